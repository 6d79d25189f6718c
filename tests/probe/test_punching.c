/* Which hole punching variant qcg-probe says the helper uses in each family
   (punching.c): the helper's punch-ttl and, under auto, the hop count to the
   reflector of each family, on the page ("hole punching", a line a family)
   and in --json ("punching": IPv4's figures as before, then "ipv4" and
   "ipv6"); from an older helper, SITE_OK's IPv4 hop count alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "probe.h"
#include "render.h"

static struct probe_opts opts = {.encrypt = QCG_ENCRYPT_INTER_SITE};
static struct probe_run run;

static void reset(int ttl)
{
    memset(&run, 0, sizeof(run));
    run.opts = &opts;
    run.site.mapping = "unknown";
    run.site.in4.state = "unknown";
    run.site.punching_answered = true;
    run.site.punching.punch_ttl = ttl;
    for (int f = 0; f < 2; f++)
        run.site.punching.family[f].hops = -1;
}

/* A family the node and the reflector both have, with hops (-1 unknown
   and why). */
static void family(int f, int hops, unsigned first, const char *why)
{
    struct local_punch_family *x = &run.site.punching.family[f];
    snprintf(x->address, sizeof(x->address), "%s", f ? "2001:db8:6::11" : "198.51.100.11");
    snprintf(x->reflector, sizeof(x->reflector), "%s",
             f ? "[2001:db8::10]:7701" : "203.0.113.10:7701");
    x->hops = hops;
    x->first_ttl = first;
    x->rtt_ms = hops >= 0 ? 2 : 0;
    snprintf(x->why, sizeof(x->why), "%s", why);
}

static void expect(const char *line, const char *json)
{
    char *h = render(report_human, &run);
    CHECK_HAS(h, line);
    free(h);
    char *j = render(report_json, &run);
    CHECK_HAS(j, json);
    free(j);
}

int main(void)
{
    /* Both families measured: a hop-limited first SYN in each. */
    reset(0);
    family(0, 3, 3, "");
    family(1, 2, 2, "");
    expect(
        "\n  hole punching  IPv4: first SYN with TTL 3 (3 hops to the reflector; punch-ttl "
        "auto)\n                 IPv6: first SYN with TTL 2 (2 hops to the reflector; "
        "punch-ttl auto)\n",
        "\"punching\":{\"punch_ttl\":\"auto\",\"hops\":3,\"first_syn_ttl\":3,\"variant\":\"first "
        "SYN with TTL 3");
    expect("", "\"ipv6\":{\"kind\":\"hop-limited\",\"variant\":\"first SYN with TTL 2 (2 hops to "
               "the reflector; punch-ttl auto)\",\"reflector\":\"[2001:db8::10]:7701\",\"hops\":2,"
               "\"first_syn_ttl\":2,\"rtt_ms\":2,\"why\":null}");
    expect("", "\"ipv4\":{\"kind\":\"hop-limited\",");

    /* Too few routers: IPv4 plain, IPv6 staggered; no hop count: the why. */
    reset(0);
    family(0, 1, 0, "");
    family(1, -1, 0, "connect with TTL 1: Network is unreachable");
    expect("  hole punching  IPv4: plain (1 hop to the reflector: too few; punch-ttl auto)\n"
           "                 IPv6: staggered: hop count unknown (connect with TTL 1: Network is "
           "unreachable; punch-ttl auto)\n",
           "\"punching\":{\"punch_ttl\":\"auto\",\"hops\":1,\"first_syn_ttl\":null,");
    expect("", "\"ipv6\":{\"kind\":\"staggered\",");
    expect("", "\"hops\":null,\"first_syn_ttl\":null,\"rtt_ms\":null,\"why\":\"connect with TTL "
               "1: Network is unreachable\"}");

    /* An IPv6-only node: IPv4 none, IPv6 measured. */
    reset(0);
    family(1, 3, 3, "");
    snprintf(run.site.punching.family[0].why, sizeof(run.site.punching.family[0].why),
             "this node has no IPv4 address");
    expect("  hole punching  IPv4: none: this node has no IPv4 address\n"
           "                 IPv6: first SYN with TTL 3 (3 hops",
           "\"ipv4\":{\"kind\":\"none\",\"variant\":\"none: this node has no IPv4 address\"");

    /* punch-ttl plain, and a fixed TTL: the same in both families. */
    reset(-1);
    family(0, -1, 0, "not measured: punch-ttl is not auto");
    family(1, -1, 0, "not measured: punch-ttl is not auto");
    expect("  hole punching  IPv4: plain: the first SYN with the normal TTL (punch-ttl plain)\n"
           "                 IPv6: plain: the first SYN with the normal TTL (punch-ttl plain)\n",
           "\"punching\":{\"punch_ttl\":\"plain\",\"hops\":null,\"first_syn_ttl\":null,");
    reset(5);
    family(0, -1, 0, "not measured: punch-ttl is not auto");
    family(1, -1, 0, "not measured: punch-ttl is not auto");
    expect("                 IPv6: first SYN with TTL 5 (punch-ttl 5)\n",
           "\"punching\":{\"punch_ttl\":\"5\",\"hops\":null,\"first_syn_ttl\":5,");
    expect("", "\"ipv6\":{\"kind\":\"hop-limited\",\"variant\":\"first SYN with TTL 5 (punch-ttl "
               "5)\",\"reflector\":\"[2001:db8::10]:7701\",\"hops\":null,\"first_syn_ttl\":5,");
    return check_result("probe-punching");
}
