/* The probe's findings per address family: a dual-stack node may reach the
   grid over IPv4 and not over IPv6 (or the other way round), a site's
   firewall may treat the two differently, and a plan may take either.  Built
   from what site.c and peers.c measured; nothing is sent here. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "address.h"
#include "json.h"
#include "probe.h"
#include "technique.h"

static const int families[2] = {AF_INET, AF_INET6};

const char *family_name(int af, bool lower)
{
    if (af == AF_INET6)
        return lower ? "ipv6" : "IPv6";
    return lower ? "ipv4" : "IPv4";
}

int family_of_endpoint(const char *endpoint)
{
    char host[256], why[200];
    int port;

    if (strstr(endpoint, "://") != NULL) {
        if (url_hostport(endpoint, host, sizeof(host), &port, why, sizeof(why)) < 0)
            return 0;
    } else if (hostport_parse(endpoint, false, host, sizeof(host), &port, why, sizeof(why)) < 0) {
        return 0;
    }
    return address_family(host);
}

int family_of_socket(int fd, int *af, char *addr, size_t addrlen)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char text[INET6_ADDRSTRLEN];
    const void *where;

    if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
        return -1;
    if (ss.ss_family == AF_INET6)
        where = &((struct sockaddr_in6 *)&ss)->sin6_addr;
    else if (ss.ss_family == AF_INET)
        where = &((struct sockaddr_in *)&ss)->sin_addr;
    else
        return -1;
    if (inet_ntop(ss.ss_family, where, text, sizeof(text)) == NULL)
        return -1;
    /* A mapped address ("::ffff:1.2.3.4") is that IPv4 host. */
    *af = address_family(text);
    return address_canonical(text, addr, addrlen) < 0 ? -1 : 0;
}

/* The reflector's dial-back (site.c) over af, or NULL (why in `why`) when
   there was none: no reflector address of af, or no node address. */
static const struct probe_inbound *inbound_over(const struct probe_site *s, int af, char *why,
                                                size_t whylen)
{
    const char *refl = af == AF_INET6 ? s->info.reflector6 : s->info.reflector;
    const char *addr[QCG_NODE_ADDRS];
    if (refl[0] == '\0' || family_of_endpoint(refl) != af) {
        snprintf(why, whylen, "not measured: the reflector has no %s address",
                 family_name(af, false));
        return NULL;
    }
    if (site_addresses_of(s, af, addr) == 0) {
        snprintf(why, whylen, "not measured: this node has no %s address", family_name(af, false));
        return NULL;
    }
    return af == AF_INET6 ? &s->in6 : &s->in4;
}

/* Why nothing connected to a site over af. */
static void why_not(const struct probe_peer *p, int af, int naddr, char *out, size_t len)
{
    int other = af == AF_INET ? AF_INET6 : AF_INET;
    bool over_other = false;
    for (int t = QCG_TECH_DIRECT; t <= QCG_TECH_PROXY; t++)
        over_other = over_other || (p->tech[t].works && p->tech[t].family == other);

    if (naddr == 0)
        snprintf(out, len, "this node has no %s address", family_name(af, false));
    else if (!p->endpoint_ok)
        snprintf(out, len, "no test endpoint: %s", p->why);
    else if (over_other)
        snprintf(out, len,
                 "every connection went over %s: no %s plan for this pair, or %s failed and the "
                 "same connect went on over %s (the helper's log says which)",
                 family_name(other, false), family_name(af, false), family_name(af, false),
                 family_name(other, false));
    else
        snprintf(out, len, "no technique connected in either family%s%s",
                 p->chosen_why[0] ? ": " : "", p->chosen_why);
}

/* The techniques that connected to p over af, "direct, reversed"; their
   count. */
static int connected_over(const struct probe_peer *p, int af, char *out, size_t len)
{
    int n = 0;
    out[0] = '\0';
    for (int t = QCG_TECH_DIRECT; t <= QCG_TECH_PROXY; t++) {
        const struct probe_technique *x = &p->tech[t];
        if (!x->works || x->family != af)
            continue;
        size_t used = strlen(out);
        snprintf(out + used, len - used, "%s%s", n++ ? ", " : "",
                 technique_name((enum technique)t));
    }
    return n;
}

static void human_family(FILE *out, const struct probe_run *r, int af)
{
    const struct probe_site *s = &r->site;
    const char *addr[QCG_NODE_ADDRS];
    const char *name = family_name(af, false);
    int naddr = site_addresses_of(s, af, addr), shown = 0;

    if (naddr == 0) {
        fprintf(out, "  %-14s none: this node has no %s address (the helper's `address`)\n", name,
                name);
        return;
    }
    fprintf(out, "  %-14s address", name);
    for (int i = 0; i < naddr; i++)
        fprintf(out, "%s %s", i ? "," : "", addr[i]);
    fprintf(out, "\n  %-14s reaches", "");
    for (int i = 0; i < s->nrtt; i++) {
        const struct probe_rtt *t = &s->rtt[i];
        if (family_of_endpoint(t->endpoint) != af)
            continue;
        if (t->ok)
            fprintf(out, "%s %s %s", shown++ ? "," : "", t->name, t->endpoint);
        else
            fprintf(out, "%s %s %s unreachable", shown++ ? "," : "", t->name, t->endpoint);
    }
    if (shown == 0)
        fprintf(out,
                " nothing measured: the grid named no %s endpoint of its services to this "
                "node",
                name);
    fprintf(out, "\n  %-14s inbound", "");
    char not_measured[120];
    const struct probe_inbound *in = inbound_over(s, af, not_measured, sizeof(not_measured));
    if (in != NULL)
        fprintf(out, " %s%s%s%s\n", in->state, in->filtering ? " (" : "",
                in->filtering ? in->filtering : "", in->filtering ? ")" : "");
    else
        fprintf(out, " %s\n", not_measured);
    for (int i = 0; i < r->npeers; i++) {
        const struct probe_peer *p = &r->peers[i];
        char list[128], why[PROBE_WHY_MAX + 200];
        if (connected_over(p, af, list, sizeof(list)) > 0) {
            fprintf(out, "  %-14s to %s: %s\n", "", p->site, list);
        } else {
            why_not(p, af, naddr, why, sizeof(why));
            fprintf(out, "  %-14s to %s: nothing: %s\n", "", p->site, why);
        }
    }
}

void family_human(FILE *out, const struct probe_run *r)
{
    fprintf(out, "\nper family\n");
    for (int i = 0; i < 2; i++)
        human_family(out, r, families[i]);
}

static void json_family(FILE *out, const struct probe_run *r, int af)
{
    const struct probe_site *s = &r->site;
    const char *addr[QCG_NODE_ADDRS];
    int naddr = site_addresses_of(s, af, addr), n = 0;
    char not_measured[120];
    const struct probe_inbound *in = inbound_over(s, af, not_measured, sizeof(not_measured));

    fprintf(out, "\"%s\":{\"addresses\":[", family_name(af, true));
    for (int i = 0; i < naddr; i++) {
        fprintf(out, "%s", i ? "," : "");
        json_string(out, addr[i]);
    }
    fprintf(out, "],\"none\":");
    if (naddr == 0) {
        char why[64];
        snprintf(why, sizeof(why), "this node has no %s address", family_name(af, false));
        json_string(out, why);
    } else {
        fputs("null", out);
    }
    fprintf(out, ",\"services\":[");
    for (int i = 0; i < s->nrtt; i++) {
        const struct probe_rtt *t = &s->rtt[i];
        if (family_of_endpoint(t->endpoint) != af)
            continue;
        fprintf(out, "%s{\"to\":", n++ ? "," : "");
        json_string(out, t->name);
        fprintf(out, ",\"endpoint\":");
        json_string(out, t->endpoint);
        fprintf(out, ",\"reachable\":%s}", t->ok ? "true" : "false");
    }
    fprintf(out, "],\"inbound\":");
    json_string(out, in != NULL ? in->state : "unknown");
    fprintf(out, ",\"inbound_filtering\":");
    if (in != NULL && in->filtering != NULL)
        json_string(out, in->filtering);
    else
        fputs("null", out);
    fprintf(out, ",\"inbound_why\":");
    json_string(out, in != NULL ? in->why : not_measured);
    fprintf(out, ",\"peers\":[");
    for (int i = 0; i < r->npeers; i++) {
        const struct probe_peer *p = &r->peers[i];
        char why[PROBE_WHY_MAX + 200];
        int k = 0;
        fprintf(out, "%s{\"site\":", i ? "," : "");
        json_string(out, p->site);
        fprintf(out, ",\"connected\":[");
        for (int t = QCG_TECH_DIRECT; t <= QCG_TECH_PROXY; t++)
            if (p->tech[t].works && p->tech[t].family == af)
                fprintf(out, "%s\"%s\"", k++ ? "," : "", technique_name((enum technique)t));
        fprintf(out, "],\"chosen\":%s,\"why_not\":",
                p->chosen != QCG_TECH_NONE && p->chosen_family == af ? "true" : "false");
        if (k == 0) {
            why_not(p, af, naddr, why, sizeof(why));
            json_string(out, why);
        } else {
            fputs("null", out);
        }
        fprintf(out, "}");
    }
    fprintf(out, "]}");
}

void family_json(FILE *out, const struct probe_run *r)
{
    fprintf(out, ",\"families\":{");
    for (int i = 0; i < 2; i++) {
        fprintf(out, "%s", i ? "," : "");
        json_family(out, r, families[i]);
    }
    fprintf(out, "}");
}
