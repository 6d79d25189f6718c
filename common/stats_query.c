/* See stats_query.h. */
#include "stats_query.h"

#include <signal.h>
#include <string.h>

#include "json.h"
#include "proto.h"
#include "soapH.h"
#include "soap_client.h"

static const char *or_empty(const char *s)
{
    return s != NULL ? s : "";
}

void stats_print(FILE *out, const struct qcg__statsResponse *res, bool json)
{
    int n = res->counter != NULL ? res->__sizeCounter : 0;
    if (json) {
        fputs("{\"role\":", out);
        json_string(out, res->role);
        fputs(",\"name\":", out);
        json_string(out, res->name);
        for (int i = 0; i < n; i++) {
            fputc(',', out);
            json_string(out, res->counter[i].name != NULL ? res->counter[i].name : "?");
            fprintf(out, ":%llu", (unsigned long long)res->counter[i].value);
        }
        fputs("}\n", out);
        return;
    }
    int width = 4;
    for (int i = 0; i < n; i++) {
        int len = (int)strlen(or_empty(res->counter[i].name));
        if (len > width && len < 64)
            width = len;
    }
    fprintf(out, "%-*s  %s\n", width, "role", or_empty(res->role));
    fprintf(out, "%-*s  %s\n", width, "name", or_empty(res->name));
    for (int i = 0; i < n; i++)
        fprintf(out, "%-*s  %llu\n", width,
                res->counter[i].name != NULL ? res->counter[i].name : "?",
                (unsigned long long)res->counter[i].value);
}

int stats_query(const char *program, const char *url, const struct tls_files *tls, bool json)
{
    struct soap_client_config cc = {
        .url = url,
        .tls = *tls,
        .connect_timeout = 5,
        .io_timeout = 10,
    };
    char err[256], sub[64], msg[256];
    /* OpenSSL writes with write(2): a server that refused us must not kill us. */
    signal(SIGPIPE, SIG_IGN);
    struct soap *soap = soap_client_new(&cc, err, sizeof(err));
    if (soap == NULL) {
        fprintf(stderr, "%s: %s\n", program, err);
        return 1;
    }
    struct qcg__statsResponse res;
    memset(&res, 0, sizeof(res));
    int rc = soap_call_qcg__stats(soap, url, NULL, QCG_PROTOCOL_VERSION, &res);
    int status = 0;
    if (soap_call_status(soap, rc, sub, sizeof(sub), msg, sizeof(msg)) != CALL_OK) {
        fprintf(stderr, "%s: stats from %s: %s%s%s\n", program, url, sub, sub[0] ? ": " : "", msg);
        status = 1;
    } else {
        stats_print(stdout, &res, json);
    }
    soap_client_reset(soap);
    soap_client_free(soap);
    return status;
}
