/* Counters; see stats.h. */
#include "stats.h"

#include <string.h>

#include "broker.h"
#include "soapH.h"

int stats_collect(struct broker *b, struct stat_counter *out, int max)
{
    struct registry_counts rc;
    registry_counts(b->reg, &rc);
    const struct stat_counter all[] = {
        {"clusters", rc.clusters},
        {"nodes", rc.nodes},
        {"jobs", rc.jobs},
        {"contacts", rc.contacts},
        {"lookups", atomic_load(&b->stats.lookups)},
        {"publishes", atomic_load(&b->stats.publishes)},
        {"withdraws", atomic_load(&b->stats.withdraws)},
        {"polls", atomic_load(&b->stats.polls)},
        {"faults", atomic_load(&b->stats.faults)},
        {"connections", atomic_load(&b->stats.connections)},
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
    if (json) {
        fputs("{\"role\":", out);
        json_string(out, role);
        fputs(",\"name\":", out);
        json_string(out, name);
        for (int i = 0; i < res->__sizeCounter; i++) {
            fputc(',', out);
            json_string(out, res->counter[i].name);
            fprintf(out, ":%llu", (unsigned long long)res->counter[i].value);
        }
        fputs("}\n", out);
        return;
    }
    int width = 4;
    for (int i = 0; i < res->__sizeCounter; i++) {
        int len = res->counter[i].name != NULL ? (int)strlen(res->counter[i].name) : 0;
        if (len > width && len < 64)
            width = len;
    }
    fprintf(out, "%-*s  %s\n", width, "role", role);
    fprintf(out, "%-*s  %s\n", width, "name", name);
    for (int i = 0; i < res->__sizeCounter; i++)
        fprintf(out, "%-*s  %llu\n", width,
                res->counter[i].name != NULL ? res->counter[i].name : "?",
                (unsigned long long)res->counter[i].value);
}
