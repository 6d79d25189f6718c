#include "stats.h"

#include <string.h>

#include "cache.h"
#include "frontend.h"
#include "frontend_config.h"
#include "soapH.h"
#include "soap_client.h"
#include "store.h"

int stats_collect(struct frontend *fe, struct counter_value *out, int max)
{
    const struct frontend_counters *c = &fe->counters;
    const struct counter_value all[] = {
        {"lookups_received", atomic_load(&c->lookups_received)},
        {"lookups_from_cache", atomic_load(&c->lookups_from_cache)},
        {"lookups_forwarded", atomic_load(&c->lookups_forwarded)},
        {"publishes", atomic_load(&c->publishes)},
        {"withdraws", atomic_load(&c->withdraws)},
        {"denied", atomic_load(&c->denied)},
        {"nodes", store_node_count(fe->store)},
        {"contacts", store_contact_count(fe->store)},
        {"cache_entries", cache_count(fe->cache)},
        {"upstream_connected", (unsigned long long)store_link(fe->store, NULL, 0)},
        {"upstream_epoch", atomic_load(&c->upstream_epoch)},
        {"upstream_registrations", atomic_load(&c->upstream_registrations)},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]) && n < max; i++)
        out[n++] = all[i];
    return n;
}

static void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; s != NULL && *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

void stats_print(FILE *out, const struct qcg__statsResponse *res, bool json)
{
    const char *role = res->role != NULL ? res->role : "";
    const char *name = res->name != NULL ? res->name : "";
    int n = res->counter != NULL ? res->__sizeCounter : 0;
    if (json) {
        fputs("{\"role\":", out);
        json_string(out, role);
        fputs(",\"name\":", out);
        json_string(out, name);
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
        int len = res->counter[i].name != NULL ? (int)strlen(res->counter[i].name) : 0;
        if (len > width && len < 64)
            width = len;
    }
    fprintf(out, "%-*s  %s\n", width, "role", role);
    fprintf(out, "%-*s  %s\n", width, "name", name);
    for (int i = 0; i < n; i++)
        fprintf(out, "%-*s  %llu\n", width,
                res->counter[i].name != NULL ? res->counter[i].name : "?",
                (unsigned long long)res->counter[i].value);
}

int stats_query(const struct frontend_config *cfg)
{
    struct soap_client_config cc = {
        .url = cfg->stats_url,
        .tls = {.ca = cfg->ca, .certkey = cfg->cert},
        .connect_timeout = 5,
        .io_timeout = 10,
    };
    char err[256];
    struct soap *soap = soap_client_new(&cc, err, sizeof(err));
    if (soap == NULL) {
        fprintf(stderr, "qcg-frontend: %s\n", err);
        return 1;
    }
    struct qcg__statsResponse res;
    memset(&res, 0, sizeof(res));
    int rc = soap_call_qcg__stats(soap, cfg->stats_url, NULL, QCG_PROTOCOL_VERSION, &res);
    char sub[32], msg[256];
    int status = 0;
    if (soap_call_status(soap, rc, sub, sizeof(sub), msg, sizeof(msg)) != CALL_OK) {
        fprintf(stderr, "qcg-frontend: stats from %s: %s%s%s\n", cfg->stats_url,
                sub[0] ? sub : "", sub[0] ? ": " : "", msg);
        status = 1;
    } else {
        stats_print(stdout, &res, cfg->json != 0);
    }
    soap_client_reset(soap);
    soap_client_free(soap);
    return status;
}
