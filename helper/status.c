/* The client side of LOCAL_STATUS, for operators and tests. */
#include <stdint.h>
#include <stdio.h>

#include "json.h"
#include "lmsg.h"
#include "status.h"

#define STATUS_TIMEOUT_MS 5000

static void print_status(const struct local_status *s, bool json, FILE *out)
{
    if (json) {
        fprintf(out, "{\"upstream_connected\":%s,\"frontend\":",
                s->upstream_connected ? "true" : "false");
        json_string(out, s->frontend);
        fprintf(out, ",\"epoch\":%llu,\"cluster\":", (unsigned long long)s->upstream_epoch);
        json_string(out, s->cluster);
        fprintf(out, ",\"node\":");
        json_string(out, s->node);
        fprintf(out, ",\"addresses\":[");
        for (int i = 0; i < QCG_NODE_ADDRS && s->address[i][0]; i++) {
            fprintf(out, "%s", i ? "," : "");
            json_string(out, s->address[i]);
        }
        fprintf(out, "]");
        fprintf(out, ",\"clients\":%u,\"contacts\":%u,\"lookups\":%llu,\"refused\":%u}\n",
                s->clients, s->contacts, (unsigned long long)s->lookups, s->refused);
        return;
    }
    fprintf(out, "%-20s %s\n", "upstream connected", s->upstream_connected ? "yes" : "no");
    fprintf(out, "%-20s %s\n", "frontend", s->frontend);
    fprintf(out, "%-20s %llu\n", "epoch", (unsigned long long)s->upstream_epoch);
    fprintf(out, "%-20s %s/%s\n", "node", s->cluster, s->node);
    fprintf(out, "%-20s", "addresses");
    for (int i = 0; i < QCG_NODE_ADDRS && s->address[i][0]; i++)
        fprintf(out, "%s %s", i ? "," : "", s->address[i]);
    fprintf(out, "\n");
    fprintf(out, "%-20s %u\n", "clients", s->clients);
    fprintf(out, "%-20s %u\n", "contacts", s->contacts);
    fprintf(out, "%-20s %llu\n", "lookups", (unsigned long long)s->lookups);
    fprintf(out, "%-20s %u\n", "refused", s->refused);
}

int helper_status(const char *socket_path, bool json, FILE *out, FILE *err)
{
    struct lmsg_reader r;
    char why[512];
    int rc = lmsg_ask(socket_path, LOCAL_STATUS, NULL, STATUS_TIMEOUT_MS, &r, why, sizeof(why));

    bool ok = rc == 0 && r.hdr.type == LOCAL_STATUS_OK;

    if (ok)
        print_status(&r.payload.status, json, out);
    else if (rc == 0 && r.hdr.type == LOCAL_ERROR)
        snprintf(why, sizeof(why), "the helper at %s refused: %s (error %d)", socket_path,
                 r.payload.error.message, r.payload.error.code);
    else if (rc == 0)
        snprintf(why, sizeof(why), "the helper at %s sent a malformed reply", socket_path);
    lmsg_reader_reset(&r);
    if (!ok)
        fprintf(err, "qcg-helper: %s\n", why);
    return ok ? 0 : 1;
}
