/* The bridge to the thread pool: upstream requests (upstream.h blocks) run
   on libuv's workers and are answered on the loop, counted per connection
   and per uid. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "address.h"
#include "attempts.h"
#include "local_internal.h"
#include "log.h"
#include "proto.h"
#include "punch_hops.h"
#include "qcgconn.h"
#include "shares.h"
#include "upstream.h"

/* Upstream requests, on the thread pool. */

void do_request(uv_work_t *work)
{
    struct request *r = work->data;
    struct local_server *srv = r->srv;

    switch (r->type) {
    case LOCAL_PUBLISH:
        contacts_sync_shared(srv->cs);
        r->rc = upstream_publish(srv->up, &r->contact, r->msg, sizeof(r->msg));
        /* Published now, before the loop hears of it: a re-publish that
           follows must include it. */
        if (r->rc == 0)
            contacts_set_state(srv->cs, r->contact.job, r->contact.rank, r->owner,
                               CONTACT_PUBLISHED);
        contacts_sync_end(srv->cs);
        break;
    case LOCAL_WITHDRAW:
        contacts_sync_shared(srv->cs);
        if (!r->skip_upstream) {
            /* Its reports first: they are checked against the contact. */
            upstream_reports_flush(srv->up);
            r->rc = upstream_withdraw(srv->up, &r->contact, r->msg, sizeof(r->msg));
            if (r->rc == QCG_EUPSTREAM)
                contacts_orphan_add(srv->cs, &r->contact);
        }
        contacts_remove(srv->cs, r->contact.job, r->contact.rank, r->owner);
        contacts_sync_end(srv->cs);
        break;
    case LOCAL_LOOKUP:
        r->rc = upstream_lookup(srv->up, &r->contact, r->to_rank, r->tried_mask, r->only, &r->plan,
                                r->msg, sizeof(r->msg));
        break;
    case LOCAL_SITE: {
        uint64_t t0 = uv_hrtime();

        r->rc = upstream_site(srv->up, r->site, r->msg, sizeof(r->msg));
        r->upstream_ms = (uint32_t)((uv_hrtime() - t0) / 1000000u);
        break;
    }
    case LOCAL_PROBE:
        r->rc = upstream_probe(srv->up, &r->probe, &r->probe_ok, r->msg, sizeof(r->msg));
        break;
    case LOCAL_OBSERVED:
        r->rc = upstream_observed(srv->up, &r->observed, r->msg, sizeof(r->msg));
        break;
    case LOCAL_REPORT:
        r->rc = upstream_report(srv->up, &r->contact, &r->report, r->msg, sizeof(r->msg));
        break;
    default:
        r->rc = QCG_EPROTO;
        break;
    }
}

/* A plan to the process.  Traversing and hole punching go on in the helper
   (attempts.h); one that cannot even start is failed right after its plan,
   so the process asks for the next technique at once. */
static void answer_plan(struct conn *c, uint32_t rid, const struct local_plan *plan)
{
    char why[LOCAL_MESSAGE_MAX] = "";
    int rc = 0;

    if (plan->technique == QCG_TECH_TRAVERSING || plan->technique == QCG_TECH_HOLEPUNCH)
        rc = attempt_begin(c->srv->attempts, c, rid, plan, why, sizeof(why));
    if (rc <= 0) /* traversing (1) answers once its SYN watch is in place */
        local_conn_plan(c, rid, plan, rc < 0 ? why : NULL);
}

void local_conn_plan(struct conn *c, uint32_t rid, const struct local_plan *plan, const char *why)
{
    send_msg(c, LOCAL_PLAN, rid, plan, sizeof(*plan), 0);
    if (why != NULL) {
        log_warnx("pid %d: %s to %s/%s cannot start: %s", (int)c->pid,
                  technique_name((enum technique)plan->technique), plan->cluster, plan->node, why);
        send_error(c, rid, QCG_EPEER, 0, "%s", why);
    }
}

/* The punching variant for qcg-probe: punch-ttl, and under auto the hop
   count to the reflector a punch measured lately (none: 0). */
static void site_punch(const struct local_server *srv, struct local_site *st)
{
    struct sockaddr_storage sa;
    char host[QCG_ADDR_MAX], why[160], note[PUNCH_HOPS_NOTE_MAX];
    int port, hops;
    unsigned rtt_ms;

    st->punch_ttl = srv->cfg->first_ttl;
    if (st->punch_ttl != 0 ||
        hostport_parse(st->reflector, false, host, sizeof(host), &port, why, sizeof(why)) < 0 ||
        address_sockaddr(host, (uint16_t)port, &sa) == 0 || sa.ss_family != AF_INET)
        return;
    if (punch_hops_cached(srv->loop, &sa, &hops, &rtt_ms, note) == 0 && hops > 0) {
        st->punch_hops = (uint32_t)hops;
        st->punch_first_ttl = (uint32_t)punch_first_ttl(hops, note);
    }
}

/* qcg-probe's requests, answered (loop thread). */
static void probe_done(struct request *r)
{
    struct local_server *srv = r->srv;
    struct conn *c = r->c;

    if (r->rc != 0) {
        log_warnx("pid %d uid %d: %s: %s", (int)c->pid, (int)c->uid,
                  r->type == LOCAL_SITE    ? "SITE"
                  : r->type == LOCAL_PROBE ? "PROBE"
                                           : "OBSERVED",
                  r->msg);
        send_error(c, r->rid, r->rc, 0, "%s", r->msg);
        return;
    }
    switch (r->type) {
    case LOCAL_SITE: {
        struct local_site *st = r->site;
        const struct helper_config *cfg = srv->cfg;

        snprintf(st->node, sizeof(st->node), "%s", cfg->node);
        snprintf(st->address, sizeof(st->address), "%s", cfg->address);
        st->port_low = (uint16_t)cfg->ports[0];
        st->port_high = (uint16_t)cfg->ports[1];
        st->upstream_ms = r->upstream_ms;
        snprintf(st->frontend, sizeof(st->frontend), "%s", upstream_url(srv->up));
        st->can_intercept = srv->can_intercept ? 1 : 0;
        st->nfqueue = srv->can_intercept ? (uint32_t)srv->nfqueue : 0;
        snprintf(st->intercept, sizeof(st->intercept), "%s", srv->intercept);
        site_punch(srv, st);
        punching_site_seen(srv, st);
        log_debug("pid %d: SITE answered (%u ms upstream, %u clusters)", (int)c->pid,
                  st->upstream_ms, st->clusters_total);
        send_msg(c, LOCAL_SITE_OK, r->rid, st, sizeof(*st), 0);
        break;
    }
    case LOCAL_PROBE:
        log_info("pid %d uid %d: probe towards cluster %s: job %s, endpoint rank %d on node %s "
                 "for %u s",
                 (int)c->pid, (int)c->uid, r->probe_ok.cluster, r->probe_ok.job, r->probe_ok.rank,
                 r->probe_ok.node, r->probe_ok.seconds);
        send_msg(c, LOCAL_PROBE_OK, r->rid, &r->probe_ok, sizeof(r->probe_ok), 0);
        break;
    default:
        log_info("pid %d uid %d: observed %s, public address %s, mapping %s, inbound %s, "
                 "port preserving %d: sent to the broker",
                 (int)c->pid, (int)c->uid, r->observed.kind,
                 r->observed.public_address[0] ? r->observed.public_address : "-",
                 r->observed.mapping, r->observed.inbound, r->observed.port_preserving);
        send_msg(c, LOCAL_OK, r->rid, NULL, 0, 0);
        break;
    }
}

/* Whether a request of this type lets its connection be read while it is
   in flight. */
static int concurrent(uint16_t type)
{
    return type == LOCAL_LOOKUP || type == LOCAL_REPORT;
}

/* One of c's requests is answered: c may be read again, and a contact
   whose release waited for its PUBLISH goes now. */
void conn_request_done(struct conn *c, uint16_t type)
{
    c->inflight--;
    if (!concurrent(type))
        c->exclusive = 0;
    if (c->closing && type == LOCAL_PUBLISH)
        release_contact(c);
    update_reading(c);
    conn_unref(c);
}

/* A first lookup: nothing tried yet, no technique asked for alone. */
static int first_lookup(uint16_t type, uint32_t tried_mask, uint32_t only)
{
    return type == LOCAL_LOOKUP && tried_mask == 0 && only == QCG_TECH_NONE;
}

int request_waits(struct conn *c)
{
    const struct helper_config *cfg = c->srv->cfg;
    const struct share *sh = c->share;

    if (!local_handlers[c->hdr.type].upstream)
        return 0;
    /* A batch takes one thread whatever it carries: first lookups have a
       bound of their own. */
    if (first_lookup(c->hdr.type, c->in.lookup.tried_mask, c->in.lookup.only))
        return sh->lookups >= (unsigned)cfg->max_lookups_per_uid;
    return sh->requests - sh->lookups >= (unsigned)cfg->max_requests_per_uid;
}

/* One request of the uid fewer: its connections that hold a request back
   go on, first come first served, as far as their bounds allow. */
static void share_request_done(struct local_server *srv, struct share *sh, int batched)
{
    /* Waiting connections are connections of the uid: it stays. */
    int waiting = sh->waiting.head != NULL;

    if (batched)
        sh->lookups--;
    share_request_end(srv->shares, sh);
    /* From the head again after each: a dispatch may end requests at once
       (and come back here) and change the list. */
    while (waiting) {
        struct conn *go = NULL;

        for (struct dlink *l = sh->waiting.head; l != NULL && go == NULL; l = l->next) {
            struct conn *c = dlist_entry(l, struct conn, wait);

            if (!request_waits(c))
                go = c;
        }
        if (go == NULL)
            return;
        dlist_remove(&sh->waiting, &go->wait);
        go->held = 0;
        dispatch(go);
        update_reading(go);
    }
}

void request_done(uv_work_t *work, int status)
{
    struct request *r = work->data;
    struct local_server *srv = r->srv;
    struct conn *c = r->c;

    if (status == UV_ECANCELED) {
        r->rc = QCG_EUPSTREAM;
        snprintf(r->msg, sizeof(r->msg), "the helper is stopping");
        if (r->type == LOCAL_WITHDRAW)
            contacts_remove(srv->cs, r->contact.job, r->contact.rank, r->owner);
    }
    switch (r->type) {
    case LOCAL_PUBLISH:
        c->publishing = 0;
        if (r->rc == 0) {
            if (!c->published)
                log_info("pid %d: published job %s rank %d port %u", (int)c->pid, r->contact.job,
                         r->contact.rank, r->contact.port);
            c->published = 1;
            c->me.port = r->contact.port;
            send_msg(c, LOCAL_OK, r->rid, NULL, 0, 0);
        } else {
            if (!c->published)
                contacts_remove(srv->cs, r->contact.job, r->contact.rank, r->owner);
            log_warnx("pid %d: publish of job %s rank %d failed: %s", (int)c->pid, r->contact.job,
                      r->contact.rank, r->msg);
            send_error(c, r->rid, r->rc, 0, "%s", r->msg);
        }
        break;
    case LOCAL_WITHDRAW:
        if (r->rc == 0)
            log_info("withdrew job %s rank %d (pid %d)", r->contact.job, r->contact.rank,
                     (int)r->contact.pid);
        else if (!r->skip_upstream)
            log_warnx("withdraw of job %s rank %d: %s%s", r->contact.job, r->contact.rank, r->msg,
                      r->rc == QCG_EUPSTREAM ? " (retried later)" : "");
        if (c != NULL) {
            if (r->rc == 0)
                send_msg(c, LOCAL_OK, r->rid, NULL, 0, 0);
            else
                send_error(c, r->rid, r->rc, 0, "%s", r->msg);
        }
        break;
    case LOCAL_LOOKUP:
        srv->lookups++;
        if (r->rc == 0) {
            char at[HOSTPORT_MAX];
            hostport_format(r->plan.address, r->plan.port, at, sizeof(at));
            log_debug("pid %d: job %s rank %d -> rank %d: %s %s", (int)c->pid, r->contact.job,
                      r->contact.rank, r->to_rank,
                      technique_name((enum technique)r->plan.technique), at);
            answer_plan(c, r->rid, &r->plan);
        } else {
            log_debug("pid %d: lookup of rank %d: %s", (int)c->pid, r->to_rank, r->msg);
            send_error(c, r->rid, r->rc, 0, "%s", r->msg);
        }
        break;
    case LOCAL_REPORT:
        /* No reply: the process may be gone already. */
        if (r->rc < 0)
            log_debug("report of job %s rank %d -> %d: %s", r->contact.job, r->contact.rank,
                      r->report.to_rank, r->msg);
        if (--r->reporter->reports == 0 && r->reporter->withdraw_waits)
            withdraw_after_reports(r->reporter);
        break;
    case LOCAL_SITE:
    case LOCAL_PROBE:
    case LOCAL_OBSERVED:
        probe_done(r);
        break;
    }
    if (r->reporter != NULL)
        c = r->reporter;
    if (c != NULL)
        conn_request_done(c, r->type);
    if (r->share != NULL)
        share_request_done(srv, r->share, r->batched);
    free(r->site);
    explicit_bzero(r, sizeof(*r));
    free(r);
}

/* A request was queued for c (REPORTs included): counted for c and its uid. */
void conn_request_begun(struct conn *c, uint16_t type)
{
    c->refs++;
    c->inflight++;
    if (!concurrent(type))
        c->exclusive = 1;
    update_reading(c);
}

void request_begun(struct conn *c, struct request *r)
{
    r->share = c->share;
    share_request_begin(c->share);
    conn_request_begun(c, r->type);
}

/* First lookups on their way to the frontend in one call: at most
   LOOKUP_BATCHES batches, each on one thread of the pool, whatever it
   carries; the lookups that come meanwhile wait for the next. */
#define LOOKUP_BATCHES 2

struct batch {
    uv_work_t work;
    struct local_server *srv;
    int n;
    struct request *r[QCG_LOOKUPS_MAX];
    struct lookup_call call[QCG_LOOKUPS_MAX];
    struct lookup_call *calls[QCG_LOOKUPS_MAX];
};

static void do_batch(uv_work_t *work)
{
    struct batch *b = work->data;

    upstream_lookups(b->srv->up, b->calls, b->n);
}

static void lookups_pump(struct local_server *srv);

static void batch_done(uv_work_t *work, int status)
{
    struct batch *b = work->data;
    struct local_server *srv = b->srv;

    srv->batches--;
    for (int i = 0; i < b->n; i++) {
        b->r[i]->rc = b->call[i].rc;
        request_done(&b->r[i]->work, status);
    }
    free(b);
    lookups_pump(srv);
}

/* A waiting lookup that cannot go up: answered at once with why. */
static void lookup_fails(struct request *r, int rc, const char *why)
{
    r->rc = rc;
    snprintf(r->msg, sizeof(r->msg), "lookup: %s", why);
    request_done(&r->work, 0);
}

/* While another uid is connected, a batch carries at most this many
   lookups of one uid: the frontend answers a batch as a whole, and another
   uid's lookup that came just after a full one of 256 waited for all of
   them (issue 32: 45-125 ms at the median under helper-uid.sh's lookups). */
#define BATCH_SHARE 16

/* The next waiting first lookup in turn: the oldest of the uid whose turn
   it is, that uid then going to the back (or, with BATCH_SHARE of its
   lookups in this batch, to *full).  So a batch takes one lookup of each
   waiting uid before a second of any: a uid with hundreds waiting delays
   another's lookup by one batch at most, not by all of its own (issue 32:
   another uid's flood of lookups on the node).  NULL: none. */
static struct request *batch_next(struct local_server *srv, struct dlist *full)
{
    if (srv->batch_turns.head == NULL)
        return NULL;
    struct share *sh = dlist_entry(srv->batch_turns.head, struct share, batch_turn);
    struct request *r = dlist_entry(sh->batch_wait.head, struct request, batch_link);
    dlist_remove(&sh->batch_wait, &r->batch_link);
    dlist_remove(&srv->batch_turns, &sh->batch_turn);
    if (sh->batch_made != srv->batches_made) {
        sh->batch_made = srv->batches_made;
        sh->in_batch = 0;
    }
    sh->in_batch++;
    if (sh->batch_wait.head != NULL)
        dlist_append(sh->in_batch >= BATCH_SHARE && share_others_connected(srv->shares, sh)
                         ? full
                         : &srv->batch_turns,
                     &sh->batch_turn);
    return r;
}

/* The uids whose share of a batch was full wait for the next, at the back. */
static void batch_end(struct local_server *srv, struct dlist *full)
{
    while (full->head != NULL) {
        struct share *sh = dlist_entry(full->head, struct share, batch_turn);
        dlist_remove(full, &sh->batch_turn);
        dlist_append(&srv->batch_turns, &sh->batch_turn);
    }
}

/* Takes what waits into batches while fewer than LOOKUP_BATCHES are on the
   way; a batch that cannot start fails its lookups (the process asks
   again). */
static void lookups_pump(struct local_server *srv)
{
    while (srv->batches < LOOKUP_BATCHES && srv->batch_turns.head != NULL) {
        struct batch *b = calloc(1, sizeof(*b));
        int rc = b != NULL ? 0 : UV_ENOMEM;

        struct dlist full = {0};

        srv->batches_made++;

        while (b != NULL && b->n < QCG_LOOKUPS_MAX && srv->batch_turns.head != NULL) {
            struct request *r = batch_next(srv, &full);

            b->r[b->n] = r;
            b->call[b->n] = (struct lookup_call){.from = &r->contact,
                                                 .to_rank = r->to_rank,
                                                 .plan = &r->plan,
                                                 .msg = r->msg,
                                                 .msglen = sizeof(r->msg)};
            b->calls[b->n] = &b->call[b->n];
            b->n++;
        }
        batch_end(srv, &full);
        if (b != NULL) {
            b->srv = srv;
            b->work.data = b;
            rc = uv_queue_work(srv->loop, &b->work, do_batch, batch_done);
        }
        if (rc == 0) {
            srv->batches++;
            log_debug("%d lookups in one call (%d calls on the way)", b->n, srv->batches);
            continue;
        }
        log_warnx("cannot queue a batch of lookups: %s", uv_strerror(rc));
        /* The lookups taken, or (out of memory) the oldest waiting one. */
        if (b == NULL) {
            lookup_fails(batch_next(srv, &full), QCG_ENOMEM, "the helper is out of memory");
            batch_end(srv, &full);
            continue;
        }
        for (int i = 0; i < b->n; i++)
            lookup_fails(b->r[i], QCG_ESYS, "the helper cannot queue it");
        free(b);
    }
}

/* Queues an upstream request; with a connection, counts it there (see
   request_begun). */
int queue_request(struct local_server *srv, struct conn *c, uint16_t type, uint32_t rid,
                  const struct contact *ct, int32_t to_rank, uint64_t owner)
{
    struct request *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return QCG_ENOMEM;
    r->work.data = r;
    r->srv = srv;
    r->c = c;
    r->owner = owner;
    r->type = type;
    r->rid = rid;
    r->contact = *ct;
    r->to_rank = to_rank;
    if (type == LOCAL_LOOKUP && c != NULL) {
        r->tried_mask = c->in.lookup.tried_mask;
        r->only = c->in.lookup.only;
    }
    if (type == LOCAL_PROBE && c != NULL)
        r->probe = c->in.probe;
    if (type == LOCAL_OBSERVED && c != NULL)
        r->observed = c->in.observed;
    if (type == LOCAL_SITE && (r->site = calloc(1, sizeof(*r->site))) == NULL) {
        free(r);
        return QCG_ENOMEM;
    }
    if (srv->closing && type == LOCAL_WITHDRAW) {
        int connected;
        uint64_t epoch;
        upstream_state(srv->up, &connected, &epoch);
        r->skip_upstream = !connected;
    }
    /* A process's first lookups go up together (lookups_pump). */
    if (c != NULL && first_lookup(type, r->tried_mask, r->only)) {
        r->batched = 1;
        if (c->share->batch_wait.head == NULL)
            dlist_append(&srv->batch_turns, &c->share->batch_turn);
        dlist_append(&c->share->batch_wait, &r->batch_link);
        request_begun(c, r);
        c->share->lookups++;
        lookups_pump(srv);
        return 0;
    }
    int rc = uv_queue_work(srv->loop, &r->work, do_request, request_done);
    if (rc < 0) {
        log_warnx("cannot queue a request: %s", uv_strerror(rc));
        free(r->site);
        free(r);
        return QCG_ESYS;
    }
    if (c != NULL)
        request_begun(c, r);
    return 0;
}

/* The connection's contact goes: withdraw it upstream (process death =
   withdrawal). */
void release_contact(struct conn *c)
{
    struct local_server *srv = c->srv;

    if (!c->published)
        return;
    if (c->reports > 0) {
        c->withdraw_waits = 1;
        return;
    }
    c->published = 0;
    contacts_set_state(srv->cs, c->me.job, c->me.rank, c->id, CONTACT_WITHDRAWING);
    if (queue_request(srv, NULL, LOCAL_WITHDRAW, 0, &c->me, 0, c->id) < 0) {
        contacts_orphan_add(srv->cs, &c->me);
        contacts_remove(srv->cs, c->me.job, c->me.rank, c->id);
    }
}
