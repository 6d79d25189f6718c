/*
 * The SOAP operation of qcg-proxy: its control endpoint answers stats to
 * any grid certificate.  The service's other operations are the broker's
 * and the frontends' (common/served.h): refused by common/not_served.c, and
 * left out of the proxy's ?wsdl.
 */
#include <stdio.h>

#include "log.h"
#include "metrics.h"
#include "relay.h"
#include "service.h"
#include "soapH.h"
#include "soap_server.h"

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
    struct soap_stage_counts stage;
    soap_server_stage_counts(soap, &stage);
    int n = (int)proxy_counters(svc->relay, &stage, counters, PROXY_COUNTERS_MAX);
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
