/* The requests a process may send: each checked, then handled through a
   table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "local_internal.h"
#include "log.h"
#include "proto.h"
#include "qcgconn.h"
#include "shares.h"
#include "upstream.h"
#include "verifier.h"

static int withdraw_now(struct conn *c, uint32_t rid);
static void quota_log(struct conn *c, const char *what, const char *option);

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
    if (!secret_strong(h->secret)) {
        unsigned left_out;
        /* The refusals' limiter: a job started with a weak secret logs once. */
        if (ratelimit_ok(&c->srv->refused_log, uv_now(c->srv->loop), 10000, &left_out))
            log_warnx("pid %d uid %d: HELLO refused: job %s's secret is too weak (%u refusal "
                      "lines left out)",
                      (int)c->pid, (int)c->uid, h->job, left_out);
        send_error(c, rid, QCG_EINVAL, 0,
                   "job secret too weak: about %d bits, at least %d needed; " QCG_SECRET_ADVICE,
                   secret_entropy_bits(h->secret), QCG_SECRET_MIN_BITS);
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
    c->me.uid = c->uid;
    log_info("pid %d uid %d: job %s rank %d", (int)c->pid, (int)c->uid, c->me.job, c->me.rank);

    memset(&ok, 0, sizeof(ok));
    /* The version it asked in (an older process's too: localproto.h). */
    ok.version = h->version;
    ok.port_low = (uint16_t)cfg->ports[0];
    ok.port_high = (uint16_t)cfg->ports[1];
    snprintf(ok.cluster, sizeof(ok.cluster), "%s", cfg->cluster);
    snprintf(ok.node, sizeof(ok.node), "%s", cfg->node);
    snprintf(ok.address, sizeof(ok.address), "%s", cfg->address);
    for (int i = 1; i < cfg->naddrs; i++)
        snprintf(ok.other_address[i - 1], sizeof(ok.other_address[i - 1]), "%s", cfg->addrs[i]);
    send_msg(c, LOCAL_HELLO_OK, rid, &ok, sizeof(ok), 0);
    return 0;
}

/* PUBLISH and WITHDRAW each call the frontend and the broker: while
   another uid is active on the node, each uid gets publishes-per-uid of
   them a second (bursts of 10 s worth) and is refused busy beyond, so that
   one uid's cycle of them cannot keep the helper's threads, the frontend
   and the broker from the others' requests (issue 32).  0: refused. */
#define PUBLISH_BURST_S 10
static int publish_admitted(struct conn *c, uint32_t rid, const char *what)
{
    const struct helper_config *cfg = c->srv->cfg;
    struct share *sh = c->share;
    double rate = cfg->publishes_per_uid;

    if (share_take(sh, &sh->publishes, rate, PUBLISH_BURST_S * rate) ||
        !share_others_active(c->srv->shares, sh, PUBLISH_BURST_S * 1000))
        return 1;
    char line[64];
    snprintf(line, sizeof(line), "%s refused", what);
    quota_log(c, line, "publishes-per-uid");
    refuse_later(c, rid,
                 "uid %d asked for more than %d PUBLISH and WITHDRAW requests a second "
                 "(publishes-per-uid) while another user is active on this node; retry later",
                 (int)c->uid, cfg->publishes_per_uid);
    return 0;
}

static int on_publish(struct conn *c, uint32_t rid)
{
    const struct helper_config *cfg = c->srv->cfg;
    unsigned port = c->in.publish.port;
    struct contact ct = c->me;
    pid_t holder;
    uid_t holder_uid;

    if (!publish_admitted(c, rid, "PUBLISH"))
        return 0;
    if ((int)port < cfg->ports[0] || (int)port > cfg->ports[1]) {
        send_error(c, rid, QCG_EINVAL, 0, "port %u is outside this node's range %d-%d", port,
                   cfg->ports[0], cfg->ports[1]);
        return 0;
    }
    if ((c->in.publish.addresses >> cfg->naddrs) != 0) {
        send_error(c, rid, QCG_EINVAL, 0, "this node has %d address%s: no address %d to listen on",
                   cfg->naddrs, cfg->naddrs == 1 ? "" : "es",
                   31 - __builtin_clz((unsigned)c->in.publish.addresses));
        return 0;
    }
    ct.port = (uint16_t)port;
    /* The first address always: older libraries publish that one alone. */
    ct.addresses = (uint16_t)(c->in.publish.addresses | 1u);
    int rc = contacts_reserve(c->srv->cs, &ct, c->id, &holder, &holder_uid);
    if (rc == QCG_EBUSY) {
        /* Another user's pid is none of the caller's business. */
        if (holder != 0 && holder_uid != c->uid)
            send_error(c, rid, QCG_EBUSY, 0,
                       "job %s rank %d is already published by another user's process on this "
                       "node",
                       ct.job, ct.rank);
        else if (holder != 0)
            send_error(c, rid, QCG_EBUSY, 0,
                       "job %s rank %d is already published by pid %d on this node", ct.job,
                       ct.rank, (int)holder);
        else
            send_error(c, rid, LOCAL_ERETRY, 0,
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
    return 1;
}

static int on_withdraw(struct conn *c, uint32_t rid)
{
    if (!c->published) {
        send_msg(c, LOCAL_OK, rid, NULL, 0, 0);
        return 0;
    }
    if (!publish_admitted(c, rid, "WITHDRAW"))
        return 0;
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
void withdraw_after_reports(struct conn *c)
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

void refusal_log(struct conn *c, struct ratelimit *rl, const char *what, const char *option)
{
    struct local_server *srv = c->srv;
    unsigned left_out;

    srv->refused++;
    if (ratelimit_ok(rl, uv_now(srv->loop), 10000, &left_out))
        log_warnx("pid %d uid %d: %s (%s; %u such lines left out)", (int)c->pid, (int)c->uid, what,
                  option, left_out);
}

/* A refusal or drop by a per-uid rate. */
static void quota_log(struct conn *c, const char *what, const char *option)
{
    refusal_log(c, &c->srv->refused_log, what, option);
}

/* Every lookup of a uid spends the node's budget at the frontend
   (node-lookups), which the node's uids share: each uid gets its own rate
   of it here, where its uid is known for sure.  A uid alone (no other
   looked up within a burst's time) may spend the whole budget: a job's
   storm on a node of its own is not slowed. */
#define LOOKUP_BURST_S 10
static int on_lookup(struct conn *c, uint32_t rid)
{
    const struct helper_config *cfg = c->srv->cfg;
    struct share *sh = c->share;
    int32_t to = c->in.lookup.to_rank;

    if (to < 0) {
        send_error(c, rid, QCG_EINVAL, 0, "invalid rank %d", to);
        return 0;
    }
    if (!share_take(sh, &sh->lookup_rate, cfg->lookups_per_uid,
                    LOOKUP_BURST_S * (double)cfg->lookups_per_uid) &&
        share_others_looking_up(c->srv->shares, sh, LOOKUP_BURST_S * 1000)) {
        quota_log(c, "LOOKUP refused", "lookups-per-uid");
        refuse_later(c, rid,
                     "uid %d asked for more than %d lookups a second (lookups-per-uid); "
                     "retry later",
                     (int)c->uid, cfg->lookups_per_uid);
        return 0;
    }
    if (queue_request(c->srv, c, LOCAL_LOOKUP, rid, &c->me, to, c->id) < 0) {
        send_error(c, rid, QCG_ESYS, 0, "the helper cannot queue the request");
        return 0;
    }
    return 1;
}

int report_admitted(struct conn *c)
{
    const struct helper_config *cfg = c->srv->cfg;
    struct share *sh = c->share;

    /* Malformed, or before HELLO: dispatch says so. */
    if (!c->hello || local_payload_check(LOCAL_REPORT, &c->in) != 0)
        return 1;
    if (!share_take(sh, &sh->reports, cfg->reports_per_uid, 16.0 * cfg->reports_per_uid)) {
        quota_log(c, "REPORT dropped: the uid's reports exceed their rate", "reports-per-uid");
        return 0;
    }
    /* A success tells the broker little it must know now; the uid's lookups
       go first.  By design, so counted but no warning: storms of jobs that
       succeeded logged it on every node. */
    if (c->in.report.ok && sh->requests >= (unsigned)cfg->max_requests_per_uid) {
        c->srv->refused++;
        log_debug("pid %d uid %d: REPORT of a success dropped: the uid's requests are all "
                  "upstream (max-requests-per-uid)",
                  (int)c->pid, (int)c->uid);
        return 0;
    }
    return 1;
}

/* No reply (the process is usually closing this connection). */
static int on_report(struct conn *c, uint32_t rid)
{
    const struct local_report *r = &c->in.report;

    if (r->to_rank < 0 || r->technique < QCG_TECH_DIRECT || r->technique > TECH_PUNCH6) {
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
    s.refused = srv->refused;
    snprintf(s.cluster, sizeof(s.cluster), "%s", srv->cfg->cluster);
    snprintf(s.node, sizeof(s.node), "%s", srv->cfg->node);
    snprintf(s.frontend, sizeof(s.frontend), "%s", upstream_url(srv->up));
    for (int i = 0; i < srv->cfg->naddrs && i < QCG_NODE_ADDRS; i++)
        snprintf(s.address[i], sizeof(s.address[i]), "%s", srv->cfg->addrs[i]);
    send_msg(c, LOCAL_STATUS_OK, rid, &s, sizeof(s), 0);
    return 0;
}

/* qcg-probe's requests: one at a time per connection like
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

/* SITE and PROBE call the broker, and a PROBE holds one of the cluster's
   few probe slots: a rate per uid. */
static int rated_probe_request(struct conn *c, uint16_t type, uint32_t rid)
{
    const struct helper_config *cfg = c->srv->cfg;
    struct share *sh = c->share;

    if (!share_take(sh, &sh->probes, cfg->probes_per_uid / 60.0, cfg->probes_per_uid)) {
        quota_log(c, type == LOCAL_SITE ? "SITE refused" : "PROBE refused", "probes-per-uid");
        refuse_later(c, rid,
                     "uid %d asked for more than %d SITE and PROBE requests a minute "
                     "(probes-per-uid); retry in a few seconds",
                     (int)c->uid, cfg->probes_per_uid);
        return 0;
    }
    return queue_probe_request(c, type, rid);
}

static int on_site(struct conn *c, uint32_t rid)
{
    return rated_probe_request(c, LOCAL_SITE, rid);
}

static int on_probe(struct conn *c, uint32_t rid)
{
    return rated_probe_request(c, LOCAL_PROBE, rid);
}

/* What a site looks like from outside is the node administrator's word:
   root's, or the helper's own user's (a probe run by the operator).  A
   user's qcg-probe asks too and is expected to be told no: not a warning. */
static int on_observed(struct conn *c, uint32_t rid)
{
    uid_t self = geteuid();

    if (c->uid != 0 && c->uid != self) {
        log_debug("pid %d uid %d: OBSERVED refused: only root or the helper's uid %d may "
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
const struct local_handler local_handlers[LOCAL_TYPE_COUNT] = {
    [LOCAL_HELLO] = {on_hello, 0, 0, "HELLO"},
    [LOCAL_PUBLISH] = {on_publish, 1, 1, "PUBLISH"},
    [LOCAL_WITHDRAW] = {on_withdraw, 1, 1, "WITHDRAW"},
    [LOCAL_LOOKUP] = {on_lookup, 1, 1, "LOOKUP"},
    [LOCAL_STATUS] = {on_status, 0, 0, "STATUS"},
    [LOCAL_REPORT] = {on_report, 1, 1, "REPORT"},
    /* Like everything that calls the broker, after a HELLO. */
    [LOCAL_SITE] = {on_site, 1, 1, "SITE"},
    [LOCAL_PROBE] = {on_probe, 1, 1, "PROBE"},
    [LOCAL_OBSERVED] = {on_observed, 0, 1, "OBSERVED"},
    [LOCAL_PUNCHING] = {on_punching, 1, 0, "PUNCHING"},
};

void dispatch(struct conn *c)
{
    uint16_t type = c->hdr.type;
    uint32_t rid = c->hdr.request_id;

    if (type == LOCAL_HELLO &&
        (c->in.hello.version < LOCAL_VERSION_OLDEST || c->in.hello.version > LOCAL_VERSION)) {
        proto_fail(c, rid, "HELLO of protocol version %u; this helper speaks %u (and %u)",
                   c->in.hello.version, LOCAL_VERSION, LOCAL_VERSION_OLDEST);
        return;
    }
    if (local_payload_check(type, &c->in) != 0) {
        proto_fail(c, rid, "%s: a string field is not NUL-terminated, or a value is out of range",
                   local_handlers[type].name);
        return;
    }
    if (local_handlers[type].need_hello && !c->hello) {
        proto_fail(c, rid, "%s before HELLO", local_handlers[type].name);
        return;
    }
    log_debug("pid %d: %s request %u", (int)c->pid, local_handlers[type].name, rid);
    local_handlers[type].handle(c, rid);
}
