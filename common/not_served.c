/*
 * The operations a daemon does not perform (served.h), refused with
 * qcg:denied and a rate-limited log line.  Weak definitions, linked into
 * the frontend and the proxy as objects (not from an archive): the
 * generated skeleton (soapServer.c) calls every operation, and a daemon's
 * own definition of one it serves takes the place of the one here.
 */
#include <stdint.h>

#include "log.h"
#include "monotonic.h"
#include "ratelimit.h"
#include "served.h"
#include "soapH.h"
#include "soap_server.h"

static int not_served(struct soap *soap, const char *op)
{
    static struct ratelimit_locked rl = RATELIMIT_LOCKED_INIT;
    unsigned left_out = 0;
    char why[160];
    const struct identity *id = soap_caller(soap);
    served_refusal(soap_server_role(soap), op, why, sizeof(why));
    if (ratelimit_locked_ok(&rl, monotonic_ms(), 1000, 1, &left_out))
        log_warnx("%s from %s %s refused (qcg:denied): %s (%u such lines left out)", op,
                  role_name(id->role), id->name, why, left_out);
    return soap_qcg_fault(soap, "denied", "%s", why);
}

/* The skeleton's signatures, whose arguments are not looked at here. */
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define WEAK __attribute__((weak))

WEAK int qcg__registerCluster(struct soap *soap, int version, struct qcg__cluster *cluster,
                              struct qcg__registerResponse *response)
{
    return not_served(soap, "registerCluster");
}

WEAK int qcg__registerNode(struct soap *soap, int version, struct qcg__node *node,
                           struct qcg__registerResponse *response)
{
    return not_served(soap, "registerNode");
}

WEAK int qcg__publish(struct soap *soap, int version, struct qcg__contact *contact,
                      struct qcg__ackResponse *response)
{
    return not_served(soap, "publish");
}

WEAK int qcg__withdraw(struct soap *soap, int version, char *job, char *secret, int rank,
                       char *node, struct qcg__ackResponse *response)
{
    return not_served(soap, "withdraw");
}

WEAK int qcg__lookup(struct soap *soap, int version, char *job, char *secret, int fromRank,
                     int toRank, char *tried, char *only, struct qcg__lookupResponse *response)
{
    return not_served(soap, "lookup");
}

WEAK int qcg__lookups(struct soap *soap, int version, struct qcg__lookupAsks *asks,
                      struct qcg__lookupsResponse *response)
{
    return not_served(soap, "lookups");
}

WEAK int qcg__traverse(struct soap *soap, int version, char *token, char *packet,
                       struct qcg__ackResponse *response)
{
    return not_served(soap, "traverse");
}

WEAK int qcg__report(struct soap *soap, int version, char *job, char *secret, int fromRank,
                     int toRank, char *technique, int ok, int setupMs, char *why,
                     struct qcg__ackResponse *response)
{
    return not_served(soap, "report");
}

WEAK int qcg__reports(struct soap *soap, int version, struct qcg__attempts *attempts,
                      struct qcg__reportsResponse *response)
{
    return not_served(soap, "reports");
}

WEAK int qcg__siteInfo(struct soap *soap, int version, struct qcg__siteInfoResponse *response)
{
    return not_served(soap, "siteInfo");
}

WEAK int qcg__probe(struct soap *soap, int version, char *cluster, int seconds, char *node,
                    struct qcg__probeResponse *response)
{
    return not_served(soap, "probe");
}

WEAK int qcg__observed(struct soap *soap, int version, struct qcg__observation *observation,
                       struct qcg__ackResponse *response)
{
    return not_served(soap, "observed");
}

WEAK int qcg__grid(struct soap *soap, int version, struct qcg__gridResponse *response)
{
    return not_served(soap, "grid");
}

WEAK int qcg__poll(struct soap *soap, int version, ULONG64 epoch, ULONG64 ackSeq, int waitSeconds,
                   struct qcg__pollResponse *response)
{
    return not_served(soap, "poll");
}

WEAK int qcg__proxyAlive(struct soap *soap, int version, int pairs, ULONG64 bytes,
                         struct qcg__ackResponse *response)
{
    return not_served(soap, "proxyAlive");
}

WEAK int qcg__stats(struct soap *soap, int version, struct qcg__statsResponse *response)
{
    return not_served(soap, "stats");
}
