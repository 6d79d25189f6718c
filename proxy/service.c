/*
 * The SOAP operations of qcg-proxy.  Its control endpoint answers stats to any
 * grid certificate; every other operation of the service is refused with
 * qcg:denied, since a proxy holds no registry.  The generated skeleton
 * (soapServer.c) calls these.
 */
#include <stdio.h>

#include "log.h"
#include "metrics.h"
#include "relay.h"
#include "service.h"
#include "soapH.h"
#include "soap_server.h"

static int not_served(struct soap *soap, const char *op)
{
    const struct identity *id = soap_caller(soap);
    log_warnx("%s from %s %s refused (qcg:denied): not served by a proxy", op, role_name(id->role),
              id->name);
    return soap_qcg_fault(soap, "denied", "%s is not served by a proxy", op);
}

int qcg__registerCluster(struct soap *soap, int version, struct qcg__cluster *cluster,
                         struct qcg__registerResponse *response)
{
    (void)version, (void)cluster, (void)response;
    return not_served(soap, "registerCluster");
}

int qcg__registerNode(struct soap *soap, int version, struct qcg__node *node,
                      struct qcg__registerResponse *response)
{
    (void)version, (void)node, (void)response;
    return not_served(soap, "registerNode");
}

int qcg__publish(struct soap *soap, int version, struct qcg__contact *contact,
                 struct qcg__ackResponse *response)
{
    (void)version, (void)contact, (void)response;
    return not_served(soap, "publish");
}

int qcg__withdraw(struct soap *soap, int version, char *job, char *secret, int rank, char *node,
                  struct qcg__ackResponse *response)
{
    (void)version, (void)job, (void)secret, (void)rank, (void)node, (void)response;
    return not_served(soap, "withdraw");
}

int qcg__lookup(struct soap *soap, int version, char *job, char *secret, int fromRank, int toRank,
                char *tried, char *only, struct qcg__lookupResponse *response)
{
    (void)version, (void)job, (void)secret, (void)fromRank, (void)toRank, (void)tried, (void)only;
    (void)response;
    return not_served(soap, "lookup");
}

int qcg__lookups(struct soap *soap, int version, struct qcg__lookupAsks *asks,
                 struct qcg__lookupsResponse *response)
{
    (void)version, (void)asks, (void)response;
    return not_served(soap, "lookups");
}

int qcg__traverse(struct soap *soap, int version, char *token, char *packet,
                  struct qcg__ackResponse *response)
{
    (void)version, (void)token, (void)packet, (void)response;
    return not_served(soap, "traverse");
}

int qcg__report(struct soap *soap, int version, char *job, char *secret, int fromRank, int toRank,
                char *technique, int ok, int setupMs, char *why, struct qcg__ackResponse *response)
{
    (void)version, (void)job, (void)secret, (void)fromRank, (void)toRank, (void)technique;
    (void)ok, (void)setupMs, (void)why, (void)response;
    return not_served(soap, "report");
}

int qcg__reports(struct soap *soap, int version, struct qcg__attempts *attempts,
                 struct qcg__reportsResponse *response)
{
    (void)version, (void)attempts, (void)response;
    return not_served(soap, "reports");
}

int qcg__siteInfo(struct soap *soap, int version, struct qcg__siteInfoResponse *response)
{
    (void)version, (void)response;
    return not_served(soap, "siteInfo");
}

int qcg__probe(struct soap *soap, int version, char *cluster, int seconds, char *node,
               struct qcg__probeResponse *response)
{
    (void)version, (void)cluster, (void)seconds, (void)node, (void)response;
    return not_served(soap, "probe");
}

int qcg__observed(struct soap *soap, int version, struct qcg__observation *observation,
                  struct qcg__ackResponse *response)
{
    (void)version, (void)observation, (void)response;
    return not_served(soap, "observed");
}

int qcg__grid(struct soap *soap, int version, struct qcg__gridResponse *response)
{
    (void)version, (void)response;
    return not_served(soap, "grid");
}

int qcg__poll(struct soap *soap, int version, ULONG64 epoch, ULONG64 ackSeq, int waitSeconds,
              struct qcg__pollResponse *response)
{
    (void)version, (void)epoch, (void)ackSeq, (void)waitSeconds, (void)response;
    return not_served(soap, "poll");
}

int qcg__proxyAlive(struct soap *soap, int version, int pairs, ULONG64 bytes,
                    struct qcg__ackResponse *response)
{
    (void)version, (void)pairs, (void)bytes, (void)response;
    return not_served(soap, "proxyAlive");
}

int qcg__stats(struct soap *soap, int version, struct qcg__statsResponse *response)
{
    struct proxy_service *svc = soap_server_state(soap);
    const struct identity *id = soap_caller(soap);

    if (soap_check_version(soap, version) != 0) {
        log_warnx("stats from %s %s refused (qcg:version): version %d, ours is %d",
                  role_name(id->role), id->name, version, QCG_PROTOCOL_VERSION);
        return SOAP_FAULT;
    }
    if (id->role == QCG_ROLE_NONE) {
        log_warnx("stats refused (qcg:denied): the caller's certificate names no grid identity");
        return soap_qcg_fault(soap, "denied", "the caller's certificate names no grid identity");
    }
    struct metrics_counter counters[PROXY_COUNTERS_MAX];
    int n = (int)proxy_counters(svc->relay, counters, PROXY_COUNTERS_MAX);
    response->version = QCG_PROTOCOL_VERSION;
    response->role = (char *)role_name(QCG_ROLE_PROXY);
    response->name = soap_strdup(soap, svc->name);
    response->counter = soap_malloc(soap, (size_t)n * sizeof(*response->counter));
    if (response->counter == NULL)
        return soap_qcg_fault(soap, "unavailable", "out of memory");
    for (int i = 0; i < n; i++) {
        response->counter[i].name = (char *)counters[i].name;
        response->counter[i].value = counters[i].value;
    }
    response->__sizeCounter = n;
    return SOAP_OK;
}
