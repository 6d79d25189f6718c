/* Which first SYN the helper's hole punching sends in each family, and the
   hop count to the reflector it comes from: the helper's PUNCHING (local
   protocol 9), or from an older helper SITE_OK's IPv4 figures alone. */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "json.h"
#include "probe.h"

/* Bounds the helper's measurement (PUNCH_HOPS_MAX silent routers of 500 ms)
   and the request around it. */
#define PUNCHING_TIMEOUT_MS 12000

/* An older helper: SITE_OK's punch-ttl and IPv4 hop count. */
static void from_site(struct probe_site *s, const char *why)
{
    struct local_punching *p = &s->punching;
    const struct local_site *i = &s->info;

    memset(p, 0, sizeof(*p));
    p->punch_ttl = i->punch_ttl;
    snprintf(p->family[LOCAL_PUNCH_IPV4].reflector, sizeof(p->family[0].reflector), "%s",
             i->reflector);
    snprintf(p->family[LOCAL_PUNCH_IPV6].reflector, sizeof(p->family[1].reflector), "%s",
             i->reflector6);
    for (int f = 0; f < 2; f++) {
        const char *addr[QCG_NODE_ADDRS];
        if (site_addresses_of(s, f ? AF_INET6 : AF_INET, addr) > 0)
            snprintf(p->family[f].address, sizeof(p->family[f].address), "%s", addr[0]);
        p->family[f].hops = -1;
        snprintf(p->family[f].why, sizeof(p->family[f].why), "%s", why);
    }
    if (i->punch_hops > 0) {
        p->family[LOCAL_PUNCH_IPV4].hops = (int32_t)i->punch_hops;
        p->family[LOCAL_PUNCH_IPV4].first_ttl = i->punch_first_ttl;
        p->family[LOCAL_PUNCH_IPV4].why[0] = '\0'; /* a count, not a reason */
    } else {
        snprintf(p->family[LOCAL_PUNCH_IPV4].why, sizeof(p->family[0].why),
                 "none measured yet: the first punch measures it");
    }
}

void punching_ask(const struct probe_opts *o, struct probe_site *s, double deadline_ms)
{
    char why[LOCAL_MESSAGE_MAX];
    int code, left = probe_left_ms(deadline_ms);

    if (helper_version() < 9) {
        snprintf(why, sizeof(why),
                 "the helper speaks local protocol %u: it names no hop count "
                 "but IPv4's",
                 helper_version());
        from_site(s, why);
        return;
    }
    probe_progress(o, "asking the helper for its hop counts to the reflector");
    int t = helper_ask(o->helper_socket, LOCAL_PUNCHING, NULL, &s->punching, sizeof(s->punching),
                       left < PUNCHING_TIMEOUT_MS ? left : PUNCHING_TIMEOUT_MS, &code, why,
                       sizeof(why));
    s->punching_answered = t == LOCAL_PUNCHING_OK;
    if (!s->punching_answered)
        from_site(s, why);
}

/* The variant's kind (hop-limited, plain, staggered, none) and one sentence. */
static const char *variant(const struct local_punching *p, int f, char *out, size_t len)
{
    const struct local_punch_family *x = &p->family[f];
    const char *unlimited = f == LOCAL_PUNCH_IPV6 ? "staggered" : "plain";
    const char *name = f == LOCAL_PUNCH_IPV6 ? "IPv6" : "IPv4";

    if (x->address[0] == '\0') {
        snprintf(out, len, "none: this node has no %s address", name);
        return "none";
    }
    if (x->reflector[0] == '\0') {
        snprintf(out, len, "none: the broker names no %s reflector", name);
        return "none";
    }
    if (p->punch_ttl < 0) {
        snprintf(out, len, "plain: the first SYN with the normal TTL (punch-ttl plain)");
        return "plain";
    }
    if (p->punch_ttl > 0) {
        snprintf(out, len, "first SYN with TTL %d (punch-ttl %d)", p->punch_ttl, p->punch_ttl);
        return "hop-limited";
    }
    if (x->hops >= 0 && x->first_ttl > 0) {
        snprintf(out, len, "first SYN with TTL %u (%d hops to the reflector; punch-ttl auto)",
                 x->first_ttl, x->hops);
        return "hop-limited";
    }
    if (x->hops >= 2 && x->first_ttl == 0 && x->why[0] != '\0') {
        snprintf(out, len, "%s (%d hops to the reflector, but %s; punch-ttl auto)", unlimited,
                 x->hops, x->why);
        return unlimited;
    }
    if (x->hops >= 0) {
        snprintf(out, len, "%s (%d hop%s to the reflector: too few; punch-ttl auto)", unlimited,
                 x->hops, x->hops == 1 ? "" : "s");
        return unlimited;
    }
    snprintf(out, len, "%s: hop count unknown (%s; punch-ttl auto)", unlimited, x->why);
    return unlimited;
}

void punching_human(FILE *out, const struct probe_site *s)
{
    char text[LOCAL_MESSAGE_MAX + 100];

    for (int f = 0; f < 2; f++) {
        variant(&s->punching, f, text, sizeof(text));
        fprintf(out, "  %-14s %s: %s\n", f ? "" : "hole punching", f ? "IPv6" : "IPv4", text);
    }
}

/* ,"key":v, or null when not known. */
static void json_number(FILE *out, const char *key, long v, bool known)
{
    if (known)
        fprintf(out, ",\"%s\":%ld", key, v);
    else
        fprintf(out, ",\"%s\":null", key);
}

/* ,"key":"text", or null. */
static void json_text(FILE *out, const char *key, const char *text)
{
    fprintf(out, ",\"%s\":", key);
    if (text != NULL)
        json_string(out, text);
    else
        fputs("null", out);
}

void punching_json(FILE *out, const struct probe_site *s)
{
    const struct local_punching *p = &s->punching;
    const struct local_punch_family *v4 = &p->family[LOCAL_PUNCH_IPV4];
    char text[LOCAL_MESSAGE_MAX + 100];

    fprintf(out, ",\"punching\":{\"punch_ttl\":");
    if (p->punch_ttl == 0)
        fputs("\"auto\"", out);
    else if (p->punch_ttl < 0)
        fputs("\"plain\"", out);
    else
        fprintf(out, "\"%d\"", p->punch_ttl);
    /* IPv4's, as before the families. */
    json_number(out, "hops", v4->hops, v4->hops >= 0);
    json_number(out, "first_syn_ttl", p->punch_ttl > 0 ? p->punch_ttl : (long)v4->first_ttl,
                p->punch_ttl > 0 || (p->punch_ttl == 0 && v4->first_ttl > 0));
    variant(p, LOCAL_PUNCH_IPV4, text, sizeof(text));
    json_text(out, "variant", text);
    for (int f = 0; f < 2; f++) {
        const struct local_punch_family *x = &p->family[f];
        const char *kind = variant(p, f, text, sizeof(text));
        fprintf(out, ",\"%s\":{\"kind\":\"%s\"", f ? "ipv6" : "ipv4", kind);
        json_text(out, "variant", text);
        json_text(out, "reflector", x->reflector[0] ? x->reflector : NULL);
        json_number(out, "hops", x->hops, x->hops >= 0);
        json_number(out, "first_syn_ttl", p->punch_ttl > 0 ? p->punch_ttl : (long)x->first_ttl,
                    strcmp(kind, "hop-limited") == 0);
        json_number(out, "rtt_ms", x->rtt_ms, x->hops >= 0 && s->punching_answered);
        json_text(out, "why", x->hops < 0 && x->why[0] ? x->why : NULL);
        fputs("}", out);
    }
    fputs("}", out);
}
