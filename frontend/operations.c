/*
 * The qcg service as a frontend serves it to the helpers of its cluster:
 * who may call what, then the relay to the broker (soap_pool) and the cache.
 * Every refusal is a qcg fault and a log line; nothing from the message is
 * trusted beyond what the caller's certificate allows.
 */
#include <openssl/crypto.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "address.h"
#include "cache.h"
#include "cmdqueue.h"
#include "frontend.h"
#include "hex.h"
#include "log.h"
#include "relay.h"
#include "soapH.h"
#include "soap_server.h"
#include "monotonic.h"
#include "ratelimit.h"
#include "rates.h"
#include "report_batch.h"
#include "stats.h"
#include "store.h"

#define POLL_WAIT_MAX 25
#define POLL_COMMANDS_MAX 32
#define TRIED_MAX 128
#define ONLY_MAX 16

/* Refusal lines: a caller may repeat a refused call at will, so at most 50
   a second, with the count of those left out. */
static struct ratelimit_locked refusal_log = RATELIMIT_LOCKED_INIT;
/* Over-rate refusals: one line per 10 s (a node over its rate repeats them). */
static struct ratelimit_locked quota_log = RATELIMIT_LOCKED_INIT;

static int refuse(struct soap *soap, struct frontend *fe, const char *op, const struct identity *id,
                  const char *subcode, const char *why)
{
    unsigned left_out;
    atomic_fetch_add(&fe->counters.denied, 1);
    if (ratelimit_locked_ok(&refusal_log, monotonic_ms(), 1000, 50, &left_out))
        log_warnx("%s from %s %s refused (%s): %s%s", op, id ? role_name(id->role) : "unknown",
                  id ? id->name : "caller", subcode, why,
                  left_out > 0 ? " (more such lines left out)" : "");
    return soap_qcg_fault(soap, subcode, "%s", why);
}

static int deny(struct soap *soap, struct frontend *fe, const char *op, const struct identity *id,
                const char *why)
{
    return refuse(soap, fe, op, id, "denied", why);
}

/* The caller's node is not registered here (this frontend restarted and
   its helper has not registered again yet): transient, not a denial. */
static int unregistered(struct soap *soap, struct frontend *fe, const char *op,
                        const struct identity *id)
{
    char why[200];
    snprintf(why, sizeof(why),
             "node %s has not registered with this frontend (yet: it may have restarted)",
             id->node);
    return refuse(soap, fe, op, id, "unregistered", why);
}

/* Only helpers of this frontend's cluster call the relayed operations. */
static int helper_only(struct soap *soap, struct frontend *fe, const char *op,
                       const struct identity **out)
{
    const struct identity *id = soap_caller(soap);
    char why[256];
    *out = id;
    if (id == NULL || id->role != QCG_ROLE_HELPER) {
        snprintf(why, sizeof(why), "%s is served to the helpers of cluster %s only", op,
                 fe->cluster);
        return deny(soap, fe, op, id, why);
    }
    if (strcmp(id->cluster, fe->cluster) != 0) {
        snprintf(why, sizeof(why), "helper %s belongs to cluster %s, this frontend serves %s",
                 id->name, id->cluster, fe->cluster);
        return deny(soap, fe, op, id, why);
    }
    return SOAP_OK;
}

static int begin(struct soap *soap, int version, const char *op, struct frontend **fe,
                 const struct identity **id)
{
    *fe = soap_server_state(soap);
    if (soap_check_version(soap, version) != 0)
        return SOAP_FAULT;
    return helper_only(soap, *fe, op, id);
}

/* How long a lookup, or a batch of them, may wait for its node's rate. */
#define LOOKUP_RATE_WAIT_MS 1000

/* A node's rate of `kind` calls (rates.h): SOAP_OK once a token is taken
   (waiting up to wait_ms for one), else qcg:retry naming the option, counted
   and logged at most every 10 s. */
static int node_rate(struct soap *soap, struct frontend *fe, const char *op,
                     const struct identity *id, enum rate_kind kind, int wait_ms)
{
    static const char *const option[RATE_KINDS] = {"node-lookups", "node-reports", "node-probes"};
    unsigned left_out;
    bool waited;

    if (rates_take_waited(fe->rates, id->node, kind, wait_ms, &waited)) {
        if (waited)
            atomic_fetch_add(&fe->counters.quota_waited, 1);
        return SOAP_OK;
    }
    atomic_fetch_add(&fe->counters.quota_refused, 1);
    if (ratelimit_locked_ok(&quota_log, monotonic_ms(), 10000, 1, &left_out))
        log_warnx("%s from %s refused: over the node's rate (%s; %u such lines left out)", op,
                  id->name, option[kind], left_out);
    return soap_qcg_fault(soap, "retry", "node %s is over its rate of %s calls (%s); retry later",
                          id->node, op, option[kind]);
}

static int invalid(struct soap *soap, const char *op, const struct identity *id, const char *why)
{
    unsigned left_out;
    if (ratelimit_locked_ok(&refusal_log, monotonic_ms(), 1000, 50, &left_out))
        log_warnx("%s from %s: %s%s", op, id->name, why,
                  left_out > 0 ? " (more such lines left out)" : "");
    return soap_qcg_fault(soap, "invalid", "%s", why);
}

/* Checks job, verifier and a rank; NULL when fine, else why not. */
static const char *job_fields_bad(const char *job, const char *verifier, int rank)
{
    if (job == NULL || !job_valid(job))
        return "job id missing or malformed";
    if (verifier == NULL || !verifier_valid(verifier))
        return "job verifier missing or malformed";
    if (rank < 0)
        return "rank must not be negative";
    return NULL;
}

/* Secrets compared without leaking where they differ. */
static int verifier_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    return la == lb && CRYPTO_memcmp(a, b, la) == 0;
}

static int unavailable(struct soap *soap, const char *op, const char *reason)
{
    log_info("%s: broker unreachable: %s", op, reason);
    return soap_qcg_fault(soap, "unavailable", "broker unreachable: %s", reason);
}

/* A failed relay becomes the helper's answer: the broker's fault as it was,
   or qcg:unavailable when the broker could not be reached. */
static int relay_failed(struct soap *soap, const char *op, const struct relay_error *err)
{
    if (err->status == CALL_UNREACHABLE)
        return unavailable(soap, op, err->msg);
    /* "retry" is flow control (a rate, a late proxy), asked again at once:
       the broker logs it, rate-limited. */
    if (strcmp(err->subcode, "retry") == 0)
        log_debug("%s: broker answered retry: %s", op, err->msg);
    else
        log_info("%s: broker answered %s: %s", op, err->subcode[0] ? err->subcode : "fault",
                 err->msg);
    if (err->subcode[0] == '\0')
        return soap_qcg_fault(soap, "unavailable", "broker failed: %s", err->msg);
    return soap_qcg_fault(soap, err->subcode, "%s", err->msg);
}

/* One relayed call, made through a context from the pool.  A kept-alive
   connection may have died since its last use (the broker restarted): the
   call is then made once more on a fresh connection.  Every relayed
   operation is idempotent at the broker, so a repeat is harmless. */
struct relay_args {
    const struct node_info *node;
    const struct contact_info *contact;
    const char *cluster;
    const char *job, *verifier, *node_name, *tried, *only;
    int from_rank, rank;
    struct plan *plan;
    const char *token, *packet;      /* traverse */
    const struct report_item *items; /* reports */
    struct lookup_ask *asks;         /* lookups */
    int nitems, *accepted;
    struct soap *dst; /* siteInfo, probe: the helper's context, for the answer */
    struct qcg__siteInfoResponse *site;
    struct qcg__probeResponse *probe;
    int seconds;
    const struct qcg__observation *observation;
};

enum relay_op {
    RELAY_NODE,
    RELAY_PUBLISH,
    RELAY_WITHDRAW,
    RELAY_LOOKUP,
    RELAY_LOOKUPS,
    RELAY_TRAVERSE,
    RELAY_REPORT,
    RELAY_REPORTS,
    RELAY_SITE,
    RELAY_PROBE,
    RELAY_OBSERVED
};

static int relay_call(struct frontend *fe, enum relay_op op, const struct relay_args *a,
                      struct relay_error *err)
{
    const char *url = soap_pool_url(fe->pool);
    int rc = -1;
    for (int attempt = 0; attempt < 2; attempt++) {
        struct soap *up = soap_pool_get(fe->pool);
        int reused = soap_valid_socket(up->socket);
        switch (op) {
        case RELAY_NODE:
            rc = relay_register_node(up, url, a->node, err);
            break;
        case RELAY_PUBLISH:
            rc = relay_publish(up, url, a->contact, a->cluster, err);
            break;
        case RELAY_WITHDRAW:
            rc = relay_withdraw(up, url, a->job, a->verifier, a->rank, a->node_name, err);
            break;
        case RELAY_LOOKUP:
            rc = relay_lookup(up, url, a->job, a->verifier, a->from_rank, a->rank, a->tried,
                              a->only, a->plan, err);
            break;
        case RELAY_LOOKUPS:
            rc = relay_lookups(up, url, a->asks, a->nitems, err);
            break;
        case RELAY_TRAVERSE:
            rc = relay_traverse(up, url, a->token, a->packet, err);
            break;
        case RELAY_REPORT:
            rc = relay_report(up, url, a->items, err);
            break;
        case RELAY_REPORTS:
            rc = relay_reports(up, url, a->items, a->nitems, a->accepted, err);
            break;
        case RELAY_SITE:
            rc = relay_site_info(up, url, a->dst, a->site, err);
            break;
        case RELAY_PROBE:
            rc = relay_probe(up, url, a->cluster, a->seconds, a->node_name, a->dst, a->probe, err);
            break;
        case RELAY_OBSERVED:
            rc = relay_observed(up, url, a->observation, err);
            break;
        }
        int broken = rc < 0 && err->status == CALL_UNREACHABLE;
        soap_client_reset(up);
        soap_pool_put(fe->pool, up, broken);
        if (!broken || !reused)
            break;
        log_debug("kept-alive connection to the broker failed (%s): trying a new one", err->msg);
    }
    return rc;
}

int qcg__registerNode(struct soap *soap, int version, struct qcg__node *node,
                      struct qcg__registerResponse *response)
{
    static const char op[] = "registerNode";
    struct frontend *fe;
    const struct identity *id;
    if (begin(soap, version, op, &fe, &id) != SOAP_OK)
        return SOAP_FAULT;
    char why[256];
    if (node == NULL || node->name == NULL)
        return invalid(soap, op, id, "node missing");
    if (strcmp(node->name, id->node) != 0) {
        snprintf(why, sizeof(why), "node '%.64s' is not the caller's node '%s'", node->name,
                 id->node);
        return deny(soap, fe, op, id, why);
    }
    if (!address_valid(node->address))
        return invalid(soap, op, id, "node address missing or not an IP address");
    if (node->portLow < 1 || node->portHigh > 65535 || node->portLow > node->portHigh) {
        snprintf(why, sizeof(why), "port range %d-%d is not within 1-65535", node->portLow,
                 node->portHigh);
        return invalid(soap, op, id, why);
    }
    struct node_info n;
    memset(&n, 0, sizeof(n));
    snprintf(n.name, sizeof(n.name), "%s", id->node);
    if (address_canonical(node->address, n.address, sizeof(n.address)) < 0 ||
        (n.nother = address_others_take(node->__sizeOtherAddress, node->otherAddress, n.address,
                                        n.other, QCG_NODE_ADDRS - 1, why, sizeof(why))) < 0)
        return invalid(soap, op, id, n.nother < 0 ? why : "node address not an IP address");
    n.port_low = node->portLow;
    n.port_high = node->portHigh;
    n.can_intercept = node->canIntercept != 0;
    snprintf(n.incarnation, sizeof(n.incarnation), "%s",
             node->incarnation ? node->incarnation : "");

    /* Kept first: if the link is down, the upstream loop sends it when the
       broker is back, and the helper may already poll its queue. */
    int was_up = 0;
    if (store_node_put(fe->store, &n, &was_up) < 0)
        return soap_qcg_fault(soap, "unavailable", "out of memory");
    if (was_up) {
        struct relay_error err;
        struct relay_args a = {.node = &n};
        int rc = relay_call(fe, RELAY_NODE, &a, &err);
        if (rc < 0)
            return relay_failed(soap, op, &err);
    }
    char addrs[ADDRESS_LIST_TEXT_MAX];
    address_list_format(n.address, n.other, n.nother, 0, addrs, sizeof(addrs));
    log_info("node %s registered: %s ports %d-%d%s%s", n.name, addrs, n.port_low, n.port_high,
             n.can_intercept ? ", can intercept" : "",
             was_up ? "" : " (broker will hear of it when reachable)");
    response->version = QCG_PROTOCOL_VERSION;
    response->epoch = fe->epoch;
    return SOAP_OK;
}

int qcg__publish(struct soap *soap, int version, struct qcg__contact *contact,
                 struct qcg__ackResponse *response)
{
    static const char op[] = "publish";
    struct frontend *fe;
    const struct identity *id;
    if (begin(soap, version, op, &fe, &id) != SOAP_OK)
        return SOAP_FAULT;
    char why[300];
    if (contact == NULL)
        return invalid(soap, op, id, "contact missing");
    const char *bad = job_fields_bad(contact->job, contact->verifier, contact->rank);
    if (bad != NULL)
        return invalid(soap, op, id, bad);
    if (!address_valid(contact->address))
        return invalid(soap, op, id, "contact address missing or not an IP address");
    if (contact->port < 1 || contact->port > 65535)
        return invalid(soap, op, id, "contact port outside 1-65535");

    struct node_info node;
    if (store_node_get(fe->store, id->node, &node) < 0)
        return unregistered(soap, fe, op, id);
    if (!address_equal(contact->address, node.address)) {
        snprintf(why, sizeof(why), "address %s is not node %s's registered address %s",
                 contact->address, node.name, node.address);
        return deny(soap, fe, op, id, why);
    }
    char other[QCG_NODE_ADDRS - 1][QCG_ADDR_MAX];
    int nother = address_others_take(contact->__sizeOtherAddress, contact->otherAddress,
                                     node.address, other, QCG_NODE_ADDRS - 1, why, sizeof(why));
    if (nother < 0)
        return invalid(soap, op, id, why);
    for (int i = 0; i < nother; i++) {
        if (!address_among(other[i], (const char(*)[QCG_ADDR_MAX])node.other, node.nother)) {
            snprintf(why, sizeof(why), "address %s is not among node %s's registered addresses",
                     other[i], node.name);
            return deny(soap, fe, op, id, why);
        }
    }
    if (contact->port < node.port_low || contact->port > node.port_high) {
        snprintf(why, sizeof(why), "port %d is outside node %s's range %d-%d", contact->port,
                 node.name, node.port_low, node.port_high);
        return deny(soap, fe, op, id, why);
    }
    char reason[256];
    if (!store_link(fe->store, reason, sizeof(reason)))
        return unavailable(soap, op, reason);

    struct contact_info c;
    memset(&c, 0, sizeof(c));
    snprintf(c.job, sizeof(c.job), "%s", contact->job);
    snprintf(c.verifier, sizeof(c.verifier), "%s", contact->verifier);
    c.rank = contact->rank;
    snprintf(c.node, sizeof(c.node), "%s", node.name);
    snprintf(c.address, sizeof(c.address), "%s", node.address);
    c.port = contact->port;
    memcpy(c.other, other, sizeof(c.other));
    c.nother = nother;

    struct relay_error err;
    struct relay_args a = {.contact = &c, .cluster = fe->cluster};
    int rc = relay_call(fe, RELAY_PUBLISH, &a, &err);
    if (rc < 0) {
        OPENSSL_cleanse(c.verifier, sizeof(c.verifier));
        return relay_failed(soap, op, &err);
    }
    int stored = store_contact_put(fe->store, &c);
    /* A contact published again may have moved: older plans are wrong. */
    cache_invalidate(fe->cache, c.job, c.rank);
    OPENSSL_cleanse(c.verifier, sizeof(c.verifier));
    if (stored < 0) {
        log_error("out of memory keeping job %s rank %d: not re-published after a broker restart",
                  c.job, c.rank);
    }
    atomic_fetch_add(&fe->counters.publishes, 1);
    char at[ADDRESS_LIST_TEXT_MAX];
    address_list_format(c.address, c.other, c.nother, c.port, at, sizeof(at));
    log_info("job %s rank %d published from node %s at %s", c.job, c.rank, c.node, at);
    response->version = QCG_PROTOCOL_VERSION;
    return SOAP_OK;
}

int qcg__withdraw(struct soap *soap, int version, char *job, char *verifier, int rank, char *node,
                  struct qcg__ackResponse *response)
{
    static const char op[] = "withdraw";
    struct frontend *fe;
    const struct identity *id;
    (void)node; /* the caller's certificate says which node it is */
    if (begin(soap, version, op, &fe, &id) != SOAP_OK)
        return SOAP_FAULT;
    const char *bad = job_fields_bad(job, verifier, rank);
    if (bad != NULL)
        return invalid(soap, op, id, bad);

    char why[300];
    struct contact_info held;
    int is_held = store_contact_get(fe->store, job, rank, &held) == 0;
    if (is_held) {
        int mine = strcmp(held.node, id->node) == 0;
        int verifier_ok = verifier_equal(held.verifier, verifier);
        OPENSSL_cleanse(held.verifier, sizeof(held.verifier));
        if (!mine) {
            snprintf(why, sizeof(why), "rank %d of job %s was published from node %s", rank, job,
                     held.node);
            return deny(soap, fe, op, id, why);
        }
        if (!verifier_ok) {
            snprintf(why, sizeof(why), "wrong secret for job %s (its verifier differs)", job);
            return deny(soap, fe, op, id, why);
        }
        /* The process is gone whatever the broker says: forget it here now. */
        store_contact_remove(fe->store, job, rank);
        atomic_fetch_add(&fe->counters.withdraws, 1);
    }
    cache_invalidate(fe->cache, job, rank);

    char reason[256];
    int up_now = store_link(fe->store, reason, sizeof(reason));
    struct relay_error err;
    int rc = -1;
    if (up_now) {
        struct relay_args a = {
            .job = job, .verifier = verifier, .rank = rank, .node_name = id->node};
        /* The rank's reports first: after its job's last withdraw the
           broker knows nothing to check them against. */
        reports_flush(fe->reports);
        rc = relay_call(fe, RELAY_WITHDRAW, &a, &err);
    }
    if (is_held) {
        if (!up_now || (rc < 0 && err.status == CALL_UNREACHABLE)) {
            struct withdrawal w;
            memset(&w, 0, sizeof(w));
            snprintf(w.job, sizeof(w.job), "%s", job);
            snprintf(w.verifier, sizeof(w.verifier), "%s", verifier);
            w.rank = rank;
            snprintf(w.node, sizeof(w.node), "%s", id->node);
            store_withdrawal_add(fe->store, &w);
            OPENSSL_cleanse(&w, sizeof(w));
            log_info("job %s rank %d withdrawn; the broker will hear of it when reachable", job,
                     rank);
        } else if (rc < 0) {
            log_info("job %s rank %d withdrawn; the broker answered %s: %s", job, rank, err.subcode,
                     err.msg);
        } else {
            log_info("job %s rank %d withdrawn from node %s", job, rank, id->node);
        }
    } else {
        /* Not held here (e.g. this frontend restarted): the broker decides. */
        if (!up_now)
            return unavailable(soap, op, reason);
        if (rc < 0)
            return relay_failed(soap, op, &err);
        atomic_fetch_add(&fe->counters.withdraws, 1);
        log_info("job %s rank %d withdrawn from node %s (not held here)", job, rank, id->node);
    }
    response->version = QCG_PROTOCOL_VERSION;
    return SOAP_OK;
}

/* The caller speaks for rank `rank` of `job`: published from this cluster,
   with the job's verifier.  SOAP_OK or the fault. */
/* Whether rank of job is published here with this verifier: 0, or 1 when
   the caller's node is not registered here, or -1, with why. */
static int member_why(struct frontend *fe, const struct identity *id, const char *job,
                      const char *verifier, int rank, char *why, size_t whylen)
{
    struct contact_info from;
    if (store_contact_get(fe->store, job, rank, &from) < 0) {
        struct node_info node;
        if (id != NULL && store_node_get(fe->store, id->node, &node) < 0)
            return 1;
        snprintf(why, whylen, "rank %d of job %s is not published from cluster %s", rank, job,
                 fe->cluster);
        return -1;
    }
    int verifier_ok = verifier_equal(from.verifier, verifier);
    OPENSSL_cleanse(from.verifier, sizeof(from.verifier));
    if (!verifier_ok) {
        snprintf(why, whylen, "wrong secret for job %s (its verifier differs)", job);
        return -1;
    }
    return 0;
}

static int check_member(struct soap *soap, struct frontend *fe, const char *op,
                        const struct identity *id, const char *job, const char *verifier, int rank)
{
    char why[300];
    int rc = member_why(fe, id, job, verifier, rank, why, sizeof(why));
    if (rc > 0)
        return unregistered(soap, fe, op, id);
    if (rc < 0)
        return deny(soap, fe, op, id, why);
    return SOAP_OK;
}

static void plan_to_soap(struct soap *soap, const struct plan *p, struct qcg__plan *out)
{
    out->status = soap_strdup(soap, p->status);
    out->technique = soap_strdup(soap, p->technique);
    out->cluster = soap_strdup(soap, p->cluster);
    out->node = soap_strdup(soap, p->node);
    out->address = soap_strdup(soap, p->address);
    out->port = p->port;
    out->token = p->token[0] ? soap_strdup(soap, p->token) : NULL;
    out->cacheable = p->cacheable;
    out->reason = soap_strdup(soap, p->reason);
    out->fallbackAddress = p->fallback[0] ? soap_strdup(soap, p->fallback) : NULL;
}

static int plan_cacheable(const struct plan *p)
{
    return p->cacheable && strcmp(p->status, "ok") == 0 && p->token[0] == '\0';
}

/* A lookup's checks and the cache: SOAP_OK, with *hit and the plan when
   the cache had it; else the fault.  A retry after a failed technique (tried)
   or a test of one technique (only) needs the broker's own plan: never
   answered from the cache. */
static int lookup_begin(struct soap *soap, struct frontend *fe, const char *op,
                        const struct identity *id, const char *job, const char *verifier,
                        int fromRank, int toRank, const char *tried, const char *only, int wait_ms,
                        unsigned char hash[JOB_HASH_LEN], struct plan *plan, bool *hit)
{
    atomic_fetch_add(&fe->counters.lookups_received, 1);
    *hit = false;
    const char *bad = job_fields_bad(job, verifier, fromRank);
    if (bad == NULL && toRank < 0)
        bad = "rank must not be negative";
    /* The broker checks the names; here only the size, so a huge list is
       not relayed. */
    if (bad == NULL && tried != NULL && strlen(tried) > TRIED_MAX)
        bad = "tried: too long";
    /* only: one technique name, checked here so junk is not relayed. */
    int alone = only != NULL && only[0] != '\0';
    if (bad == NULL && alone &&
        (strlen(only) > ONLY_MAX || technique_parse(only) <= (int)TECH_NONE))
        bad = "only: not a technique name";
    int retry = (tried != NULL && tried[0] != '\0') || alone;
    if (bad != NULL)
        return invalid(soap, op, id, bad);
    /* Only a process of this cluster, holding the job's verifier, resolves its
       peers: checked here so a wrong verifier never reaches the cache, and
       first, so that a non-member never spends the node's rate. */
    if (check_member(soap, fe, op, id, job, verifier, fromRank) != SOAP_OK)
        return SOAP_FAULT;
    if (node_rate(soap, fe, op, id, RATE_LOOKUP, wait_ms) != SOAP_OK)
        return SOAP_FAULT;
    if (job_secret_hash(job, verifier, hash) < 0)
        return soap_qcg_fault(soap, "unavailable", "cannot hash the job verifier");
    struct cached_plan cp;
    memset(plan, 0, sizeof(*plan));
    if (retry || !cache_get(fe->cache, job, hash, toRank, &cp))
        return SOAP_OK;
    atomic_fetch_add(&fe->counters.lookups_from_cache, 1);
    snprintf(plan->status, sizeof(plan->status), "ok");
    memcpy(plan->technique, cp.technique, sizeof(plan->technique));
    memcpy(plan->cluster, cp.cluster, sizeof(plan->cluster));
    memcpy(plan->node, cp.node, sizeof(plan->node));
    memcpy(plan->address, cp.address, sizeof(plan->address));
    memcpy(plan->fallback, cp.fallback, sizeof(plan->fallback));
    plan->port = cp.port;
    plan->cacheable = 1;
    snprintf(plan->reason, sizeof(plan->reason), "cached by frontend %s", fe->cluster);
    char at[HOSTPORT_MAX];
    hostport_format(plan->address, plan->port, at, sizeof(at));
    log_debug("job %s %d -> %d: %s %s (cache)", job, fromRank, toRank, plan->technique, at);
    *hit = true;
    return SOAP_OK;
}

/* A plan of the broker's kept when it may be (cache.h): a first lookup's
   direct plan without a token, and no invalidation since `gen`. */
static void lookup_keep(struct frontend *fe, const char *job, const unsigned char *hash, int toRank,
                        const struct plan *plan, uint64_t gen)
{
    if (!plan_cacheable(plan))
        return;
    struct cached_plan cp;
    memset(&cp, 0, sizeof(cp));
    memcpy(cp.technique, plan->technique, sizeof(cp.technique));
    memcpy(cp.cluster, plan->cluster, sizeof(cp.cluster));
    memcpy(cp.node, plan->node, sizeof(cp.node));
    memcpy(cp.address, plan->address, sizeof(cp.address));
    memcpy(cp.fallback, plan->fallback, sizeof(cp.fallback));
    cp.port = plan->port;
    if (cache_put(fe->cache, job, hash, toRank, &cp, gen) < 0)
        log_warnx("out of memory: plan for job %s rank %d not cached", job, toRank);
}

int qcg__lookup(struct soap *soap, int version, char *job, char *verifier, int fromRank, int toRank,
                char *tried, char *only, struct qcg__lookupResponse *response)
{
    static const char op[] = "lookup";
    struct frontend *fe;
    const struct identity *id;
    if (begin(soap, version, op, &fe, &id) != SOAP_OK)
        return SOAP_FAULT;
    unsigned char hash[JOB_HASH_LEN];
    struct plan plan;
    bool hit;
    int rc = lookup_begin(soap, fe, op, id, job, verifier, fromRank, toRank, tried, only,
                          LOOKUP_RATE_WAIT_MS, hash, &plan, &hit);
    if (rc == SOAP_OK && !hit) {
        char reason[256];
        int retry = (tried != NULL && tried[0] != '\0') || (only != NULL && only[0] != '\0');
        uint64_t gen = cache_generation(fe->cache);
        struct relay_error err;
        struct relay_args a = {.job = job,
                               .verifier = verifier,
                               .from_rank = fromRank,
                               .rank = toRank,
                               .tried = tried,
                               .only = only,
                               .plan = &plan};
        if (!store_link(fe->store, reason, sizeof(reason)))
            rc = unavailable(soap, op, reason);
        else if (atomic_fetch_add(&fe->counters.lookups_forwarded, 1),
                 relay_call(fe, RELAY_LOOKUP, &a, &err) < 0)
            rc = relay_failed(soap, op, &err);
        else if (!retry)
            lookup_keep(fe, job, hash, toRank, &plan, gen);
        char at[HOSTPORT_MAX];
        hostport_format(plan.address, plan.port, at, sizeof(at));
        if (rc == SOAP_OK)
            log_debug("job %s %d -> %d%s%s: %s %s %s", job, fromRank, toRank,
                      retry ? ", tried/only " : "", retry ? (tried ? tried : only) : "",
                      plan.status, plan.technique, at);
    }
    OPENSSL_cleanse(hash, sizeof(hash));
    if (rc != SOAP_OK)
        return rc;
    response->version = QCG_PROTOCOL_VERSION;
    plan_to_soap(soap, &plan, &response->plan);
    return SOAP_OK;
}

/* An ask the broker did not answer: its fault, as a lookup alone gets it. */
static void ask_failed(struct lookup_ask *l, const struct relay_error *err)
{
    snprintf(l->fault, sizeof(l->fault), "%s",
             err->status == CALL_UNREACHABLE || !err->subcode[0] ? "unavailable" : err->subcode);
    snprintf(l->fault_text, sizeof(l->fault_text), "%s%s",
             err->status == CALL_UNREACHABLE ? "broker unreachable: " : "", err->msg);
}

/* The broker's answers to the lookups the cache did not have; an older
   broker, without qcg__lookups, gets them one by one. */
static void lookups_relay(struct frontend *fe, struct lookup_ask *asks, int n)
{
    struct relay_error err = {.status = CALL_UNREACHABLE};
    if (!store_link(fe->store, err.msg, sizeof(err.msg))) {
        for (int i = 0; i < n; i++)
            ask_failed(&asks[i], &err);
        return;
    }
    atomic_fetch_add(&fe->counters.lookups_forwarded, (unsigned long long)n);
    if (!atomic_load(&fe->broker_single_lookups)) {
        struct relay_args a = {.asks = asks, .nitems = n};
        if (relay_call(fe, RELAY_LOOKUPS, &a, &err) == 0)
            return;
        if (!soap_call_unknown_op(err.status, err.subcode, err.msg)) {
            for (int i = 0; i < n; i++)
                ask_failed(&asks[i], &err);
            return;
        }
        log_info("the broker has no lookups operation (%s): lookups go one by one", err.msg);
        atomic_store(&fe->broker_single_lookups, 1);
    }
    for (int i = 0; i < n; i++) {
        struct lookup_ask *l = &asks[i];
        struct relay_args a = {.job = l->job,
                               .verifier = l->verifier,
                               .from_rank = l->from_rank,
                               .rank = l->to_rank,
                               .plan = &l->plan};
        if (relay_call(fe, RELAY_LOOKUP, &a, &err) != 0)
            ask_failed(l, &err);
    }
}

int qcg__lookups(struct soap *soap, int version, struct qcg__lookupAsks *asks,
                 struct qcg__lookupsResponse *response)
{
    static const char op[] = "lookups";
    struct frontend *fe;
    const struct identity *id;
    if (begin(soap, version, op, &fe, &id) != SOAP_OK)
        return SOAP_FAULT;
    int n = asks != NULL ? asks->__sizeAsk : 0;
    if (n < 0 || n > QCG_LOOKUPS_MAX || (n > 0 && asks->ask == NULL))
        return invalid(soap, op, id, "too many lookups in one call");
    response->version = QCG_PROTOCOL_VERSION;
    response->__sizeAnswer = n;
    response->answer = soap_malloc(soap, (size_t)(n > 0 ? n : 1) * sizeof(*response->answer));
    struct lookup_ask *up = calloc((size_t)(n > 0 ? n : 1), sizeof(*up));
    int *which = calloc((size_t)(n > 0 ? n : 1), sizeof(*which));
    unsigned char(*hash)[JOB_HASH_LEN] = calloc((size_t)(n > 0 ? n : 1), sizeof(*hash));
    struct plan plan;
    if (response->answer == NULL || up == NULL || which == NULL || hash == NULL) {
        free(up), free(which), free(hash);
        return soap_qcg_fault(soap, "unavailable", "out of memory");
    }
    /* Each ask checked as a lookup alone (its refusal is its answer); the
       batch waits for the node's rate as long as one lookup would. */
    uint64_t until = monotonic_ms() + LOOKUP_RATE_WAIT_MS;
    int misses = 0;
    for (int i = 0; i < n; i++) {
        const struct qcg__lookupAsk *a = &asks->ask[i];
        struct qcg__lookupAnswer *out = &response->answer[i];
        uint64_t now = monotonic_ms();
        bool hit;
        memset(out, 0, sizeof(*out));
        if (lookup_begin(soap, fe, op, id, a->job, a->verifier, a->fromRank, a->toRank, NULL, NULL,
                         now < until ? (int)(until - now) : 0, hash[misses], &plan,
                         &hit) != SOAP_OK) {
            soap_qcg_fault_take(soap, &out->fault, &out->faultText);
            continue;
        }
        if (hit) {
            out->plan = soap_malloc(soap, sizeof(*out->plan));
            if (out->plan != NULL)
                plan_to_soap(soap, &plan, out->plan);
            continue;
        }
        up[misses] = (struct lookup_ask){
            .job = a->job, .verifier = a->verifier, .from_rank = a->fromRank, .to_rank = a->toRank};
        which[misses++] = i;
    }
    if (misses > 0) {
        uint64_t gen = cache_generation(fe->cache);
        lookups_relay(fe, up, misses);
        for (int k = 0; k < misses; k++) {
            struct qcg__lookupAnswer *out = &response->answer[which[k]];
            if (up[k].fault[0] != '\0') {
                out->fault = soap_strdup(soap, up[k].fault);
                out->faultText = soap_strdup(soap, up[k].fault_text);
                continue;
            }
            lookup_keep(fe, up[k].job, hash[k], up[k].to_rank, &up[k].plan, gen);
            out->plan = soap_malloc(soap, sizeof(*out->plan));
            if (out->plan != NULL)
                plan_to_soap(soap, &up[k].plan, out->plan);
            char at[HOSTPORT_MAX];
            hostport_format(up[k].plan.address, up[k].plan.port, at, sizeof(at));
            log_debug("job %s %d -> %d: %s %s %s", up[k].job, up[k].from_rank, up[k].to_rank,
                      up[k].plan.status, up[k].plan.technique, at);
        }
    }
    OPENSSL_cleanse(hash, (size_t)(n > 0 ? n : 1) * sizeof(*hash));
    for (int k = 0; k < misses; k++)
        OPENSSL_cleanse(up[k].plan.token, sizeof(up[k].plan.token));
    free(up), free(which), free(hash);
    return SOAP_OK;
}

int qcg__traverse(struct soap *soap, int version, char *token, char *packet,
                  struct qcg__ackResponse *response)
{
    static const char op[] = "traverse";
    struct frontend *fe;
    const struct identity *id;
    if (begin(soap, version, op, &fe, &id) != SOAP_OK)
        return SOAP_FAULT;
    /* The broker checks the token and the packet; here only their shape, so
       nothing oversized is relayed. */
    if (!hex_lower_valid(token, QCG_TOKEN_MAX - 1))
        return invalid(soap, op, id, "token: missing, too long or not lowercase hex");
    if (!hex_lower_valid(packet, QCG_PACKET_HEX_MAX - 1) || strlen(packet) % 2 != 0)
        return invalid(soap, op, id, "packet: missing, too long or not lowercase hex");
    char reason[256];
    if (!store_link(fe->store, reason, sizeof(reason)))
        return unavailable(soap, op, reason);
    struct relay_error err;
    struct relay_args a = {.token = token, .packet = packet};
    if (relay_call(fe, RELAY_TRAVERSE, &a, &err) < 0)
        return relay_failed(soap, op, &err);
    log_debug("traverse from node %s relayed", id->node);
    response->version = QCG_PROTOCOL_VERSION;
    return SOAP_OK;
}

/* A report's fields: NULL when well-formed, else why not. */
static const char *report_fields_bad(const char *job, const char *verifier, int from_rank,
                                     int to_rank, const char *technique, int ok, int setup_ms,
                                     const char *why)
{
    const char *bad = job_fields_bad(job, verifier, from_rank);
    if (bad == NULL && to_rank < 0)
        bad = "rank must not be negative";
    if (bad == NULL && (technique == NULL || attempt_parse(technique) <= (int)TECH_NONE))
        bad = "technique: not a technique name";
    if (bad == NULL && (setup_ms < 0 || (ok != 0 && ok != 1)))
        bad = "ok must be 0 or 1 and setupMs not negative";
    if (bad == NULL && why != NULL && strlen(why) > REPORT_WHY_MAX)
        bad = "why: too long";
    return bad;
}

static struct report_item report_item_of(const char *job, const char *verifier, int from_rank,
                                         int to_rank, const char *technique, int ok, int setup_ms,
                                         const char *why)
{
    struct report_item r = {
        .from_rank = from_rank, .to_rank = to_rank, .ok = ok, .setup_ms = setup_ms};
    snprintf(r.job, sizeof(r.job), "%s", job);
    snprintf(r.verifier, sizeof(r.verifier), "%s", verifier);
    snprintf(r.technique, sizeof(r.technique), "%s", technique);
    snprintf(r.why, sizeof(r.why), "%s", why != NULL ? why : "");
    return r;
}

int qcg__report(struct soap *soap, int version, char *job, char *verifier, int fromRank, int toRank,
                char *technique, int ok, int setupMs, char *why, struct qcg__ackResponse *response)
{
    static const char op[] = "report";
    struct frontend *fe;
    const struct identity *id;
    if (begin(soap, version, op, &fe, &id) != SOAP_OK)
        return SOAP_FAULT;
    const char *bad =
        report_fields_bad(job, verifier, fromRank, toRank, technique, ok, setupMs, why);
    if (bad != NULL)
        return invalid(soap, op, id, bad);
    if (check_member(soap, fe, op, id, job, verifier, fromRank) != SOAP_OK)
        return SOAP_FAULT;
    if (node_rate(soap, fe, op, id, RATE_REPORT, 0) != SOAP_OK)
        return SOAP_FAULT;
    char reason[256];
    if (!store_link(fe->store, reason, sizeof(reason)))
        return unavailable(soap, op, reason);
    /* A failure goes on at once and the helper waits for it: the process's
       next lookup must be planned knowing it. */
    struct report_item r =
        report_item_of(job, verifier, fromRank, toRank, technique, ok, setupMs, why);
    if (!ok) {
        struct relay_args a = {.items = &r};
        struct relay_error err;
        int rc = relay_call(fe, RELAY_REPORT, &a, &err);
        OPENSSL_cleanse(r.verifier, sizeof(r.verifier));
        if (rc < 0)
            return relay_failed(soap, op, &err);
        atomic_fetch_add(&fe->counters.reports_forwarded, 1);
        response->version = QCG_PROTOCOL_VERSION;
        return SOAP_OK;
    }
    /* A success is answered now and sent on with others (report_batch.h):
       the helper's request is not held for the broker's answer. */
    bool queued = reports_add(fe->reports, &r);
    OPENSSL_cleanse(r.verifier, sizeof(r.verifier));
    if (!queued) {
        atomic_fetch_add(&fe->counters.reports_dropped, 1);
        return unavailable(soap, op, "too many reports wait for the broker");
    }
    response->version = QCG_PROTOCOL_VERSION;
    return SOAP_OK;
}

/* Refused reports of a batch: counted, one line a second (a refusal here
   is mostly a race: the process's contact went first). */
static struct ratelimit_locked batch_log = RATELIMIT_LOCKED_INIT;

int qcg__reports(struct soap *soap, int version, struct qcg__attempts *attempts,
                 struct qcg__reportsResponse *response)
{
    static const char op[] = "reports";
    struct frontend *fe;
    const struct identity *id;
    if (begin(soap, version, op, &fe, &id) != SOAP_OK)
        return SOAP_FAULT;
    int n = attempts != NULL && attempts->attempt != NULL ? attempts->__sizeAttempt : 0;
    if (n < 0 || n > QCG_REPORTS_MAX)
        return invalid(soap, op, id, "too many reports in one call");
    char reason[256];
    if (!store_link(fe->store, reason, sizeof(reason)))
        return unavailable(soap, op, reason);
    int accepted = 0;
    for (int i = 0; i < n; i++) {
        const struct qcg__attempt *a = &attempts->attempt[i];
        char why[300];
        const char *bad = report_fields_bad(a->job, a->verifier, a->fromRank, a->toRank,
                                            a->technique, a->ok, a->setupMs, a->why);
        if (bad == NULL &&
            member_why(fe, id, a->job, a->verifier, a->fromRank, why, sizeof(why)) != 0)
            bad = why;
        if (bad == NULL && !rates_take(fe->rates, id->node, RATE_REPORT, 0)) {
            atomic_fetch_add(&fe->counters.quota_refused, 1);
            bad = "over the node's rate of reports (node-reports)";
        }
        if (bad == NULL) {
            struct report_item r = report_item_of(a->job, a->verifier, a->fromRank, a->toRank,
                                                  a->technique, a->ok, a->setupMs, a->why);
            bool queued = reports_add(fe->reports, &r);
            OPENSSL_cleanse(r.verifier, sizeof(r.verifier));
            if (queued) {
                accepted++;
                continue;
            }
            atomic_fetch_add(&fe->counters.reports_dropped, 1);
            bad = "too many reports wait for the broker";
        }
        unsigned left_out = 0;
        atomic_fetch_add(&fe->counters.denied, 1);
        if (ratelimit_locked_ok(&batch_log, monotonic_ms(), 1000, 1, &left_out))
            log_info("a report of %s refused: %s (%u such lines left out)", id->name, bad,
                     left_out);
    }
    response->version = QCG_PROTOCOL_VERSION;
    response->accepted = accepted;
    return SOAP_OK;
}

/* A report is advice: what the broker cannot take is counted and logged
   (one line a minute), never retried. */
static struct ratelimit_locked reports_log = RATELIMIT_LOCKED_INIT;

static void reports_lost(struct frontend *fe, int n, const char *why)
{
    unsigned left_out = 0;
    atomic_fetch_add(&fe->counters.reports_dropped, (unsigned long long)n);
    if (ratelimit_locked_ok(&reports_log, monotonic_ms(), 60000, 1, &left_out))
        log_warnx("%d reports not sent to the broker: %s (%u such lines left out)", n, why,
                  left_out);
}

void frontend_send_reports(void *arg, const struct report_item *items, int n)
{
    struct frontend *fe = arg;
    struct relay_error err;
    int accepted = 0;
    if (!atomic_load(&fe->broker_single_reports)) {
        struct relay_args a = {.items = items, .nitems = n, .accepted = &accepted};
        if (relay_call(fe, RELAY_REPORTS, &a, &err) == 0) {
            atomic_fetch_add(&fe->counters.reports_forwarded, (unsigned long long)accepted);
            if (accepted < n)
                atomic_fetch_add(&fe->counters.reports_refused, (unsigned long long)(n - accepted));
            return;
        }
        if (!soap_call_unknown_op(err.status, err.subcode, err.msg)) {
            reports_lost(fe, n, err.msg);
            return;
        }
        log_info("the broker has no reports operation (%s): reports go one by one", err.msg);
        atomic_store(&fe->broker_single_reports, 1);
    }
    for (int i = 0; i < n; i++) {
        struct relay_args a = {.items = &items[i]};
        if (relay_call(fe, RELAY_REPORT, &a, &err) == 0)
            atomic_fetch_add(&fe->counters.reports_forwarded, 1);
        else if (err.status == CALL_FAULT)
            atomic_fetch_add(&fe->counters.reports_refused, 1);
        else
            reports_lost(fe, 1, err.msg);
    }
}

int qcg__poll(struct soap *soap, int version, ULONG64 epoch, ULONG64 ackSeq, int waitSeconds,
              struct qcg__pollResponse *response)
{
    static const char op[] = "poll";
    struct frontend *fe;
    const struct identity *id;
    if (begin(soap, version, op, &fe, &id) != SOAP_OK)
        return SOAP_FAULT;
    response->version = QCG_PROTOCOL_VERSION;
    response->epoch = fe->epoch;
    response->__sizeCommand = 0;
    response->command = NULL;
    if (epoch != fe->epoch) {
        log_debug("poll from %s with epoch %llu, ours is %llu: it must re-register", id->name,
                  (unsigned long long)epoch, (unsigned long long)fe->epoch);
        return SOAP_OK;
    }
    struct cmdqueue *q = store_node_queue(fe->store, id->node);
    if (q == NULL)
        return unregistered(soap, fe, op, id);
    int wait = waitSeconds < 0 ? 0 : waitSeconds > POLL_WAIT_MAX ? POLL_WAIT_MAX : waitSeconds;
    struct command cmds[POLL_COMMANDS_MAX];
    int n = cmdqueue_wait(q, ackSeq, wait * 1000, cmds, POLL_COMMANDS_MAX);
    if (n <= 0)
        return SOAP_OK;
    struct qcg__command *out = soap_malloc(soap, (size_t)n * sizeof(*out));
    if (out == NULL)
        return soap_qcg_fault(soap, "unavailable", "out of memory");
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof(out[i]));
        out[i].seq = cmds[i].seq;
        out[i].kind = soap_strdup(soap, cmds[i].kind);
        out[i].job = cmds[i].job[0] ? soap_strdup(soap, cmds[i].job) : NULL;
        out[i].rank = cmds[i].rank;
        out[i].node = cmds[i].node[0] ? soap_strdup(soap, cmds[i].node) : NULL;
        out[i].address = cmds[i].address[0] ? soap_strdup(soap, cmds[i].address) : NULL;
        out[i].port = cmds[i].port;
        out[i].token = cmds[i].token[0] ? soap_strdup(soap, cmds[i].token) : NULL;
        out[i].peerRank = cmds[i].peer_rank;
        out[i].packet = cmds[i].packet[0] ? soap_strdup(soap, cmds[i].packet) : NULL;
        out[i].seconds = cmds[i].seconds;
    }
    response->__sizeCommand = n;
    response->command = out;
    return SOAP_OK;
}

int qcg__stats(struct soap *soap, int version, struct qcg__statsResponse *response)
{
    struct frontend *fe = soap_server_state(soap);
    if (soap_check_version(soap, version) != 0)
        return SOAP_FAULT;
    const struct identity *id = soap_caller(soap);
    if (id == NULL || id->role == QCG_ROLE_NONE)
        return deny(soap, fe, "stats", id, "stats is served to members of the grid only");
    struct counter_value v[FRONTEND_STATS_MAX];
    struct soap_stage_counts stage;
    soap_server_stage_counts(soap, &stage);
    int n = stats_collect(fe, &stage, v, FRONTEND_STATS_MAX);
    response->version = QCG_PROTOCOL_VERSION;
    response->role = soap_strdup(soap, "frontend");
    response->name = soap_strdup(soap, fe->cluster);
    response->counter = soap_malloc(soap, (size_t)n * sizeof(*response->counter));
    if (response->counter == NULL)
        return soap_qcg_fault(soap, "unavailable", "out of memory");
    for (int i = 0; i < n; i++) {
        response->counter[i].name = soap_strdup(soap, v[i].name);
        response->counter[i].value = v[i].value;
    }
    response->__sizeCounter = n;
    return SOAP_OK;
}

/* ---- qcg-probe: siteInfo, probe, observed (relayed); grid is the broker's ---- */

/* One relayed call of a probe operation, the link checked first.  SOAP_OK or
   the fault ("broker unreachable: ..." when it cannot be reached). */
static int relay_probe_op(struct soap *soap, struct frontend *fe, const char *op, enum relay_op rop,
                          const struct relay_args *a)
{
    char reason[256];
    struct relay_error err;
    const struct identity *id = soap_caller(soap);
    if (node_rate(soap, fe, op, id, RATE_PROBE, 0) != SOAP_OK)
        return SOAP_FAULT;
    if (!store_link(fe->store, reason, sizeof(reason)))
        return unavailable(soap, op, reason);
    if (relay_call(fe, rop, a, &err) < 0)
        return relay_failed(soap, op, &err);
    return SOAP_OK;
}

int qcg__siteInfo(struct soap *soap, int version, struct qcg__siteInfoResponse *response)
{
    static const char op[] = "siteInfo";
    struct frontend *fe;
    const struct identity *id;
    if (begin(soap, version, op, &fe, &id) != SOAP_OK)
        return SOAP_FAULT;
    struct relay_args a = {.dst = soap, .site = response};
    if (relay_probe_op(soap, fe, op, RELAY_SITE, &a) != SOAP_OK)
        return SOAP_FAULT;
    response->broker = soap_strdup(soap, soap_pool_url(fe->pool));
    log_debug("siteInfo for %s: %d clusters, %d proxies", id->name, response->__sizePeer,
              response->__sizeProxy);
    return SOAP_OK;
}

int qcg__probe(struct soap *soap, int version, char *cluster, int seconds, char *node,
               struct qcg__probeResponse *response)
{
    static const char op[] = "probe";
    struct frontend *fe;
    const struct identity *id;
    char why[128];
    if (begin(soap, version, op, &fe, &id) != SOAP_OK)
        return SOAP_FAULT;
    if (cluster == NULL || !name_valid(cluster))
        return invalid(soap, op, id, "cluster: missing or not a valid name");
    if (seconds < 1 || seconds > QCG_PROBE_TTL_MAX) {
        snprintf(why, sizeof(why), "seconds: %d is not within 1-%d", seconds, QCG_PROBE_TTL_MAX);
        return invalid(soap, op, id, why);
    }
    memset(response, 0, sizeof(*response));
    /* The broker counts probes per calling node: which node calls comes from
       the certificate, never from the message. */
    (void)node;
    struct relay_args a = {.dst = soap,
                           .probe = response,
                           .cluster = cluster,
                           .seconds = seconds,
                           .node_name = id->node};
    if (relay_probe_op(soap, fe, op, RELAY_PROBE, &a) != SOAP_OK)
        return SOAP_FAULT;
    log_info("probe from %s: test endpoint in %s (node %s, job %s, %d s)", id->name, cluster,
             response->node, response->job, response->seconds);
    return SOAP_OK;
}

/* The observation's words; NULL when fine, else what is wrong.  The broker
   checks again: here so that junk is not relayed. */
static const char *observation_bad(const struct qcg__observation *o)
{
    static const char *const mappings[] = {"none", "endpoint-independent", "endpoint-dependent",
                                           "unknown"};
    int mapping_ok = 0;
    for (size_t i = 0; i < 4; i++)
        mapping_ok |= o->mapping != NULL && strcmp(o->mapping, mappings[i]) == 0;
    if (o->kind == NULL || cluster_kind_parse(o->kind) < 0)
        return "kind: not open, firewalled, nat or symnat";
    if (!mapping_ok)
        return "mapping: not none, endpoint-independent, endpoint-dependent or unknown";
    if (!observed_inbound_valid(o->inbound))
        return "inbound: not open, dropped, reset, icmp, rejected or unknown";
    if (o->portPreserving < -1 || o->portPreserving > 1)
        return "portPreserving: not -1, 0 or 1";
    if (o->publicAddress != NULL && o->publicAddress[0] != '\0' && !address_valid(o->publicAddress))
        return "publicAddress: not an IP address";
    return NULL;
}

int qcg__observed(struct soap *soap, int version, struct qcg__observation *observation,
                  struct qcg__ackResponse *response)
{
    static const char op[] = "observed";
    struct frontend *fe;
    const struct identity *id;
    if (begin(soap, version, op, &fe, &id) != SOAP_OK)
        return SOAP_FAULT;
    if (observation == NULL)
        return invalid(soap, op, id, "observation missing");
    const char *bad = observation_bad(observation);
    if (bad != NULL)
        return invalid(soap, op, id, bad);
    /* Whose observation it is comes from the certificate, never the message. */
    observation->cluster = soap_strdup(soap, id->cluster);
    observation->node = soap_strdup(soap, id->node);
    observation->when = 0;
    struct relay_args a = {.observation = observation};
    if (relay_probe_op(soap, fe, op, RELAY_OBSERVED, &a) != SOAP_OK)
        return SOAP_FAULT;
    log_info("observed from %s: %s, public address %s, mapping %s, inbound %s", id->name,
             observation->kind, observation->publicAddress ? observation->publicAddress : "?",
             observation->mapping, observation->inbound);
    response->version = QCG_PROTOCOL_VERSION;
    return SOAP_OK;
}
