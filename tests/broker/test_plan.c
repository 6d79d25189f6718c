/*
 * broker-plan: the plan table of docs/architecture.md over the five lab sites
 * (open, fw, nata, natb, sym) pairwise, the same cluster, a firewalled site
 * with an open port range, and the fallback (techniques already tried, no
 * proxy configured), and the family of a plan (IPv6 first, IPv4 behind it).
 */
#include <string.h>

#include "check.h"
#include "plan.h"
#include "plan_traverse6.h"

/* The lab's sites as their frontends declare them; every helper can intercept. */
static const struct plan_end open_site = {"open", CLUSTER_OPEN, 0, 0, true, 20001, NULL};
static const struct plan_end fw_site = {"fw", CLUSTER_FIREWALLED, 0, 0, true, 20001, NULL};
static const struct plan_end nata_site = {"nata", CLUSTER_NAT, 0, 0, true, 20001, NULL};
static const struct plan_end natb_site = {"natb", CLUSTER_NAT, 0, 0, true, 20001, NULL};
static const struct plan_end sym_site = {"sym", CLUSTER_SYMNAT, 0, 0, true, 20001, NULL};

struct row {
    const struct plan_end *from, *to;
    enum technique technique; /* with a proxy configured, nothing tried: always ok */
};

/* Rows: initiator, target, expected technique (docs/design.md). */
static const struct row pairs[] = {
    /* to open: always direct */
    {&open_site, &open_site, TECH_DIRECT},
    {&fw_site, &open_site, TECH_DIRECT},
    {&nata_site, &open_site, TECH_DIRECT},
    {&natb_site, &open_site, TECH_DIRECT},
    {&sym_site, &open_site, TECH_DIRECT},
    /* to fw (no open range, node can intercept) */
    {&open_site, &fw_site, TECH_REVERSED},
    {&fw_site, &fw_site, TECH_DIRECT},
    {&nata_site, &fw_site, TECH_TRAVERSING},
    {&natb_site, &fw_site, TECH_TRAVERSING},
    {&sym_site, &fw_site, TECH_PROXY},
    /* to nata */
    {&open_site, &nata_site, TECH_REVERSED},
    {&fw_site, &nata_site, TECH_HOLEPUNCH},
    {&nata_site, &nata_site, TECH_DIRECT},
    {&natb_site, &nata_site, TECH_HOLEPUNCH},
    {&sym_site, &nata_site, TECH_PROXY},
    /* to natb */
    {&open_site, &natb_site, TECH_REVERSED},
    {&fw_site, &natb_site, TECH_HOLEPUNCH},
    {&nata_site, &natb_site, TECH_HOLEPUNCH},
    {&natb_site, &natb_site, TECH_DIRECT},
    {&sym_site, &natb_site, TECH_PROXY},
    /* to sym */
    {&open_site, &sym_site, TECH_REVERSED},
    {&fw_site, &sym_site, TECH_PROXY},
    {&nata_site, &sym_site, TECH_PROXY},
    {&natb_site, &sym_site, TECH_PROXY},
    {&sym_site, &sym_site, TECH_DIRECT},
};

static void decide(const struct plan_end *from, const struct plan_end *to, unsigned tried,
                   bool have_proxy, struct plan_decision *d)
{
    struct plan_offer offer = {.proxy = have_proxy, .reflector = true};
    plan_decide(from, to, tried, &offer, d);
}

static void check_row(const struct plan_end *from, const struct plan_end *to, enum technique t)
{
    struct plan_decision d;
    decide(from, to, 0, true, &d);
    CHECKF(d.ok && d.technique == t, "%s -> %s: got %s %s, want ok %s (%s)", from->cluster,
           to->cluster, d.ok ? "ok" : "unavailable", technique_name(d.technique), technique_name(t),
           d.reason);
    /* Only direct plans may be cached, and every plan explains itself. */
    CHECKF(d.cacheable == (t == TECH_DIRECT), "%s -> %s: cacheable %d", from->cluster, to->cluster,
           d.cacheable);
    CHECKF(strstr(d.reason, to->cluster) != NULL, "%s -> %s: reason does not name the target: %s",
           from->cluster, to->cluster, d.reason);
    if (t != TECH_DIRECT) {
        CHECKF(strstr(d.reason, from->cluster) != NULL, "%s -> %s: reason: %s", from->cluster,
               to->cluster, d.reason);
        /* The reason ends with the technique chosen. */
        const char *name = technique_name(t);
        size_t rl = strlen(d.reason), nl = strlen(name);
        CHECKF(rl > nl && strcmp(d.reason + rl - nl, name) == 0, "%s -> %s: reason: %s",
               from->cluster, to->cluster, d.reason);
    }
}

static void test_reasons(void)
{
    struct plan_decision d;
    decide(&nata_site, &natb_site, 0, true, &d);
    CHECKF(strcmp(d.reason, "cluster nata is behind a NAT and cluster natb is not reachable "
                            "(behind a NAT): holepunch") == 0,
           "reason: %s", d.reason);
    decide(&nata_site, &fw_site, TECH_BIT(TECH_TRAVERSING), true, &d);
    CHECKF(strstr(d.reason, ": traversing already tried; holepunch") != NULL &&
               d.technique == TECH_HOLEPUNCH,
           "reason: %s", d.reason);
    decide(&nata_site, &sym_site, 0, true, &d);
    CHECKF(strstr(d.reason, "behind a symmetric NAT") != NULL && d.technique == TECH_PROXY &&
               strstr(d.reason, "holepunch") == NULL,
           "reason: %s", d.reason);
    decide(&open_site, &fw_site, 0, true, &d);
    CHECKF(strcmp(d.reason, "cluster open is open and cluster fw is not reachable (firewalled "
                            "with no open port range): reversed") == 0,
           "reason: %s", d.reason);
}

/* What the broker offers and remembers: no reflector, no hole punching; a
   technique remembered as failing is skipped like a tried one. */
static void test_offer(void)
{
    struct plan_decision d;
    struct plan_offer none = {.proxy = true, .reflector = false};
    plan_decide(&nata_site, &natb_site, 0, &none, &d);
    CHECKF(d.ok && d.technique == TECH_PROXY &&
               strstr(d.reason, "holepunch needed, but the broker has no reflector configured"),
           "no reflector: %s", d.reason);
    struct plan_offer mem = {
        .proxy = true, .reflector = true, .remembered = TECH_BIT(TECH_HOLEPUNCH)};
    plan_decide(&sym_site, &natb_site, 0, &mem, &d);
    CHECKF(d.ok && d.technique == TECH_PROXY, "sym -> natb, remembered: %s", d.reason);
    plan_decide(&nata_site, &natb_site, 0, &mem, &d);
    CHECKF(d.ok && d.technique == TECH_PROXY &&
               strstr(d.reason, "holepunch failed recently between these clusters; proxy"),
           "nata -> natb, holepunch remembered: %s", d.reason);
    mem.remembered = TECH_BIT(TECH_TRAVERSING);
    plan_decide(&nata_site, &fw_site, 0, &mem, &d);
    CHECKF(d.ok && d.technique == TECH_HOLEPUNCH, "nata -> fw, traversing remembered: %s",
           d.reason);
    /* Memory never blocks direct inside a site: direct does not look at it
       unless it failed there. */
    /* A proxy that failed (killed, restarting) is still the last resort: a
       job whose reconnect hit the dead proxy gets the live one next (issue
       19); only its own tried list rules it out. */
    mem.remembered = TECH_BIT(TECH_PROXY);
    plan_decide(&nata_site, &natb_site, TECH_BIT(TECH_HOLEPUNCH), &mem, &d);
    CHECKF(d.ok && d.technique == TECH_PROXY, "proxy remembered, still planned: %s", d.reason);
    plan_decide(&nata_site, &natb_site, TECH_BIT(TECH_HOLEPUNCH) | TECH_BIT(TECH_PROXY), &mem, &d);
    CHECKF(!d.ok && strstr(d.reason, "no technique left"), "all tried: %s", d.reason);
}

static void test_open_range(void)
{
    /* A firewalled site that opens 30000-30099: contacts inside are direct,
       outside they are like any firewalled contact. */
    struct plan_end fw_in = {"fwr", CLUSTER_FIREWALLED, 30000, 30099, true, 30050, NULL};
    struct plan_end fw_out = fw_in;
    fw_out.port = 20001;
    struct plan_end fw_edge = fw_in;
    fw_edge.port = 30099;
    check_row(&nata_site, &fw_in, TECH_DIRECT);
    check_row(&sym_site, &fw_edge, TECH_DIRECT);
    check_row(&nata_site, &fw_out, TECH_TRAVERSING);
    /* As the initiator, a contact inside the open range can take a call back. */
    check_row(&fw_in, &nata_site, TECH_REVERSED);
    check_row(&fw_in, &sym_site, TECH_REVERSED);
    check_row(&fw_out, &nata_site, TECH_HOLEPUNCH);

    struct plan_decision d;
    decide(&nata_site, &fw_out, 0, true, &d);
    CHECKF(strstr(d.reason, "port 20001 outside its open range 30000-30099") != NULL, "reason: %s",
           d.reason);
}

static void test_no_intercept(void)
{
    /* A helper without privileges on either side: traversing is never
       planned, hole punching takes over (no privileges needed). */
    struct plan_end fw_plain = fw_site, nata_plain = nata_site;
    fw_plain.can_intercept = false;
    nata_plain.can_intercept = false;
    check_row(&nata_site, &fw_plain, TECH_HOLEPUNCH);
    check_row(&nata_plain, &fw_site, TECH_HOLEPUNCH);
    check_row(&open_site, &fw_plain, TECH_REVERSED);
    check_row(&sym_site, &fw_plain, TECH_PROXY);
    struct plan_decision d;
    decide(&nata_site, &fw_plain, 0, true, &d);
    CHECKF(strstr(d.reason, "cannot intercept") != NULL && strstr(d.reason, "traversing") == NULL,
           "reason: %s", d.reason);
    decide(&nata_plain, &fw_site, 0, true, &d);
    CHECKF(strstr(d.reason, "nata is behind a NAT, its helper cannot intercept") != NULL,
           "reason: %s", d.reason);
}

static void test_same_cluster(void)
{
    /* Inside one site everything is direct to the private address, whatever its kind. */
    const struct plan_end *sites[] = {&open_site, &fw_site, &nata_site, &natb_site, &sym_site};
    for (size_t i = 0; i < sizeof(sites) / sizeof(sites[0]); i++) {
        struct plan_end other = *sites[i];
        other.port = 20002;
        struct plan_decision d;
        decide(sites[i], &other, 0, false, &d);
        CHECKF(d.ok && d.technique == TECH_DIRECT && d.cacheable, "%s internal: %s",
               sites[i]->cluster, d.reason);
        CHECKF(strstr(d.reason, "same cluster") != NULL, "reason: %s", d.reason);
        /* Direct failed inside a site: the target calls back. */
        decide(sites[i], &other, TECH_BIT(TECH_DIRECT), true, &d);
        CHECKF(d.ok && d.technique == TECH_REVERSED && !d.cacheable,
               "%s internal, direct tried: %s", sites[i]->cluster, d.reason);
    }
}

/* The fallback: what was tried is skipped, and without a proxy a pair that
   needs one is unavailable, naming the proxy. */
static void test_fallback(void)
{
    struct plan_decision d;
    decide(&open_site, &nata_site, TECH_BIT(TECH_REVERSED), true, &d);
    CHECKF(d.ok && d.technique == TECH_HOLEPUNCH && !d.cacheable &&
               strstr(d.reason, "reversed already tried; holepunch") != NULL,
           "open -> nata, reversed tried: %s", d.reason);
    decide(&open_site, &nata_site, TECH_BIT(TECH_REVERSED) | TECH_BIT(TECH_HOLEPUNCH), true, &d);
    CHECKF(d.ok && d.technique == TECH_PROXY && !d.cacheable &&
               strstr(d.reason, "reversed already tried; holepunch already tried; proxy") != NULL,
           "open -> nata, reversed and holepunch tried: %s", d.reason);
    decide(&open_site, &nata_site,
           TECH_BIT(TECH_REVERSED) | TECH_BIT(TECH_HOLEPUNCH) | TECH_BIT(TECH_PROXY), true, &d);
    CHECKF(!d.ok && d.technique == TECH_PROXY && strstr(d.reason, "reversed already tried;") &&
               strstr(d.reason, "proxy already tried; no technique left"),
           "open -> nata, all tried: %s", d.reason);
    decide(&open_site, &nata_site, 0, false, &d);
    CHECKF(d.ok && d.technique == TECH_REVERSED, "open -> nata, no proxy: %s", d.reason);
    decide(&open_site, &nata_site, TECH_BIT(TECH_REVERSED) | TECH_BIT(TECH_HOLEPUNCH), false, &d);
    CHECKF(!d.ok && d.technique == TECH_PROXY && strstr(d.reason, "no proxy configured"),
           "open -> nata, reversed and holepunch tried, no proxy: %s", d.reason);
    decide(&sym_site, &nata_site, 0, false, &d);
    CHECKF(!d.ok && d.technique == TECH_PROXY && !d.cacheable &&
               strstr(d.reason, "proxy needed, but the broker has no proxy configured"),
           "sym -> nata, no proxy: %s", d.reason);
    decide(&fw_site, &nata_site, TECH_BIT(TECH_HOLEPUNCH), false, &d);
    CHECKF(!d.ok && d.technique == TECH_PROXY &&
               strstr(d.reason, "holepunch already tried; proxy needed"),
           "fw -> nata, holepunch tried, no proxy: %s", d.reason);
    /* Techniques that do not apply are not named as tried or skipped; a
       direct connection that failed towards an open site (a wrong
       declaration) falls to hole punching. */
    decide(&nata_site, &open_site, TECH_BIT(TECH_DIRECT), true, &d);
    CHECKF(d.ok && d.technique == TECH_HOLEPUNCH && strstr(d.reason, "reversed") == NULL &&
               strstr(d.reason, "direct already tried"),
           "nata -> open, direct tried: %s", d.reason);
    decide(&sym_site, &open_site, TECH_BIT(TECH_DIRECT), true, &d);
    CHECKF(d.ok && d.technique == TECH_PROXY && strstr(d.reason, "holepunch") == NULL,
           "sym -> open, direct tried: %s", d.reason);
}

/* Whether technique t can work between two different lab sites (every helper
   able to intercept), as docs/design.md says. */
static bool works_between(const struct plan_end *from, const struct plan_end *to, enum technique t)
{
    switch (t) {
    case TECH_DIRECT:
        return to->kind == CLUSTER_OPEN;
    case TECH_REVERSED:
        return from->kind == CLUSTER_OPEN;
    case TECH_TRAVERSING:
        return to->kind == CLUSTER_FIREWALLED && from->kind != CLUSTER_SYMNAT;
    case TECH_HOLEPUNCH:
        return from->kind != CLUSTER_SYMNAT && to->kind != CLUSTER_SYMNAT;
    default:
        return true;
    }
}

static void only(const struct plan_end *from, const struct plan_end *to, enum technique t,
                 struct plan_decision *d)
{
    /* The memory says everything failed: `only` must not care. */
    struct plan_offer offer = {.proxy = true, .reflector = true, .remembered = ~0u};
    plan_only(from, to, t, &offer, d);
}

/* lookup `only`: every technique between every pair of lab sites. */
static void test_only_matrix(void)
{
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        const struct plan_end *from = pairs[i].from, *to = pairs[i].to;
        bool same = strcmp(from->cluster, to->cluster) == 0;
        for (enum technique t = TECH_DIRECT; t <= TECH_PROXY; t++) {
            struct plan_decision d;
            only(from, to, t, &d);
            bool want = same ? t == TECH_DIRECT : works_between(from, to, t);
            CHECKF(d.ok == want && d.technique == t && !d.cacheable,
                   "only %s, %s -> %s: got %s (%s)", technique_name(t), from->cluster, to->cluster,
                   d.ok ? "ok" : "unavailable", d.reason);
            if (d.ok) {
                CHECKF(strstr(d.reason, technique_name(t)) != NULL, "only %s: reason %s",
                       technique_name(t), d.reason);
            } else if (same) {
                CHECKF(strstr(d.reason, "only direct is used inside a cluster") != NULL,
                       "only %s inside %s: %s", technique_name(t), to->cluster, d.reason);
            } else {
                /* A cause naming a cluster of the pair; its consequence. */
                CHECKF((strstr(d.reason, from->cluster) != NULL ||
                        strstr(d.reason, to->cluster) != NULL) &&
                           (strstr(d.reason, "cannot work") != NULL ||
                            strstr(d.reason, "traversing is for firewalled targets") != NULL),
                       "only %s, %s -> %s: reason %s", technique_name(t), from->cluster,
                       to->cluster, d.reason);
            }
        }
    }
}

static void test_only_reasons(void)
{
    struct plan_decision d;
    only(&nata_site, &fw_site, TECH_DIRECT, &d);
    CHECKF(strcmp(d.reason, "cluster fw is firewalled with no open port range: it accepts no "
                            "connection from outside \u2192 direct cannot work") == 0,
           "direct: %s", d.reason);
    only(&nata_site, &open_site, TECH_REVERSED, &d);
    CHECKF(strcmp(d.reason, "cluster nata (the initiator) is behind a NAT: the target's helper "
                            "cannot connect back to it \u2192 reversed cannot work") == 0,
           "reversed: %s", d.reason);
    only(&open_site, &nata_site, TECH_TRAVERSING, &d);
    CHECKF(strcmp(d.reason, "cluster nata is behind a NAT, not a firewall: traversing is for "
                            "firewalled targets") == 0,
           "traversing to a NAT: %s", d.reason);
    only(&open_site, &open_site, TECH_TRAVERSING, &d);
    CHECKF(!d.ok && strstr(d.reason, "same cluster open: only direct is used inside a cluster"),
           "traversing inside: %s", d.reason);
    only(&sym_site, &fw_site, TECH_TRAVERSING, &d);
    CHECKF(strstr(d.reason, "cluster sym (the initiator) is behind a symmetric NAT: its mapping "
                            "varies by destination, so the SYN's public source port cannot be "
                            "predicted \u2192 traversing cannot work") != NULL,
           "traversing from sym: %s", d.reason);
    struct plan_end fw1 = fw_site, nata1 = nata_site;
    fw1.can_intercept = false;
    fw1.node = "fw1";
    only(&nata_site, &fw1, TECH_TRAVERSING, &d);
    CHECKF(!d.ok &&
               strcmp(d.reason, "the helper of node fw1 cannot intercept (no "
                                "CAP_NET_ADMIN/CAP_NET_RAW) \u2192 traversing cannot work") == 0,
           "traversing, target cannot intercept: %s", d.reason);
    nata1.can_intercept = false;
    nata1.node = "nata1";
    only(&nata1, &fw_site, TECH_TRAVERSING, &d);
    CHECKF(!d.ok && strstr(d.reason, "the helper of node nata1 cannot intercept"),
           "traversing, initiator cannot intercept: %s", d.reason);
    struct plan_end fw_open = {"fwr", CLUSTER_FIREWALLED, 30000, 30099, true, 30050, "fwr1"};
    only(&nata_site, &fw_open, TECH_TRAVERSING, &d);
    CHECKF(!d.ok && strstr(d.reason, "port 30050 in its open range") &&
               strstr(d.reason, "traversing is for firewalled targets"),
           "traversing to an open port: %s", d.reason);
    only(&nata_site, &fw_open, TECH_DIRECT, &d);
    CHECKF(d.ok && !d.cacheable, "direct to an open port: %s", d.reason);
    only(&nata_site, &sym_site, TECH_HOLEPUNCH, &d);
    CHECKF(strcmp(d.reason, "site sym: mapping varies by destination (symmetric NAT) \u2192 hole "
                            "punching cannot work") == 0,
           "holepunch to sym: %s", d.reason);
    only(&sym_site, &nata_site, TECH_HOLEPUNCH, &d);
    CHECKF(!d.ok && strstr(d.reason, "site sym:"), "holepunch from sym: %s", d.reason);
    struct plan_offer bare = {.proxy = false, .reflector = false};
    plan_only(&nata_site, &natb_site, TECH_HOLEPUNCH, &bare, &d);
    CHECKF(!d.ok && d.technique == TECH_HOLEPUNCH &&
               strstr(d.reason, "the broker has no reflector configured"),
           "holepunch, no reflector: %s", d.reason);
    plan_only(&nata_site, &natb_site, TECH_PROXY, &bare, &d);
    CHECKF(!d.ok && d.technique == TECH_PROXY &&
               strstr(d.reason, "the broker has no proxy configured"),
           "proxy, none configured: %s", d.reason);
    /* Remembered failures are ignored; the reason says what was asked. */
    only(&nata_site, &natb_site, TECH_HOLEPUNCH, &d);
    CHECKF(d.ok && !d.cacheable && strstr(d.reason, "cluster nata is behind a NAT") &&
               strstr(d.reason, "holepunch asked for alone"),
           "holepunch, memory says failed: %s", d.reason);
    only(&fw_site, &fw_site, TECH_DIRECT, &d);
    CHECKF(d.ok && !d.cacheable && strstr(d.reason, "same cluster fw"), "direct inside: %s",
           d.reason);
    only(&fw_site, &nata_site, TECH_NONE, &d);
    CHECKF(!d.ok, "none is no technique: %s", d.reason);
}

static void test_tried_parse(void)
{
    unsigned t = 99;
    char why[128];
    CHECKF(plan_tried_parse(NULL, &t, why, sizeof(why)) == 0 && t == 0, "NULL");
    CHECKF(plan_tried_parse("", &t, why, sizeof(why)) == 0 && t == 0, "empty");
    CHECKF(plan_tried_parse("reversed,proxy", &t, why, sizeof(why)) == 0 &&
               t == (TECH_BIT(TECH_REVERSED) | TECH_BIT(TECH_PROXY)),
           "reversed,proxy: %x", t);
    CHECKF(plan_tried_parse("direct,,direct", &t, why, sizeof(why)) == 0 &&
               t == TECH_BIT(TECH_DIRECT),
           "repeats and empty items");
    CHECKF(plan_tried_parse("reversed,warp", &t, why, sizeof(why)) == -1 && strstr(why, "warp"),
           "unknown name: %s", why);
    CHECKF(plan_tried_parse("none", &t, why, sizeof(why)) == -1, "none is no technique");
    CHECKF(plan_tried_parse("holepunch6,reversed", &t, why, sizeof(why)) == 0 &&
               t == (TECH_BIT(TECH_PUNCH6) | TECH_BIT(TECH_REVERSED)),
           "holepunch6: the IPv6 punch apart: %x", t);
    char longer[300];
    memset(longer, 'a', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    CHECKF(plan_tried_parse(longer, &t, why, sizeof(why)) == -1 && strstr(why, "longer"),
           "too long: %s", why);
}

/* The family of a plan: IPv6 first where both ends have it and the target
   takes it, IPv4 behind it; IPv6 instead of a NAT's technique only through
   an open range, and never once direct failed. */
static void test_family(void)
{
    struct plan_decision d;
    struct plan_offer offer = {.proxy = true, .reflector = true};
    const struct plan_v6 both = {true, true, false}, open6 = {true, true, true};
    const struct plan_v6 no_from = {false, true, true}, no_to = {true, false, false};

    decide(&open_site, &open_site, 0, true, &d);
    CHECKF(plan_prefer_v6(&nata_site, &open_site, &both, 0, &offer, TECH_NONE, &d) ==
                   PLAN_FAMILY_V6 &&
               d.ok && d.technique == TECH_DIRECT && d.cacheable &&
               strstr(d.reason, "over IPv6 first, IPv4 behind it") != NULL,
           "to an open site with IPv6 on both ends: IPv6 first: %s", d.reason);
    decide(&nata_site, &nata_site, 0, true, &d);
    CHECKF(plan_prefer_v6(&nata_site, &nata_site, &both, 0, &offer, TECH_NONE, &d) ==
               PLAN_FAMILY_V6,
           "inside a NATed site: IPv6 first: %s", d.reason);
    decide(&open_site, &nata_site, 0, true, &d);
    CHECKF(plan_prefer_v6(&open_site, &nata_site, &both, 0, &offer, TECH_NONE, &d) ==
                   PLAN_FAMILY_V4 &&
               d.technique == TECH_REVERSED,
           "to a NATed site without an open IPv6 range: reversed over IPv4: %s", d.reason);
    CHECKF(plan_prefer_v6(&open_site, &nata_site, &no_from, 0, &offer, TECH_NONE, &d) ==
                   PLAN_FAMILY_V4 &&
               d.technique == TECH_REVERSED,
           "an initiator without IPv6: IPv4: %s", d.reason);
    decide(&sym_site, &natb_site, 0, true, &d);
    CHECKF(plan_prefer_v6(&sym_site, &natb_site, &open6, 0, &offer, TECH_NONE, &d) ==
                   PLAN_FAMILY_V6_ONLY &&
               d.ok && d.technique == TECH_DIRECT &&
               strstr(d.reason, "open range: direct over IPv6") != NULL,
           "the NAT avoided: direct over IPv6 instead of the proxy: %s", d.reason);
    decide(&sym_site, &natb_site, TECH_BIT(TECH_DIRECT), true, &d);
    CHECKF(plan_prefer_v6(&sym_site, &natb_site, &open6, TECH_BIT(TECH_DIRECT), &offer, TECH_NONE,
                          &d) == PLAN_FAMILY_V4 &&
               d.technique == TECH_PROXY,
           "IPv6 direct tried: the IPv4 plan (proxy): %s", d.reason);
    struct plan_offer failed = offer;
    failed.remembered = TECH_BIT(TECH_DIRECT);
    decide(&sym_site, &natb_site, 0, true, &d);
    CHECKF(plan_prefer_v6(&sym_site, &natb_site, &open6, 0, &failed, TECH_NONE, &d) ==
               PLAN_FAMILY_V4,
           "direct failed lately between the sites: the IPv4 plan: %s", d.reason);
    plan_only(&sym_site, &natb_site, TECH_DIRECT, &offer, &d);
    CHECKF(!d.ok &&
               plan_prefer_v6(&sym_site, &natb_site, &open6, 0, &offer, TECH_DIRECT, &d) ==
                   PLAN_FAMILY_V6_ONLY &&
               d.ok && !d.cacheable,
           "only=direct through an open IPv6 range: ok, never cached: %s", d.reason);
    plan_only(&sym_site, &natb_site, TECH_PROXY, &offer, &d);
    CHECKF(plan_prefer_v6(&sym_site, &natb_site, &open6, 0, &offer, TECH_PROXY, &d) ==
                   PLAN_FAMILY_V4 &&
               d.technique == TECH_PROXY,
           "only=proxy stays the proxy: %s", d.reason);
    decide(&open_site, &open_site, 0, true, &d);
    CHECKF(plan_prefer_v6(&open_site, &open_site, &no_to, 0, &offer, TECH_NONE, &d) ==
               PLAN_FAMILY_V4,
           "a target without IPv6: IPv4: %s", d.reason);
}

/* Hole punching over IPv6: where both ends have IPv6 and IPv4 needs a punch,
   a relay or has nothing left (v6 is an IPv6-only firewalled site). */
static void test_punch6(void)
{
    struct plan_decision d;
    struct plan_offer offer = {.proxy = true, .reflector = true, .reflector6 = true};
    const struct plan_families dual = {FAMILY_V4 | FAMILY_V6, FAMILY_V4 | FAMILY_V6};
    const struct plan_families to_v6_only = {FAMILY_V4 | FAMILY_V6, FAMILY_V6};
    const struct plan_families from_v4_only = {FAMILY_V4, FAMILY_V4 | FAMILY_V6};
    static const struct plan_end v6_site = {"v6", CLUSTER_FIREWALLED, 0, 0, true, 20001, NULL};

    decide(&nata_site, &natb_site, 0, true, &d);
    CHECKF(d.technique == TECH_HOLEPUNCH &&
               plan_prefer_punch6(&nata_site, &natb_site, &dual, 0, &offer, &d) && d.ok &&
               d.technique == TECH_HOLEPUNCH && !d.cacheable &&
               strstr(d.reason, "holepunch over IPv6") != NULL &&
               strstr(d.reason, "over IPv4: holepunch") != NULL,
           "NAT to NAT with IPv6 on both: the punch goes over IPv6: %s", d.reason);
    decide(&sym_site, &natb_site, 0, true, &d);
    CHECKF(d.technique == TECH_PROXY &&
               plan_prefer_punch6(&sym_site, &natb_site, &dual, 0, &offer, &d) &&
               d.technique == TECH_HOLEPUNCH && strstr(d.reason, "over IPv4: proxy") != NULL,
           "a symmetric NAT's node with IPv6: punched over IPv6, not relayed: %s", d.reason);
    decide(&nata_site, &v6_site, 0, true, &d);
    CHECKF(d.technique == TECH_TRAVERSING &&
               plan_prefer_punch6(&nata_site, &v6_site, &to_v6_only, 0, &offer, &d) &&
               d.technique == TECH_HOLEPUNCH,
           "traversing into a node without IPv4: punched over IPv6: %s", d.reason);
    decide(&nata_site, &fw_site, 0, true, &d);
    CHECKF(d.technique == TECH_TRAVERSING &&
               !plan_prefer_punch6(&nata_site, &fw_site, &dual, 0, &offer, &d) &&
               d.technique == TECH_TRAVERSING,
           "traversing over IPv4 where both have IPv4 stays: %s", d.reason);
    decide(&nata_site, &natb_site, 0, true, &d);
    CHECKF(!plan_prefer_punch6(&nata_site, &natb_site, &from_v4_only, 0, &offer, &d),
           "an initiator without IPv6: the IPv4 punch");
    CHECKF(!plan_prefer_punch6(&nata_site, &natb_site, &dual, TECH_BIT(TECH_HOLEPUNCH), &offer, &d),
           "hole punching tried: not again over IPv6");
    struct plan_offer failed = offer;
    failed.remembered = TECH_BIT(TECH_HOLEPUNCH);
    CHECKF(!plan_prefer_punch6(&nata_site, &natb_site, &dual, 0, &failed, &d),
           "hole punching failed lately between the sites: not over IPv6 either");
    struct plan_offer v4_refl = offer;
    v4_refl.reflector6 = false;
    CHECKF(!plan_prefer_punch6(&nata_site, &natb_site, &dual, 0, &v4_refl, &d) &&
               d.technique == TECH_HOLEPUNCH && strstr(d.reason, "IPv6") == NULL,
           "a reflector without IPv6: the IPv4 punch: %s", d.reason);
    decide(&nata_site, &nata_site, 0, true, &d);
    CHECKF(!plan_prefer_punch6(&nata_site, &nata_site, &dual, 0, &offer, &d) &&
               d.technique == TECH_DIRECT,
           "inside a site: direct");
    decide(&open_site, &nata_site, 0, true, &d);
    CHECKF(!plan_prefer_punch6(&open_site, &nata_site, &dual, 0, &offer, &d) &&
               d.technique == TECH_REVERSED,
           "reversed stays reversed: %s", d.reason);
}

/* A lookup of a dual-stack pair as the registry makes it: the IPv4 plan,
   then hole punching over IPv6 where it saves something.  True: over IPv6. */
static bool lookup_dual(const struct plan_end *from, const struct plan_end *to, unsigned tried,
                        const struct plan_offer *offer, struct plan_decision *d)
{
    const struct plan_families dual = {FAMILY_V4 | FAMILY_V6, FAMILY_V4 | FAMILY_V6};
    plan_decide(from, to, tried, offer, d);
    return plan_prefer_punch6(from, to, &dual, tried, offer, d);
}

/* The order within one connect: the IPv6 punch, the IPv4 punch, the proxy,
   each reason naming the family; and the memory of each family apart. */
static void test_punch_families(void)
{
    struct plan_decision d;
    const struct plan_offer offer = {.proxy = true, .reflector = true, .reflector6 = true};
    unsigned p6 = TECH_BIT(TECH_PUNCH6), p4 = TECH_BIT(TECH_HOLEPUNCH);

    CHECKF(lookup_dual(&nata_site, &natb_site, 0, &offer, &d) && d.ok &&
               d.technique == TECH_HOLEPUNCH,
           "first: the IPv6 punch: %s", d.reason);
    CHECKF(!lookup_dual(&nata_site, &natb_site, p6, &offer, &d) && d.ok &&
               d.technique == TECH_HOLEPUNCH &&
               strstr(d.reason, "holepunch over IPv6 already tried; holepunch over IPv4") != NULL &&
               d.punch4,
           "the IPv6 punch failed: the IPv4 punch in the same connect: %s", d.reason);
    CHECKF(!lookup_dual(&nata_site, &natb_site, p6 | p4, &offer, &d) && d.ok &&
               d.technique == TECH_PROXY &&
               strstr(d.reason, "holepunch over IPv6 already tried; holepunch over IPv4 already "
                                "tried; proxy") != NULL,
           "both punches failed: the proxy: %s", d.reason);
    /* An older helper's plain "holepunch" after the IPv6 punch: as before. */
    CHECKF(!lookup_dual(&nata_site, &natb_site, p4, &offer, &d) && d.ok &&
               d.technique == TECH_PROXY && strstr(d.reason, "IPv6") == NULL,
           "plain holepunch tried: no punch of either family: %s", d.reason);
    /* A symmetric NAT over IPv4: after the IPv6 punch, the relay. */
    CHECKF(!lookup_dual(&sym_site, &natb_site, p6, &offer, &d) && d.ok &&
               d.technique == TECH_PROXY &&
               strstr(d.reason, "holepunch over IPv6 already tried; proxy") != NULL,
           "symmetric NAT, the IPv6 punch failed: the proxy: %s", d.reason);

    struct plan_offer mem = offer;
    mem.remembered = p6;
    CHECKF(!lookup_dual(&nata_site, &natb_site, 0, &mem, &d) && d.ok &&
               d.technique == TECH_HOLEPUNCH &&
               strstr(d.reason, "holepunch over IPv6 failed recently between these clusters; "
                                "holepunch over IPv4") != NULL &&
               d.punch4,
           "the IPv6 punch failed lately: the IPv4 punch at once: %s", d.reason);
    mem.remembered = p4;
    CHECKF(!lookup_dual(&nata_site, &natb_site, 0, &mem, &d) && d.ok && d.technique == TECH_PROXY,
           "hole punching (either family, older reports) failed lately: the proxy: %s", d.reason);
    mem.remembered = p6 | p4;
    CHECKF(!lookup_dual(&nata_site, &natb_site, 0, &mem, &d) && d.ok && d.technique == TECH_PROXY &&
               strstr(d.reason, "holepunch over IPv4 failed recently") != NULL,
           "both punches failed lately: the proxy: %s", d.reason);
    mem.proxy = false;
    mem.remembered = p6;
    CHECKF(!lookup_dual(&nata_site, &natb_site, p4, &mem, &d) && !d.ok &&
               d.technique == TECH_PROXY && strstr(d.reason, "holepunch over IPv4 already tried"),
           "no proxy, both punches out: nothing left: %s", d.reason);
}

/* Traversing over IPv6 (plan_traverse6.h), as the registry makes it: the
   IPv4 plan, then traversing over IPv6, then hole punching over IPv6.
   True: traversing over IPv6. */
static bool lookup_v6(const struct plan_end *from, const struct plan_end *to,
                      const struct plan_families *fam, unsigned tried,
                      const struct plan_offer *offer, struct plan_decision *d)
{
    plan_decide(from, to, tried, offer, d);
    if (plan_prefer_traverse6(from, to, fam, tried, offer, true, d))
        return true;
    plan_prefer_punch6(from, to, fam, tried, offer, d);
    return false;
}

static void test_traverse6(void)
{
    struct plan_decision d;
    const struct plan_offer offer = {.proxy = true, .reflector = true, .reflector6 = true};
    const struct plan_families dual = {FAMILY_V4 | FAMILY_V6, FAMILY_V4 | FAMILY_V6};
    const struct plan_families to_v6_only = {FAMILY_V4 | FAMILY_V6, FAMILY_V6};
    const struct plan_families from_v6_only = {FAMILY_V6, FAMILY_V4 | FAMILY_V6};
    const struct plan_families from_v4_only = {FAMILY_V4, FAMILY_V4 | FAMILY_V6};
    static const struct plan_end v6_site = {"v6", CLUSTER_FIREWALLED, 0, 0, true, 20001, NULL};
    static const struct plan_end v6_noint = {"v6", CLUSTER_FIREWALLED, 0, 0, false, 20001, NULL};
    unsigned tv = TECH_BIT(TECH_TRAVERSING), p6 = TECH_BIT(TECH_PUNCH6);

    /* The lab's v61 <-> nata1: over IPv4 the one has no address, the other
       is NATed; over IPv6 both sit behind stateful firewalls. */
    CHECKF(lookup_v6(&nata_site, &v6_site, &to_v6_only, 0, &offer, &d) && d.ok &&
               d.technique == TECH_TRAVERSING && !d.cacheable &&
               strstr(d.reason, "over IPv4: traversing): traversing over IPv6") != NULL,
           "into an IPv6-only firewalled node: traversed over IPv6: %s", d.reason);
    CHECKF(lookup_v6(&v6_site, &nata_site, &from_v6_only, 0, &offer, &d) && d.ok &&
               d.technique == TECH_TRAVERSING &&
               strstr(d.reason, "over IPv4: holepunch): traversing over IPv6") != NULL,
           "from an IPv6-only node into a NAT's site: traversed over IPv6: %s", d.reason);
    CHECKF(lookup_v6(&sym_site, &natb_site, &dual, 0, &offer, &d) &&
               strstr(d.reason, "over IPv4: proxy") != NULL,
           "a symmetric NAT's node: traversed over IPv6, not relayed: %s", d.reason);
    /* Within the same connect: after it failed, the IPv6 punch, then IPv4's. */
    CHECKF(!lookup_v6(&v6_site, &nata_site, &from_v6_only, tv, &offer, &d) && d.ok &&
               d.technique == TECH_HOLEPUNCH && strstr(d.reason, "holepunch over IPv6") != NULL,
           "traversing over IPv6 failed: the IPv6 punch next: %s", d.reason);
    CHECKF(!lookup_v6(&sym_site, &natb_site, &dual, tv, &offer, &d) && d.ok &&
               d.technique == TECH_HOLEPUNCH && strstr(d.reason, "holepunch over IPv6") != NULL,
           "a symmetric NAT's node, traversing over IPv6 failed: the IPv6 punch: %s", d.reason);
    CHECKF(!lookup_v6(&sym_site, &natb_site, &dual, tv | p6, &offer, &d) && d.ok &&
               d.technique == TECH_PROXY,
           "then the proxy (no IPv4 punch with a symmetric NAT): %s", d.reason);
    /* What stays as it was. */
    CHECKF(!lookup_v6(&nata_site, &fw_site, &dual, 0, &offer, &d) &&
               d.technique == TECH_TRAVERSING && strstr(d.reason, "IPv6") == NULL,
           "traversing over IPv4 where both have IPv4: stays IPv4: %s", d.reason);
    CHECKF(!lookup_v6(&open_site, &nata_site, &dual, 0, &offer, &d) && d.technique == TECH_REVERSED,
           "reversed stays reversed: %s", d.reason);
    CHECKF(!lookup_v6(&nata_site, &open_site, &dual, 0, &offer, &d) && d.technique == TECH_DIRECT,
           "into an open site: direct");
    CHECKF(!lookup_v6(&nata_site, &nata_site, &dual, 0, &offer, &d) && d.technique == TECH_DIRECT,
           "inside a site: direct");
    CHECKF(!lookup_v6(&nata_site, &natb_site, &from_v4_only, 0, &offer, &d),
           "an initiator without IPv6: not over IPv6");
    CHECKF(!lookup_v6(&nata_site, &natb_site, &dual, 0, &offer, &d) &&
               d.technique == TECH_HOLEPUNCH && strstr(d.reason, "holepunch over IPv6") != NULL,
           "a punch that works over IPv4 stays a punch, over IPv6 first: %s", d.reason);
    CHECKF(!lookup_v6(&nata_site, &v6_noint, &to_v6_only, 0, &offer, &d) &&
               d.technique == TECH_HOLEPUNCH,
           "a target whose helper cannot intercept: the IPv6 punch: %s", d.reason);
    struct plan_offer mem = offer;
    mem.remembered = tv;
    CHECKF(!lookup_v6(&nata_site, &v6_site, &to_v6_only, 0, &mem, &d) &&
               d.technique == TECH_HOLEPUNCH,
           "traversing failed lately between the sites: not over IPv6 either: %s", d.reason);
    plan_decide(&nata_site, &natb_site, 0, &offer, &d);
    CHECKF(!plan_prefer_traverse6(&nata_site, &natb_site, &dual, 0, &offer, false, &d) &&
               d.technique == TECH_HOLEPUNCH,
           "the address rules refuse the initiator's IPv6 address: not over IPv6");
}

/* qcg-probe's `only` holepunch: over IPv6 where both nodes have IPv6. */
static void test_only_punch6(void)
{
    struct plan_decision d;
    const struct plan_offer offer = {.proxy = true, .reflector = true, .reflector6 = true};
    const struct plan_families v6 = {FAMILY_V6, FAMILY_V6};
    const struct plan_families v4 = {FAMILY_V4, FAMILY_V4 | FAMILY_V6};

    plan_only(&nata_site, &natb_site, TECH_HOLEPUNCH, &offer, &d);
    CHECKF(plan_only_punch6(&nata_site, &natb_site, &v6, &offer, &d) && d.ok &&
               d.technique == TECH_HOLEPUNCH && strstr(d.reason, "over IPv6") != NULL,
           "IPv6-only nodes: the punch alone goes over IPv6: %s", d.reason);
    plan_only(&sym_site, &natb_site, TECH_HOLEPUNCH, &offer, &d);
    CHECKF(!d.ok && plan_only_punch6(&sym_site, &natb_site, &v6, &offer, &d) && d.ok &&
               strstr(d.reason, "over IPv6") != NULL,
           "a symmetric NAT's IPv6 node: punched over IPv6: %s", d.reason);
    plan_only(&nata_site, &natb_site, TECH_HOLEPUNCH, &offer, &d);
    CHECKF(!plan_only_punch6(&nata_site, &natb_site, &v4, &offer, &d) && d.ok &&
               strstr(d.reason, "IPv6") == NULL,
           "an initiator without IPv6: over IPv4: %s", d.reason);
    struct plan_offer v4_refl = offer;
    v4_refl.reflector6 = false;
    plan_only(&nata_site, &natb_site, TECH_HOLEPUNCH, &v4_refl, &d);
    CHECKF(!plan_only_punch6(&nata_site, &natb_site, &v6, &v4_refl, &d),
           "a reflector without IPv6: not over IPv6");
    plan_only(&nata_site, &natb_site, TECH_PROXY, &offer, &d);
    CHECKF(!plan_only_punch6(&nata_site, &natb_site, &v6, &offer, &d) && d.technique == TECH_PROXY,
           "only proxy: untouched");
    plan_only(&nata_site, &nata_site, TECH_HOLEPUNCH, &offer, &d);
    CHECKF(!plan_only_punch6(&nata_site, &nata_site, &v6, &offer, &d) && !d.ok,
           "inside a site: no punch");
}

/* qcg-probe's `only` traversing: over IPv6 where the pair allows it. */
static void test_only_traverse6(void)
{
    struct plan_decision d;
    const struct plan_offer offer = {.proxy = true, .reflector = true, .reflector6 = true};
    const struct plan_families to_v6_only = {FAMILY_V4 | FAMILY_V6, FAMILY_V6};
    const struct plan_families dual = {FAMILY_V4 | FAMILY_V6, FAMILY_V4 | FAMILY_V6};
    const struct plan_families from_v4_only = {FAMILY_V4, FAMILY_V4 | FAMILY_V6};
    static const struct plan_end v6_site = {"v6", CLUSTER_FIREWALLED, 0, 0, true, 20001, NULL};
    static const struct plan_end v6_noint = {"v6", CLUSTER_FIREWALLED, 0, 0, false, 20001, NULL};

    plan_only(&nata_site, &v6_site, TECH_TRAVERSING, &offer, &d);
    CHECKF(plan_only_traverse6(&nata_site, &v6_site, &to_v6_only, true, &d) && d.ok &&
               d.technique == TECH_TRAVERSING &&
               strstr(d.reason, "traversing asked for alone, over IPv6") != NULL,
           "into an IPv6-only node: traversing alone goes over IPv6: %s", d.reason);
    plan_only(&nata_site, &fw_site, TECH_TRAVERSING, &offer, &d);
    CHECKF(plan_only_traverse6(&nata_site, &fw_site, &dual, true, &d) && d.ok,
           "both dual-stack: over IPv6 too, as the punch alone: %s", d.reason);
    plan_only(&nata_site, &fw_site, TECH_TRAVERSING, &offer, &d);
    CHECKF(!plan_only_traverse6(&nata_site, &fw_site, &from_v4_only, true, &d) && d.ok &&
               strstr(d.reason, "IPv6") == NULL,
           "an initiator without IPv6: over IPv4: %s", d.reason);
    plan_only(&nata_site, &v6_noint, TECH_TRAVERSING, &offer, &d);
    CHECKF(!plan_only_traverse6(&nata_site, &v6_noint, &to_v6_only, true, &d),
           "a target whose helper cannot intercept: not over IPv6");
    plan_only(&nata_site, &open_site, TECH_TRAVERSING, &offer, &d);
    CHECKF(!plan_only_traverse6(&nata_site, &open_site, &dual, true, &d),
           "into an open site: not over IPv6");
    plan_only(&nata_site, &v6_site, TECH_TRAVERSING, &offer, &d);
    CHECKF(!plan_only_traverse6(&nata_site, &v6_site, &to_v6_only, false, &d),
           "the address rules refuse the initiator's IPv6 address: not over IPv6");
    plan_only(&nata_site, &v6_site, TECH_HOLEPUNCH, &offer, &d);
    CHECKF(!plan_only_traverse6(&nata_site, &v6_site, &to_v6_only, true, &d) &&
               d.technique == TECH_HOLEPUNCH,
           "only holepunch: untouched");
}

int main(void)
{
    test_family();
    test_punch6();
    test_only_traverse6();
    test_punch_families();
    test_only_punch6();
    test_traverse6();
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
        check_row(pairs[i].from, pairs[i].to, pairs[i].technique);
    test_same_cluster();
    test_open_range();
    test_no_intercept();
    test_reasons();
    test_offer();
    test_fallback();
    test_tried_parse();
    test_only_matrix();
    test_only_reasons();
    return check_result("broker-plan");
}
