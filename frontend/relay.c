#include "relay.h"
#include "report_soap.h"

#include <stdio.h>
#include <string.h>

#include "address.h"
#include "log.h"
#include "soapH.h"
#include "store.h"

static int call_failed(struct soap *soap, int rc, struct relay_error *err)
{
    err->subcode[0] = '\0';
    err->msg[0] = '\0';
    err->status =
        soap_call_status(soap, rc, err->subcode, sizeof(err->subcode), err->msg, sizeof(err->msg));
    return err->status == CALL_OK ? 0 : -1;
}

static int malformed(struct relay_error *err, const char *what)
{
    err->status = CALL_UNREACHABLE;
    err->subcode[0] = '\0';
    snprintf(err->msg, sizeof(err->msg), "the broker sent a malformed %s", what);
    log_warnx("%s", err->msg);
    return -1;
}

/* Copies an optional string from the broker; -1 when it does not fit. */
static int copy_str(char *dst, size_t len, const char *src)
{
    if (src == NULL) {
        dst[0] = '\0';
        return 0;
    }
    if (strlen(src) >= len)
        return -1;
    memcpy(dst, src, strlen(src) + 1);
    return 0;
}

int relay_register_cluster(struct soap *soap, const char *url, const struct cluster_decl *cluster,
                           uint64_t *epoch, struct relay_error *err)
{
    struct qcg__cluster c;
    struct qcg__registerResponse resp;
    memset(&c, 0, sizeof(c));
    memset(&resp, 0, sizeof(resp));
    c.name = (char *)cluster->name;
    c.kind = (char *)cluster->kind;
    c.__sizePublicAddress = cluster->naddrs;
    c.publicAddress = (char **)cluster->addrs;
    c.portLow = cluster->port_low;
    c.portHigh = cluster->port_high;
    c.__sizeNodeRange = cluster->nranges;
    c.nodeRange = (char **)cluster->ranges;
    c.__sizeOpenRange = cluster->nopen;
    c.openRange = (char **)cluster->open;
    int rc = soap_call_qcg__registerCluster(soap, url, NULL, QCG_PROTOCOL_VERSION, &c, &resp);
    if (call_failed(soap, rc, err) < 0)
        return -1;
    *epoch = resp.epoch;
    return 0;
}

int relay_register_node(struct soap *soap, const char *url, const struct node_info *node,
                        struct relay_error *err)
{
    struct qcg__node n;
    struct qcg__registerResponse resp;
    memset(&n, 0, sizeof(n));
    memset(&resp, 0, sizeof(resp));
    n.name = (char *)node->name;
    n.address = (char *)node->address;
    n.portLow = node->port_low;
    n.portHigh = node->port_high;
    n.canIntercept = node->can_intercept;
    n.incarnation = node->incarnation[0] != '\0' ? (char *)node->incarnation : NULL;
    char *other[QCG_NODE_ADDRS];
    for (int i = 0; i < node->nother; i++)
        other[i] = (char *)node->other[i];
    n.__sizeOtherAddress = node->nother;
    n.otherAddress = other;
    int rc = soap_call_qcg__registerNode(soap, url, NULL, QCG_PROTOCOL_VERSION, &n, &resp);
    return call_failed(soap, rc, err);
}

int relay_publish(struct soap *soap, const char *url, const struct contact_info *contact,
                  const char *cluster, struct relay_error *err)
{
    struct qcg__contact c;
    struct qcg__ackResponse resp;
    memset(&c, 0, sizeof(c));
    memset(&resp, 0, sizeof(resp));
    c.job = (char *)contact->job;
    c.verifier = (char *)contact->verifier;
    c.rank = contact->rank;
    c.cluster = (char *)cluster;
    c.node = (char *)contact->node;
    c.address = (char *)contact->address;
    c.port = contact->port;
    char *other[QCG_NODE_ADDRS];
    for (int i = 0; i < contact->nother; i++)
        other[i] = (char *)contact->other[i];
    c.__sizeOtherAddress = contact->nother;
    c.otherAddress = other;
    int rc = soap_call_qcg__publish(soap, url, NULL, QCG_PROTOCOL_VERSION, &c, &resp);
    return call_failed(soap, rc, err);
}

int relay_withdraw(struct soap *soap, const char *url, const char *job, const char *verifier,
                   int rank, const char *node, struct relay_error *err)
{
    struct qcg__ackResponse resp;
    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__withdraw(soap, url, NULL, QCG_PROTOCOL_VERSION, (char *)job,
                                     (char *)verifier, rank, (char *)node, &resp);
    return call_failed(soap, rc, err);
}

/* A plan from the broker into ours: -1 when it does not fit our limits. */
static int plan_copy(const struct qcg__plan *p, struct plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    if (p->status == NULL || copy_str(plan->status, sizeof(plan->status), p->status) < 0 ||
        copy_str(plan->technique, sizeof(plan->technique), p->technique) < 0 ||
        copy_str(plan->cluster, sizeof(plan->cluster), p->cluster) < 0 ||
        copy_str(plan->node, sizeof(plan->node), p->node) < 0 ||
        copy_str(plan->address, sizeof(plan->address), p->address) < 0 ||
        copy_str(plan->token, sizeof(plan->token), p->token) < 0 ||
        copy_str(plan->reason, sizeof(plan->reason), p->reason) < 0 ||
        copy_str(plan->fallback, sizeof(plan->fallback), p->fallbackAddress) < 0 || p->port < 0 ||
        p->port > 65535 || (plan->fallback[0] != '\0' && address_family(plan->fallback) != AF_INET))
        return -1;
    plan->port = p->port;
    plan->cacheable = p->cacheable != 0;
    return 0;
}

int relay_lookup(struct soap *soap, const char *url, const char *job, const char *verifier,
                 int from_rank, int to_rank, const char *tried, const char *only, struct plan *plan,
                 struct relay_error *err)
{
    struct qcg__lookupResponse resp;
    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__lookup(soap, url, NULL, QCG_PROTOCOL_VERSION, (char *)job,
                                   (char *)verifier, from_rank, to_rank,
                                   tried != NULL && tried[0] != '\0' ? (char *)tried : NULL,
                                   only != NULL && only[0] != '\0' ? (char *)only : NULL, &resp);
    if (call_failed(soap, rc, err) < 0)
        return -1;
    if (plan_copy(&resp.plan, plan) < 0)
        return malformed(err, "plan");
    return 0;
}

int relay_lookups(struct soap *soap, const char *url, struct lookup_ask *asks, int n,
                  struct relay_error *err)
{
    struct qcg__lookupAsks list = {.__sizeAsk = n};
    list.ask = soap_malloc(soap, (size_t)n * sizeof(*list.ask));
    if (list.ask == NULL)
        return malformed(err, "lookups: out of memory");
    for (int i = 0; i < n; i++)
        list.ask[i] = (struct qcg__lookupAsk){.job = (char *)asks[i].job,
                                              .verifier = (char *)asks[i].verifier,
                                              .fromRank = asks[i].from_rank,
                                              .toRank = asks[i].to_rank};
    struct qcg__lookupsResponse resp;
    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__lookups(soap, url, NULL, QCG_PROTOCOL_VERSION, &list, &resp);
    if (call_failed(soap, rc, err) < 0)
        return -1;
    if (resp.__sizeAnswer != n || resp.answer == NULL)
        return malformed(err, "lookups answer (not one answer per lookup)");
    for (int i = 0; i < n; i++) {
        const struct qcg__lookupAnswer *a = &resp.answer[i];
        struct lookup_ask *out = &asks[i];
        out->fault[0] = out->fault_text[0] = '\0';
        if (a->plan != NULL && plan_copy(a->plan, &out->plan) == 0)
            continue;
        if (a->plan != NULL || a->fault == NULL ||
            copy_str(out->fault, sizeof(out->fault), a->fault) < 0)
            snprintf(out->fault, sizeof(out->fault), "unavailable");
        snprintf(out->fault_text, sizeof(out->fault_text), "%s",
                 a->plan != NULL        ? "the broker sent a malformed plan"
                 : a->faultText != NULL ? a->faultText
                                        : "refused");
    }
    return 0;
}

int relay_traverse(struct soap *soap, const char *url, const char *token, const char *packet,
                   struct relay_error *err)
{
    struct qcg__ackResponse resp;
    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__traverse(soap, url, NULL, QCG_PROTOCOL_VERSION, (char *)token,
                                     (char *)packet, &resp);
    return call_failed(soap, rc, err);
}

int relay_report(struct soap *soap, const char *url, const struct report_item *r,
                 struct relay_error *err)
{
    struct qcg__ackResponse resp;
    memset(&resp, 0, sizeof(resp));
    int rc =
        soap_call_qcg__report(soap, url, NULL, QCG_PROTOCOL_VERSION, (char *)r->job,
                              (char *)r->verifier, r->from_rank, r->to_rank, (char *)r->technique,
                              r->ok, r->setup_ms, r->why[0] != '\0' ? (char *)r->why : NULL, &resp);
    return call_failed(soap, rc, err);
}

int relay_reports(struct soap *soap, const char *url, const struct report_item *items, int n,
                  int *accepted, struct relay_error *err)
{
    struct qcg__reportsResponse resp;
    struct qcg__attempts list;
    if (report_attempts(soap, items, n, &list) < 0)
        return malformed(err, "reports: out of memory");
    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__reports(soap, url, NULL, QCG_PROTOCOL_VERSION, &list, &resp);
    if (call_failed(soap, rc, err) < 0)
        return -1;
    *accepted = resp.accepted;
    return 0;
}

static char *dup_str(struct soap *dst, const char *s)
{
    return s != NULL ? soap_strdup(dst, s) : NULL;
}

/* Deep copies of what the broker sent: every pointer into `dst`, array
   sizes trusted only with their array. */
static void cluster_copy(struct soap *dst, const struct qcg__cluster *in, struct qcg__cluster *out)
{
    memset(out, 0, sizeof(*out));
    out->name = dup_str(dst, in->name);
    out->kind = dup_str(dst, in->kind);
    out->portLow = in->portLow;
    out->portHigh = in->portHigh;
    int n = in->publicAddress != NULL && in->__sizePublicAddress > 0 ? in->__sizePublicAddress : 0;
    out->publicAddress = n > 0 ? soap_malloc(dst, (size_t)n * sizeof(char *)) : NULL;
    for (int i = 0; out->publicAddress != NULL && i < n; i++)
        out->publicAddress[i] = dup_str(dst, in->publicAddress[i]);
    out->__sizePublicAddress = out->publicAddress != NULL ? n : 0;
}

int relay_site_info(struct soap *soap, const char *url, struct soap *dst,
                    struct qcg__siteInfoResponse *out, struct relay_error *err)
{
    struct qcg__siteInfoResponse r;
    memset(&r, 0, sizeof(r));
    int rc = soap_call_qcg__siteInfo(soap, url, NULL, QCG_PROTOCOL_VERSION, &r);
    if (call_failed(soap, rc, err) < 0)
        return -1;
    memset(out, 0, sizeof(*out));
    out->version = QCG_PROTOCOL_VERSION;
    cluster_copy(dst, &r.cluster, &out->cluster);
    out->frontendSeenFrom = dup_str(dst, r.frontendSeenFrom);
    if (r.reflector != NULL && (out->reflector = soap_malloc(dst, sizeof(*out->reflector)))) {
        out->reflector->address = dup_str(dst, r.reflector->address);
        out->reflector->port = r.reflector->port;
    }
    if (r.reflector6 != NULL && (out->reflector6 = soap_malloc(dst, sizeof(*out->reflector6)))) {
        out->reflector6->address = dup_str(dst, r.reflector6->address);
        out->reflector6->port = r.reflector6->port;
    }
    int np = r.proxy != NULL && r.__sizeProxy > 0 ? r.__sizeProxy : 0;
    out->proxy = np > 0 ? soap_malloc(dst, (size_t)np * sizeof(*out->proxy)) : NULL;
    for (int i = 0; out->proxy != NULL && i < np; i++) {
        out->proxy[i].address = dup_str(dst, r.proxy[i].address);
        out->proxy[i].port = r.proxy[i].port;
        out->__sizeProxy = i + 1;
    }
    int nc = r.peer != NULL && r.__sizePeer > 0 ? r.__sizePeer : 0;
    out->peer = nc > 0 ? soap_malloc(dst, (size_t)nc * sizeof(*out->peer)) : NULL;
    for (int i = 0; out->peer != NULL && i < nc; i++) {
        cluster_copy(dst, &r.peer[i], &out->peer[i]);
        out->__sizePeer = i + 1;
    }
    if (r.cluster.name == NULL || (np > 0 && out->proxy == NULL) || (nc > 0 && out->peer == NULL))
        return malformed(err, "siteInfo answer (or out of memory)");
    return 0;
}

int relay_probe(struct soap *soap, const char *url, const char *cluster, int seconds,
                const char *node, struct soap *dst, struct qcg__probeResponse *out,
                struct relay_error *err)
{
    struct qcg__probeResponse r;
    memset(&r, 0, sizeof(r));
    int rc = soap_call_qcg__probe(soap, url, NULL, QCG_PROTOCOL_VERSION, (char *)cluster, seconds,
                                  (char *)node, &r);
    if (call_failed(soap, rc, err) < 0)
        return -1;
    if (r.job == NULL || r.secret == NULL || r.node == NULL || r.address == NULL)
        return malformed(err, "probe answer");
    out->version = QCG_PROTOCOL_VERSION;
    out->job = dup_str(dst, r.job);
    out->secret = dup_str(dst, r.secret);
    out->rank = r.rank;
    out->cluster = dup_str(dst, r.cluster);
    out->node = dup_str(dst, r.node);
    out->address = dup_str(dst, r.address);
    out->seconds = r.seconds;
    return 0;
}

int relay_observed(struct soap *soap, const char *url, const struct qcg__observation *o,
                   struct relay_error *err)
{
    struct qcg__ackResponse resp;
    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__observed(soap, url, NULL, QCG_PROTOCOL_VERSION,
                                     (struct qcg__observation *)o, &resp);
    return call_failed(soap, rc, err);
}
