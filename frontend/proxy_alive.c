/*
 * proxyAlive is a proxy's call to the broker: a frontend refuses it.  Apart
 * from operations.c so that the frontend's operations stay one file per job.
 */
#include "log.h"
#include "monotonic.h"
#include "ratelimit.h"
#include "soapH.h"
#include "soap_server.h"

int qcg__proxyAlive(struct soap *soap, int version, int pairs, ULONG64 bytes,
                    struct qcg__ackResponse *response)
{
    static struct ratelimit_locked rl = RATELIMIT_LOCKED_INIT;
    unsigned left_out = 0;
    (void)version, (void)pairs, (void)bytes, (void)response;
    const struct identity *id = soap_caller(soap);
    if (ratelimit_locked_ok(&rl, monotonic_ms(), 1000, 1, &left_out))
        log_warnx("proxyAlive from %s %s refused (qcg:denied): served by the broker, not a "
                  "frontend (%u such lines left out)",
                  role_name(id->role), id->name, left_out);
    return soap_qcg_fault(soap, "denied", "proxyAlive is served by the broker, not a frontend");
}
