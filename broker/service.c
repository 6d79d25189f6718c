/*
 * The SOAP operations of the broker: version first, then who is calling (from
 * the certificate, never from the message), then field checks, then the
 * registry.  Every refusal is a fault with a qcg:<subcode> and a warn line
 * naming the caller.  The generated skeleton (soapServer.c) calls these.
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "address.h"
#include "broker.h"
#include "known.h"
#include "cmdqueue.h"
#include "hex.h"
#include "log.h"
#include "monotonic.h"
#include "ratelimit.h"
#include "soapH.h"
#include "soap_server.h"
#include "stats.h"
#include "issued.h"
#include "lease.h"
#include "outcomes.h"
#include "pair_metrics.h"
#include "plan_bridge.h"
#include "proxy_live.h"
#include "rates.h"
#include "reflector.h"
#include "syncheck.h"
#include "token.h"
#include "validate.h"

#define POLL_MAX_WAIT 25     /* seconds, whatever the caller asks */
#define POLL_MAX_COMMANDS 64 /* per response; the rest follow on the next poll */

static struct broker *state(struct soap *soap)
{
    return soap_server_state(soap);
}

/* Refusal lines of one kind: a caller may repeat a refused call at will, so
   at most `burst` lines per `window_ms`, with the count of those left out. */
struct refusal_log {
    struct ratelimit_locked rl;
    uint64_t window_ms;
    unsigned burst;
};
static struct refusal_log general_log = {RATELIMIT_LOCKED_INIT, 1000, 50};
static struct refusal_log address_log = {RATELIMIT_LOCKED_INIT, 1000, 1};
static struct refusal_log quota_log = {RATELIMIT_LOCKED_INIT, 10000, 1};

/* Every refusal: the fault, the faults counter, and a warn line naming the
   caller as lg allows. */
static int vrefuse(struct soap *soap, struct refusal_log *lg, const char *op, const char *subcode,
                   const char *fmt, va_list ap)
{
    char msg[512];
    unsigned left_out = 0;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (ratelimit_locked_ok(&lg->rl, monotonic_ms(), lg->window_ms, lg->burst, &left_out)) {
        const struct identity *id = soap_caller(soap);
        if (left_out > 0)
            log_warnx("%s from %s %s refused (qcg:%s): %s (%u such lines left out)", op,
                      role_name(id->role), id->name, subcode, msg, left_out);
        else
            log_warnx("%s from %s %s refused (qcg:%s): %s", op, role_name(id->role), id->name,
                      subcode, msg);
    }
    atomic_fetch_add(&state(soap)->stats.faults, 1);
    return soap_qcg_fault(soap, subcode, "%s", msg);
}

static int refuse(struct soap *soap, const char *op, const char *subcode, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(struct soap *soap, const char *op, const char *subcode, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vrefuse(soap, &general_log, op, subcode, fmt, ap);
    va_end(ap);
    return rc;
}

/* A refusal of an address outside what a site declared (site_ranges.h):
   counted apart, and logged at most once a second whatever a site repeats. */
static int refuse_address(struct soap *soap, const char *op, const char *subcode, const char *fmt,
                          ...) __attribute__((format(printf, 4, 5)));
static int refuse_address(struct soap *soap, const char *op, const char *subcode, const char *fmt,
                          ...)
{
    va_list ap;
    atomic_fetch_add(&state(soap)->stats.addresses_refused, 1);
    va_start(ap, fmt);
    int rc = vrefuse(soap, &address_log, op, subcode, fmt, ap);
    va_end(ap);
    return rc;
}

/* Counts a connection the first time one of its calls reaches us.  gSOAP copies
   the listening context for every connection, so a marker left in the copy's
   `data` slot outlives the calls of that connection only. */
static void count_connection(struct soap *soap)
{
    static const char marker[] = "counted";
    if (soap->data[3] != marker) {
        soap->data[3] = (void *)marker;
        atomic_fetch_add(&state(soap)->stats.connections, 1);
    }
}

/* The checks every operation starts with.  Returns SOAP_OK and the caller, or
   the fault already set. */
static int check_call(struct soap *soap, const char *op, int version, bool frontend_only,
                      const struct identity **idp)
{
    count_connection(soap);
    const struct identity *id = soap_caller(soap);
    if (soap_check_version(soap, version) != 0) {
        log_warnx("%s from %s %s refused (qcg:version): version %d, ours is %d", op,
                  role_name(id->role), id->name, version, QCG_PROTOCOL_VERSION);
        atomic_fetch_add(&state(soap)->stats.faults, 1);
        return SOAP_FAULT;
    }
    if (id->role == QCG_ROLE_NONE)
        return refuse(soap, op, "denied", "the caller's certificate names no grid identity");
    if (frontend_only && id->role != QCG_ROLE_FRONTEND)
        return refuse(soap, op, "denied", "only a frontend may call %s at the broker, not a %s", op,
                      role_name(id->role));
    *idp = id;
    return SOAP_OK;
}

static int refuse_status(struct soap *soap, const char *op, enum reg_status st, const char *why)
{
    return refuse(soap, op, reg_status_subcode(st), "%s", why);
}

/* The caller's address; a dual-stack listener shows IPv4 callers as
   ::ffff:a.b.c.d. */
static const char *caller_address(const struct soap *soap)
{
    return strncmp(soap->host, "::ffff:", 7) == 0 && strchr(soap->host, '.') ? soap->host + 7
                                                                             : soap->host;
}

int qcg__registerCluster(struct soap *soap, int version, struct qcg__cluster *cluster,
                         struct qcg__registerResponse *response)
{
    const struct identity *id;
    char why[256];
    struct reg_cluster c;
    if (check_call(soap, "registerCluster", version, true, &id) != SOAP_OK)
        return SOAP_FAULT;
    if (validate_cluster(cluster, &c, why, sizeof(why)) != 0)
        return refuse(soap, "registerCluster", "invalid", "%s", why);
    if (strcmp(c.name, id->cluster) != 0)
        return refuse(soap, "registerCluster", "denied",
                      "frontend %s may register cluster %s only, not %s", id->name, id->cluster,
                      c.name);
    /* A frontend that declares no node ranges (an older one, or option
       addresses unset) gets the one address it demonstrably holds: the one
       it connects from. */
    if (c.nranges == 0) {
        char err[128];
        if (addr_range_parse(caller_address(soap), &c.ranges[0], err, sizeof(err)) < 0)
            return refuse(soap, "registerCluster", "invalid",
                          "cluster %s declares no node ranges and its address is unknown", c.name);
        c.nranges = 1;
        c.ranges_implicit = true;
        /* A frontend on the broker's own host (loopback) holds that host's
           loopback of the other family too: a one-host grid's dual-stack
           node has both. */
        if (addr_range_loopback(&c.ranges[0]) &&
            addr_range_parse(c.ranges[0].family == AF_INET ? "::1" : "127.0.0.1", &c.ranges[1], err,
                             sizeof(err)) == 0)
            c.nranges = 2;
    }
    /* Kept (state file) and known to the handshake stage after a restart. */
    const char *from = caller_address(soap);
    c.from[0] = '\0';
    if (address_valid(from))
        memcpy(c.from, from, strlen(from) + 1); /* shorter than QCG_ADDR_MAX */
    enum reg_status st = registry_register_cluster(state(soap)->reg, &c, why, sizeof(why));
    if (st == REG_DENIED)
        return refuse_address(soap, "registerCluster", "denied", "%s", why);
    if (st != REG_OK)
        return refuse_status(soap, "registerCluster", st, why);
    lease_heard(state(soap)->lease, c.name, monotonic_ms());
    broker_know_cluster(state(soap), &c);
    char first[QCG_ADDR_MAX + 4];
    addr_range_format(&c.ranges[0], first, sizeof(first));
    if (c.ranges_implicit)
        log_warnx("cluster %s declares no node ranges: only nodes at its frontend's own address "
                  "%s are accepted (set addresses = in its qcg-frontend.conf)",
                  c.name, first);
    log_info("cluster %s registered: %s, %d public address%s, open ports %d-%d, node ranges %s%s",
             c.name, cluster_kind_name(c.kind), c.npublic, c.npublic == 1 ? "" : "es", c.port_low,
             c.port_high, first, c.nranges > 1 ? ", ..." : "");
    response->version = QCG_PROTOCOL_VERSION;
    response->epoch = registry_epoch(state(soap)->reg);
    return SOAP_OK;
}

int qcg__registerNode(struct soap *soap, int version, struct qcg__node *node,
                      struct qcg__registerResponse *response)
{
    const struct identity *id;
    char why[256] = "";
    struct reg_node n;
    if (check_call(soap, "registerNode", version, true, &id) != SOAP_OK)
        return SOAP_FAULT;
    if (validate_node(node, &n, why, sizeof(why)) != 0)
        return refuse(soap, "registerNode", "invalid", "%s", why);
    enum reg_status st =
        registry_register_node(state(soap)->reg, id->cluster, &n, why, sizeof(why));
    if (st == REG_DENIED)
        return refuse_address(soap, "registerNode", "denied", "%s", why);
    if (st != REG_OK)
        return refuse_status(soap, "registerNode", st, why);
    char addrs[ADDRESS_LIST_TEXT_MAX];
    address_list_format(n.address, n.other, n.nother, 0, addrs, sizeof(addrs));
    log_info("node %s/%s registered: %s, ports %d-%d%s%s%s", id->cluster, n.name, addrs, n.port_low,
             n.port_high, n.can_intercept ? ", can intercept" : "", why[0] != '\0' ? "; " : "",
             why);
    response->version = QCG_PROTOCOL_VERSION;
    response->epoch = registry_epoch(state(soap)->reg);
    return SOAP_OK;
}

int qcg__publish(struct soap *soap, int version, struct qcg__contact *contact,
                 struct qcg__ackResponse *response)
{
    const struct identity *id;
    char why[256];
    struct reg_contact c;
    if (check_call(soap, "publish", version, true, &id) != SOAP_OK)
        return SOAP_FAULT;
    if (validate_contact(contact, &c, why, sizeof(why)) != 0)
        return refuse(soap, "publish", "invalid", "%s", why);
    /* The contact's cluster is the caller's; naming another one is refused. */
    if (c.cluster[0] != '\0' && strcmp(c.cluster, id->cluster) != 0)
        return refuse(soap, "publish", "denied",
                      "frontend %s may publish for cluster %s only, not %s", id->name, id->cluster,
                      c.cluster);
    snprintf(c.cluster, sizeof(c.cluster), "%s", id->cluster);
    atomic_fetch_add(&state(soap)->stats.publishes, 1);
    enum reg_status st =
        registry_publish(state(soap)->reg, &c, contact->verifier, why, sizeof(why));
    if (st != REG_OK)
        return refuse_status(soap, "publish", st, why);
    log_debug("published job %s rank %d at %s/%s %s port %d", c.job, c.rank, c.cluster, c.node,
              c.address, c.port);
    response->version = QCG_PROTOCOL_VERSION;
    return SOAP_OK;
}

int qcg__withdraw(struct soap *soap, int version, char *job, char *verifier, int rank, char *node,
                  struct qcg__ackResponse *response)
{
    const struct identity *id;
    char why[256];
    if (check_call(soap, "withdraw", version, true, &id) != SOAP_OK)
        return SOAP_FAULT;
    if (validate_job(job, verifier, why, sizeof(why)) != 0 ||
        validate_rank(rank, "rank", why, sizeof(why)) != 0)
        return refuse(soap, "withdraw", "invalid", "%s", why);
    if (node != NULL && node[0] != '\0' && !name_valid(node))
        return refuse(soap, "withdraw", "invalid", "node is not a valid name");
    atomic_fetch_add(&state(soap)->stats.withdraws, 1);
    enum reg_status st = registry_withdraw(state(soap)->reg, id->cluster, node, job, verifier, rank,
                                           why, sizeof(why));
    if (st != REG_OK)
        return refuse_status(soap, "withdraw", st, why);
    log_debug("withdrew job %s rank %d (cluster %s)", job, rank, id->cluster);
    response->version = QCG_PROTOCOL_VERSION;
    return SOAP_OK;
}

/* 32 hex characters from 16 random bytes: the one-time token of a reversed
   connection, which the target's process puts into its hello; a probe's job
   id and verifier. */
static int random_hex(char *out, size_t len)
{
    unsigned char raw[16];
    if (len < 2 * sizeof(raw) + 1 || RAND_bytes(raw, sizeof(raw)) != 1)
        return -1;
    hex_encode(raw, sizeof(raw), out);
    OPENSSL_cleanse(raw, sizeof(raw));
    return 0;
}

/* A proxied plan: the proxy (one with an address each end can reach), its
   two tokens, and the proxy's address in a family of each end's node (the
   first configured of those): an IPv6-only end and an IPv4-only one meet
   at one proxy over their own families, and it bridges them. */
static int order_proxy(struct broker *b, const struct reg_lookup *res, const unsigned char *pair,
                       uint64_t now, struct command *cmd, char *plan_token, size_t token_len,
                       char *address, size_t addr_len, int *port, char *why, size_t whylen)
{
    unsigned from_fam = plan_families_of(res->from.address, res->from.other, res->from.nother);
    unsigned to_fam = plan_families_of(res->target.address, res->target.other, res->target.nother);
    uint64_t expiry = now + PROXY_TOKEN_LIFETIME;
    struct proxy_addr px;
    if (b->proxy_live == NULL ||
        proxy_live_pick(b->proxy_live, pair, monotonic_ms(), from_fam, to_fam, &px) < 0) {
        snprintf(why, whylen, "no live proxy with an address in a family of each end");
        return -1;
    }
    int from_port = 0, to_port = 0;
    const char *from_host = proxy_addr_for(&px, from_fam, &from_port);
    const char *to_host = proxy_addr_for(&px, to_fam, &to_port);
    if (from_host == NULL || to_host == NULL ||
        token_issue(&b->proxies.key, pair, TOKEN_SIDE_INITIATOR, expiry, plan_token, token_len) <
            0 ||
        token_issue(&b->proxies.key, pair, TOKEN_SIDE_TARGET, expiry, cmd->token,
                    sizeof(cmd->token)) < 0) {
        snprintf(why, whylen, "cannot issue proxy tokens");
        return -1;
    }
    snprintf(cmd->kind, sizeof(cmd->kind), "proxy-connect");
    /* IP addresses (proxies.c checked them): at most 45 characters. */
    snprintf(cmd->address, sizeof(cmd->address), "%.45s", to_host);
    cmd->port = to_port;
    snprintf(address, addr_len, "%.45s", from_host);
    *port = from_port;
    return 1;
}

/* A traversal's ends: over IPv6 (plan_prefer_traverse6) the two nodes' own
   IPv6 addresses, else the target's first address and where the
   initiator's packets appear from. */
static const char *traverse_to(const struct reg_lookup *res)
{
    return res->traverse6[0] != '\0' ? res->traverse6 : res->target.address;
}

static const char *traverse_from(const struct reg_lookup *res)
{
    return res->traverse6[0] != '\0' ? res->traverse6_from : res->from_public;
}

/* The order for the target's side of a reversed, hole-punched or proxied
   connection, to its cluster's queue (the frontend passes it to the node's
   helper), and the plan's address, port and token.  A traversing plan
   orders nothing yet: the target's order waits for the initiator's SYN
   (qcg__traverse).  Returns 1 when *cmd is to be queued, 0 when not, -1 with
   why. */
static int order_target(struct broker *b, const struct reg_lookup *res, struct command *cmd,
                        char *plan_token, size_t token_len, char *address, size_t addr_len,
                        int *port, char *why, size_t whylen)
{
    enum technique t = res->decision.technique;
    memset(cmd, 0, sizeof(*cmd));
    snprintf(cmd->job, sizeof(cmd->job), "%s", res->target.job);
    snprintf(cmd->node, sizeof(cmd->node), "%s", res->target.node);
    cmd->rank = res->target.rank;
    cmd->peer_rank = res->from.rank;
    if (t == TECH_REVERSED) {
        snprintf(cmd->kind, sizeof(cmd->kind), "connect-back");
        snprintf(cmd->address, sizeof(cmd->address), "%s", res->back_address);
        cmd->port = res->from.port;
        if (random_hex(cmd->token, sizeof(cmd->token)) < 0) {
            snprintf(why, whylen, "no randomness for a token");
            return -1;
        }
        snprintf(plan_token, token_len, "%s", cmd->token);
        snprintf(address, addr_len, "%s", res->target.address);
        *port = res->target.port;
        return 1;
    }
    unsigned char pair[TOKEN_PAIR_LEN];
    uint64_t now = (uint64_t)time(NULL);
    /* Tagged with its job: the proxy and the reflector share by it. */
    if (token_pair_new(&b->punch_key, res->target.job, pair) < 0) {
        snprintf(why, whylen, "no randomness for a token");
        return -1;
    }
    if (t == TECH_TRAVERSING) {
        struct traversal tr;
        memset(&tr, 0, sizeof(tr));
        memcpy(tr.pair, pair, sizeof(pair));
        tr.expiry = now + TRAVERSAL_LIFETIME;
        snprintf(tr.job, sizeof(tr.job), "%s", res->target.job);
        tr.from_rank = res->from.rank;
        tr.target_rank = res->target.rank;
        snprintf(tr.from_cluster, sizeof(tr.from_cluster), "%s", res->from.cluster);
        snprintf(tr.from_public, sizeof(tr.from_public), "%s", traverse_from(res));
        snprintf(tr.target_cluster, sizeof(tr.target_cluster), "%s", res->target.cluster);
        snprintf(tr.target_node, sizeof(tr.target_node), "%s", res->target.node);
        snprintf(tr.target_address, sizeof(tr.target_address), "%s", traverse_to(res));
        tr.target_port = res->target.port;
        if (token_issue(&b->punch_key, pair, TOKEN_SIDE_INITIATOR, tr.expiry, plan_token,
                        token_len) < 0 ||
            traversals_add(&b->traversals, &tr, now) < 0) {
            snprintf(why, whylen, "too many traversals waiting for their SYN");
            return -1;
        }
        snprintf(address, addr_len, "%s", traverse_to(res));
        *port = res->target.port;
        return 0;
    }
    if (t == TECH_HOLEPUNCH) {
        struct reflector_side sides[2];
        uint64_t expiry = now + PROXY_TOKEN_LIFETIME;
        const struct reg_contact *ends[2] = {&res->from, &res->target};
        const enum cluster_kind kinds[2] = {res->from_kind, res->target_kind};
        memset(sides, 0, sizeof(sides));
        for (int i = 0; i < 2; i++) {
            snprintf(sides[i].cluster, sizeof(sides[i].cluster), "%s", ends[i]->cluster);
            snprintf(sides[i].node, sizeof(sides[i].node), "%s", ends[i]->node);
            /* Declared public or port-keeping: the reflector checks it. */
            sides[i].preserving = kinds[i] != CLUSTER_SYMNAT;
        }
        if (token_issue(&b->punch_key, pair, TOKEN_SIDE_INITIATOR, expiry, plan_token, token_len) <
                0 ||
            token_issue(&b->punch_key, pair, TOKEN_SIDE_TARGET, expiry, cmd->token,
                        sizeof(cmd->token)) < 0 ||
            reflector_client_expect(b->reflector, pair, sides, expiry) < 0) {
            snprintf(why, whylen,
                     "cannot issue hole-punching tokens (the reflector process did not take it)");
            return -1;
        }
        /* The reflector's family is the punch's: each helper binds its
           node's address of that family. */
        const char *refl = res->punch6 ? b->reflector6_host : b->reflector_host;
        snprintf(cmd->kind, sizeof(cmd->kind), "punch");
        snprintf(cmd->address, sizeof(cmd->address), "%s", refl);
        cmd->port = b->reflector_port;
        snprintf(address, addr_len, "%s", refl);
        *port = b->reflector_port;
        return 1;
    }
    return order_proxy(b, res, pair, now, cmd, plan_token, token_len, address, addr_len, port, why,
                       whylen);
}

/* A lookup whose plan had to skip a connect-back or an inject for the
   address rules: counted, logged at most once a second. */
static void note_refused_orders(struct broker *b, const char *caller, const struct reg_lookup *res)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static struct ratelimit rl;
    unsigned left_out = 0;
    if (res->refused == 0)
        return;
    atomic_fetch_add(&b->stats.targets_refused, 1);
    pthread_mutex_lock(&lock);
    bool log_now = ratelimit_ok(&rl, monotonic_ms(), 1000, &left_out);
    pthread_mutex_unlock(&lock);
    if (log_now)
        log_warnx("lookup from cluster %s: job %s rank %d -> %d: %s%s", caller, res->from.job,
                  res->from.rank, res->target.rank, res->decision.reason,
                  left_out > 0 ? " (and others not logged)" : "");
}

static atomic_ullong *plan_counter(struct broker *b, enum technique t)
{
    switch (t) {
    case TECH_REVERSED:
        return &b->stats.plans_reversed;
    case TECH_TRAVERSING:
        return &b->stats.plans_traversing;
    case TECH_HOLEPUNCH:
        return &b->stats.plans_holepunch;
    default:
        return &b->stats.plans_proxy;
    }
}

/* A refusal a caller may repeat at will (quotas, full tables): the fault
   every time, the warning at most once in 10 s. */
static int refuse_quota(struct soap *soap, const char *op, const char *subcode, const char *fmt,
                        ...) __attribute__((format(printf, 4, 5)));
static int refuse_quota(struct soap *soap, const char *op, const char *subcode, const char *fmt,
                        ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vrefuse(soap, &quota_log, op, subcode, fmt, ap);
    va_end(ap);
    return rc;
}

/* How long a lookup, or a batch of them, may wait for its cluster's rate. */
#define LOOKUP_RATE_WAIT_MS 1000

/* A cluster's rate of `kind` calls (rates.h): SOAP_OK once a token is taken
   (waiting up to wait_ms for one), else qcg:retry. */
static int cluster_rate(struct soap *soap, const char *op, const struct identity *id,
                        enum rate_kind kind, int wait_ms)
{
    static const char *const option[RATE_KINDS] = {"cluster-lookups", "cluster-reports",
                                                   "cluster-probes"};
    struct broker *b = state(soap);
    if (rates_take(b->rates, id->cluster, kind, wait_ms))
        return SOAP_OK;
    atomic_fetch_add(&b->stats.quota_refused, 1);
    return refuse_quota(soap, op, "retry",
                        "cluster %s is over its rate of %s calls (the broker's %s); retry later",
                        id->cluster, op, option[kind]);
}

/* A punch plan's family in the log: IPv6, or IPv4 after the IPv6 one; a
   traversal's over IPv6. */
static const char *punch_family(const struct reg_lookup *res)
{
    return res->punch6 || res->traverse6[0] != '\0' ? " over IPv6"
           : res->decision.punch4                   ? " over IPv4"
                                                    : "";
}

/* One lookup, the caller checked, waiting up to wait_ms for the cluster's
   rate: *p filled, SOAP_OK; or the fault set (logged and counted),
   SOAP_FAULT. */
static int lookup_plan(struct soap *soap, const struct identity *id, char *job, char *verifier,
                       int fromRank, int toRank, char *tried, char *only, int wait_ms,
                       struct qcg__plan *p)
{
    char why[256];
    struct reg_lookup res;
    unsigned tried_set = 0;
    int only_t = TECH_NONE;
    struct broker *b = state(soap);
    if (validate_job(job, verifier, why, sizeof(why)) != 0 ||
        validate_rank(fromRank, "fromRank", why, sizeof(why)) != 0 ||
        validate_rank(toRank, "toRank", why, sizeof(why)) != 0 ||
        plan_tried_parse(tried, &tried_set, why, sizeof(why)) != 0)
        return refuse(soap, "lookup", "invalid", "%s", why);
    if (only != NULL && only[0] != '\0' && (only_t = technique_parse(only)) <= (int)TECH_NONE)
        return refuse(soap, "lookup", "invalid", "only: '%.32s' is not a technique", only);
    if (cluster_rate(soap, "lookup", id, RATE_LOOKUP, wait_ms) != SOAP_OK)
        return SOAP_FAULT;
    atomic_fetch_add(&b->stats.lookups, 1);
    bool proxy_ok = b->proxy_live != NULL && proxy_live_usable(b->proxy_live, monotonic_ms());
    struct plan_offer offer = {
        .proxy = proxy_ok,
        .proxies_dead = !proxy_ok && b->proxies.count > 0,
        .proxy_families = proxies_families(&b->proxies),
        .proxy_bridge = b->proxy_live != NULL &&
                        proxy_live_usable_for(b->proxy_live, monotonic_ms(), FAMILY_V4, FAMILY_V6),
        .reflector = reflector_client_up(b->reflector),
        .reflector6 = b->reflector6_host[0] != '\0'};
    enum reg_status st =
        registry_lookup(b->reg, id->cluster, job, verifier, fromRank, toRank, tried_set,
                        (enum technique)only_t, &offer, b->outcomes, &res, why, sizeof(why));
    if (st != REG_OK)
        return refuse_status(soap, "lookup", st, why);
    note_refused_orders(b, id->cluster, &res);

    memset(p, 0, sizeof(*p));
    if (!res.found) {
        p->status = "notfound";
        p->technique = (char *)technique_name(TECH_NONE);
        p->reason = soap_strdup(soap, "rank is not published (yet)");
        return SOAP_OK;
    }
    const struct plan_decision *d = &res.decision;
    char late[QCG_NAME_MAX];
    uint64_t silent_ms = 0;
    /* The proxy the pair needs may be late, not gone: ask again (a test of
       the proxy alone hears at once that none is alive). */
    if (!d->ok && d->technique == TECH_PROXY && offer.proxies_dead && only_t == TECH_NONE &&
        !(tried_set & TECH_BIT(TECH_PROXY)) &&
        proxy_live_late(b->proxy_live, monotonic_ms(), late, sizeof(late), &silent_ms))
        return refuse_quota(soap, "lookup", "retry",
                            "job %s rank %d -> %d: a proxy is needed, and proxy %s has not beaten "
                            "for %llu s (its host or ours stalled, or it is down); retry later",
                            job, fromRank, toRank, late, (unsigned long long)(silent_ms / 1000));
    char token[QCG_TOKEN_MAX] = "", address[QCG_ADDR_MAX];
    int port = res.target.port;
    snprintf(address, sizeof(address), "%s",
             res.direct_address[0] != '\0' ? res.direct_address : res.target.address);
    if (d->ok && d->technique != TECH_DIRECT) {
        struct command cmd;
        struct cmdqueue *q = registry_queue(b->reg, res.target.cluster);
        int queue = q == NULL ? -1
                              : order_target(b, &res, &cmd, token, sizeof(token), address,
                                             sizeof(address), &port, why, sizeof(why));
        if (queue < 0) {
            OPENSSL_cleanse(token, sizeof(token));
            if (q == NULL)
                snprintf(why, sizeof(why), "the target's cluster has no queue");
            return refuse_quota(soap, "lookup", "unavailable",
                                "job %s rank %d -> %d: cannot order the target's side: %s", job,
                                fromRank, toRank, why);
        }
        uint64_t seq = 0;
        if (queue && (seq = cmdqueue_push(q, &cmd)) == 0) {
            int full = errno == ENOSPC;
            OPENSSL_cleanse(&cmd, sizeof(cmd));
            OPENSSL_cleanse(token, sizeof(token));
            atomic_fetch_add(&b->stats.orders_refused, 1);
            return refuse_quota(
                soap, "lookup", "retry", "job %s rank %d -> %d: %s for cluster %s; retry later",
                job, fromRank, toRank,
                full ? "orders fill the command queue" : "the job has too many orders queued",
                res.target.cluster);
        }
        atomic_fetch_add(plan_counter(b, d->technique), 1);
        log_info("job %s rank %d (%s) -> rank %d (%s/%s): %s%s%s; %s%s%s (seq %llu)%s%s", job,
                 fromRank, id->cluster, toRank, res.target.cluster, res.target.node,
                 technique_name(d->technique), punch_family(&res),
                 only_t != TECH_NONE ? " (asked for alone)" : "",
                 queue ? cmd.kind : "waiting for the SYN", queue ? " ordered to " : "",
                 queue ? res.target.cluster : "", (unsigned long long)seq,
                 tried_set ? ", tried before: " : "", tried_set ? tried : "");
        OPENSSL_cleanse(&cmd, sizeof(cmd));
    } else {
        log_debug("job %s rank %d -> %d: %s %s: %s", job, fromRank, toRank,
                  d->ok ? "ok" : "unavailable", technique_name(d->technique), d->reason);
    }
    if (d->ok) {
        uint64_t now = (uint64_t)time(NULL);
        issued_record(b->issued, id->cluster, job, toRank, d->technique,
                      now + (d->cacheable ? ISSUED_CACHEABLE_WINDOW_S : ISSUED_WINDOW_S), now);
    }
    p->status = d->ok ? "ok" : "unavailable";
    p->technique = (char *)technique_name(d->technique);
    p->cluster = soap_strdup(soap, res.target.cluster);
    p->node = soap_strdup(soap, res.target.node);
    p->address = soap_strdup(soap, address);
    p->port = port;
    p->token = token[0] != '\0' ? soap_strdup(soap, token) : NULL;
    p->cacheable = d->cacheable ? 1 : 0;
    p->reason = soap_strdup(soap, d->reason);
    p->fallbackAddress = res.fallback[0] != '\0' ? soap_strdup(soap, res.fallback) : NULL;
    OPENSSL_cleanse(token, sizeof(token));
    return SOAP_OK;
}

int qcg__lookup(struct soap *soap, int version, char *job, char *verifier, int fromRank, int toRank,
                char *tried, char *only, struct qcg__lookupResponse *response)
{
    const struct identity *id;
    if (check_call(soap, "lookup", version, true, &id) != SOAP_OK)
        return SOAP_FAULT;
    atomic_fetch_add(&state(soap)->stats.lookup_calls, 1);
    response->version = QCG_PROTOCOL_VERSION;
    return lookup_plan(soap, id, job, verifier, fromRank, toRank, tried, only, LOOKUP_RATE_WAIT_MS,
                       &response->plan);
}

int qcg__lookups(struct soap *soap, int version, struct qcg__lookupAsks *asks,
                 struct qcg__lookupsResponse *response)
{
    const struct identity *id;
    if (check_call(soap, "lookups", version, true, &id) != SOAP_OK)
        return SOAP_FAULT;
    int n = asks != NULL ? asks->__sizeAsk : 0;
    if (n < 0 || n > QCG_LOOKUPS_MAX || (n > 0 && asks->ask == NULL))
        return refuse(soap, "lookups", "invalid", "%d lookups in one call; at most %d", n,
                      QCG_LOOKUPS_MAX);
    atomic_fetch_add(&state(soap)->stats.lookup_calls, 1);
    response->version = QCG_PROTOCOL_VERSION;
    response->__sizeAnswer = n;
    response->answer = soap_malloc(soap, (size_t)(n > 0 ? n : 1) * sizeof(*response->answer));
    if (response->answer == NULL)
        return SOAP_EOM;
    /* The batch waits for the rate as long as one lookup would, in all. */
    uint64_t until = monotonic_ms() + LOOKUP_RATE_WAIT_MS;
    for (int i = 0; i < n; i++) {
        const struct qcg__lookupAsk *a = &asks->ask[i];
        uint64_t now = monotonic_ms();
        int wait_ms = now < until ? (int)(until - now) : 0;
        struct qcg__lookupAnswer *out = &response->answer[i];
        memset(out, 0, sizeof(*out));
        out->plan = soap_malloc(soap, sizeof(*out->plan));
        if (out->plan == NULL)
            return SOAP_EOM;
        /* Each ask as a lookup alone: its refusal is its answer. */
        if (lookup_plan(soap, id, a->job, a->verifier, a->fromRank, a->toRank, NULL, NULL, wait_ms,
                        out->plan) != SOAP_OK) {
            out->plan = NULL;
            soap_qcg_fault_take(soap, &out->fault, &out->faultText);
        }
    }
    return SOAP_OK;
}

static void command_to_soap(struct soap *soap, const struct command *in, struct qcg__command *out)
{
    memset(out, 0, sizeof(*out));
    out->seq = in->seq;
    out->kind = soap_strdup(soap, in->kind);
    out->job = in->job[0] != '\0' ? soap_strdup(soap, in->job) : NULL;
    out->rank = in->rank;
    out->node = in->node[0] != '\0' ? soap_strdup(soap, in->node) : NULL;
    out->address = in->address[0] != '\0' ? soap_strdup(soap, in->address) : NULL;
    out->port = in->port;
    out->token = in->token[0] != '\0' ? soap_strdup(soap, in->token) : NULL;
    out->peerRank = in->peer_rank;
    out->packet = in->packet[0] != '\0' ? soap_strdup(soap, in->packet) : NULL;
    out->seconds = in->seconds;
}

int qcg__poll(struct soap *soap, int version, ULONG64 epoch, ULONG64 ackSeq, int waitSeconds,
              struct qcg__pollResponse *response)
{
    const struct identity *id;
    if (check_call(soap, "poll", version, true, &id) != SOAP_OK)
        return SOAP_FAULT;
    struct registry *reg = state(soap)->reg;
    atomic_fetch_add(&state(soap)->stats.polls, 1);
    response->version = QCG_PROTOCOL_VERSION;
    response->epoch = registry_epoch(reg);
    response->__sizeCommand = 0;
    response->command = NULL;
    if (epoch != registry_epoch(reg)) {
        /* An old epoch: the caller re-registers and restarts at ackSeq 0. */
        log_debug("poll from frontend %s with epoch %llu, ours is %llu", id->name,
                  (unsigned long long)epoch, (unsigned long long)registry_epoch(reg));
        return SOAP_OK;
    }
    struct cmdqueue *q = registry_queue(reg, id->cluster);
    if (q == NULL)
        return refuse(soap, "poll", "notfound", "cluster %s is not registered", id->cluster);
    lease_heard(state(soap)->lease, id->cluster, monotonic_ms());
    int wait = waitSeconds < 0 ? 0 : waitSeconds > POLL_MAX_WAIT ? POLL_MAX_WAIT : waitSeconds;
    log_debug("poll from frontend %s: ack %llu, waiting up to %d s", id->name,
              (unsigned long long)ackSeq, wait);
    struct command cmds[POLL_MAX_COMMANDS];
    int n = cmdqueue_wait(q, ackSeq, wait * 1000, cmds, POLL_MAX_COMMANDS);
    if (n <= 0)
        return SOAP_OK;
    response->command = soap_malloc(soap, (size_t)n * sizeof(*response->command));
    if (response->command == NULL)
        return refuse(soap, "poll", "unavailable", "out of memory");
    for (int i = 0; i < n; i++)
        command_to_soap(soap, &cmds[i], &response->command[i]);
    response->__sizeCommand = n;
    return SOAP_OK;
}

int qcg__traverse(struct soap *soap, int version, char *token, char *packet,
                  struct qcg__ackResponse *response)
{
    const struct identity *id;
    struct broker *b = state(soap);
    char why[256];
    unsigned char pair[TOKEN_PAIR_LEN];
    int side = -1;
    uint64_t now = (uint64_t)time(NULL);
    struct traversal tr;
    if (check_call(soap, "traverse", version, true, &id) != SOAP_OK)
        return SOAP_FAULT;
    if (token == NULL || strlen(token) >= QCG_TOKEN_MAX ||
        token_check(&b->punch_key, token, now, 0, pair, &side, NULL) != TOKEN_OK ||
        side != TOKEN_SIDE_INITIATOR)
        return refuse(soap, "traverse", "denied", "not a traversing token of this broker");
    if (traversals_take(&b->traversals, pair, now, &tr) < 0)
        return refuse(soap, "traverse", "denied",
                      "no traversal waits for this token (already used or expired)");
    if (strcmp(tr.from_cluster, id->cluster) != 0)
        return refuse(soap, "traverse", "denied", "the traversal was planned for cluster %s",
                      tr.from_cluster);
    struct syn_info syn;
    if (syn_check_hex(packet, &syn, why, sizeof(why)) < 0)
        return refuse(soap, "traverse", "invalid", "packet: %s", why);
    if (syn.dport != tr.target_port || !address_equal(syn.daddr, tr.target_address))
        return refuse(soap, "traverse", "invalid",
                      "the SYN goes to %s port %d, the plan was for %s port %d", syn.daddr,
                      syn.dport, tr.target_address, tr.target_port);
    /* Over IPv6 no NAT rewrites it: the SYN leaves from the initiator's
       own address, the one the target's helper answers. */
    if (address_family(syn.daddr) == AF_INET6 && !address_equal(syn.saddr, tr.from_public))
        return refuse(soap, "traverse", "invalid", "the SYN comes from %s, the plan was for %s",
                      syn.saddr, tr.from_public);
    struct cmdqueue *q = registry_queue(b->reg, tr.target_cluster);
    if (q == NULL)
        return refuse(soap, "traverse", "unavailable", "cluster %s is gone", tr.target_cluster);
    struct command cmd;
    memset(&cmd, 0, sizeof(cmd));
    snprintf(cmd.kind, sizeof(cmd.kind), "inject");
    snprintf(cmd.job, sizeof(cmd.job), "%s", tr.job);
    cmd.rank = tr.target_rank;
    cmd.peer_rank = tr.from_rank;
    snprintf(cmd.node, sizeof(cmd.node), "%s", tr.target_node);
    /* A NAT that keeps ports shows the SYN's own source port. */
    snprintf(cmd.address, sizeof(cmd.address), "%s", tr.from_public);
    cmd.port = syn.sport;
    snprintf(cmd.token, sizeof(cmd.token), "%s", token);
    snprintf(cmd.packet, sizeof(cmd.packet), "%s", packet);
    uint64_t seq = cmdqueue_push(q, &cmd);
    if (seq == 0) {
        OPENSSL_cleanse(&cmd, sizeof(cmd));
        atomic_fetch_add(&b->stats.orders_refused, 1);
        return refuse_quota(soap, "traverse", "retry",
                            "job %s: the inject order does not fit cluster %s's command queue; "
                            "the connection falls back to its next technique",
                            tr.job, tr.target_cluster);
    }
    atomic_fetch_add(&b->stats.injects_ordered, 1);
    log_info("job %s rank %d (%s) -> rank %d (%s/%s): SYN from %s port %d, inject ordered "
             "(seq %llu)",
             tr.job, tr.from_rank, tr.from_cluster, tr.target_rank, tr.target_cluster,
             tr.target_node, tr.from_public, syn.sport, (unsigned long long)seq);
    OPENSSL_cleanse(&cmd, sizeof(cmd));
    response->version = QCG_PROTOCOL_VERSION;
    return SOAP_OK;
}

/* An attempt's fields: NULL when well-formed, else "invalid" with why. */
static const char *report_one_valid(const struct qcg__attempt *a, char *why, size_t whylen)
{
    int t = a->technique != NULL ? attempt_parse(a->technique) : -1;
    if (validate_job(a->job, a->verifier, why, whylen) != 0 ||
        validate_rank(a->fromRank, "fromRank", why, whylen) != 0 ||
        validate_rank(a->toRank, "toRank", why, whylen) != 0)
        return "invalid";
    if (t <= (int)TECH_NONE || (a->ok != 0 && a->ok != 1) || a->setupMs < 0) {
        snprintf(why, whylen, "technique, ok or setupMs out of range");
        return "invalid";
    }
    for (const char *c = a->why; c != NULL && *c != '\0'; c++) {
        if (*c < 0x20 || *c > 0x7e || c - a->why >= 256) {
            snprintf(why, whylen, "why: not one line of printable text");
            return "invalid";
        }
    }
    return NULL;
}

/* A well-formed attempt's end (report, reports): NULL once recorded, else
   the fault subcode, with why.  The cluster's report rate is the caller's
   to take. */
static const char *report_one(struct broker *b, const struct identity *id,
                              const struct qcg__attempt *a, char *why, size_t whylen)
{
    struct reg_lookup res;
    int t = attempt_parse(a->technique);
    /* The IPv6 punch is remembered apart; the plan issued, and the pair's
       metrics, are hole punching's. */
    enum technique planned = t == TECH_PUNCH6 ? TECH_HOLEPUNCH : (enum technique)t;
    /* The same checks as a lookup: only the initiator's side, with the
       verifier, reports; the two contacts give the cluster pair. */
    enum reg_status st = registry_pair(b->reg, id->cluster, a->job, a->verifier, a->fromRank,
                                       a->toRank, &res, why, whylen);
    if (st != REG_OK)
        return reg_status_subcode(st);
    uint64_t now = (uint64_t)time(NULL);
    /* Only an answer to a plan of ours teaches anything: else anyone could
       report failures of techniques nobody planned. */
    if (!issued_check(b->issued, id->cluster, a->job, a->toRank, planned, now)) {
        atomic_fetch_add(&b->stats.reports_refused, 1);
        snprintf(why, whylen,
                 "this broker has no open %s plan for job %s towards rank %d from cluster %s: a "
                 "report answers a lookup",
                 a->technique, a->job, a->toRank, id->cluster);
        return "denied";
    }
    if (!res.found && !res.target_gone)
        return NULL; /* the peer is long gone: nothing to learn about the pair */
    outcomes_record(b->outcomes, res.from.cluster, res.target.cluster, (enum technique)t,
                    a->ok != 0, (unsigned)a->setupMs, now, a->job, res.from.node);
    pair_metrics_record(b->pair_metrics, res.from.cluster, res.target.cluster, planned, a->ok != 0,
                        (unsigned)a->setupMs, a->why);
    atomic_fetch_add(a->ok ? &b->stats.reports_ok : &b->stats.reports_failed, 1);
    if (a->ok)
        log_debug("job %s rank %d (%s) -> rank %d (%s): %s worked in %d ms", a->job, a->fromRank,
                  res.from.cluster, a->toRank, res.target.cluster, a->technique, a->setupMs);
    else
        log_info("job %s rank %d (%s) -> rank %d (%s): %s failed after %d ms (%.200s); not "
                 "planned again between %s and %s until it expires",
                 a->job, a->fromRank, res.from.cluster, a->toRank, res.target.cluster, a->technique,
                 a->setupMs, a->why != NULL ? a->why : "no reason given", res.from.cluster,
                 res.target.cluster);
    return NULL;
}

int qcg__report(struct soap *soap, int version, char *job, char *verifier, int fromRank, int toRank,
                char *technique, int ok, int setupMs, char *why_failed,
                struct qcg__ackResponse *response)
{
    const struct identity *id;
    char why[256];
    if (check_call(soap, "report", version, true, &id) != SOAP_OK)
        return SOAP_FAULT;
    struct qcg__attempt a = {.job = job,
                             .verifier = verifier,
                             .fromRank = fromRank,
                             .toRank = toRank,
                             .technique = technique,
                             .ok = ok,
                             .setupMs = setupMs,
                             .why = why_failed};
    /* Checked before the rate: a malformed report costs no token. */
    const char *sub = report_one_valid(&a, why, sizeof(why));
    if (sub != NULL)
        return refuse(soap, "report", sub, "%s", why);
    if (cluster_rate(soap, "report", id, RATE_REPORT, 0) != SOAP_OK)
        return SOAP_FAULT;
    sub = report_one(state(soap), id, &a, why, sizeof(why));
    if (sub != NULL)
        return refuse(soap, "report", sub, "%s", why);
    response->version = QCG_PROTOCOL_VERSION;
    return SOAP_OK;
}

/* Refused attempts of a batch: no fault (the others count), one line a
   second with how many were left out. */
static struct refusal_log reports_log = {RATELIMIT_LOCKED_INIT, 1000, 1};
/* A batch over its cluster's report rate waits up to this for its tokens,
   and one that would wait longer is refused after as long: each call costs
   its parsing before any check, so a cluster that sends reports without
   end is slowed to its rate by back-pressure (as its lookups are), not
   answered at once and parsed again at the speed of the broker's CPU. */
#define REPORTS_WAIT_MS 1000

int qcg__reports(struct soap *soap, int version, struct qcg__attempts *attempts,
                 struct qcg__reportsResponse *response)
{
    const struct identity *id;
    struct broker *b = state(soap);
    if (check_call(soap, "reports", version, true, &id) != SOAP_OK)
        return SOAP_FAULT;
    int n = attempts != NULL && attempts->attempt != NULL ? attempts->__sizeAttempt : 0;
    if (n < 0 || n > QCG_REPORTS_MAX)
        return refuse(soap, "reports", "invalid", "%d attempts in one call (at most %d)", n,
                      QCG_REPORTS_MAX);
    int accepted = 0, valid = 0;
    for (int i = 0; i < n; i++) {
        char why[256];
        valid += report_one_valid(&attempts->attempt[i], why, sizeof(why)) == NULL;
    }
    bool rate_ok = valid == 0 || rates_take_n(b->rates, id->cluster, RATE_REPORT, (unsigned)valid,
                                              REPORTS_WAIT_MS);
    if (!rate_ok) {
        atomic_fetch_add(&b->stats.quota_refused, (unsigned long long)valid);
        struct timespec tarpit = {REPORTS_WAIT_MS / 1000, (REPORTS_WAIT_MS % 1000) * 1000000L};
        nanosleep(&tarpit, NULL);
    }
    for (int i = 0; i < n; i++) {
        char why[256];
        const struct qcg__attempt *a = &attempts->attempt[i];
        const char *sub = report_one_valid(a, why, sizeof(why));
        if (sub == NULL && !rate_ok) {
            sub = "retry";
            snprintf(why, sizeof(why),
                     "cluster %s is over its rate of report calls (the broker's cluster-reports)",
                     id->cluster);
        }
        if (sub == NULL)
            sub = report_one(b, id, a, why, sizeof(why));
        if (sub == NULL) {
            accepted++;
            continue;
        }
        unsigned left_out = 0;
        atomic_fetch_add(&b->stats.faults, 1);
        if (ratelimit_locked_ok(&reports_log.rl, monotonic_ms(), reports_log.window_ms,
                                reports_log.burst, &left_out))
            /* Info, not a warning: the frontend checked each one, so a
               refusal is mostly a race (its job left the broker first). */
            log_info("a report of %s %s refused (qcg:%s): %s (%u such lines left out)",
                     role_name(id->role), id->name, sub, why, left_out);
    }
    response->version = QCG_PROTOCOL_VERSION;
    response->accepted = accepted;
    return SOAP_OK;
}

int qcg__stats(struct soap *soap, int version, struct qcg__statsResponse *response)
{
    const struct identity *id;
    if (check_call(soap, "stats", version, false, &id) != SOAP_OK)
        return SOAP_FAULT;
    struct stat_counter counters[STATS_MAX];
    struct soap_stage_counts stage;
    soap_server_stage_counts(soap, &stage);
    int n = stats_collect(state(soap), &stage, counters, STATS_MAX);
    response->version = QCG_PROTOCOL_VERSION;
    response->role = (char *)role_name(QCG_ROLE_BROKER);
    response->name = soap_strdup(soap, state(soap)->name);
    response->counter = soap_malloc(soap, (size_t)n * sizeof(*response->counter));
    if (response->counter == NULL)
        return refuse(soap, "stats", "unavailable", "out of memory");
    for (int i = 0; i < n; i++) {
        response->counter[i].name = (char *)counters[i].name;
        response->counter[i].value = counters[i].value;
    }
    response->__sizeCounter = n;
    return SOAP_OK;
}

/* ---- qcg-probe: siteInfo, probe, observed, grid ---- */

static void cluster_to_soap(struct soap *soap, const struct reg_cluster *in,
                            struct qcg__cluster *out)
{
    memset(out, 0, sizeof(*out));
    out->name = soap_strdup(soap, in->name);
    out->kind = (char *)cluster_kind_name(in->kind);
    out->portLow = in->port_low;
    out->portHigh = in->port_high;
    out->publicAddress =
        in->npublic > 0 ? soap_malloc(soap, (size_t)in->npublic * sizeof(char *)) : NULL;
    if (out->publicAddress == NULL)
        return;
    for (int i = 0; i < in->npublic; i++)
        out->publicAddress[i] = soap_strdup(soap, in->public_addr[i]);
    out->__sizePublicAddress = in->npublic;
}

/* n ranges as CIDR texts; NULL when none (the element is left out). */
static char **ranges_to_soap(struct soap *soap, const struct addr_range *r, int n, int *size)
{
    char **out = n > 0 ? soap_malloc(soap, (size_t)n * sizeof(char *)) : NULL;
    *size = 0;
    for (int i = 0; out != NULL && i < n; i++) {
        char text[QCG_ADDR_MAX + 4];
        addr_range_format(&r[i], text, sizeof(text));
        out[i] = soap_strdup(soap, text);
        *size = i + 1;
    }
    return out;
}

/* The declared node and open ranges, both families: for the grid picture
   only (siteInfo keeps what older frontends read). */
static void cluster_ranges_to_soap(struct soap *soap, const struct reg_cluster *in,
                                   struct qcg__cluster *out)
{
    if (!in->ranges_implicit)
        out->nodeRange = ranges_to_soap(soap, in->ranges, in->nranges, &out->__sizeNodeRange);
    out->openRange = ranges_to_soap(soap, in->open, in->nopen, &out->__sizeOpenRange);
}

static struct qcg__endpoint *endpoint_new(struct soap *soap, const char *address, int port)
{
    struct qcg__endpoint *e = soap_malloc(soap, sizeof(*e));
    if (e != NULL) {
        e->address = soap_strdup(soap, address);
        e->port = port;
    }
    return e;
}

int qcg__siteInfo(struct soap *soap, int version, struct qcg__siteInfoResponse *response)
{
    static const char op[] = "siteInfo";
    const struct identity *id;
    struct broker *b = state(soap);
    struct reg_cluster_view *all;
    size_t n;
    if (check_call(soap, op, version, true, &id) != SOAP_OK)
        return SOAP_FAULT;
    if (registry_clusters(b->reg, &all, &n) < 0)
        return refuse(soap, op, "unavailable", "out of memory");
    memset(response, 0, sizeof(*response));
    response->version = QCG_PROTOCOL_VERSION;
    response->peer = soap_malloc(soap, (n > 0 ? n : 1) * sizeof(*response->peer));
    int mine = -1;
    for (size_t i = 0; response->peer != NULL && i < n; i++) {
        cluster_to_soap(soap, &all[i].decl, &response->peer[i]);
        if (strcmp(all[i].decl.name, id->cluster) == 0) {
            mine = (int)i;
            cluster_to_soap(soap, &all[i].decl, &response->cluster);
        }
    }
    free(all);
    if (response->peer == NULL)
        return refuse(soap, op, "unavailable", "out of memory");
    if (mine < 0)
        return refuse(soap, op, "notfound", "cluster %s is not registered", id->cluster);
    response->__sizePeer = (int)n;
    response->frontendSeenFrom =
        soap->host[0] != '\0' ? soap_strdup(soap, caller_address(soap)) : NULL;
    if (b->reflector != NULL)
        response->reflector = endpoint_new(soap, b->reflector_host, b->reflector_port);
    if (b->reflector != NULL && b->reflector6_host[0] != '\0')
        response->reflector6 = endpoint_new(soap, b->reflector6_host, b->reflector_port);
    /* Every address of every proxy, as more endpoints of the same list: an
       older frontend relays and an older helper reads them as before, and
       qcg-probe checks those of its node's families. */
    if (b->proxies.count > 0)
        response->proxy =
            soap_malloc(soap, 2 * (size_t)b->proxies.count * sizeof(*response->proxy));
    for (int i = 0; response->proxy != NULL && i < b->proxies.count; i++) {
        const struct proxy_addr *px = &b->proxies.list[i];
        int k = response->__sizeProxy;
        response->proxy[k].address = soap_strdup(soap, px->host);
        response->proxy[k++].port = px->port;
        if (px->host2[0] != '\0') {
            response->proxy[k].address = soap_strdup(soap, px->host2);
            response->proxy[k++].port = px->port2;
        }
        response->__sizeProxy = k;
    }
    log_debug("siteInfo for frontend %s (seen from %s): %zu clusters, %d proxies%s", id->name,
              soap->host, n, response->__sizeProxy, b->reflector != NULL ? ", a reflector" : "");
    return SOAP_OK;
}

int qcg__probe(struct soap *soap, int version, char *cluster, int seconds, char *node,
               struct qcg__probeResponse *response)
{
    static const char op[] = "probe";
    const struct identity *id;
    struct broker *b = state(soap);
    char why[256];
    struct reg_node where;
    struct command cmd;
    if (check_call(soap, op, version, true, &id) != SOAP_OK ||
        cluster_rate(soap, op, id, RATE_PROBE, 0) != SOAP_OK)
        return SOAP_FAULT;
    if (cluster == NULL || !name_valid(cluster))
        return refuse(soap, op, "invalid", "cluster: missing or not a valid name");
    if (seconds < 1 || seconds > QCG_PROBE_TTL_MAX)
        return refuse(soap, op, "invalid", "seconds: %d is not within 1-%d", seconds,
                      QCG_PROBE_TTL_MAX);
    if (node != NULL && node[0] != '\0' && !name_valid(node))
        return refuse(soap, op, "invalid", "node: not a valid name");
    memset(&cmd, 0, sizeof(cmd));
    snprintf(cmd.kind, sizeof(cmd.kind), "probe-listen");
    memcpy(cmd.job, QCG_PROBE_JOB_PREFIX, QCG_PROBE_JOB_PREFIX_LEN);
    if (random_hex(cmd.job + QCG_PROBE_JOB_PREFIX_LEN, sizeof(cmd.job) - QCG_PROBE_JOB_PREFIX_LEN) <
            0 ||
        random_hex(cmd.token, sizeof(cmd.token)) < 0)
        return refuse(soap, op, "unavailable", "no randomness for a probe job");
    struct cmdqueue *q = registry_queue(b->reg, cluster);
    uint64_t now = (uint64_t)time(NULL);
    enum reg_status st =
        q == NULL ? REG_NOTFOUND
                  : registry_probe_start(b->reg, id->cluster, node != NULL ? node : "",
                                         b->probes_per_node, cluster, cmd.job, now,
                                         now + (uint64_t)seconds, &where, why, sizeof(why));
    if (q == NULL)
        snprintf(why, sizeof(why), "cluster %s is not registered", cluster);
    if (st != REG_OK) {
        OPENSSL_cleanse(&cmd, sizeof(cmd));
        return refuse_status(soap, op, st, why);
    }
    snprintf(cmd.node, sizeof(cmd.node), "%s", where.name);
    cmd.rank = QCG_PROBE_ENDPOINT_RANK;
    cmd.seconds = seconds;
    uint64_t seq = cmdqueue_push(q, &cmd);
    if (seq == 0) {
        registry_probe_cancel(b->reg, id->cluster, cmd.job);
        OPENSSL_cleanse(&cmd, sizeof(cmd));
        atomic_fetch_add(&b->stats.orders_refused, 1);
        return refuse_quota(soap, op, "retry",
                            "orders fill the command queue of cluster %s; retry later", cluster);
    }
    atomic_fetch_add(&b->stats.probes_started, 1);
    log_info("probe: cluster %s%s%s asked for a test endpoint in %s (node %s, job %s, %d s); "
             "probe-listen seq %llu",
             id->cluster, node != NULL && node[0] != '\0' ? " node " : "", node != NULL ? node : "",
             cluster, where.name, cmd.job, seconds, (unsigned long long)seq);
    response->version = QCG_PROTOCOL_VERSION;
    response->job = soap_strdup(soap, cmd.job);
    response->secret = soap_strdup(soap, cmd.token);
    response->rank = QCG_PROBE_ENDPOINT_RANK;
    response->cluster = soap_strdup(soap, cluster);
    response->node = soap_strdup(soap, where.name);
    response->address = soap_strdup(soap, where.address);
    response->seconds = seconds;
    OPENSSL_cleanse(&cmd, sizeof(cmd));
    return SOAP_OK;
}

/* Why an observed kind contradicts a declaration, in a few words. */
static const char *kind_meaning(enum cluster_kind k)
{
    switch (k) {
    case CLUSTER_OPEN:
        return "unsolicited inbound connections reach it";
    case CLUSTER_FIREWALLED:
        return "public addresses, inbound connections filtered";
    case CLUSTER_NAT:
        return "behind a NAT with an endpoint-independent mapping";
    default:
        return "mapping varies by destination";
    }
}

int qcg__observed(struct soap *soap, int version, struct qcg__observation *observation,
                  struct qcg__ackResponse *response)
{
    static const char op[] = "observed";
    const struct identity *id;
    struct broker *b = state(soap);
    char why[256];
    struct reg_observation o;
    struct reg_cluster decl;
    if (check_call(soap, op, version, true, &id) != SOAP_OK)
        return SOAP_FAULT;
    if (validate_observation(observation, &o, why, sizeof(why)) != 0)
        return refuse(soap, op, "invalid", "%s", why);
    if (strcmp(observation->cluster, id->cluster) != 0)
        return refuse(soap, op, "denied", "frontend %s may report for cluster %s only, not %s",
                      id->name, id->cluster, observation->cluster);
    o.when = (uint64_t)time(NULL);
    enum reg_status st = registry_observe(b->reg, id->cluster, &o, &decl, why, sizeof(why));
    if (st == REG_DENIED)
        return refuse_address(soap, op, "denied", "%s", why);
    if (st != REG_OK)
        return refuse_status(soap, op, st, why);
    atomic_fetch_add(&b->stats.observations, 1);
    if (o.kind != decl.kind)
        log_warnx("misconfiguration: cluster %s declares %s but node %s observed %s (%s)",
                  decl.name, cluster_kind_name(decl.kind), o.node, cluster_kind_name(o.kind),
                  kind_meaning(o.kind));
    log_info("observed: cluster %s node %s: %s, public address %s, mapping %s, inbound %s, "
             "port preserving %s",
             decl.name, o.node, cluster_kind_name(o.kind), o.public_addr[0] ? o.public_addr : "?",
             o.mapping, o.inbound,
             o.port_preserving < 0 ? "unknown"
             : o.port_preserving   ? "yes"
                                   : "no");
    response->version = QCG_PROTOCOL_VERSION;
    return SOAP_OK;
}

static struct qcg__observation *observation_to_soap(struct soap *soap, const char *cluster,
                                                    const struct reg_observation *in)
{
    struct qcg__observation *o = soap_malloc(soap, sizeof(*o));
    if (o == NULL)
        return NULL;
    o->cluster = soap_strdup(soap, cluster);
    o->node = soap_strdup(soap, in->node);
    o->kind = (char *)cluster_kind_name(in->kind);
    o->publicAddress = soap_strdup(soap, in->public_addr);
    o->portPreserving = in->port_preserving;
    o->mapping = soap_strdup(soap, in->mapping);
    o->inbound = soap_strdup(soap, in->inbound);
    o->when = in->when;
    return o;
}

/* The outcomes of the grid answer; at most what a client accepts. */
#define GRID_OUTCOMES_MAX 1000

static int grid_outcomes(struct soap *soap, struct outcomes *mem, struct qcg__gridResponse *r)
{
    struct outcome_pair *pairs = malloc(OUTCOMES_PAIRS_MAX * sizeof(*pairs));
    if (pairs == NULL)
        return -1;
    size_t n = outcomes_snapshot(mem, pairs, OUTCOMES_PAIRS_MAX);
    uint64_t now = (uint64_t)time(NULL);
    r->outcome = soap_malloc(soap, GRID_OUTCOMES_MAX * sizeof(*r->outcome));
    r->__sizeOutcome = 0;
    for (size_t i = 0; r->outcome != NULL && i < n; i++) {
        for (int t = TECH_DIRECT; t < OUTCOMES_TECHNIQUES; t++) {
            const struct outcome_tally *y = &pairs[i].tech[t];
            if (y->ok + y->failed == 0 || r->__sizeOutcome >= GRID_OUTCOMES_MAX)
                continue;
            struct qcg__outcome *o = &r->outcome[r->__sizeOutcome++];
            o->from = soap_strdup(soap, pairs[i].from);
            o->to = soap_strdup(soap, pairs[i].to);
            o->technique = (char *)attempt_name(t);
            o->ok = y->ok;
            o->failed = y->failed;
            o->lastOk = y->last_ok ? 1 : 0;
            o->lastSetupMs = (int)y->last_setup_ms;
            o->age = now > y->last ? now - y->last : 0;
        }
    }
    free(pairs);
    return r->outcome != NULL ? 0 : -1;
}

/* Each configured proxy with what its beats said. */
static int grid_proxies(struct soap *soap, struct broker *b, struct qcg__gridResponse *r)
{
    struct proxy_view v[PROXIES_MAX];
    size_t n = b->proxy_live != NULL
                   ? proxy_live_snapshot(b->proxy_live, monotonic_ms(), v, PROXIES_MAX)
                   : 0;
    r->__sizeProxy = 0;
    if (n == 0)
        return 0;
    r->proxy = soap_malloc(soap, n * sizeof(*r->proxy));
    if (r->proxy == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        struct qcg__gridProxy *g = &r->proxy[i];
        g->name = soap_strdup(soap, v[i].addr.name);
        g->address = soap_strdup(soap, v[i].addr.host);
        g->port = v[i].addr.port;
        g->__sizeOther = 0;
        g->other = NULL;
        if (v[i].addr.host2[0] != '\0')
            g->other = endpoint_new(soap, v[i].addr.host2, v[i].addr.port2);
        if (g->other != NULL)
            g->__sizeOther = 1;
        g->state = (char *)proxy_state_name(v[i].state);
        g->lastSeen = v[i].last_seen_s;
        g->pairs = (int)v[i].pairs;
        g->bytes = v[i].bytes;
        g->planned = v[i].planned;
    }
    r->__sizeProxy = (int)n;
    return 0;
}

int qcg__grid(struct soap *soap, int version, struct qcg__gridResponse *response)
{
    static const char op[] = "grid";
    const struct identity *id;
    struct broker *b = state(soap);
    struct reg_cluster_view *all;
    size_t n;
    if (check_call(soap, op, version, false, &id) != SOAP_OK)
        return SOAP_FAULT;
    if (id->role != QCG_ROLE_BROKER && id->role != QCG_ROLE_FRONTEND)
        return refuse(soap, op, "denied", "grid is served to the broker and frontends, not to a %s",
                      role_name(id->role));
    if (registry_clusters(b->reg, &all, &n) < 0)
        return refuse(soap, op, "unavailable", "out of memory");
    memset(response, 0, sizeof(*response));
    response->version = QCG_PROTOCOL_VERSION;
    response->cluster = soap_malloc(soap, (n > 0 ? n : 1) * sizeof(*response->cluster));
    for (size_t i = 0; response->cluster != NULL && i < n; i++) {
        struct qcg__gridCluster *g = &response->cluster[i];
        cluster_to_soap(soap, &all[i].decl, &g->declared);
        cluster_ranges_to_soap(soap, &all[i].decl, &g->declared);
        g->nodes = (int)all[i].nodes;
        g->observed = all[i].observed.when != 0
                          ? observation_to_soap(soap, all[i].decl.name, &all[i].observed)
                          : NULL;
        g->punchesPreserved = (int)all[i].punches_kept;
        g->punchesChanged = (int)all[i].punches_changed;
        response->__sizeCluster = (int)i + 1;
    }
    free(all);
    if (response->cluster == NULL || grid_outcomes(soap, b->outcomes, response) < 0 ||
        grid_proxies(soap, b, response) < 0)
        return refuse(soap, op, "unavailable", "out of memory");
    log_debug("grid for %s %s: %d clusters, %d outcomes, %d proxies", role_name(id->role), id->name,
              response->__sizeCluster, response->__sizeOutcome, response->__sizeProxy);
    return SOAP_OK;
}

int qcg__proxyAlive(struct soap *soap, int version, int pairs, ULONG64 bytes,
                    struct qcg__ackResponse *response)
{
    static const char op[] = "proxyAlive";
    const struct identity *id;
    struct broker *b = state(soap);
    if (check_call(soap, op, version, false, &id) != SOAP_OK)
        return SOAP_FAULT;
    if (id->role != QCG_ROLE_PROXY)
        return refuse(soap, op, "denied", "only a proxy may call %s, not a %s", op,
                      role_name(id->role));
    if (pairs < 0)
        return refuse(soap, op, "invalid", "pairs: %d is negative", pairs);
    int was = b->proxy_live != NULL
                  ? proxy_live_beat(b->proxy_live, id->name, (unsigned)pairs, bytes, monotonic_ms())
                  : -1;
    if (was < 0)
        return refuse(soap, op, "notfound", "no proxy named %s is configured at this broker",
                      id->name);
    atomic_fetch_add(&b->stats.proxy_beats, 1);
    if (was != PROXY_ALIVE)
        log_info("proxy %s is alive (was %s): pairs are planned through it", id->name,
                 proxy_state_name((enum proxy_state)was));
    log_debug("proxy %s alive: %d pairs, %llu bytes", id->name, pairs, (unsigned long long)bytes);
    response->version = QCG_PROTOCOL_VERSION;
    return SOAP_OK;
}
