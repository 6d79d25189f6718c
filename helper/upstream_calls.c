/* The blocking requests worker threads make (publish, withdraw, lookup,
   traverse, report, and qcg-probe's siteInfo, probe, observed), each on a
   kept-alive connection of the pool, and what a failure means locally. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "longpoll.h"
#include "ratelimit.h"
#include "monotonic.h"
#include "proto.h"
#include "qcgconn.h"
#include "report_soap.h"
#include "upstream_internal.h"
#include "verifier.h"

int upstream_error(enum call_status st, const char *subcode)
{
    static const struct {
        const char *subcode;
        int code;
    } faults[] = {
        {"busy", QCG_EBUSY},
        {"retry", LOCAL_ERETRY},
        {"denied", QCG_EDENIED},
        {"notfound", QCG_ENOTFOUND},
        {"invalid", QCG_EINVAL},
        {"version", QCG_EPROTO},
        {"unavailable", QCG_EUPSTREAM},
        {"unregistered", QCG_EUPSTREAM},
    };

    if (st == CALL_OK)
        return 0;
    if (st == CALL_FAULT && subcode != NULL) {
        for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
            if (strcmp(subcode, faults[i].subcode) == 0)
                return faults[i].code;
        }
    }
    return QCG_EUPSTREAM;
}

/* A call's failure as the process reads it: msg filled, the QCG_E* code
   returned.  With frontend_said, a qcg:unavailable fault (the frontend is
   there, the broker behind it is not) says so rather than "refused". */
static int failed(struct upstream *u, enum call_status st, const char *subcode, const char *text,
                  const char *op, int frontend_said, char *msg, size_t msglen)
{
    if (st == CALL_UNREACHABLE)
        snprintf(msg, msglen, "%s: frontend %s unreachable: %s", op, u->cfg->frontend, text);
    else if (st == CALL_FAULT && strcmp(subcode, "unregistered") == 0) {
        /* The frontend restarted and we have not noticed yet: register now
           rather than at the next poll; the caller asks again. */
        snprintf(msg, msglen, "%s: frontend %s does not know this node yet (restarted?): %s", op,
                 u->cfg->frontend, text);
        longpoll_register_again(u->lp);
    } else if (frontend_said && strcmp(subcode, "unavailable") == 0)
        snprintf(msg, msglen, "%s: frontend %s reached, but it says: %s", op, u->cfg->frontend,
                 text[0] ? text : "the broker is unavailable");
    else
        snprintf(msg, msglen, "%s refused: %s%s%s", op, subcode[0] ? subcode : "fault",
                 text[0] ? ": " : "", text);
    return upstream_error(st, subcode);
}

/* Whether this thread's last finished call was refused for an operation the
   frontend lacks (an older frontend): pool_call runs the call in the
   caller's thread, which then falls back to the older operations. */
static __thread bool unknown_op;

/* Classifies a finished call; fills msg and returns the QCG_E* code. */
int finish_call(struct upstream *u, struct soap *soap, int rc, const char *op, int frontend_said,
                enum call_status *st, char *msg, size_t msglen)
{
    char subcode[32] = "", text[LOCAL_MESSAGE_MAX] = "";

    *st = soap_call_status(soap, rc, subcode, sizeof(subcode), text, sizeof(text));
    unknown_op = soap_call_unknown_op(*st, subcode, text);
    if (*st == CALL_OK)
        return 0;
    return failed(u, *st, subcode, text, op, frontend_said, msg, msglen);
}

int finish(struct upstream *u, struct soap *soap, int rc, const char *op, enum call_status *st,
           char *msg, size_t msglen)
{
    return finish_call(u, soap, rc, op, 0, st, msg, msglen);
}

/* The contact's job verifier: all that goes upstream of its secret. */
static int verifier_of(const struct contact *c, char v[QCG_VERIFIER_LEN + 1], const char *op,
                       enum call_status *st, char *msg, size_t msglen)
{
    if (job_verifier(c->job, c->secret, v) == 0)
        return 0;
    *st = CALL_FAULT;
    snprintf(msg, msglen, "%s: cannot derive the job verifier", op);
    return QCG_ESYS;
}

int call_publish(struct upstream *u, struct soap *soap, const struct call_args *a,
                 enum call_status *st, char *msg, size_t msglen)
{
    struct contact c = *a->c;
    char v[QCG_VERIFIER_LEN + 1];
    if (verifier_of(&c, v, "publish", st, msg, msglen) != 0) {
        explicit_bzero(&c, sizeof(c));
        return QCG_ESYS;
    }
    /* The node's further addresses the process's listener takes. */
    char *other[QCG_NODE_ADDRS];
    int nother = 0;
    for (int i = 1; i < u->cfg->naddrs; i++) {
        if (c.addresses & (1u << i))
            other[nother++] = (char *)u->cfg->addrs[i];
    }
    struct qcg__contact con = {
        .job = c.job,
        .verifier = v,
        .rank = c.rank,
        .cluster = u->cfg->cluster,
        .node = u->cfg->node,
        .address = u->cfg->address,
        .port = c.port,
        .__sizeOtherAddress = nother,
        .otherAddress = other,
    };
    struct qcg__ackResponse resp;

    memset(&resp, 0, sizeof(resp));
    int rc =
        soap_call_qcg__publish(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION, &con, &resp);
    rc = finish(u, soap, rc, "publish", st, msg, msglen);
    explicit_bzero(&c, sizeof(c));
    explicit_bzero(v, sizeof(v));
    return rc;
}

int call_withdraw(struct upstream *u, struct soap *soap, const struct call_args *a,
                  enum call_status *st, char *msg, size_t msglen)
{
    struct contact c = *a->c;
    struct qcg__ackResponse resp;

    char v[QCG_VERIFIER_LEN + 1];
    if (verifier_of(&c, v, "withdraw", st, msg, msglen) != 0) {
        explicit_bzero(&c, sizeof(c));
        return QCG_ESYS;
    }
    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__withdraw(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION, c.job, v,
                                     c.rank, u->cfg->node, &resp);
    rc = finish(u, soap, rc, "withdraw", st, msg, msglen);
    explicit_bzero(&c, sizeof(c));
    return rc;
}

static int call_lookup(struct upstream *u, struct soap *soap, const struct call_args *a,
                       enum call_status *st, char *msg, size_t msglen)
{
    struct contact c = *a->c;
    struct qcg__lookupResponse resp;
    char tried[128];
    const char *only = a->only != QCG_TECH_NONE ? technique_name((enum technique)a->only) : NULL;

    char v[QCG_VERIFIER_LEN + 1];
    if (verifier_of(&c, v, "lookup", st, msg, msglen) != 0) {
        explicit_bzero(&c, sizeof(c));
        return QCG_ESYS;
    }
    memset(&resp, 0, sizeof(resp));
    upstream_tried_text(a->tried_mask, !atomic_load(&u->no_punch6_tried), tried, sizeof(tried));
    int rc =
        soap_call_qcg__lookup(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION, c.job, v, c.rank,
                              a->to_rank, tried[0] ? tried : NULL, (char *)only, &resp);
    rc = finish(u, soap, rc, "lookup", st, msg, msglen);
    if (rc == 0)
        rc = upstream_plan(&resp.plan, a->to_rank, a->plan, msg, msglen);
    /* One technique asked for: the broker's reason is the whole answer
       (qcg-probe prints it as the technique's "why"). */
    if (rc == QCG_ETECHNIQUE && only != NULL)
        snprintf(msg, msglen, "%s",
                 resp.plan.reason != NULL ? resp.plan.reason : "no reason given");
    explicit_bzero(&c, sizeof(c));
    return rc;
}

/* Many first lookups in one call; each answer into its lookup_call. */
static int call_lookups(struct upstream *u, struct soap *soap, const struct call_args *a,
                        enum call_status *st, char *msg, size_t msglen)
{
    int n = a->nitems;
    struct qcg__lookupAsks list = {.__sizeAsk = n};
    list.ask = soap_malloc(soap, (size_t)n * sizeof(*list.ask));
    if (list.ask == NULL) {
        *st = CALL_UNREACHABLE;
        snprintf(msg, msglen, "lookups: out of memory");
        return QCG_ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        const struct lookup_call *l = a->lookups[i];
        char *v = soap_malloc(soap, QCG_VERIFIER_LEN + 1);
        if (v == NULL) {
            *st = CALL_UNREACHABLE;
            snprintf(msg, msglen, "lookups: out of memory");
            return QCG_ENOMEM;
        }
        if (verifier_of(l->from, v, "lookups", st, msg, msglen) != 0) {
            for (int j = 0; j < i; j++)
                explicit_bzero(list.ask[j].verifier, QCG_VERIFIER_LEN + 1);
            return QCG_ESYS;
        }
        list.ask[i] = (struct qcg__lookupAsk){.job = (char *)l->from->job,
                                              .verifier = v,
                                              .fromRank = l->from->rank,
                                              .toRank = l->to_rank};
    }
    struct qcg__lookupsResponse resp;
    memset(&resp, 0, sizeof(resp));
    int rc =
        soap_call_qcg__lookups(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION, &list, &resp);
    for (int i = 0; i < n; i++)
        explicit_bzero(list.ask[i].verifier, QCG_VERIFIER_LEN + 1);
    rc = finish(u, soap, rc, "lookups", st, msg, msglen);
    if (rc != 0)
        return rc;
    if (resp.__sizeAnswer != n || resp.answer == NULL) {
        *st = CALL_UNREACHABLE;
        snprintf(msg, msglen, "lookups: the frontend sent %d answers to %d lookups",
                 resp.__sizeAnswer, n);
        return QCG_EUPSTREAM;
    }
    for (int i = 0; i < n; i++) {
        struct lookup_call *l = a->lookups[i];
        const struct qcg__lookupAnswer *ans = &resp.answer[i];
        if (ans->plan != NULL)
            l->rc = upstream_plan(ans->plan, l->to_rank, l->plan, l->msg, l->msglen);
        else
            l->rc = failed(u, CALL_FAULT, ans->fault != NULL ? ans->fault : "",
                           ans->faultText != NULL ? ans->faultText : "", "lookup", 0, l->msg,
                           l->msglen);
    }
    return 0;
}

static int call_traverse(struct upstream *u, struct soap *soap, const struct call_args *a,
                         enum call_status *st, char *msg, size_t msglen)
{
    struct qcg__ackResponse resp;

    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__traverse(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION,
                                     (char *)a->token, (char *)a->packet, &resp);
    return finish(u, soap, rc, "traverse", st, msg, msglen);
}

static int call_reports(struct upstream *u, struct soap *soap, const struct call_args *a,
                        enum call_status *st, char *msg, size_t msglen)
{
    struct qcg__reportsResponse resp;
    struct qcg__attempts list;

    if (report_attempts(soap, a->items, a->nitems, &list) < 0) {
        *st = CALL_UNREACHABLE;
        snprintf(msg, msglen, "reports: out of memory");
        return QCG_ENOMEM;
    }
    memset(&resp, 0, sizeof(resp));
    int rc =
        soap_call_qcg__reports(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION, &list, &resp);
    rc = finish(u, soap, rc, "reports", st, msg, msglen);
    if (rc == 0)
        *a->accepted = resp.accepted;
    return rc;
}

/* One report alone, to a frontend that has no reports operation. */
static int call_report(struct upstream *u, struct soap *soap, const struct call_args *a,
                       enum call_status *st, char *msg, size_t msglen)
{
    const struct report_item *r = a->items;
    struct qcg__ackResponse resp;

    memset(&resp, 0, sizeof(resp));
    int rc =
        soap_call_qcg__report(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION, (char *)r->job,
                              (char *)r->verifier, r->from_rank, r->to_rank, (char *)r->technique,
                              r->ok, r->setup_ms, r->why[0] != '\0' ? (char *)r->why : NULL, &resp);
    return finish(u, soap, rc, "report", st, msg, msglen);
}

static int pool_call(struct upstream *u, call_fn fn, const struct call_args *a, char *msg,
                     size_t msglen)
{
    for (int attempt = 0;; attempt++) {
        struct soap *soap = soap_pool_get(u->pool);
        int reused = soap_valid_socket(soap->socket);
        enum call_status st;

        unknown_op = false;
        int rc = fn(u, soap, a, &st, msg, msglen);

        soap_client_reset(soap);
        soap_pool_put(u->pool, soap, st == CALL_UNREACHABLE);
        /* A kept-alive connection that the frontend dropped (it restarted)
           fails once; a fresh connection tells whether it is really down. */
        if (st == CALL_UNREACHABLE && reused && attempt == 0)
            continue;
        return rc;
    }
}

int upstream_publish(struct upstream *u, const struct contact *c, char *msg, size_t msglen)
{
    struct call_args a = {.c = c};

    return pool_call(u, call_publish, &a, msg, msglen);
}

int upstream_withdraw(struct upstream *u, const struct contact *c, char *msg, size_t msglen)
{
    struct call_args a = {.c = c};

    return pool_call(u, call_withdraw, &a, msg, msglen);
}

/* Whether a refusal is an older service's of "holepunch6" (in `flag`'s
   kind of call): then the IPv6 punch is plain "holepunch" there from now
   on (the broker rules out both punches after it, as before the name), and
   the call is made again. */
static bool punch6_refused(atomic_int *flag, uint32_t sent, const char *msg)
{
    if (!(sent & (1u << TECH_PUNCH6)) || atomic_load(flag) || strstr(msg, "holepunch6") == NULL)
        return false;
    atomic_store(flag, 1);
    log_info("the services refuse \"holepunch6\" (%s): the IPv6 punch goes up as \"holepunch\"",
             msg);
    return true;
}

int upstream_lookup(struct upstream *u, const struct contact *from, int32_t to_rank,
                    uint32_t tried_mask, uint32_t only, struct local_plan *plan, char *msg,
                    size_t msglen)
{
    struct call_args a = {
        .c = from, .to_rank = to_rank, .tried_mask = tried_mask, .only = only, .plan = plan};

    int rc = pool_call(u, call_lookup, &a, msg, msglen);
    if (rc == QCG_EINVAL && punch6_refused(&u->no_punch6_tried, tried_mask, msg))
        rc = pool_call(u, call_lookup, &a, msg, msglen);
    return rc;
}

void upstream_lookups(struct upstream *u, struct lookup_call *const *ls, int n)
{
    char msg[LOCAL_MESSAGE_MAX];

    if (n > 1 && !atomic_load(&u->single_lookups)) {
        struct call_args a = {.lookups = ls, .nitems = n};
        int rc = pool_call(u, call_lookups, &a, msg, sizeof(msg));
        if (rc == 0)
            return;
        if (!unknown_op) {
            for (int i = 0; i < n; i++) {
                ls[i]->rc = rc;
                snprintf(ls[i]->msg, ls[i]->msglen, "%s", msg);
            }
            return;
        }
        log_info("the frontend has no lookups operation (%s): lookups go one by one", msg);
        atomic_store(&u->single_lookups, 1);
    }
    for (int i = 0; i < n; i++) {
        struct call_args a = {.c = ls[i]->from, .to_rank = ls[i]->to_rank, .plan = ls[i]->plan};
        ls[i]->rc = pool_call(u, call_lookup, &a, ls[i]->msg, ls[i]->msglen);
    }
}

int upstream_traverse(struct upstream *u, const char *token, const char *packet_hex, char *msg,
                      size_t msglen)
{
    struct call_args a = {.token = token, .packet = packet_hex};

    return pool_call(u, call_traverse, &a, msg, msglen);
}

int upstream_report(struct upstream *u, const struct contact *from, const struct local_report *r,
                    char *msg, size_t msglen)
{
    struct report_item it;
    enum call_status st;

    memset(&it, 0, sizeof(it));
    if (verifier_of(from, it.verifier, "report", &st, msg, msglen) != 0)
        return QCG_ESYS;
    snprintf(it.job, sizeof(it.job), "%s", from->job);
    snprintf(it.technique, sizeof(it.technique), "%s",
             upstream_attempt_name(r->technique, !atomic_load(&u->no_punch6_report)));
    snprintf(it.why, sizeof(it.why), "%s", r->why);
    it.from_rank = from->rank;
    it.to_rank = r->to_rank;
    it.ok = r->ok ? 1 : 0;
    it.setup_ms = r->setup_ms > INT32_MAX ? INT32_MAX : (int)r->setup_ms;
    /* A failure goes at once, alone: the process's next lookup, which
       follows it, must be planned knowing it.  Successes can wait. */
    if (!it.ok) {
        struct call_args a = {.items = &it, .nitems = 1};
        int rc = pool_call(u, call_report, &a, msg, msglen);
        if (rc == QCG_EINVAL && punch6_refused(&u->no_punch6_report, 1u << r->technique, msg)) {
            snprintf(it.technique, sizeof(it.technique), "%s", technique_name(TECH_HOLEPUNCH));
            rc = pool_call(u, call_report, &a, msg, msglen);
        }
        explicit_bzero(it.verifier, sizeof(it.verifier));
        return rc;
    }
    /* A connection that left IPv6 for IPv4 says why (the process's report,
       rate-limited per uid like every report). */
    if (it.why[0] != '\0')
        log_info("job %s rank %d -> rank %d: %s connected after: %s", it.job, it.from_rank,
                 it.to_rank, it.technique, it.why);
    bool queued = reports_add(u->reports, &it);
    explicit_bzero(it.verifier, sizeof(it.verifier));
    if (!queued) {
        atomic_fetch_add(&u->reports_dropped, 1);
        snprintf(msg, msglen, "report: too many reports wait for the frontend");
        return QCG_EBUSY;
    }
    return 0;
}

void upstream_reports_flush(struct upstream *u)
{
    reports_flush(u->reports);
}

/* A report is advice: what the frontend does not take is dropped, one line
   a minute. */
static void reports_lost(struct upstream *u, int n, const char *why)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static struct ratelimit rl;
    unsigned left_out = 0;
    bool log;

    atomic_fetch_add(&u->reports_dropped, (unsigned long long)n);
    pthread_mutex_lock(&lock);
    log = ratelimit_ok(&rl, monotonic_ms(), 60000, &left_out);
    pthread_mutex_unlock(&lock);
    if (log)
        log_warnx("%d reports not sent to the frontend: %s (%u such lines left out)", n, why,
                  left_out);
}

void upstream_send_reports(void *arg, const struct report_item *items, int n)
{
    struct upstream *u = arg;
    char msg[LOCAL_MESSAGE_MAX];
    int accepted = 0;

    if (!atomic_load(&u->single_reports)) {
        struct call_args a = {.items = items, .nitems = n, .accepted = &accepted};
        int rc = pool_call(u, call_reports, &a, msg, sizeof(msg));
        if (rc == 0)
            return;
        /* An older frontend: the operation is unknown to it, not refused. */
        if (!unknown_op) {
            reports_lost(u, n, msg);
            return;
        }
        log_info("the frontend has no reports operation (%s): reports go one by one", msg);
        atomic_store(&u->single_reports, 1);
    }
    for (int i = 0; i < n; i++) {
        struct call_args a = {.items = &items[i], .nitems = 1};
        if (pool_call(u, call_report, &a, msg, sizeof(msg)) != 0)
            log_debug("report of job %s rank %d -> %d: %s", items[i].job, items[i].from_rank,
                      items[i].to_rank, msg);
    }
}

static int call_site(struct upstream *u, struct soap *soap, const struct call_args *a,
                     enum call_status *st, char *msg, size_t msglen)
{
    struct qcg__siteInfoResponse resp;

    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__siteInfo(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION, &resp);
    rc = finish_call(u, soap, rc, "siteInfo", 1, st, msg, msglen);
    if (rc == 0 && site_copy(&resp, a->site) < 0) {
        snprintf(msg, msglen, "siteInfo: the frontend sent a malformed or oversized answer");
        rc = QCG_EUPSTREAM;
    }
    return rc;
}

static int call_probe(struct upstream *u, struct soap *soap, const struct call_args *a,
                      enum call_status *st, char *msg, size_t msglen)
{
    struct qcg__probeResponse resp;
    struct local_probe_ok *out = a->probe_ok;

    memset(&resp, 0, sizeof(resp));
    /* The frontend names the calling node from our certificate. */
    int rc = soap_call_qcg__probe(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION,
                                  (char *)a->probe->cluster, (int)a->probe->seconds, NULL, &resp);
    rc = finish_call(u, soap, rc, "probe", 1, st, msg, msglen);
    if (rc != 0)
        return rc;
    memset(out, 0, sizeof(*out));
    if (resp.job == NULL || !job_valid(resp.job) || resp.secret == NULL ||
        !secret_valid(resp.secret) || copy_field(out->job, sizeof(out->job), resp.job) < 0 ||
        copy_field(out->secret, sizeof(out->secret), resp.secret) < 0 ||
        copy_field(out->cluster, sizeof(out->cluster), resp.cluster) < 0 ||
        copy_field(out->node, sizeof(out->node), resp.node) < 0 ||
        copy_field(out->address, sizeof(out->address), resp.address) < 0 || resp.rank < 0 ||
        resp.seconds < 1 || resp.seconds > QCG_PROBE_TTL_MAX) {
        explicit_bzero(out, sizeof(*out));
        snprintf(msg, msglen, "probe: the frontend sent a malformed answer");
        return QCG_EUPSTREAM;
    }
    out->rank = resp.rank;
    out->seconds = (uint32_t)resp.seconds;
    return 0;
}

static int call_observed(struct upstream *u, struct soap *soap, const struct call_args *a,
                         enum call_status *st, char *msg, size_t msglen)
{
    const struct local_observed *o = a->observed;
    /* cluster and node: the frontend sets them from our certificate. */
    struct qcg__observation obs = {
        .kind = (char *)o->kind,
        .publicAddress = o->public_address[0] ? (char *)o->public_address : NULL,
        .portPreserving = o->port_preserving,
        .mapping = (char *)o->mapping,
        .inbound = (char *)o->inbound,
    };
    struct qcg__ackResponse resp;

    memset(&resp, 0, sizeof(resp));
    int rc =
        soap_call_qcg__observed(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION, &obs, &resp);
    return finish_call(u, soap, rc, "observed", 1, st, msg, msglen);
}

int upstream_site(struct upstream *u, struct local_site *site, char *msg, size_t msglen)
{
    struct call_args a = {.site = site};

    return pool_call(u, call_site, &a, msg, msglen);
}

int upstream_probe(struct upstream *u, const struct local_probe *p, struct local_probe_ok *ok,
                   char *msg, size_t msglen)
{
    struct call_args a = {.probe = p, .probe_ok = ok};

    return pool_call(u, call_probe, &a, msg, msglen);
}

int upstream_observed(struct upstream *u, const struct local_observed *o, char *msg, size_t msglen)
{
    struct call_args a = {.observed = o};

    return pool_call(u, call_observed, &a, msg, msglen);
}
