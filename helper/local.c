/* The Unix socket server: a connection per process (or status tool), every
   message checked before use, then dispatched through a table.

   A connection has many LOOKUPs (and REPORTs) in flight at once: each is
   answered with its request id when its upstream call ends, in any order.
   PUBLISH, WITHDRAW and qcg-probe's SITE, PROBE and OBSERVED change or ask
   about the connection as a whole: reading stops until each is answered.
   Requests are never refused for being too many: a connection with
   max-requests in flight, or whose replies wait unsent, is not read, and
   neither is the next request of a uid with max-requests-per-uid on the
   thread pool; the requests wait in the kernel. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "attempts.h"
#include "dlist.h"
#include "fdpass.h"
#include "local.h"
#include "log.h"
#include "proto.h"
#include "qcgconn.h"
#include "shares.h"

#define LISTEN_BACKLOG 128

struct local_server {
    uv_loop_t *loop;
    uv_pipe_t listener;
    int closing;
    const struct helper_config *cfg;
    struct contacts *cs;
    struct upstream *up;
    dev_t dev;                  /* the socket file we made, so we remove only ours */
    ino_t ino;
    struct dlist conns; /* of struct conn, closing ones no longer */
    unsigned nclients;
    struct shares *shares; /* per uid: connections, requests */
    uint64_t next_id;
    uint64_t lookups;
    struct attempts *attempts; /* traversing and hole punching, initiator side */
    /* For SITE: whether this helper intercepts, and why (local_server_set_intercept). */
    int can_intercept;
    int nfqueue;
    char intercept[LOCAL_MESSAGE_MAX];
};

struct conn {
    uv_pipe_t pipe;
    struct local_server *srv;
    struct dlink link;          /* in srv->conns until it closes */
    uint64_t id;                /* the owner of its contact in the contacts table */
    pid_t pid;
    uid_t uid;
    struct share *share;        /* its uid's */
    int refs;                   /* the handle, each write, each request in flight */
    int closing;
    int draining; /* closing once its last reply is out: read nothing */
    int hello;
    int reading;
    unsigned inflight; /* its requests on the thread pool, REPORTs included */
    int exclusive;     /* one that stops reading is in flight (or waits) */
    /* A whole message read, waiting in share->waiting for the uid's
       requests to drop under max-requests-per-uid. */
    int held;
    struct dlink wait;
    int published;              /* me is published upstream */
    /* A PUBLISH of me is on its way upstream, for this port.  The broker may
       have it, and send an order for me, before its answer is back here. */
    int publishing;
    uint16_t publishing_port;
    /* REPORTs still on their way upstream.  The broker takes a report only
       from a published rank: the withdrawal (asked, or at the process's end)
       waits for them, or a process that reports and quits at once would
       lose its last outcome. */
    unsigned reports;
    int withdraw_waits;
    uint32_t withdraw_rid;
    struct contact me;          /* job, secret, rank from HELLO; port once published */

    /* The message being read: exactly a header, then exactly its payload. */
    size_t have;
    struct local_header hdr;
    union local_payload in;
};

struct write_req {
    uv_write_t req;
    struct conn *c;
    int close_after;
    struct local_header hdr;
    union local_payload payload;
};

struct request {
    uv_work_t work;
    struct local_server *srv;
    struct conn *c;             /* NULL for the withdraw of a closed connection */
    struct conn *reporter;      /* REPORT: whose withdrawal waits for it */
    struct share *share;        /* whose requests count it (none: a closed one's withdraw) */
    uint64_t owner;
    uint16_t type;
    uint32_t rid;
    struct contact contact;
    int32_t to_rank;
    uint32_t tried_mask;
    uint32_t only;              /* LOOKUP: one technique (qcg-probe) */
    int skip_upstream;          /* stopping with the frontend away: local cleanup only */
    int rc;
    char msg[LOCAL_MESSAGE_MAX];
    struct local_plan plan;
    struct local_report report;
    struct local_site *site;    /* SITE: allocated with the request (it is large) */
    uint32_t upstream_ms;       /* SITE: how long the call took */
    struct local_probe probe;
    struct local_probe_ok probe_ok;
    struct local_observed observed;
};

static void conn_close(struct conn *c);
static void dispatch(struct conn *c);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void conn_unref(struct conn *c)
{
    if (--c->refs > 0)
        return;
    if (c->share != NULL)
        share_leave(c->srv->shares, c->share);
    explicit_bzero(&c->me, sizeof(c->me));
    explicit_bzero(&c->in, sizeof(c->in));
    free(c);
}

/* A process that sends requests without reading the replies would make
   libuv queue them without end: while replies wait unsent, its requests wait
   in the kernel (the socket buffers then stop the sender). */
static int backlogged(struct conn *c)
{
    return uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) > 0;
}

/* Reads from c while it may take another request, else lets the requests
   wait in the kernel; called whenever one of the conditions may change. */
static void update_reading(struct conn *c)
{
    int want = !c->closing && !c->draining && !c->exclusive && !c->held &&
               c->inflight < (unsigned)c->srv->cfg->max_requests && !backlogged(c);

    if (want == c->reading)
        return;
    c->reading = want;
    if (!want) {
        if (c->inflight >= (unsigned)c->srv->cfg->max_requests)
            log_debug("pid %d: %u requests in flight (max-requests): not reading", (int)c->pid,
                      c->inflight);
        uv_read_stop((uv_stream_t *)&c->pipe);
        return;
    }
    int rc = uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
    if (rc < 0) {
        log_warnx("pid %d: cannot read: %s", (int)c->pid, uv_strerror(rc));
        conn_close(c);
    }
}

static void on_written(uv_write_t *req, int status)
{
    struct write_req *w = (struct write_req *)req;
    struct conn *c = w->c;

    if (status < 0 && !c->closing)
        log_debug("pid %d: write failed: %s", (int)c->pid, uv_strerror(status));
    if (status < 0 || w->close_after)
        conn_close(c);
    else
        update_reading(c);
    explicit_bzero(w, sizeof(*w));
    free(w);
    conn_unref(c);
}

static void send_msg(struct conn *c, uint16_t type, uint32_t rid, const void *payload, size_t len,
                     int close_after)
{
    if (c->closing)
        return;
    struct write_req *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        log_warnx("pid %d: out of memory for a reply; closing", (int)c->pid);
        conn_close(c);
        return;
    }
    w->c = c;
    w->close_after = close_after;
    if (close_after) {
        c->draining = 1;
        update_reading(c);
    }
    w->hdr = (struct local_header){
        .magic = LOCAL_MAGIC, .type = type, .length = (uint32_t)len, .request_id = rid};
    if (len > 0)
        memcpy(&w->payload, payload, len);
    uv_buf_t bufs[2] = {uv_buf_init((char *)&w->hdr, sizeof(w->hdr)),
                        uv_buf_init((char *)&w->payload, (unsigned)len)};
    c->refs++;
    int rc = uv_write(&w->req, (uv_stream_t *)&c->pipe, bufs, len > 0 ? 2 : 1, on_written);
    if (rc < 0) {
        log_warnx("pid %d: cannot queue a reply: %s", (int)c->pid, uv_strerror(rc));
        free(w);
        c->refs--;
        conn_close(c);
    }
}

__attribute__((format(printf, 5, 6))) static void send_error(struct conn *c, uint32_t rid,
                                                             int code, int close_after,
                                                             const char *fmt, ...)
{
    struct local_error e;
    va_list ap;

    memset(&e, 0, sizeof(e));
    e.code = code;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof(e.message), fmt, ap);
    va_end(ap);
    send_msg(c, LOCAL_ERROR, rid, &e, sizeof(e), close_after);
}

/* A protocol violation: say why, log it, close. */
__attribute__((format(printf, 3, 4))) static void proto_fail(struct conn *c, uint32_t rid,
                                                             const char *fmt, ...)
{
    char msg[LOCAL_MESSAGE_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_warnx("pid %d uid %d: %s; closing", (int)c->pid, (int)c->uid, msg);
    send_error(c, rid, QCG_EPROTO, 1, "%s", msg);
}

/* Upstream requests, on the thread pool. */

static void do_request(uv_work_t *work)
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
            r->rc = upstream_withdraw(srv->up, &r->contact, r->msg, sizeof(r->msg));
            if (r->rc == QCG_EUPSTREAM)
                contacts_orphan_add(srv->cs, &r->contact);
        }
        contacts_remove(srv->cs, r->contact.job, r->contact.rank, r->owner);
        contacts_sync_end(srv->cs);
        break;
    case LOCAL_LOOKUP:
        r->rc = upstream_lookup(srv->up, &r->contact, r->to_rank, r->tried_mask, r->only,
                                &r->plan, r->msg, sizeof(r->msg));
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

static void release_contact(struct conn *c);
static void withdraw_after_reports(struct conn *c);

/* A plan to the process.  Traversing and hole punching go on in the helper
   (attempts.h); one that cannot even start is failed right after its plan,
   so the process asks for the next technique at once. */
static void answer_plan(struct conn *c, uint32_t rid, const struct local_plan *plan)
{
    char why[LOCAL_MESSAGE_MAX] = "";
    int rc = 0;

    if (plan->technique == QCG_TECH_TRAVERSING || plan->technique == QCG_TECH_HOLEPUNCH)
        rc = attempt_begin(c->srv->attempts, c, rid, plan, why, sizeof(why));
    send_msg(c, LOCAL_PLAN, rid, plan, sizeof(*plan), 0);
    if (rc < 0) {
        log_warnx("pid %d: %s to %s/%s cannot start: %s", (int)c->pid,
                  technique_name((enum technique)plan->technique), plan->cluster, plan->node, why);
        send_error(c, rid, QCG_EPEER, 0, "%s", why);
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
        log_debug("pid %d: SITE answered (%u ms upstream, %u clusters)", (int)c->pid,
                  st->upstream_ms, st->clusters_total);
        send_msg(c, LOCAL_SITE_OK, r->rid, st, sizeof(*st), 0);
        break;
    }
    case LOCAL_PROBE:
        log_info("pid %d uid %d: probe towards cluster %s: job %s, endpoint rank %d on node %s "
                 "for %u s",
                 (int)c->pid, (int)c->uid, r->probe_ok.cluster, r->probe_ok.job,
                 r->probe_ok.rank, r->probe_ok.node, r->probe_ok.seconds);
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
static void conn_request_done(struct conn *c, uint16_t type)
{
    c->inflight--;
    if (!concurrent(type))
        c->exclusive = 0;
    if (c->closing && type == LOCAL_PUBLISH)
        release_contact(c);
    update_reading(c);
    conn_unref(c);
}

/* One request of the uid fewer: its connections that hold a request back
   go on, first come first served, while the uid stays under its bound. */
static void share_request_done(struct local_server *srv, struct share *sh)
{
    const unsigned max = (unsigned)srv->cfg->max_requests_per_uid;
    /* Waiting connections are connections of the uid: it stays. */
    int waiting = sh->waiting.head != NULL;

    share_request_end(srv->shares, sh);
    while (waiting && sh->waiting.head != NULL && sh->requests < max) {
        struct conn *c = dlist_entry(sh->waiting.head, struct conn, wait);

        dlist_remove(&sh->waiting, &c->wait);
        c->held = 0;
        dispatch(c);
        update_reading(c);
    }
}

static void request_done(uv_work_t *work, int status)
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
                log_info("pid %d: published job %s rank %d port %u", (int)c->pid,
                         r->contact.job, r->contact.rank, r->contact.port);
            c->published = 1;
            c->me.port = r->contact.port;
            send_msg(c, LOCAL_OK, r->rid, NULL, 0, 0);
        } else {
            if (!c->published)
                contacts_remove(srv->cs, r->contact.job, r->contact.rank, r->owner);
            log_warnx("pid %d: publish of job %s rank %d failed: %s", (int)c->pid,
                      r->contact.job, r->contact.rank, r->msg);
            send_error(c, r->rid, r->rc, 0, "%s", r->msg);
        }
        break;
    case LOCAL_WITHDRAW:
        if (r->rc == 0)
            log_info("withdrew job %s rank %d (pid %d)", r->contact.job, r->contact.rank,
                     (int)r->contact.pid);
        else if (!r->skip_upstream)
            log_warnx("withdraw of job %s rank %d: %s%s", r->contact.job, r->contact.rank,
                      r->msg, r->rc == QCG_EUPSTREAM ? " (retried later)" : "");
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
            log_debug("pid %d: job %s rank %d -> rank %d: %s %s:%u", (int)c->pid,
                      r->contact.job, r->contact.rank, r->to_rank,
                      technique_name((enum technique)r->plan.technique), r->plan.address,
                      r->plan.port);
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
        share_request_done(srv, r->share);
    free(r->site);
    explicit_bzero(r, sizeof(*r));
    free(r);
}

/* A request was queued for c (REPORTs included): counted for c and its uid. */
static void request_begun(struct conn *c, struct request *r)
{
    c->refs++;
    c->inflight++;
    if (!concurrent(r->type))
        c->exclusive = 1;
    r->share = c->share;
    share_request_begin(c->share);
    update_reading(c);
}

/* Queues an upstream request; with a connection, counts it there (see
   request_begun). */
static int queue_request(struct local_server *srv, struct conn *c, uint16_t type, uint32_t rid,
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
static void release_contact(struct conn *c)
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

/* The handlers: 0 = answered (or failed and closing), 1 = waiting upstream. */

static int on_hello(struct conn *c, uint32_t rid)
{
    const struct local_hello *h = &c->in.hello;
    const struct helper_config *cfg = c->srv->cfg;
    struct local_hello_ok ok;

    if (c->hello) {
        proto_fail(c, rid, "a second HELLO");
        return 0;
    }
    if (!job_valid(h->job)) {
        send_error(c, rid, QCG_EINVAL, 0, "invalid job id (1-63 of [A-Za-z0-9._-])");
        return 0;
    }
    if (!secret_valid(h->secret)) {
        send_error(c, rid, QCG_EINVAL, 0, "invalid job secret (1-127 printable characters)");
        return 0;
    }
    if (h->rank < 0) {
        send_error(c, rid, QCG_EINVAL, 0, "invalid rank %d", h->rank);
        return 0;
    }
    c->hello = 1;
    snprintf(c->me.job, sizeof(c->me.job), "%s", h->job);
    snprintf(c->me.secret, sizeof(c->me.secret), "%s", h->secret);
    c->me.rank = h->rank;
    c->me.pid = c->pid;
    log_info("pid %d uid %d: job %s rank %d", (int)c->pid, (int)c->uid, c->me.job, c->me.rank);

    memset(&ok, 0, sizeof(ok));
    ok.version = LOCAL_VERSION;
    ok.port_low = (uint16_t)cfg->ports[0];
    ok.port_high = (uint16_t)cfg->ports[1];
    snprintf(ok.cluster, sizeof(ok.cluster), "%s", cfg->cluster);
    snprintf(ok.node, sizeof(ok.node), "%s", cfg->node);
    snprintf(ok.address, sizeof(ok.address), "%s", cfg->address);
    send_msg(c, LOCAL_HELLO_OK, rid, &ok, sizeof(ok), 0);
    return 0;
}

static int on_publish(struct conn *c, uint32_t rid)
{
    const struct helper_config *cfg = c->srv->cfg;
    unsigned port = c->in.publish.port;
    struct contact ct = c->me;
    pid_t holder;

    if ((int)port < cfg->ports[0] || (int)port > cfg->ports[1]) {
        send_error(c, rid, QCG_EINVAL, 0, "port %u is outside this node's range %d-%d", port,
                   cfg->ports[0], cfg->ports[1]);
        return 0;
    }
    ct.port = (uint16_t)port;
    int rc = contacts_reserve(c->srv->cs, &ct, c->id, &holder);
    if (rc == QCG_EBUSY) {
        if (holder != 0)
            send_error(c, rid, QCG_EBUSY, 0,
                       "job %s rank %d is already published by pid %d on this node", ct.job,
                       ct.rank, (int)holder);
        else
            send_error(c, rid, QCG_EBUSY, 0,
                       "job %s rank %d is being withdrawn on this node; retry", ct.job, ct.rank);
        return 0;
    }
    if (rc == QCG_EINVAL) {
        send_error(c, rid, QCG_EINVAL, 0, "already published on port %u; withdraw first",
                   c->me.port);
        return 0;
    }
    if (rc < 0) {
        send_error(c, rid, rc, 0, "this helper holds too many contacts");
        return 0;
    }
    rc = queue_request(c->srv, c, LOCAL_PUBLISH, rid, &ct, 0, c->id);
    if (rc < 0) {
        if (!c->published)
            contacts_remove(c->srv->cs, ct.job, ct.rank, c->id);
        send_error(c, rid, rc, 0, "the helper cannot queue the request");
        return 0;
    }
    c->publishing = 1;
    c->publishing_port = ct.port;
    return 1;
}

static int withdraw_now(struct conn *c, uint32_t rid);

static int on_withdraw(struct conn *c, uint32_t rid)
{
    if (!c->published) {
        send_msg(c, LOCAL_OK, rid, NULL, 0, 0);
        return 0;
    }
    if (c->reports > 0) {
        /* Its reports go first; reading stops as for a request upstream. */
        c->withdraw_waits = 1;
        c->withdraw_rid = rid;
        c->exclusive = 1;
        update_reading(c);
        return 1;
    }
    return withdraw_now(c, rid);
}

/* The last report of c is upstream: the withdrawal that waited goes now
   (at the process's end, the release of its contact). */
static void withdraw_after_reports(struct conn *c)
{
    c->withdraw_waits = 0;
    c->exclusive = 0;
    if (c->closing) {
        release_contact(c);
        return;
    }
    withdraw_now(c, c->withdraw_rid);
    update_reading(c);
}

static int withdraw_now(struct conn *c, uint32_t rid)
{
    contacts_set_state(c->srv->cs, c->me.job, c->me.rank, c->id, CONTACT_WITHDRAWING);
    if (queue_request(c->srv, c, LOCAL_WITHDRAW, rid, &c->me, 0, c->id) < 0) {
        contacts_set_state(c->srv->cs, c->me.job, c->me.rank, c->id, CONTACT_PUBLISHED);
        send_error(c, rid, QCG_ESYS, 0, "the helper cannot queue the request");
        return 0;
    }
    c->published = 0;
    return 1;
}

static int on_lookup(struct conn *c, uint32_t rid)
{
    int32_t to = c->in.lookup.to_rank;

    if (to < 0) {
        send_error(c, rid, QCG_EINVAL, 0, "invalid rank %d", to);
        return 0;
    }
    if (queue_request(c->srv, c, LOCAL_LOOKUP, rid, &c->me, to, c->id) < 0) {
        send_error(c, rid, QCG_ESYS, 0, "the helper cannot queue the request");
        return 0;
    }
    return 1;
}

/* No reply (the process is usually closing this connection). */
static int on_report(struct conn *c, uint32_t rid)
{
    const struct local_report *r = &c->in.report;

    if (r->to_rank < 0 || r->technique < QCG_TECH_DIRECT || r->technique > QCG_TECH_PROXY) {
        proto_fail(c, rid, "REPORT for rank %d, technique %u", r->to_rank, r->technique);
        return 0;
    }
    /* Not tied to the connection: the process goes on (asks for the next
       technique) without waiting for the broker to hear of it. */
    struct request *q = calloc(1, sizeof(*q));
    if (q == NULL) {
        log_warnx("pid %d: out of memory for a report", (int)c->pid);
        return 0;
    }
    q->work.data = q;
    q->srv = c->srv;
    q->type = LOCAL_REPORT;
    q->rid = rid;
    q->contact = c->me;
    q->to_rank = r->to_rank;
    q->report = *r;
    q->reporter = c;
    if (uv_queue_work(c->srv->loop, &q->work, do_request, request_done) < 0) {
        log_warnx("pid %d: cannot queue a report", (int)c->pid);
        explicit_bzero(q, sizeof(*q));
        free(q);
        return 0;
    }
    c->reports++;
    request_begun(c, q);
    return 0;
}

static int on_status(struct conn *c, uint32_t rid)
{
    struct local_server *srv = c->srv;
    struct local_status s;
    int connected;
    uint64_t epoch;

    memset(&s, 0, sizeof(s));
    upstream_state(srv->up, &connected, &epoch);
    s.upstream_connected = connected ? 1 : 0;
    s.clients = srv->nclients;
    s.contacts = (uint32_t)contacts_published(srv->cs);
    s.upstream_epoch = epoch;
    s.lookups = srv->lookups;
    snprintf(s.cluster, sizeof(s.cluster), "%s", srv->cfg->cluster);
    snprintf(s.node, sizeof(s.node), "%s", srv->cfg->node);
    snprintf(s.frontend, sizeof(s.frontend), "%s", upstream_url(srv->up));
    send_msg(c, LOCAL_STATUS_OK, rid, &s, sizeof(s), 0);
    return 0;
}

/* qcg-probe's requests need no HELLO; one at a time per connection like
   every request (reading stops until the answer), so a connection has at
   most one PROBE outstanding. */
static int queue_probe_request(struct conn *c, uint16_t type, uint32_t rid)
{
    if (queue_request(c->srv, c, type, rid, &c->me, 0, c->id) < 0) {
        send_error(c, rid, QCG_ESYS, 0, "the helper cannot queue the request");
        return 0;
    }
    return 1;
}

static int on_site(struct conn *c, uint32_t rid)
{
    return queue_probe_request(c, LOCAL_SITE, rid);
}

static int on_probe(struct conn *c, uint32_t rid)
{
    return queue_probe_request(c, LOCAL_PROBE, rid);
}

/* What a site looks like from outside is the node administrator's word:
   root's, or the helper's own user's (a probe run by the operator). */
static int on_observed(struct conn *c, uint32_t rid)
{
    uid_t self = geteuid();

    if (c->uid != 0 && c->uid != self) {
        log_warnx("pid %d uid %d: OBSERVED refused: only root or the helper's uid %d may "
                  "report what a probe observed",
                  (int)c->pid, (int)c->uid, (int)self);
        send_error(c, rid, QCG_EDENIED, 0,
                   "OBSERVED is accepted from root or the helper's user (uid %d) only, not "
                   "uid %d",
                   (int)self, (int)c->uid);
        return 0;
    }
    return queue_probe_request(c, LOCAL_OBSERVED, rid);
}

/* What a process may send; everything else (the helper's own message types
   included) is a protocol violation. */
static const struct {
    int (*handle)(struct conn *c, uint32_t rid);
    int need_hello;
    int upstream; /* may take a thread: counts against max-requests-per-uid */
    const char *name;
} handlers[LOCAL_TYPE_COUNT] = {
    [LOCAL_HELLO] = {on_hello, 0, 0, "HELLO"},
    [LOCAL_PUBLISH] = {on_publish, 1, 1, "PUBLISH"},
    [LOCAL_WITHDRAW] = {on_withdraw, 1, 1, "WITHDRAW"},
    [LOCAL_LOOKUP] = {on_lookup, 1, 1, "LOOKUP"},
    [LOCAL_STATUS] = {on_status, 0, 0, "STATUS"},
    [LOCAL_REPORT] = {on_report, 1, 1, "REPORT"},
    [LOCAL_SITE] = {on_site, 0, 1, "SITE"},
    [LOCAL_PROBE] = {on_probe, 0, 1, "PROBE"},
    [LOCAL_OBSERVED] = {on_observed, 0, 1, "OBSERVED"},
};

static void dispatch(struct conn *c)
{
    uint16_t type = c->hdr.type;
    uint32_t rid = c->hdr.request_id;

    if (type == LOCAL_HELLO && c->in.hello.version != LOCAL_VERSION) {
        proto_fail(c, rid, "HELLO of protocol version %u; this helper speaks %u",
                   c->in.hello.version, LOCAL_VERSION);
        return;
    }
    if (local_payload_check(type, &c->in) != 0) {
        proto_fail(c, rid, "%s: a string field is not NUL-terminated, or a value is out of range",
                   handlers[type].name);
        return;
    }
    if (handlers[type].need_hello && !c->hello) {
        proto_fail(c, rid, "%s before HELLO", handlers[type].name);
        return;
    }
    log_debug("pid %d: %s request %u", (int)c->pid, handlers[type].name, rid);
    handlers[type].handle(c, rid);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;

    (void)suggested;
    /* Never read past the current message: the next one waits in the kernel
       while the connection may not take it (update_reading). */
    if (c->have < sizeof(c->hdr)) {
        buf->base = (char *)&c->hdr + c->have;
        buf->len = sizeof(c->hdr) - c->have;
    } else {
        size_t off = c->have - sizeof(c->hdr);
        buf->base = (char *)&c->in + off;
        buf->len = c->hdr.length - off;
    }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;

    (void)buf;
    if (nread < 0) {
        if (nread != UV_EOF)
            log_debug("pid %d: read: %s", (int)c->pid, uv_strerror((int)nread));
        else if (c->have > 0)
            log_warnx("pid %d: connection closed in the middle of a message", (int)c->pid);
        conn_close(c);
        return;
    }
    if (nread == 0 || c->closing)
        return;
    c->have += (size_t)nread;
    if (c->have == sizeof(c->hdr)) {
        const struct local_header *h = &c->hdr;
        if (local_header_check(h) != 0) {
            if (h->magic != LOCAL_MAGIC)
                proto_fail(c, h->request_id, "bad magic 0x%08x", h->magic);
            else if (h->type == 0 || h->type >= LOCAL_TYPE_COUNT)
                proto_fail(c, h->request_id, "unknown message type %u", h->type);
            else
                proto_fail(c, h->request_id, "message type %u: length %u, expected %zu",
                           h->type, h->length, local_payload_size[h->type]);
            return;
        }
        if (handlers[h->type].handle == NULL) {
            proto_fail(c, h->request_id, "message type %u is not a request", h->type);
            return;
        }
    }
    if (c->have == sizeof(c->hdr) + c->hdr.length) {
        c->have = 0;
        if (handlers[c->hdr.type].upstream &&
            c->share->requests >= (unsigned)c->srv->cfg->max_requests_per_uid) {
            log_debug("pid %d uid %d: %s waits: %u requests of the uid upstream "
                      "(max-requests-per-uid)",
                      (int)c->pid, (int)c->uid, handlers[c->hdr.type].name, c->share->requests);
            c->held = 1;
            dlist_append(&c->share->waiting, &c->wait);
        } else {
            dispatch(c);
        }
        update_reading(c);
    }
}

static void on_conn_closed(uv_handle_t *h)
{
    conn_unref(h->data);
}

static void conn_close(struct conn *c)
{
    struct local_server *srv = c->srv;

    if (c->closing)
        return;
    c->closing = 1;
    c->reading = 0; /* uv_close stops it */
    dlist_remove(&srv->conns, &c->link);
    srv->nclients--;
    log_debug("pid %d: disconnected", (int)c->pid);
    if (c->held) {
        dlist_remove(&c->share->waiting, &c->wait);
        c->held = 0;
    }
    /* With a PUBLISH in flight, its completion releases the contact. */
    if (!c->publishing)
        release_contact(c);
    uv_close((uv_handle_t *)&c->pipe, on_conn_closed);
}

static void on_unaccepted_closed(uv_handle_t *h)
{
    free(h->data);
}

static void on_connection(uv_stream_t *server, int status)
{
    struct local_server *srv = server->data;
    struct ucred cred;
    socklen_t len = sizeof(cred);
    uv_os_fd_t fd;

    if (status < 0) {
        log_warnx("accept: %s", uv_strerror(status));
        return;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        log_warnx("out of memory for a new client");
        return;
    }
    uv_pipe_init(srv->loop, &c->pipe, 0);
    c->pipe.data = c;
    if (uv_accept(server, (uv_stream_t *)&c->pipe) < 0 || uv_fileno((uv_handle_t *)&c->pipe, &fd) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        log_warn("cannot accept a client");
        uv_close((uv_handle_t *)&c->pipe, on_unaccepted_closed);
        return;
    }
    c->srv = srv;
    c->refs = 1;
    c->id = ++srv->next_id;
    c->pid = cred.pid;
    c->uid = cred.uid;
    c->share = share_join(srv->shares, cred.uid);
    if (c->share == NULL) {
        log_warnx("pid %d uid %d: out of memory for a new client", (int)c->pid, (int)c->uid);
        uv_close((uv_handle_t *)&c->pipe, on_unaccepted_closed);
        return;
    }
    dlist_append(&srv->conns, &c->link);
    srv->nclients++;
    log_debug("pid %d uid %d: connected", (int)c->pid, (int)c->uid);

    /* The helper's own probe endpoints (responder.h) are served like any
       process, whatever allow-uids says. */
    if (cred.pid != getpid() && !helper_uid_allowed(srv->cfg, cred.uid)) {
        log_warnx("pid %d uid %d: uid not in allow-uids; refused", (int)c->pid, (int)c->uid);
        send_error(c, 0, QCG_EDENIED, 1, "uid %d may not use this helper", (int)c->uid);
        return;
    }
    if (srv->nclients > (unsigned)srv->cfg->max_clients) {
        log_warnx("pid %d uid %d: more than max-clients (%d) connections; refused", (int)c->pid,
                  (int)c->uid, srv->cfg->max_clients);
        send_error(c, 0, QCG_ENOHELPER, 1, "the helper serves at most %d clients (max-clients)",
                   srv->cfg->max_clients);
        return;
    }
    if (c->share->conns > (unsigned)srv->cfg->max_clients_per_uid) {
        log_warnx("pid %d uid %d: more than max-clients-per-uid (%d) connections of this uid; "
                  "refused",
                  (int)c->pid, (int)c->uid, srv->cfg->max_clients_per_uid);
        send_error(c, 0, QCG_ENOHELPER, 1,
                   "the helper serves at most %d clients of uid %d (max-clients-per-uid)",
                   srv->cfg->max_clients_per_uid, (int)c->uid);
        return;
    }
    update_reading(c);
}

static int make_parent(const char *path, char *err, size_t errlen)
{
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];

    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir)
        return 0;
    *slash = '\0';
    for (char *p = dir + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
            goto fail;
        *p = '/';
    }
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        goto fail;
    return 0;
fail:
    snprintf(err, errlen, "socket: cannot create %s: %s", dir, strerror(errno));
    return -1;
}

/* A socket file left by a helper that died is removed; one a live helper
   listens on is not ours to take. */
static int remove_stale(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    struct stat st;

    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : (snprintf(err, errlen, "socket: %s: %s", path,
                                               strerror(errno)), -1);
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "socket: %s exists and is not a socket", path);
        return -1;
    }
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    int rc = connect(fd, (struct sockaddr *)&sun, sizeof(sun));
    int saved = errno;
    close(fd);
    if (rc == 0) {
        snprintf(err, errlen, "socket: a helper is already listening on %s", path);
        return -1;
    }
    if (saved != ECONNREFUSED) {
        snprintf(err, errlen, "socket: %s: %s", path, strerror(saved));
        return -1;
    }
    if (unlink(path) < 0) {
        snprintf(err, errlen, "socket: cannot remove the stale %s: %s", path, strerror(errno));
        return -1;
    }
    log_info("removed the stale socket %s", path);
    return 0;
}

struct local_server *local_server_new(uv_loop_t *loop, const struct helper_config *cfg,
                                      struct contacts *cs, struct upstream *up, char *err,
                                      size_t errlen)
{
    struct local_server *srv = calloc(1, sizeof(*srv));
    struct stat st;
    int rc;

    if (srv == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    srv->loop = loop;
    srv->cfg = cfg;
    srv->cs = cs;
    srv->up = up;
    srv->shares = shares_new();
    if (srv->shares == NULL) {
        snprintf(err, errlen, "out of memory");
        free(srv);
        return NULL;
    }
    if (make_parent(cfg->socket, err, errlen) < 0 || remove_stale(cfg->socket, err, errlen) < 0) {
        shares_free(srv->shares);
        free(srv);
        return NULL;
    }
    uv_pipe_init(loop, &srv->listener, 0);
    srv->listener.data = srv;
    if ((rc = uv_pipe_bind(&srv->listener, cfg->socket)) < 0) {
        snprintf(err, errlen, "socket: cannot bind %s: %s", cfg->socket, uv_strerror(rc));
        goto fail;
    }
    if (chmod(cfg->socket, cfg->mode) < 0 || stat(cfg->socket, &st) < 0) {
        snprintf(err, errlen, "socket: %s: %s", cfg->socket, strerror(errno));
        unlink(cfg->socket);
        goto fail;
    }
    srv->dev = st.st_dev;
    srv->ino = st.st_ino;
    if ((rc = uv_listen((uv_stream_t *)&srv->listener, LISTEN_BACKLOG, on_connection)) < 0) {
        snprintf(err, errlen, "socket: cannot listen on %s: %s", cfg->socket, uv_strerror(rc));
        unlink(cfg->socket);
        goto fail;
    }
    return srv;
fail:
    /* The handle must be closed by the loop before its memory goes. */
    srv->closing = 1;
    uv_close((uv_handle_t *)&srv->listener, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    shares_free(srv->shares);
    free(srv);
    return NULL;
}

void local_server_close(struct local_server *srv)
{
    struct stat st;

    if (srv->closing)
        return;
    srv->closing = 1;
    uv_close((uv_handle_t *)&srv->listener, NULL);
    if (stat(srv->cfg->socket, &st) == 0 && st.st_dev == srv->dev && st.st_ino == srv->ino)
        unlink(srv->cfg->socket);
    while (srv->conns.head != NULL)
        conn_close(dlist_entry(srv->conns.head, struct conn, link));
}

void local_server_free(struct local_server *srv)
{
    if (srv == NULL)
        return;
    shares_free(srv->shares);
    free(srv);
}

static struct conn *publisher(struct local_server *srv, const char *job, int32_t rank)
{
    for (struct dlink *l = srv->conns.head; l != NULL; l = l->next) {
        struct conn *c = dlist_entry(l, struct conn, link);
        if (c->hello && (c->published || c->publishing) && !c->closing && c->me.rank == rank &&
            strcmp(c->me.job, job) == 0)
            return c;
    }
    return NULL;
}

int local_server_publishes(struct local_server *srv, const char *job, int32_t rank, char *why,
                           size_t whylen)
{
    if (publisher(srv, job, rank) != NULL)
        return 1;
    snprintf(why, whylen, "no live process on this node publishes job %s rank %d", job, rank);
    return 0;
}

/* The rest of a message the socket took only in part, queued behind it. */
struct raw_write {
    uv_write_t req;
    struct conn *c;
    unsigned char data[sizeof(struct local_header) + sizeof(struct local_incoming)];
};

static void on_raw_written(uv_write_t *req, int status)
{
    struct raw_write *w = (struct raw_write *)req;
    struct conn *c = w->c;

    if (status < 0)
        conn_close(c);
    else
        update_reading(c);
    explicit_bzero(w, sizeof(*w));
    free(w);
    conn_unref(c);
}

/* Sends INCOMING `in` with a copy of fd on c, as a reply to rid (0 =
   unsolicited): 0 sent, 1 busy, -1 failed (why). */
static int pass_fd(struct conn *c, uint32_t rid, const struct local_incoming *in, int fd, char *why,
                   size_t whylen)
{
    struct {
        struct local_header hdr;
        struct local_incoming in;
    } msg;
    uv_os_fd_t pipe_fd;

    if (c->closing) {
        snprintf(why, whylen, "pid %d: its connection is closing", (int)c->pid);
        return -1;
    }
    /* The descriptor travels with the first byte of the message, written
       straight to the socket: only once every queued reply is out, so the
       message cannot land inside another one. */
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) > 0)
        return 1;
    if (uv_fileno((uv_handle_t *)&c->pipe, &pipe_fd) < 0) {
        snprintf(why, whylen, "pid %d: its connection has no descriptor", (int)c->pid);
        return -1;
    }
    _Static_assert(sizeof(msg) == sizeof(struct local_header) + sizeof(struct local_incoming),
                   "INCOMING message without padding");
    memset(&msg, 0, sizeof(msg));
    msg.hdr = (struct local_header){.magic = LOCAL_MAGIC, .type = LOCAL_INCOMING,
                                    .length = sizeof(msg.in), .request_id = rid};
    msg.in = *in;
    ssize_t n = fdpass_send(pipe_fd, &msg, sizeof(msg), fd);
    if (n < 0) {
        explicit_bzero(&msg, sizeof(msg));
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 1;
        snprintf(why, whylen, "pid %d: sending the descriptor: %s", (int)c->pid, strerror(errno));
        return -1;
    }
    if ((size_t)n < sizeof(msg)) {
        struct raw_write *w = calloc(1, sizeof(*w));
        uv_buf_t buf;

        if (w == NULL) {
            /* Half a message on the stream: the connection is lost. */
            explicit_bzero(&msg, sizeof(msg));
            conn_close(c);
            snprintf(why, whylen, "pid %d: out of memory", (int)c->pid);
            return -1;
        }
        w->c = c;
        memcpy(w->data, (unsigned char *)&msg + n, sizeof(msg) - (size_t)n);
        buf = uv_buf_init((char *)w->data, (unsigned)(sizeof(msg) - (size_t)n));
        c->refs++;
        if (uv_write(&w->req, (uv_stream_t *)&c->pipe, &buf, 1, on_raw_written) < 0) {
            c->refs--;
            free(w);
            conn_close(c);
            explicit_bzero(&msg, sizeof(msg));
            snprintf(why, whylen, "pid %d: cannot queue the rest of the message", (int)c->pid);
            return -1;
        }
    }
    explicit_bzero(&msg, sizeof(msg));
    return 0;
}

int local_server_deliver(struct local_server *srv, const char *job, int32_t rank,
                         const struct local_incoming *in, int fd, pid_t *pid, char *why,
                         size_t whylen)
{
    struct conn *c = publisher(srv, job, rank);

    if (c == NULL) {
        snprintf(why, whylen, "no live process on this node publishes job %s rank %d (any "
                              "more)", job, rank);
        return -1;
    }
    *pid = c->pid;
    return pass_fd(c, 0, in, fd, why, whylen);
}

int local_server_published_port(struct local_server *srv, const char *job, int32_t rank)
{
    struct conn *c = publisher(srv, job, rank);

    if (c == NULL)
        return 0;
    return c->published ? (int)c->me.port : (int)c->publishing_port;
}

void local_server_set_attempts(struct local_server *srv, struct attempts *as)
{
    srv->attempts = as;
}

void local_server_set_intercept(struct local_server *srv, int can_intercept, int nfqueue,
                                const char *why)
{
    srv->can_intercept = can_intercept;
    srv->nfqueue = nfqueue;
    snprintf(srv->intercept, sizeof(srv->intercept), "%s", why);
}

void local_conn_hold(struct conn *c)
{
    c->refs++;
}

void local_conn_drop(struct conn *c)
{
    conn_unref(c);
}

int local_conn_alive(const struct conn *c)
{
    return !c->closing;
}

void local_conn_error(struct conn *c, uint32_t rid, int code, const char *msg)
{
    send_error(c, rid, code, 0, "%s", msg);
}

int local_conn_pass(struct conn *c, uint32_t rid, const struct local_incoming *in, int fd,
                    char *why, size_t whylen)
{
    return pass_fd(c, rid, in, fd, why, whylen);
}
