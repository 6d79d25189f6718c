/*
 * broker-proxy-families: a proxy with an address in each family (the broker's
 * `proxy` option naming it twice), the address each end of a proxied pair is
 * given, and the plan of a pair whose ends share no family (an IPv6-only node
 * and an IPv4-only one): the proxy at once, bridging them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "plan_bridge.h"
#include "proxies.h"

static const struct plan_end v6_site = {"v6", CLUSTER_FIREWALLED, 0, 0, true, 20001, "v61"};
static const struct plan_end fw_site = {"fw", CLUSTER_FIREWALLED, 0, 0, true, 20001, "fw1"};

static char key_path[64];

static int parse(struct proxies *p, const char *spec, char *err, size_t errlen)
{
    err[0] = '\0';
    return proxies_parse(p, spec, key_path, err, errlen);
}

static void test_parse(void)
{
    struct proxies p;
    char err[256];
    int port = 0;

    REQUIRE(parse(&p, "lab@203.0.113.20:7703, lab@[2001:db8::20]:7713, two@203.0.113.21:7703", err,
                  sizeof(err)) == 0);
    CHECK_EQ(p.count, 2);
    CHECK(strcmp(p.list[0].host, "203.0.113.20") == 0 && p.list[0].port == 7703);
    CHECK(strcmp(p.list[0].host2, "2001:db8::20") == 0 && p.list[0].port2 == 7713);
    CHECK_EQ(proxy_addr_families(&p.list[0]), FAMILY_V4 | FAMILY_V6);
    CHECK_EQ(proxy_addr_families(&p.list[1]), FAMILY_V4);
    CHECK_EQ(proxies_families(&p), FAMILY_V4 | FAMILY_V6);
    /* Each end the first configured address of a family its node has. */
    CHECK(strcmp(proxy_addr_for(&p.list[0], FAMILY_V6, &port), "2001:db8::20") == 0 &&
          port == 7713);
    CHECK(strcmp(proxy_addr_for(&p.list[0], FAMILY_V4, &port), "203.0.113.20") == 0 &&
          port == 7703);
    CHECK(strcmp(proxy_addr_for(&p.list[0], FAMILY_V4 | FAMILY_V6, &port), "203.0.113.20") == 0);
    CHECK(proxy_addr_for(&p.list[1], FAMILY_V6, &port) == NULL);
    proxies_clear(&p);

    /* IPv6 first: a dual-stack end gets the IPv6 address. */
    REQUIRE(parse(&p, "lab@[2001:db8::20]:7703,lab@203.0.113.20:7703", err, sizeof(err)) == 0);
    CHECK_EQ(p.count, 1);
    CHECK(strcmp(proxy_addr_for(&p.list[0], FAMILY_V4 | FAMILY_V6, &port), "2001:db8::20") == 0);
    proxies_clear(&p);

    CHECKF(parse(&p, "lab@203.0.113.20:7703,lab@203.0.113.21:7703", err, sizeof(err)) < 0 &&
               strstr(err, "lab has two IPv4 addresses") != NULL,
           "one family twice: %s", err);
    CHECKF(parse(&p, "lab@[2001:db8::20]:7703,lab@203.0.113.20:7703,lab@[2001:db8::21]:7703", err,
                 sizeof(err)) < 0 &&
               strstr(err, "lab has two IPv6 addresses") != NULL,
           "three addresses: %s", err);
}

static void test_bridge(void)
{
    struct plan_decision d;
    struct plan_offer offer = {.proxy = true,
                               .reflector = true,
                               .proxy_families = FAMILY_V4 | FAMILY_V6,
                               .proxy_bridge = true};
    const struct plan_families v6_to_v4 = {FAMILY_V6, FAMILY_V4}, v4_to_v6 = {FAMILY_V4, FAMILY_V6};

    CHECK(plan_bridge(&v6_site, &fw_site, &v6_to_v4, 0, &offer, TECH_NONE, &d));
    CHECKF(d.ok && d.technique == TECH_PROXY && !d.cacheable &&
               strstr(d.reason, "cluster v6 (node v61) has IPv6 only and cluster fw (node fw1) "
                                "IPv4 only: no address family in common: proxy, bridging IPv6 "
                                "to IPv4") != NULL,
           "IPv6-only to IPv4-only: the proxy at once: %s", d.reason);
    CHECKF(plan_bridge(&fw_site, &v6_site, &v4_to_v6, 0, &offer, TECH_NONE, &d) && d.ok &&
               d.technique == TECH_PROXY && strstr(d.reason, "bridging IPv4 to IPv6") != NULL,
           "IPv4-only to IPv6-only: the proxy at once: %s", d.reason);

    /* A family in common: plan_decide's order (and hole punching, traversing
       where they apply), untouched. */
    const struct plan_families shared[] = {{FAMILY_V4, FAMILY_V4},
                                           {FAMILY_V6, FAMILY_V6},
                                           {FAMILY_V6, FAMILY_V4 | FAMILY_V6},
                                           {FAMILY_V4 | FAMILY_V6, FAMILY_V4}};
    for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++) {
        memset(&d, 0x5a, sizeof(d));
        CHECKF(!plan_bridge(&v6_site, &fw_site, &shared[i], 0, &offer, TECH_NONE, &d) &&
                   d.reason[0] == 0x5a,
               "families %u and %u share one: no bridge", shared[i].from, shared[i].to);
    }

    CHECKF(
        plan_bridge(&v6_site, &fw_site, &v6_to_v4, TECH_BIT(TECH_PROXY), &offer, TECH_NONE, &d) &&
            !d.ok && d.technique == TECH_PROXY &&
            strstr(d.reason, "proxy already tried; no technique left") != NULL,
        "proxy tried: nothing else can work: %s", d.reason);
    /* Whatever else failed before, only the proxy. */
    CHECKF(plan_bridge(&v6_site, &fw_site, &v6_to_v4,
                       TECH_BIT(TECH_TRAVERSING) | TECH_BIT(TECH_HOLEPUNCH), &offer, TECH_NONE,
                       &d) &&
               d.ok && d.technique == TECH_PROXY,
           "others tried: the proxy: %s", d.reason);

    struct plan_offer none = offer;
    none.proxy = false;
    CHECKF(plan_bridge(&v6_site, &fw_site, &v6_to_v4, 0, &none, TECH_NONE, &d) && !d.ok &&
               strstr(d.reason, "proxy needed, but the broker has no proxy configured") != NULL,
           "no proxy: %s", d.reason);
    none.proxies_dead = true;
    CHECKF(plan_bridge(&v6_site, &fw_site, &v6_to_v4, 0, &none, TECH_NONE, &d) && !d.ok &&
               strstr(d.reason, "no live proxy") != NULL,
           "proxies dead: %s", d.reason);
    struct plan_offer v4_only = offer;
    v4_only.proxy_families = FAMILY_V4;
    CHECKF(plan_bridge(&v6_site, &fw_site, &v6_to_v4, 0, &v4_only, TECH_NONE, &d) && !d.ok &&
               d.technique == TECH_PROXY &&
               strstr(d.reason, "the broker's proxies have no IPv6 address") != NULL,
           "proxies with IPv4 addresses only: %s", d.reason);
    /* An IPv4-only proxy and an IPv6-only one, or the one with both dead:
       no proxy can take both legs. */
    struct plan_offer split = offer;
    split.proxy_bridge = false;
    CHECKF(plan_bridge(&v6_site, &fw_site, &v6_to_v4, 0, &split, TECH_NONE, &d) && !d.ok &&
               d.technique == TECH_PROXY &&
               strstr(d.reason, "no live proxy has both an IPv4 and an IPv6 address") != NULL,
           "no proxy with both families: %s", d.reason);

    /* qcg-probe's `only`: the proxy, or why another cannot work. */
    CHECKF(
        plan_bridge(&v6_site, &fw_site, &v6_to_v4, TECH_BIT(TECH_PROXY), &offer, TECH_PROXY, &d) &&
            d.ok && d.technique == TECH_PROXY,
        "only=proxy: %s", d.reason);
    CHECKF(plan_bridge(&v6_site, &fw_site, &v6_to_v4, 0, &offer, TECH_TRAVERSING, &d) && !d.ok &&
               d.technique == TECH_TRAVERSING &&
               strstr(d.reason, "traversing cannot work, only the proxy can bridge them") != NULL,
           "only=traversing: %s", d.reason);
}

static void test_families_of(void)
{
    char others[2][QCG_ADDR_MAX] = {"2001:db8:1::11", "198.51.100.12"};
    CHECK_EQ(plan_families_of("198.51.100.11", others, 0), FAMILY_V4);
    CHECK_EQ(plan_families_of("2001:db8:6::11", others, 0), FAMILY_V6);
    CHECK_EQ(plan_families_of("198.51.100.11", others, 1), FAMILY_V4 | FAMILY_V6);
    /* An IPv4-mapped address is the IPv4 host (address.h). */
    CHECK_EQ(plan_families_of("::ffff:198.51.100.11", others, 0), FAMILY_V4);
}

int main(void)
{
    snprintf(key_path, sizeof(key_path), "/tmp/qcg-test-proxy-families.%ld", (long)getpid());
    FILE *f = fopen(key_path, "w");
    REQUIRE(f != NULL);
    fprintf(f, "%064d\n", 7);
    fclose(f);
    REQUIRE(chmod(key_path, 0600) == 0);
    test_parse();
    test_bridge();
    test_families_of();
    unlink(key_path);
    return check_result("broker-proxy-families");
}
