/* See grid_query.h. */
#include "grid_query.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "address.h"
#include "grid_html.h"
#include "json.h"
#include "proto.h"
#include "soapH.h"
#include "soap_client.h"
#include "technique.h"

#define CELL_MAX 160

static const char *or_dash(const char *s)
{
    return s != NULL && s[0] != '\0' ? s : "-";
}

static uint64_t age(uint64_t now, uint64_t when)
{
    return now > when ? now - when : 0;
}

/* Observed differs from declared: another kind, or (behind a NAT) a public
   address the frontend does not declare. */
bool grid_cluster_mismatch(const struct qcg__gridCluster *c)
{
    const struct qcg__observation *o = c->observed;
    const struct qcg__cluster *d = &c->declared;
    if (o == NULL || o->kind == NULL || d->kind == NULL)
        return false;
    if (strcmp(o->kind, d->kind) != 0)
        return true;
    if (o->publicAddress == NULL || o->publicAddress[0] == '\0' || d->__sizePublicAddress == 0 ||
        (strcmp(d->kind, "nat") != 0 && strcmp(d->kind, "symnat") != 0))
        return false;
    for (int i = 0; i < d->__sizePublicAddress; i++) {
        if (d->publicAddress[i] != NULL && strcmp(d->publicAddress[i], o->publicAddress) == 0)
            return false;
    }
    return true;
}

static void addresses(const struct qcg__cluster *d, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < d->__sizePublicAddress && used + 1 < len; i++) {
        int n = snprintf(buf + used, len - used, "%s%s", i > 0 ? "," : "",
                         d->publicAddress[i] != NULL ? d->publicAddress[i] : "?");
        used += n > 0 ? (size_t)n : 0;
    }
    if (buf[0] == '\0')
        snprintf(buf, len, "-");
}

/* Where a technique stands in the preference order; the IPv6 punch, where
   hole punching does. */
static int rank(const char *technique)
{
    int a = attempt_parse(technique);
    return a == TECH_PUNCH6 ? TECH_HOLEPUNCH : a;
}

bool grid_newer_ok(const struct qcg__outcome *o, const struct qcg__outcome *best)
{
    if (!o->lastOk)
        return false;
    if (best == NULL || o->age != best->age)
        return best == NULL || o->age < best->age;
    return rank(o->technique) < rank(best->technique);
}

/* What worked last from `from` to `to`, and what failed: "holepunch 74ms, x proxy". */
static void cell(const struct qcg__gridResponse *g, const char *from, const char *to, char *buf,
                 size_t len)
{
    const struct qcg__outcome *best = NULL;
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < g->__sizeOutcome; i++) {
        const struct qcg__outcome *o = &g->outcome[i];
        if (o->from == NULL || o->to == NULL || strcmp(o->from, from) != 0 ||
            strcmp(o->to, to) != 0 || !o->lastOk)
            continue;
        if (grid_newer_ok(o, best))
            best = o;
    }
    if (best != NULL) {
        int n = snprintf(buf, len, "%s %dms", best->technique, best->lastSetupMs);
        used = n > 0 ? (size_t)n : 0;
    }
    for (int i = 0; i < g->__sizeOutcome && used + 1 < len; i++) {
        const struct qcg__outcome *o = &g->outcome[i];
        if (o->from == NULL || o->to == NULL || strcmp(o->from, from) != 0 ||
            strcmp(o->to, to) != 0 || o->lastOk)
            continue;
        int n = snprintf(buf + used, len - used, "%sx %s", used > 0 ? ", " : "", o->technique);
        used += n > 0 ? (size_t)n : 0;
    }
    if (buf[0] == '\0')
        snprintf(buf, len, "-");
}

/* A proxy this broker never heard from: unknown, or dead since another one
   beats (dead otherwise means silent for proxy-dead-after, at least 1 s). */
static bool never_heard(const struct qcg__gridProxy *p)
{
    return p->state != NULL && (strcmp(p->state, "unknown") == 0 ||
                                (strcmp(p->state, "dead") == 0 && p->lastSeen == 0));
}

/* A proxy's data endpoints, "203.0.113.20:7703, [2001:db8::20]:7703": the
   first configured one, then the other family's (a newer broker's). */
#define PROXY_ENDPOINTS_MAX 2
static int proxy_endpoints(const struct qcg__gridProxy *p, char out[][HOSTPORT_MAX])
{
    int n = 0;
    hostport_format(or_dash(p->address), p->port, out[n++], HOSTPORT_MAX);
    for (int i = 0; p->other != NULL && i < p->__sizeOther && n < PROXY_ENDPOINTS_MAX; i++)
        hostport_format(or_dash(p->other[i].address), p->other[i].port, out[n++], HOSTPORT_MAX);
    return n;
}

static void proxy_addresses(const struct qcg__gridProxy *p, char *buf, size_t len)
{
    char ep[PROXY_ENDPOINTS_MAX][HOSTPORT_MAX];
    int n = proxy_endpoints(p, ep);
    snprintf(buf, len, "%s%s%s", ep[0], n > 1 ? ", " : "", n > 1 ? ep[1] : "");
}

/* One line per configured proxy: its addresses, state, last beat, load. */
static void print_proxies(FILE *out, const struct qcg__gridResponse *g)
{
    int np = g->proxy != NULL ? g->__sizeProxy : 0;
    int width = 22;
    char addr[2 * HOSTPORT_MAX + 2];
    if (np == 0)
        return;
    for (int i = 0; i < np; i++) {
        proxy_addresses(&g->proxy[i], addr, sizeof(addr));
        width = (int)strlen(addr) > width ? (int)strlen(addr) : width;
    }
    fprintf(out, "\n%-16s %-*s %-8s %-10s %7s %14s %8s\n", "proxy", width, "address", "state",
            "last seen", "pairs", "bytes", "planned");
    for (int i = 0; i < np; i++) {
        const struct qcg__gridProxy *p = &g->proxy[i];
        char seen[32];
        proxy_addresses(p, addr, sizeof(addr));
        if (never_heard(p))
            snprintf(seen, sizeof(seen), "never");
        else
            snprintf(seen, sizeof(seen), "%llu s ago", (unsigned long long)p->lastSeen);
        fprintf(out, "%-16s %-*s %-8s %-10s %7d %14llu %8llu\n", or_dash(p->name), width, addr,
                or_dash(p->state), seen, p->pairs, (unsigned long long)p->bytes,
                (unsigned long long)p->planned);
    }
}

/* "addresses: nata nodes 198.18.1.0/24, 2001:db8:3::/48; open 2001:db8:3:5::/64":
   every family a site declares, when it declares ranges at all. */
static void print_ranges(FILE *out, const struct qcg__cluster *d)
{
    int nn = d->nodeRange != NULL ? d->__sizeNodeRange : 0;
    int no = d->openRange != NULL ? d->__sizeOpenRange : 0;
    if (nn == 0 && no == 0)
        return;
    fprintf(out, "addresses: %s nodes", or_dash(d->name));
    for (int i = 0; i < nn; i++)
        fprintf(out, "%s %s", i ? "," : "", or_dash(d->nodeRange[i]));
    if (nn == 0)
        fprintf(out, " at its frontend's address");
    for (int i = 0; i < no; i++)
        fprintf(out, "%s %s", i ? "," : "; open to inbound", or_dash(d->openRange[i]));
    fputc('\n', out);
}

static void print_human(FILE *out, const struct qcg__gridResponse *g, uint64_t now)
{
    int nc = g->cluster != NULL ? g->__sizeCluster : 0;
    fprintf(out, "%-16s %-11s %-24s %5s  %s\n", "cluster", "declared", "public addresses", "nodes",
            "observed");
    for (int i = 0; i < nc; i++) {
        const struct qcg__gridCluster *c = &g->cluster[i];
        const struct qcg__observation *o = c->observed;
        char addrs[128], seen[256];
        addresses(&c->declared, addrs, sizeof(addrs));
        if (o == NULL)
            snprintf(seen, sizeof(seen), "not probed");
        else
            snprintf(seen, sizeof(seen), "%s from %s, mapping %s, inbound %s, by %s %llu s ago",
                     or_dash(o->kind), or_dash(o->publicAddress), or_dash(o->mapping),
                     or_dash(o->inbound), or_dash(o->node), (unsigned long long)age(now, o->when));
        fprintf(out, "%-16s %-11s %-24s %5d  %s%s\n", or_dash(c->declared.name),
                or_dash(c->declared.kind), addrs, c->nodes, seen,
                grid_cluster_mismatch(c) ? "  MISMATCH" : "");
    }
    for (int i = 0; i < nc; i++) {
        const struct qcg__gridCluster *c = &g->cluster[i];
        int punches = c->punchesPreserved + c->punchesChanged;
        if (punches > 0)
            fprintf(out, "reflector: %s punched %d time%s, port kept %d, changed %d\n",
                    or_dash(c->declared.name), punches, punches == 1 ? "" : "s",
                    c->punchesPreserved, c->punchesChanged);
    }

    for (int i = 0; i < nc; i++)
        print_ranges(out, &g->cluster[i].declared);
    print_proxies(out, g);

    /* The matrix: rows from, columns to; every column as wide as its widest cell. */
    int width[nc > 0 ? nc : 1], first = 4;
    char buf[CELL_MAX];
    for (int j = 0; j < nc; j++) {
        const char *to = or_dash(g->cluster[j].declared.name);
        width[j] = (int)strlen(to);
        if (width[j] > first)
            first = width[j];
        for (int i = 0; i < nc; i++) {
            cell(g, or_dash(g->cluster[i].declared.name), to, buf, sizeof(buf));
            if ((int)strlen(buf) > width[j])
                width[j] = (int)strlen(buf);
        }
    }
    fprintf(out,
            "\ntechniques that last worked (rows: from, columns: to; x = last attempt "
            "failed)\n%-*s",
            first, "");
    for (int j = 0; j < nc; j++)
        fprintf(out, "  %-*s", width[j], or_dash(g->cluster[j].declared.name));
    fputc('\n', out);
    for (int i = 0; i < nc; i++) {
        const char *from = or_dash(g->cluster[i].declared.name);
        fprintf(out, "%-*s", first, from);
        for (int j = 0; j < nc; j++) {
            cell(g, from, or_dash(g->cluster[j].declared.name), buf, sizeof(buf));
            fprintf(out, "  %-*s", width[j], buf);
        }
        fputc('\n', out);
    }
}

static void json_field(FILE *out, const char *sep, const char *name, const char *value)
{
    fprintf(out, "%s\"%s\":", sep, name);
    if (value != NULL)
        json_string(out, value);
    else
        fputs("null", out);
}

/* key then a JSON list of n strings ([] when none). */
static void json_strings(FILE *out, const char *key, char **v, int n)
{
    fputs(key, out);
    fputc('[', out);
    for (int i = 0; v != NULL && i < n; i++) {
        if (i > 0)
            fputc(',', out);
        json_string(out, or_dash(v[i]));
    }
    fputc(']', out);
}

static void print_json(FILE *out, const struct qcg__gridResponse *g, uint64_t now)
{
    int nc = g->cluster != NULL ? g->__sizeCluster : 0;
    int no = g->outcome != NULL ? g->__sizeOutcome : 0;
    fputs("{\"clusters\":[", out);
    for (int i = 0; i < nc; i++) {
        const struct qcg__gridCluster *c = &g->cluster[i];
        const struct qcg__cluster *d = &c->declared;
        const struct qcg__observation *o = c->observed;
        json_field(out, i > 0 ? ",{" : "{", "name", d->name);
        json_field(out, ",\"declared\":{", "kind", d->kind);
        fputs(",\"public_addresses\":[", out);
        for (int k = 0; k < d->__sizePublicAddress; k++) {
            if (k > 0)
                fputc(',', out);
            json_string(out, d->publicAddress[k]);
        }
        if (d->portLow > 0)
            fprintf(out, "],\"open_ports\":\"%d-%d\"", d->portLow, d->portHigh);
        else
            fputs("],\"open_ports\":null", out);
        json_strings(out, ",\"node_ranges\":", d->nodeRange, d->__sizeNodeRange);
        json_strings(out, ",\"open_ranges\":", d->openRange, d->__sizeOpenRange);
        fputc('}', out);
        fprintf(out, ",\"nodes\":%d,\"observed\":", c->nodes);
        if (o != NULL) {
            json_field(out, "{", "node", o->node);
            json_field(out, ",", "kind", o->kind);
            json_field(out, ",", "public_address",
                       o->publicAddress != NULL && o->publicAddress[0] ? o->publicAddress : NULL);
            fprintf(out, ",\"port_preserving\":%s",
                    o->portPreserving < 0 ? "null"
                    : o->portPreserving   ? "true"
                                          : "false");
            json_field(out, ",", "mapping", o->mapping);
            json_field(out, ",", "inbound", o->inbound);
            fprintf(out, ",\"age_s\":%llu}", (unsigned long long)age(now, o->when));
        } else {
            fputs("null", out);
        }
        fprintf(out, ",\"mismatch\":%s,\"punches\":{\"port_kept\":%d,\"port_changed\":%d}}",
                grid_cluster_mismatch(c) ? "true" : "false", c->punchesPreserved,
                c->punchesChanged);
    }
    fputs("],\"outcomes\":[", out);
    for (int i = 0; i < no; i++) {
        const struct qcg__outcome *o = &g->outcome[i];
        json_field(out, i > 0 ? ",{" : "{", "from", o->from);
        json_field(out, ",", "to", o->to);
        json_field(out, ",", "technique", o->technique);
        fprintf(out,
                ",\"ok\":%llu,\"failed\":%llu,\"last_ok\":%s,\"last_setup_ms\":%d,"
                "\"age_s\":%llu}",
                (unsigned long long)o->ok, (unsigned long long)o->failed,
                o->lastOk ? "true" : "false", o->lastSetupMs, (unsigned long long)o->age);
    }
    fputs("],\"proxies\":[", out);
    for (int i = 0; g->proxy != NULL && i < g->__sizeProxy; i++) {
        const struct qcg__gridProxy *p = &g->proxy[i];
        json_field(out, i > 0 ? ",{" : "{", "name", p->name);
        json_field(out, ",", "address", p->address);
        json_field(out, ",", "state", p->state);
        fprintf(out, ",\"port\":%d", p->port);
        char ep[PROXY_ENDPOINTS_MAX][HOSTPORT_MAX];
        char *eps[PROXY_ENDPOINTS_MAX] = {ep[0], ep[1]};
        json_strings(out, ",\"addresses\":", eps, proxy_endpoints(p, ep));
        fputs(",\"last_seen_s\":", out);
        if (never_heard(p))
            fputs("null", out);
        else
            fprintf(out, "%llu", (unsigned long long)p->lastSeen);
        fprintf(out, ",\"pairs\":%d,\"bytes\":%llu,\"planned\":%llu}", p->pairs,
                (unsigned long long)p->bytes, (unsigned long long)p->planned);
    }
    fputs("]}\n", out);
}

void grid_print(FILE *out, const struct qcg__gridResponse *g, bool json, uint64_t now)
{
    if (json)
        print_json(out, g, now);
    else
        print_human(out, g, now);
}

/* The page into path ("-": stdout), whole or not at all: written beside it
   and renamed, so a browser reloading it never sees half a page. */
static int write_html(const char *program, const char *path, const struct qcg__gridResponse *g)
{
    uint64_t now = (uint64_t)time(NULL);
    if (strcmp(path, "-") == 0) {
        grid_html(stdout, g, now);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp)) {
        fprintf(stderr, "%s: --html: path too long\n", program);
        return 1;
    }
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        fprintf(stderr, "%s: --html: cannot create %s: %s\n", program, tmp, strerror(errno));
        return 1;
    }
    grid_html(f, g, now);
    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed || rename(tmp, path) != 0) {
        fprintf(stderr, "%s: --html: cannot write %s: %s\n", program, path, strerror(errno));
        unlink(tmp);
        return 1;
    }
    int nc = g->cluster != NULL ? g->__sizeCluster : 0;
    printf("%s: the grid's picture (%d cluster%s) is in %s\n", program, nc, nc == 1 ? "" : "s",
           path);
    return 0;
}

int grid_query(const char *program, const char *url, const struct tls_files *tls, bool json,
               const char *html)
{
    struct soap_client_config cc = {
        .url = url,
        .tls = *tls,
        .connect_timeout = 5,
        .io_timeout = 10,
    };
    char err[256], sub[64], msg[256];
    /* OpenSSL writes with write(2): a broker that refused us must not kill us. */
    signal(SIGPIPE, SIG_IGN);
    struct soap *soap = soap_client_new(&cc, err, sizeof(err));
    if (soap == NULL) {
        fprintf(stderr, "%s: %s\n", program, err);
        return 1;
    }
    struct qcg__gridResponse res;
    memset(&res, 0, sizeof(res));
    int rc = soap_call_qcg__grid(soap, url, NULL, QCG_PROTOCOL_VERSION, &res);
    int status = 0;
    if (soap_call_status(soap, rc, sub, sizeof(sub), msg, sizeof(msg)) != CALL_OK) {
        fprintf(stderr, "%s: grid from %s: %s%s%s\n", program, url, sub, sub[0] ? ": " : "", msg);
        status = 1;
    } else if (html != NULL) {
        status = write_html(program, html, &res);
    } else {
        grid_print(stdout, &res, json, (uint64_t)time(NULL));
    }
    soap_client_reset(soap);
    soap_client_free(soap);
    return status;
}
