/* The plan table of docs/architecture.md: one preference order, one rule per
   technique. */
#include "plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define TRIED_MAX_LEN 128

static bool port_in_open_range(const struct plan_end *e)
{
    return e->open_low > 0 && e->port >= e->open_low && e->port <= e->open_high;
}

/* A contact accepts connections from outside its site: its cluster is open, or
   firewalled and the port lies in the declared open range (NATs never do). */
static bool reachable(const struct plan_end *e)
{
    return e->kind == CLUSTER_OPEN || (e->kind == CLUSTER_FIREWALLED && port_in_open_range(e));
}

static bool same_cluster(const struct plan_end *from, const struct plan_end *to)
{
    return strcmp(from->cluster, to->cluster) == 0;
}

/* "open", "behind a NAT", "firewalled, port 20001 outside its open range 30000-30100". */
static void describe(const struct plan_end *e, char *buf, size_t len)
{
    switch (e->kind) {
    case CLUSTER_OPEN:
        snprintf(buf, len, "open");
        break;
    case CLUSTER_FIREWALLED:
        if (port_in_open_range(e))
            snprintf(buf, len, "firewalled with port %d in its open range", e->port);
        else if (e->open_low > 0)
            snprintf(buf, len, "firewalled, port %d outside its open range %d-%d", e->port,
                     e->open_low, e->open_high);
        else
            snprintf(buf, len, "firewalled with no open port range");
        break;
    case CLUSTER_NAT:
        snprintf(buf, len, "behind a NAT");
        break;
    case CLUSTER_SYMNAT:
        snprintf(buf, len, "behind a symmetric NAT");
        break;
    default:
        snprintf(buf, len, "of unknown kind");
        break;
    }
}

/* The rules below answer whether a technique can work for the pair; when it
   cannot and `why` is not NULL (a buffer of WHY_LEN), they say why there,
   cause then consequence, so that plan_only explains exactly the rule that
   failed. */
#define WHY_LEN 300

static bool cannot(char *why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool cannot(char *why, const char *fmt, ...)
{
    if (why != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, WHY_LEN, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* "node fw1" or "the target's node" when the caller did not name it. */
static const char *node_of(const struct plan_end *e, const char *role, char *buf, size_t len)
{
    if (e->node != NULL && e->node[0] != '\0')
        snprintf(buf, len, "node %s", e->node);
    else
        snprintf(buf, len, "the %s's node", role);
    return buf;
}

static bool direct_applies(const struct plan_end *from, const struct plan_end *to, char *why)
{
    char desc[96];
    if (same_cluster(from, to) || reachable(to))
        return true;
    describe(to, desc, sizeof(desc));
    return cannot(why,
                  "cluster %s is %s: it accepts no connection from outside \u2192 direct cannot "
                  "work",
                  to->cluster, desc);
}

/* The target's helper calls the initiator's listener back. */
static bool reversed_applies(const struct plan_end *from, const struct plan_end *to, char *why)
{
    char desc[96];
    if (same_cluster(from, to) || reachable(from))
        return true;
    describe(from, desc, sizeof(desc));
    return cannot(why,
                  "cluster %s (the initiator) is %s: the target's helper cannot connect back to "
                  "it \u2192 reversed cannot work",
                  from->cluster, desc);
}

/* The initiator's SYN, as it leaves its site, is what the target's helper
   injects: its public address and port must be known in advance (public, or
   a NAT that keeps ports), and both helpers must intercept and inject. */
static bool traversing_applies(const struct plan_end *from, const struct plan_end *to, char *why)
{
    char desc[96], node[QCG_NAME_MAX + 16];
    static const char no_caps[] =
        "the helper of %s cannot intercept (no CAP_NET_ADMIN/CAP_NET_RAW) \u2192 traversing "
        "cannot work";
    if (same_cluster(from, to))
        return cannot(why, "same cluster %s: only direct is used inside a cluster", to->cluster);
    describe(to, desc, sizeof(desc));
    if (to->kind == CLUSTER_NAT || to->kind == CLUSTER_SYMNAT)
        return cannot(why, "cluster %s is %s, not a firewall: traversing is for firewalled targets",
                      to->cluster, desc);
    if (to->kind != CLUSTER_FIREWALLED || reachable(to))
        return cannot(why,
                      "cluster %s is %s: it accepts connections from outside, traversing is for "
                      "firewalled targets that do not",
                      to->cluster, desc);
    if (!to->can_intercept)
        return cannot(why, no_caps, node_of(to, "target", node, sizeof(node)));
    if (!from->can_intercept)
        return cannot(why, no_caps, node_of(from, "initiator", node, sizeof(node)));
    if (from->kind == CLUSTER_SYMNAT)
        return cannot(why,
                      "cluster %s (the initiator) is behind a symmetric NAT: its mapping varies "
                      "by destination, so the SYN's public source port cannot be predicted "
                      "\u2192 traversing cannot work",
                      from->cluster);
    return true;
}

/* Both mappings must be the same towards the reflector and towards the peer. */
static bool holepunch_applies(const struct plan_end *from, const struct plan_end *to, char *why)
{
    if (same_cluster(from, to))
        return cannot(why, "same cluster %s: only direct is used inside a cluster", to->cluster);
    const struct plan_end *sym = from->kind == CLUSTER_SYMNAT ? from
                                 : to->kind == CLUSTER_SYMNAT ? to
                                                              : NULL;
    if (sym != NULL)
        return cannot(why,
                      "site %s: mapping varies by destination (symmetric NAT) \u2192 hole "
                      "punching cannot work",
                      sym->cluster);
    return true;
}

/* Both sides connect out: works for every pair. */
static bool proxy_applies(const struct plan_end *from, const struct plan_end *to, char *why)
{
    (void)from;
    (void)to;
    (void)why;
    return true;
}

/* The preference order of docs/design.md: fewest extra messages first. */
static const struct {
    enum technique technique;
    bool (*applies)(const struct plan_end *from, const struct plan_end *to, char *why);
} preference[] = {
    {TECH_DIRECT, direct_applies},         {TECH_REVERSED, reversed_applies},
    {TECH_TRAVERSING, traversing_applies}, {TECH_HOLEPUNCH, holepunch_applies},
    {TECH_PROXY, proxy_applies},
};

/* Appends to the reason; snprintf truncates safely when it is full. */
static void add(struct plan_decision *d, const char *fmt, const char *arg)
{
    size_t used = strlen(d->reason);
    if (used + 1 < sizeof(d->reason))
        snprintf(d->reason + used, sizeof(d->reason) - used, fmt, arg);
}

/* How the pair looks: the start of every reason. */
static void situation(const struct plan_end *from, const struct plan_end *to,
                      struct plan_decision *d)
{
    char fdesc[96], tdesc[128];
    describe(from, fdesc, sizeof(fdesc));
    describe(to, tdesc, sizeof(tdesc));
    if (to->kind == CLUSTER_FIREWALLED && !to->can_intercept && !reachable(to))
        strncat(tdesc, ", its helper cannot intercept", sizeof(tdesc) - strlen(tdesc) - 1);
    if (!same_cluster(from, to) && to->kind == CLUSTER_FIREWALLED && !reachable(to) &&
        to->can_intercept && !from->can_intercept)
        strncat(fdesc, ", its helper cannot intercept", sizeof(fdesc) - strlen(fdesc) - 1);
    if (same_cluster(from, to))
        snprintf(d->reason, sizeof(d->reason), "same cluster %s", to->cluster);
    else if (reachable(to))
        snprintf(d->reason, sizeof(d->reason), "cluster %s is %s", to->cluster, tdesc);
    else
        snprintf(d->reason, sizeof(d->reason),
                 "cluster %s is %s and cluster %s is not reachable (%s)", from->cluster, fdesc,
                 to->cluster, tdesc);
}

/* Once the IPv6 punch was tried or failed lately, the hole punching left
   is the IPv4 one. */
static bool punch4_left(enum technique t, unsigned tried, const struct plan_offer *offer)
{
    return t == TECH_HOLEPUNCH && ((tried | offer->remembered) & TECH_BIT(TECH_PUNCH6));
}

/* A technique's name in a reason, hole punching's with its family then. */
static const char *label(enum technique t, unsigned tried, const struct plan_offer *offer)
{
    return punch4_left(t, tried, offer) ? "holepunch over IPv4" : technique_name(t);
}

/* The IPv6 punch this connect tried, or the pair saw fail lately, said where
   hole punching stands in the order (plan_prefer_punch6 made it). */
static void punch6_before(struct plan_decision *d, unsigned tried, const struct plan_offer *offer,
                          const char **sep)
{
    const char *what = (tried & TECH_BIT(TECH_PUNCH6)) ? "already tried"
                       : (offer->remembered & TECH_BIT(TECH_PUNCH6))
                           ? "failed recently between these clusters"
                           : NULL;
    if (what == NULL)
        return;
    add(d, "%s", *sep);
    add(d, "holepunch over IPv6 %s", what);
    *sep = "; ";
}

void plan_decide(const struct plan_end *from, const struct plan_end *to, unsigned tried,
                 const struct plan_offer *offer, struct plan_decision *d)
{
    const char *sep = ": ";
    memset(d, 0, sizeof(*d));
    situation(from, to, d);
    d->technique = TECH_NONE;
    for (size_t i = 0; i < sizeof(preference) / sizeof(preference[0]); i++) {
        enum technique t = preference[i].technique;
        if (t == TECH_HOLEPUNCH && !same_cluster(from, to))
            punch6_before(d, tried, offer, &sep);
        if (!preference[i].applies(from, to, NULL))
            continue;
        /* The last technique that applies is the one a failure names. */
        d->technique = t;
        add(d, "%s", sep);
        sep = "; ";
        if (tried & TECH_BIT(t)) {
            add(d, "%s already tried", label(t, tried, offer));
            continue;
        }
        /* The last resort is never skipped for the memory: nothing comes
           after it, and its failures are the proxy's (killed, restarting,
           another one alive now), not the pair's. */
        if ((offer->remembered & TECH_BIT(t)) && t != TECH_PROXY) {
            add(d, "%s failed recently between these clusters", label(t, tried, offer));
            continue;
        }
        if (offer->refused[t] != NULL) {
            d->refused |= TECH_BIT(t);
            add(d, "%s", offer->refused[t]);
            continue;
        }
        if (t == TECH_HOLEPUNCH && !offer->reflector) {
            add(d, "%s needed, but the broker has no reflector configured", technique_name(t));
            continue;
        }
        if (t == TECH_PROXY && !offer->proxy) {
            add(d, "%s needed, but the broker has ", technique_name(t));
            add(d, "%s",
                offer->proxies_dead ? "no live proxy (none heard from lately)"
                                    : "no proxy configured");
            continue;
        }
        d->ok = true;
        /* Only a direct plan holds nothing one-time: the others carry a
           token or an order to the target's helper. */
        d->cacheable = t == TECH_DIRECT;
        if (t == TECH_DIRECT && same_cluster(from, to))
            add(d, "%s", "direct to the private address");
        else
            add(d, "%s", label(t, tried, offer));
        d->punch4 = punch4_left(t, tried, offer);
        return;
    }
    add(d, "%s", "; no technique left");
}

void plan_only(const struct plan_end *from, const struct plan_end *to, enum technique t,
               const struct plan_offer *offer, struct plan_decision *d)
{
    char why[WHY_LEN];
    memset(d, 0, sizeof(*d));
    d->technique = t;
    /* A test of one technique: never cached, whatever it is. */
    d->cacheable = false;
    size_t i = 0;
    while (i < sizeof(preference) / sizeof(preference[0]) && preference[i].technique != t)
        i++;
    if (i == sizeof(preference) / sizeof(preference[0])) {
        snprintf(d->reason, sizeof(d->reason), "%s is not a technique", technique_name(t));
        return;
    }
    why[0] = '\0';
    if (t != TECH_DIRECT && same_cluster(from, to)) {
        snprintf(d->reason, sizeof(d->reason),
                 "same cluster %s: only direct is used inside a cluster", to->cluster);
        return;
    }
    if (!preference[i].applies(from, to, why)) {
        snprintf(d->reason, sizeof(d->reason), "%s", why);
        return;
    }
    if (offer->refused[t] != NULL) {
        d->refused |= TECH_BIT(t);
        snprintf(d->reason, sizeof(d->reason), "%s", offer->refused[t]);
        return;
    }
    if (t == TECH_HOLEPUNCH && !offer->reflector) {
        snprintf(d->reason, sizeof(d->reason),
                 "the broker has no reflector configured \u2192 hole punching cannot work");
        return;
    }
    if (t == TECH_PROXY && !offer->proxy) {
        snprintf(d->reason, sizeof(d->reason), "the broker has %s \u2192 proxy cannot work",
                 offer->proxies_dead ? "no live proxy (none heard from lately)"
                                     : "no proxy configured");
        return;
    }
    d->ok = true;
    situation(from, to, d);
    add(d, ": %s asked for alone", technique_name(t));
}

int plan_tried_parse(const char *text, unsigned *tried, char *why, size_t whylen)
{
    char buf[TRIED_MAX_LEN];
    char *save = NULL;
    *tried = 0;
    if (text == NULL || text[0] == '\0')
        return 0;
    if (strlen(text) >= sizeof(buf)) {
        snprintf(why, whylen, "tried: longer than %d characters", TRIED_MAX_LEN - 1);
        return -1;
    }
    memcpy(buf, text, strlen(text) + 1);
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        int t = attempt_parse(tok);
        if (t <= (int)TECH_NONE) {
            snprintf(why, whylen, "tried: '%.32s' is not a technique", tok);
            return -1;
        }
        *tried |= TECH_BIT(t);
    }
    return 0;
}

static bool direct6_applies(const struct plan_end *from, const struct plan_end *to,
                            const struct plan_v6 *v6)
{
    if (!v6->from_has || !v6->to_has)
        return false;
    return same_cluster(from, to) || v6->to_open || to->kind == CLUSTER_OPEN ||
           (to->kind == CLUSTER_FIREWALLED && port_in_open_range(to));
}

enum plan_family plan_prefer_v6(const struct plan_end *from, const struct plan_end *to,
                                const struct plan_v6 *v6, unsigned tried,
                                const struct plan_offer *offer, enum technique only,
                                struct plan_decision *d)
{
    if ((only != TECH_NONE && only != TECH_DIRECT) || !direct6_applies(from, to, v6))
        return PLAN_FAMILY_V4;
    if (d->ok && d->technique == TECH_DIRECT) {
        add(d, "%s", ", over IPv6 first, IPv4 behind it");
        return PLAN_FAMILY_V6;
    }
    /* Direct failed for this connect, or lately between the clusters: the
       IPv4 plan stands. */
    if ((tried & TECH_BIT(TECH_DIRECT)) ||
        (only == TECH_NONE && (offer->remembered & TECH_BIT(TECH_DIRECT))))
        return PLAN_FAMILY_V4;
    char fdesc[96], tdesc[128];
    describe(from, fdesc, sizeof(fdesc));
    describe(to, tdesc, sizeof(tdesc));
    d->ok = true;
    d->technique = TECH_DIRECT;
    d->cacheable = only == TECH_NONE;
    snprintf(d->reason, sizeof(d->reason),
             "cluster %s is %s and cluster %s is %s over IPv4, but the target's IPv6 address "
             "lies in its cluster's open range: direct over IPv6",
             from->cluster, fdesc, to->cluster, tdesc);
    return PLAN_FAMILY_V6_ONLY;
}

void plan_over_v6(struct plan_decision *d, enum technique t, const char *what)
{
    char was[64];
    if (d->ok)
        snprintf(was, sizeof(was), "%s", technique_name(d->technique));
    else
        snprintf(was, sizeof(was), "nothing left");
    d->ok = true;
    d->technique = t;
    d->cacheable = false;
    d->punch4 = false;
    size_t used = strlen(d->reason);
    /* The IPv4 reason, shortened if need be, then why IPv6. */
    if (used > sizeof(d->reason) - 120)
        used = sizeof(d->reason) - 120;
    snprintf(d->reason + used, sizeof(d->reason) - used,
             "; both nodes have IPv6 addresses (over IPv4: %s): %s", was, what);
}

/* What the IPv4 plan needs that hole punching over IPv6 saves. */
static bool punch6_saves(const struct plan_families *fam, const struct plan_decision *d)
{
    if (!d->ok)
        return true;
    if (d->technique == TECH_HOLEPUNCH || d->technique == TECH_PROXY)
        return true;
    return d->technique == TECH_TRAVERSING && !(fam->from & fam->to & FAMILY_V4);
}

bool plan_prefer_punch6(const struct plan_end *from, const struct plan_end *to,
                        const struct plan_families *fam, unsigned tried,
                        const struct plan_offer *offer, struct plan_decision *d)
{
    /* A plain "holepunch" tried or remembered may be an older helper's
       word for the IPv6 punch: no punch over IPv6 after it either. */
    unsigned punched = TECH_BIT(TECH_HOLEPUNCH) | TECH_BIT(TECH_PUNCH6);
    if (!(fam->from & fam->to & FAMILY_V6) || same_cluster(from, to) || !offer->reflector ||
        !offer->reflector6 || ((tried | offer->remembered) & punched) || !punch6_saves(fam, d))
        return false;
    plan_over_v6(d, TECH_HOLEPUNCH, "holepunch over IPv6");
    return true;
}

bool plan_only_punch6(const struct plan_end *from, const struct plan_end *to,
                      const struct plan_families *fam, const struct plan_offer *offer,
                      struct plan_decision *d)
{
    if (d->technique != TECH_HOLEPUNCH || !(fam->from & fam->to & FAMILY_V6) ||
        same_cluster(from, to) || !offer->reflector || !offer->reflector6)
        return false;
    /* Over IPv4 it may not work (a symmetric NAT): IPv6 global addresses
       have no mapping to vary. */
    if (!d->ok) {
        d->ok = true;
        situation(from, to, d);
        add(d, "%s", ": holepunch asked for alone");
    }
    add(d, "%s", ", over IPv6: both nodes have IPv6 addresses");
    return true;
}
