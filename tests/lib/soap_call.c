/*
 * soap-call: one operation of the qcg service (common/qcg_service.h) over
 * mutual TLS, as a helper, a frontend or a proxy calls it; the shell tests'
 * one SOAP client, for the broker and the frontend alike.
 *
 *   soap-call --url URL --ca CA --cert PEM [--protocol N] OPERATION [FIELD=VALUE...]
 *
 * OPERATION and each FIELD are named as in the WSDL (registerNode, fromRank).
 * A field not given is absent from the message (a string) or 0 (a number);
 * a list field (publicAddress, nodeRange) is given once per element.  The
 * job credential is secret=S, sent as its verifier as a helper derives it,
 * or verifier=V, sent as is.  lookups and reports take one ask or attempt
 * after another, each starting at its job=.  poll's waitSeconds also
 * stretches the receive timeout.
 *
 * Output, one item a line (control characters as '?'):
 *   ok, then NAME=VALUE per response field, nested names joined by '.',
 *     a list as LIST.count=N and LIST.I.FIELD=VALUE, stats' counters as
 *     counter.NAME=VALUE; absent strings and structures print nothing;
 *   fault SUBCODE: TEXT (exit 1), SUBCODE without "qcg:" ("-" if none);
 *   unreachable: TEXT (exit 3), no answer (refused, TLS, timeout);
 * a bad command line, or a CA or certificate it cannot load: one line on
 * stderr, exit 2.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "number.h"
#include "proto.h"
#include "soapH.h"
#include "soap_client.h"
#include "verifier.h"

/* The FIELD=VALUE arguments of one message, or of one element of a batch. */
struct args {
    char **key, **value;
    bool *used;
    int n;
    const char *bad; /* the first thing wrong with them, or NULL */
    char why[160];
};

static void wrong(struct args *a, const char *fmt, ...)
{
    if (a->bad != NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->why, sizeof(a->why), fmt, ap);
    va_end(ap);
    a->bad = a->why;
}

/* The value of KEY (marked used), or NULL; one key given twice is wrong. */
static char *str_arg(struct args *a, const char *key)
{
    char *v = NULL;
    for (int i = 0; i < a->n; i++) {
        if (strcmp(a->key[i], key) != 0)
            continue;
        if (v != NULL)
            wrong(a, "%s given twice", key);
        v = a->value[i];
        a->used[i] = true;
    }
    return v;
}

static long num_arg(struct args *a, const char *key, long min, long max)
{
    const char *v = str_arg(a, key);
    long n = 0;
    if (v != NULL && number_parse(v, min, max, &n) < 0)
        wrong(a, "%s=%s: not a number in [%ld, %ld]", key, v, min, max);
    return n;
}

static int int_arg(struct args *a, const char *key)
{
    return (int)num_arg(a, key, INT_MIN, INT_MAX);
}

/* Epochs and sequence numbers span all 64 bits. */
static unsigned long long u64_arg(struct args *a, const char *key)
{
    const char *v = str_arg(a, key);
    char *end = NULL;
    errno = 0;
    unsigned long long n = v != NULL && *v >= '0' && *v <= '9' ? strtoull(v, &end, 10) : 0;
    if (v != NULL && (end == NULL || *end != '\0' || errno != 0))
        wrong(a, "%s=%s: not a whole number", key, v);
    return n;
}

/* Every value of KEY, in order, in a new array (*n of them; NULL if none). */
static char **list_arg(struct args *a, const char *key, int *n)
{
    char **list = calloc((size_t)a->n + 1, sizeof(*list));
    *n = 0;
    for (int i = 0; i < a->n && list != NULL; i++)
        if (strcmp(a->key[i], key) == 0) {
            list[(*n)++] = a->value[i];
            a->used[i] = true;
        }
    if (*n == 0) {
        free(list);
        return NULL;
    }
    return list;
}

/* The verifier: secret=S derived as a helper does (core/verifier.h), or
   verifier=V as given (a malformed one, or a leaked secret).  A job id too
   long to derive from still gets a well-formed verifier, so that the
   service's own check of the id is what refuses. */
static char *verifier_arg(struct args *a, const char *job, char out[QCG_VERIFIER_LEN + 1])
{
    char *secret = str_arg(a, "secret"), *raw = str_arg(a, "verifier");
    if (secret != NULL && raw != NULL)
        wrong(a, "secret and verifier given both");
    if (secret == NULL)
        return raw;
    if (job == NULL || job_verifier(job, secret, out) < 0)
        memset(out, '0', QCG_VERIFIER_LEN), out[QCG_VERIFIER_LEN] = '\0';
    return out;
}

/* Whether every argument was understood; says why not otherwise. */
static bool args_ok(struct args *a, const char *op)
{
    for (int i = 0; i < a->n; i++)
        if (!a->used[i])
            wrong(a, "%s has no field %s", op, a->key[i]);
    if (a->bad != NULL)
        fprintf(stderr, "soap-call: %s: %s\n", op, a->bad);
    return a->bad == NULL;
}

/* The batch's elements: a new one starts at each FIRST=... argument. */
static int split(struct args *all, const char *first, struct args *part, int max)
{
    int n = 0;
    for (int i = 0; i < all->n; i++) {
        if (strcmp(all->key[i], first) == 0 || n == 0) {
            if (n == max)
                return -1;
            part[n++] = (struct args){all->key + i, all->value + i, all->used + i, 0, NULL, ""};
        }
        part[n - 1].n++;
    }
    return n;
}

/* --- output --- */

/* TEXT and a newline: a line whatever the service sent. */
static void put_line(const char *text)
{
    for (const char *c = text; *c != '\0'; c++)
        putchar((unsigned char)*c < 0x20 || *c == 0x7f ? '?' : *c);
    putchar('\n');
}

static void put(const char *prefix, const char *name, const char *value)
{
    if (value == NULL)
        return;
    printf("%s%s=", prefix, name);
    put_line(value);
}

static void put_num(const char *prefix, const char *name, long long value)
{
    printf("%s%s=%lld\n", prefix, name, value);
}

/* PREFIX NAME "." I "." into buf: the prefix of a list's element. */
static const char *element(char *buf, size_t len, const char *prefix, const char *name, int i)
{
    snprintf(buf, len, "%s%s.%d.", prefix, name, i);
    return buf;
}

static void put_strings(const char *prefix, const char *name, int n, char **list)
{
    char key[128];
    printf("%s%s.count=%d\n", prefix, name, n);
    for (int i = 0; i < n && list != NULL; i++) {
        snprintf(key, sizeof(key), "%s.%d", name, i);
        put(prefix, key, list[i]);
    }
}

static void put_cluster(const char *p, const struct qcg__cluster *c)
{
    put(p, "name", c->name);
    put(p, "kind", c->kind);
    put_strings(p, "publicAddress", c->__sizePublicAddress, c->publicAddress);
    put_num(p, "portLow", c->portLow);
    put_num(p, "portHigh", c->portHigh);
    put_strings(p, "nodeRange", c->__sizeNodeRange, c->nodeRange);
    put_strings(p, "openRange", c->__sizeOpenRange, c->openRange);
}

static void put_plan(const char *p, const struct qcg__plan *plan)
{
    put(p, "status", plan->status);
    put(p, "technique", plan->technique);
    put(p, "cluster", plan->cluster);
    put(p, "node", plan->node);
    put(p, "address", plan->address);
    put_num(p, "port", plan->port);
    put(p, "token", plan->token);
    put_num(p, "cacheable", plan->cacheable);
    put(p, "reason", plan->reason);
    put(p, "fallbackAddress", plan->fallbackAddress);
}

static void put_command(const char *p, const struct qcg__command *c)
{
    put_num(p, "seq", (long long)c->seq);
    put(p, "kind", c->kind);
    put(p, "job", c->job);
    put_num(p, "rank", c->rank);
    put(p, "node", c->node);
    put(p, "address", c->address);
    put_num(p, "port", c->port);
    put(p, "token", c->token);
    put_num(p, "peerRank", c->peerRank);
    put(p, "packet", c->packet);
    put_num(p, "seconds", c->seconds);
}

static void put_observation(const char *p, const struct qcg__observation *o)
{
    put(p, "cluster", o->cluster);
    put(p, "node", o->node);
    put(p, "kind", o->kind);
    put(p, "publicAddress", o->publicAddress);
    put_num(p, "portPreserving", o->portPreserving);
    put(p, "mapping", o->mapping);
    put(p, "inbound", o->inbound);
    put_num(p, "when", (long long)o->when);
}

static void put_endpoint(const char *p, const struct qcg__endpoint *e)
{
    put(p, "address", e->address);
    put_num(p, "port", e->port);
}

static void put_grid(const struct qcg__gridResponse *r)
{
    char p[96], q[128];
    printf("cluster.count=%d\n", r->__sizeCluster);
    for (int i = 0; i < r->__sizeCluster; i++) {
        const struct qcg__gridCluster *c = &r->cluster[i];
        element(p, sizeof(p), "", "cluster", i);
        snprintf(q, sizeof(q), "%sdeclared.", p);
        put_cluster(q, &c->declared);
        put_num(p, "nodes", c->nodes);
        if (c->observed != NULL) {
            snprintf(q, sizeof(q), "%sobserved.", p);
            put_observation(q, c->observed);
        }
        put_num(p, "punchesPreserved", c->punchesPreserved);
        put_num(p, "punchesChanged", c->punchesChanged);
    }
    printf("outcome.count=%d\n", r->__sizeOutcome);
    for (int i = 0; i < r->__sizeOutcome; i++) {
        const struct qcg__outcome *o = &r->outcome[i];
        element(p, sizeof(p), "", "outcome", i);
        put(p, "from", o->from);
        put(p, "to", o->to);
        put(p, "technique", o->technique);
        put_num(p, "ok", (long long)o->ok);
        put_num(p, "failed", (long long)o->failed);
        put_num(p, "lastOk", o->lastOk);
        put_num(p, "lastSetupMs", o->lastSetupMs);
        put_num(p, "age", (long long)o->age);
    }
    printf("proxy.count=%d\n", r->__sizeProxy);
    for (int i = 0; i < r->__sizeProxy; i++) {
        const struct qcg__gridProxy *x = &r->proxy[i];
        element(p, sizeof(p), "", "proxy", i);
        put(p, "name", x->name);
        put(p, "address", x->address);
        put_num(p, "port", x->port);
        put(p, "state", x->state);
        put_num(p, "lastSeen", (long long)x->lastSeen);
        put_num(p, "pairs", x->pairs);
        put_num(p, "bytes", (long long)x->bytes);
        put_num(p, "planned", (long long)x->planned);
    }
}

/* --- the operations: each parses its fields, calls, prints the answer --- */

#define USAGE (-1000) /* not a gSOAP status: the command line was wrong */

struct call {
    struct soap *soap;
    const char *url;
    int version;
    const char *op;
    struct args *a;
    char vbuf[QCG_VERIFIER_LEN + 1];
};

static int op_register_cluster(struct call *c)
{
    struct qcg__cluster cl = {.name = str_arg(c->a, "name"),
                              .kind = str_arg(c->a, "kind"),
                              .portLow = int_arg(c->a, "portLow"),
                              .portHigh = int_arg(c->a, "portHigh")};
    cl.publicAddress = list_arg(c->a, "publicAddress", &cl.__sizePublicAddress);
    cl.nodeRange = list_arg(c->a, "nodeRange", &cl.__sizeNodeRange);
    cl.openRange = list_arg(c->a, "openRange", &cl.__sizeOpenRange);
    struct qcg__registerResponse r = {0, 0};
    int rc = USAGE;
    if (args_ok(c->a, c->op))
        rc = soap_call_qcg__registerCluster(c->soap, c->url, NULL, c->version, &cl, &r);
    if (rc == SOAP_OK)
        printf("ok\nversion=%d\nepoch=%llu\n", r.version, (unsigned long long)r.epoch);
    free(cl.publicAddress), free(cl.nodeRange), free(cl.openRange);
    return rc;
}

static int op_register_node(struct call *c)
{
    struct qcg__node n = {.name = str_arg(c->a, "name"),
                          .address = str_arg(c->a, "address"),
                          .portLow = int_arg(c->a, "portLow"),
                          .portHigh = int_arg(c->a, "portHigh"),
                          .canIntercept = int_arg(c->a, "canIntercept"),
                          .incarnation = str_arg(c->a, "incarnation")};
    n.otherAddress = list_arg(c->a, "otherAddress", &n.__sizeOtherAddress);
    struct qcg__registerResponse r = {0, 0};
    int rc = USAGE;
    if (args_ok(c->a, c->op))
        rc = soap_call_qcg__registerNode(c->soap, c->url, NULL, c->version, &n, &r);
    if (rc == SOAP_OK)
        printf("ok\nversion=%d\nepoch=%llu\n", r.version, (unsigned long long)r.epoch);
    free(n.otherAddress);
    return rc;
}

static int op_publish(struct call *c)
{
    struct qcg__contact ct = {.job = str_arg(c->a, "job"),
                              .rank = int_arg(c->a, "rank"),
                              .cluster = str_arg(c->a, "cluster"),
                              .node = str_arg(c->a, "node"),
                              .address = str_arg(c->a, "address"),
                              .port = int_arg(c->a, "port")};
    ct.verifier = verifier_arg(c->a, ct.job, c->vbuf);
    ct.otherAddress = list_arg(c->a, "otherAddress", &ct.__sizeOtherAddress);
    struct qcg__ackResponse r = {0};
    int rc = USAGE;
    if (args_ok(c->a, c->op))
        rc = soap_call_qcg__publish(c->soap, c->url, NULL, c->version, &ct, &r);
    if (rc == SOAP_OK)
        printf("ok\nversion=%d\n", r.version);
    free(ct.otherAddress);
    return rc;
}

static int op_withdraw(struct call *c)
{
    char *job = str_arg(c->a, "job"), *node = str_arg(c->a, "node");
    char *verifier = verifier_arg(c->a, job, c->vbuf);
    int rank = int_arg(c->a, "rank");
    struct qcg__ackResponse r = {0};
    if (!args_ok(c->a, c->op))
        return USAGE;
    int rc =
        soap_call_qcg__withdraw(c->soap, c->url, NULL, c->version, job, verifier, rank, node, &r);
    if (rc == SOAP_OK)
        printf("ok\nversion=%d\n", r.version);
    return rc;
}

static int op_lookup(struct call *c)
{
    char *job = str_arg(c->a, "job"), *tried = str_arg(c->a, "tried");
    char *only = str_arg(c->a, "only"), *verifier = verifier_arg(c->a, job, c->vbuf);
    int from = int_arg(c->a, "fromRank"), to = int_arg(c->a, "toRank");
    struct qcg__lookupResponse r;
    memset(&r, 0, sizeof(r));
    if (!args_ok(c->a, c->op))
        return USAGE;
    int rc = soap_call_qcg__lookup(c->soap, c->url, NULL, c->version, job, verifier, from, to,
                                   tried, only, &r);
    if (rc == SOAP_OK) {
        printf("ok\nversion=%d\n", r.version);
        put_plan("plan.", &r.plan);
    }
    return rc;
}

/* Room for one element more than the service takes, to test its limit. */
#define BATCH_MAX (QCG_LOOKUPS_MAX > QCG_REPORTS_MAX ? QCG_LOOKUPS_MAX + 1 : QCG_REPORTS_MAX + 1)

static int op_lookups(struct call *c)
{
    static struct args part[BATCH_MAX];
    static struct qcg__lookupAsk ask[BATCH_MAX];
    static char vbuf[BATCH_MAX][QCG_VERIFIER_LEN + 1];
    int n = split(c->a, "job", part, BATCH_MAX);
    if (n < 0)
        wrong(c->a, "more than %d asks", BATCH_MAX);
    for (int i = 0; i < n; i++) {
        struct args *a = &part[i];
        ask[i] = (struct qcg__lookupAsk){.job = str_arg(a, "job"),
                                         .fromRank = int_arg(a, "fromRank"),
                                         .toRank = int_arg(a, "toRank")};
        ask[i].verifier = verifier_arg(a, ask[i].job, vbuf[i]);
        if (!args_ok(a, c->op))
            return USAGE;
    }
    struct qcg__lookupAsks list = {.__sizeAsk = n, .ask = n > 0 ? ask : NULL};
    struct qcg__lookupsResponse r;
    memset(&r, 0, sizeof(r));
    if (!args_ok(c->a, c->op))
        return USAGE;
    int rc = soap_call_qcg__lookups(c->soap, c->url, NULL, c->version, &list, &r);
    if (rc == SOAP_OK) {
        char p[64], q[80];
        printf("ok\nversion=%d\nanswer.count=%d\n", r.version, r.__sizeAnswer);
        for (int i = 0; i < r.__sizeAnswer; i++) {
            element(p, sizeof(p), "", "answer", i);
            if (r.answer[i].plan != NULL) {
                snprintf(q, sizeof(q), "%splan.", p);
                put_plan(q, r.answer[i].plan);
            }
            put(p, "fault", r.answer[i].fault);
            put(p, "faultText", r.answer[i].faultText);
        }
    }
    return rc;
}

static int op_poll(struct call *c)
{
    unsigned long long epoch = u64_arg(c->a, "epoch"), ack = u64_arg(c->a, "ackSeq");
    int wait = (int)num_arg(c->a, "waitSeconds", 0, 3600);
    struct qcg__pollResponse r;
    memset(&r, 0, sizeof(r));
    if (!args_ok(c->a, c->op))
        return USAGE;
    soap_client_set_wait(c->soap, wait);
    int rc = soap_call_qcg__poll(c->soap, c->url, NULL, c->version, epoch, ack, wait, &r);
    if (rc == SOAP_OK) {
        char p[64];
        printf("ok\nversion=%d\nepoch=%llu\ncommand.count=%d\n", r.version,
               (unsigned long long)r.epoch, r.__sizeCommand);
        for (int i = 0; i < r.__sizeCommand && r.command != NULL; i++)
            put_command(element(p, sizeof(p), "", "command", i), &r.command[i]);
    }
    return rc;
}

static int op_report(struct call *c)
{
    char *job = str_arg(c->a, "job"), *technique = str_arg(c->a, "technique");
    char *why = str_arg(c->a, "why"), *verifier = verifier_arg(c->a, job, c->vbuf);
    int from = int_arg(c->a, "fromRank"), to = int_arg(c->a, "toRank");
    int ok = int_arg(c->a, "ok"), ms = int_arg(c->a, "setupMs");
    struct qcg__ackResponse r = {0};
    if (!args_ok(c->a, c->op))
        return USAGE;
    int rc = soap_call_qcg__report(c->soap, c->url, NULL, c->version, job, verifier, from, to,
                                   technique, ok, ms, why, &r);
    if (rc == SOAP_OK)
        printf("ok\nversion=%d\n", r.version);
    return rc;
}

static int op_reports(struct call *c)
{
    static struct args part[BATCH_MAX];
    static struct qcg__attempt at[BATCH_MAX];
    static char vbuf[BATCH_MAX][QCG_VERIFIER_LEN + 1];
    int n = split(c->a, "job", part, BATCH_MAX);
    if (n < 0)
        wrong(c->a, "more than %d attempts", BATCH_MAX);
    for (int i = 0; i < n; i++) {
        struct args *a = &part[i];
        at[i] = (struct qcg__attempt){.job = str_arg(a, "job"),
                                      .fromRank = int_arg(a, "fromRank"),
                                      .toRank = int_arg(a, "toRank"),
                                      .technique = str_arg(a, "technique"),
                                      .ok = int_arg(a, "ok"),
                                      .setupMs = int_arg(a, "setupMs"),
                                      .why = str_arg(a, "why")};
        at[i].verifier = verifier_arg(a, at[i].job, vbuf[i]);
        if (!args_ok(a, c->op))
            return USAGE;
    }
    struct qcg__attempts list = {.__sizeAttempt = n, .attempt = n > 0 ? at : NULL};
    struct qcg__reportsResponse r = {0, 0};
    if (!args_ok(c->a, c->op))
        return USAGE;
    int rc = soap_call_qcg__reports(c->soap, c->url, NULL, c->version, &list, &r);
    if (rc == SOAP_OK)
        printf("ok\nversion=%d\naccepted=%d\n", r.version, r.accepted);
    return rc;
}

static int op_site_info(struct call *c)
{
    struct qcg__siteInfoResponse r;
    memset(&r, 0, sizeof(r));
    if (!args_ok(c->a, c->op))
        return USAGE;
    int rc = soap_call_qcg__siteInfo(c->soap, c->url, NULL, c->version, &r);
    if (rc == SOAP_OK) {
        char p[64];
        printf("ok\nversion=%d\n", r.version);
        put_cluster("cluster.", &r.cluster);
        put("", "broker", r.broker);
        put("", "frontendSeenFrom", r.frontendSeenFrom);
        if (r.reflector != NULL)
            put_endpoint("reflector.", r.reflector);
        if (r.reflector6 != NULL)
            put_endpoint("reflector6.", r.reflector6);
        printf("proxy.count=%d\n", r.__sizeProxy);
        for (int i = 0; i < r.__sizeProxy && r.proxy != NULL; i++)
            put_endpoint(element(p, sizeof(p), "", "proxy", i), &r.proxy[i]);
        printf("peer.count=%d\n", r.__sizePeer);
        for (int i = 0; i < r.__sizePeer && r.peer != NULL; i++)
            put_cluster(element(p, sizeof(p), "", "peer", i), &r.peer[i]);
    }
    return rc;
}

static int op_probe(struct call *c)
{
    char *cluster = str_arg(c->a, "cluster"), *node = str_arg(c->a, "node");
    int seconds = int_arg(c->a, "seconds");
    struct qcg__probeResponse r;
    memset(&r, 0, sizeof(r));
    if (!args_ok(c->a, c->op))
        return USAGE;
    int rc = soap_call_qcg__probe(c->soap, c->url, NULL, c->version, cluster, seconds, node, &r);
    if (rc == SOAP_OK) {
        printf("ok\nversion=%d\n", r.version);
        put("", "job", r.job);
        put("", "secret", r.secret);
        put_num("", "rank", r.rank);
        put("", "cluster", r.cluster);
        put("", "node", r.node);
        put("", "address", r.address);
        put_num("", "seconds", r.seconds);
    }
    return rc;
}

static int op_observed(struct call *c)
{
    struct qcg__observation o = {.cluster = str_arg(c->a, "cluster"),
                                 .node = str_arg(c->a, "node"),
                                 .kind = str_arg(c->a, "kind"),
                                 .publicAddress = str_arg(c->a, "publicAddress"),
                                 .portPreserving = int_arg(c->a, "portPreserving"),
                                 .mapping = str_arg(c->a, "mapping"),
                                 .inbound = str_arg(c->a, "inbound")};
    struct qcg__ackResponse r = {0};
    if (!args_ok(c->a, c->op))
        return USAGE;
    int rc = soap_call_qcg__observed(c->soap, c->url, NULL, c->version, &o, &r);
    if (rc == SOAP_OK)
        printf("ok\nversion=%d\n", r.version);
    return rc;
}

static int op_grid(struct call *c)
{
    struct qcg__gridResponse r;
    memset(&r, 0, sizeof(r));
    if (!args_ok(c->a, c->op))
        return USAGE;
    int rc = soap_call_qcg__grid(c->soap, c->url, NULL, c->version, &r);
    if (rc == SOAP_OK) {
        printf("ok\nversion=%d\n", r.version);
        put_grid(&r);
    }
    return rc;
}

static int op_stats(struct call *c)
{
    struct qcg__statsResponse r;
    memset(&r, 0, sizeof(r));
    if (!args_ok(c->a, c->op))
        return USAGE;
    int rc = soap_call_qcg__stats(c->soap, c->url, NULL, c->version, &r);
    if (rc == SOAP_OK) {
        printf("ok\nversion=%d\n", r.version);
        put("", "role", r.role);
        put("", "name", r.name);
        for (int i = 0; i < r.__sizeCounter && r.counter != NULL; i++)
            put_num("counter.", r.counter[i].name != NULL ? r.counter[i].name : "?",
                    (long long)r.counter[i].value);
    }
    return rc;
}

static const struct {
    const char *name;
    int (*run)(struct call *c);
} ops[] = {
    {"registerCluster", op_register_cluster},
    {"registerNode", op_register_node},
    {"publish", op_publish},
    {"withdraw", op_withdraw},
    {"lookup", op_lookup},
    {"lookups", op_lookups},
    {"poll", op_poll},
    {"report", op_report},
    {"reports", op_reports},
    {"siteInfo", op_site_info},
    {"probe", op_probe},
    {"observed", op_observed},
    {"grid", op_grid},
    {"stats", op_stats},
};

static int usage(const char *why, const char *what)
{
    fprintf(stderr,
            "soap-call: %s%s; usage: soap-call --url URL --ca CA --cert PEM [--protocol N] "
            "OPERATION [FIELD=VALUE...]\n",
            why, what);
    return 2;
}

int main(int argc, char **argv)
{
    struct soap_client_config cc = {.connect_timeout = 5, .io_timeout = 10};
    long version = QCG_PROTOCOL_VERSION;
    int i = 1;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (strcmp(argv[i], "--url") == 0)
            cc.url = argv[i + 1];
        else if (strcmp(argv[i], "--ca") == 0)
            cc.tls.ca = argv[i + 1];
        else if (strcmp(argv[i], "--cert") == 0)
            cc.tls.certkey = argv[i + 1];
        else if (strcmp(argv[i], "--protocol") != 0 ||
                 number_parse(argv[i + 1], 0, INT_MAX, &version) < 0)
            return usage("an unknown option, or --protocol not a number: ", argv[i]);
    }
    if (cc.url == NULL || cc.tls.ca == NULL || cc.tls.certkey == NULL || i >= argc)
        return usage("--url, --ca, --cert and an operation are needed", "");
    struct call c = {.url = cc.url, .version = (int)version, .op = argv[i]};
    int (*run)(struct call *) = NULL;
    for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++)
        if (strcmp(ops[k].name, c.op) == 0)
            run = ops[k].run;
    if (run == NULL)
        return usage("unknown operation ", c.op);
    int n = argc - i - 1;
    struct args a = {calloc((size_t)n + 1, sizeof(char *)),
                     calloc((size_t)n + 1, sizeof(char *)),
                     calloc((size_t)n + 1, sizeof(bool)),
                     n,
                     NULL,
                     ""};
    if (a.key == NULL || a.value == NULL || a.used == NULL)
        wrong(&a, "out of memory"), a.n = 0;
    for (int k = 0; k < a.n; k++) {
        a.key[k] = argv[i + 1 + k];
        char *eq = strchr(a.key[k], '=');
        if (eq == NULL || eq == a.key[k]) {
            wrong(&a, "'%s' is not FIELD=VALUE", a.key[k]);
            a.n = k;
            break;
        }
        *eq = '\0';
        a.value[k] = eq + 1;
    }
    c.a = &a;

    log_init("soap-call", LOG_LEVEL_ERROR, false);
    /* TLS writes to a server that refused us would otherwise kill us. */
    signal(SIGPIPE, SIG_IGN);
    char err[256], sub[64], msg[512];
    int status = 2;
    c.soap = a.bad == NULL ? soap_client_new(&cc, err, sizeof(err)) : NULL;
    if (c.soap == NULL) {
        if (a.bad == NULL)
            fprintf(stderr, "soap-call: %s\n", err);
        else
            args_ok(&a, c.op);
    } else {
        int rc = run(&c);
        if (rc != USAGE) {
            status = 0;
            switch (soap_call_status(c.soap, rc, sub, sizeof(sub), msg, sizeof(msg))) {
            case CALL_OK:
                break;
            case CALL_FAULT:
                printf("fault %s: ", sub[0] != '\0' ? sub : "-");
                put_line(msg);
                status = 1;
                break;
            case CALL_UNREACHABLE:
                printf("unreachable: ");
                put_line(msg);
                status = 3;
                break;
            }
        }
        soap_client_reset(c.soap);
        soap_client_free(c.soap);
    }
    free(a.key), free(a.value), free(a.used);
    return status;
}
