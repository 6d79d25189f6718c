/* `qcg-broker --stats`; see stats_client.h. */
#include "stats_client.h"

#include <signal.h>
#include <stdio.h>

#include "proto.h"
#include "soapH.h"
#include "soap_client.h"
#include "stats.h"

int stats_client_run(const struct broker_config *cfg)
{
    char url[256], err[256], sub[64], msg[256];
    if (cfg->url != NULL)
        snprintf(url, sizeof(url), "%s", cfg->url);
    else
        snprintf(url, sizeof(url), "https://127.0.0.1:%d/", cfg->port);
    struct soap_client_config cc = {
        .url = url,
        .tls = {.ca = cfg->ca, .certkey = cfg->cert},
        .connect_timeout = 5,
        .io_timeout = 10,
    };
    /* OpenSSL writes with write(2): a server that refused us must not kill us. */
    signal(SIGPIPE, SIG_IGN);
    struct soap *soap = soap_client_new(&cc, err, sizeof(err));
    if (soap == NULL) {
        fprintf(stderr, "qcg-broker: %s\n", err);
        return 1;
    }
    struct qcg__statsResponse res;
    int rc = soap_call_qcg__stats(soap, url, NULL, QCG_PROTOCOL_VERSION, &res);
    int status = 0;
    if (soap_call_status(soap, rc, sub, sizeof(sub), msg, sizeof(msg)) != CALL_OK) {
        fprintf(stderr, "qcg-broker: stats from %s: %s%s%s\n", url, sub, sub[0] ? ": " : "", msg);
        status = 1;
    } else {
        stats_print(stdout, &res, cfg->json != 0);
    }
    soap_client_reset(soap);
    soap_client_free(soap);
    return status;
}
