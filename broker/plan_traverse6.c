/* See plan_traverse6.h. */
#include "plan_traverse6.h"

#include <string.h>

/* The IPv4 plan relays, has nothing left, or cannot work: traversing or
   hole punching with an end that has no IPv4 address.  A punch that can
   work over IPv4 stays a punch (over IPv6 first, plan_prefer_punch6): it
   needs no interception, and against a firewall that resets the SYN its
   TTL-limited first SYN connects at once, where a traversal waits for a
   retransmission (the reset closed the initiator's side's state). */
static bool traverse6_saves(const struct plan_families *fam, const struct plan_decision *d)
{
    if (!d->ok || d->technique == TECH_PROXY)
        return true;
    return (d->technique == TECH_TRAVERSING || d->technique == TECH_HOLEPUNCH) &&
           !(fam->from & fam->to & FAMILY_V4);
}

/* What traversing over IPv6 needs of the pair, whatever IPv4 would do. */
static bool traverse6_possible(const struct plan_end *from, const struct plan_end *to,
                               const struct plan_families *fam, bool allowed)
{
    return (fam->from & fam->to & FAMILY_V6) && strcmp(from->cluster, to->cluster) != 0 &&
           to->kind != CLUSTER_OPEN && to->can_intercept && from->can_intercept && allowed;
}

bool plan_prefer_traverse6(const struct plan_end *from, const struct plan_end *to,
                           const struct plan_families *fam, unsigned tried,
                           const struct plan_offer *offer, bool allowed, struct plan_decision *d)
{
    if (!traverse6_possible(from, to, fam, allowed) ||
        ((tried | offer->remembered) & TECH_BIT(TECH_TRAVERSING)) || !traverse6_saves(fam, d))
        return false;
    plan_over_v6(d, TECH_TRAVERSING, "traversing over IPv6");
    return true;
}

bool plan_only_traverse6(const struct plan_end *from, const struct plan_end *to,
                         const struct plan_families *fam, bool allowed, struct plan_decision *d)
{
    if (d->technique != TECH_TRAVERSING || !traverse6_possible(from, to, fam, allowed))
        return false;
    plan_over_v6(d, TECH_TRAVERSING, "traversing asked for alone, over IPv6");
    return true;
}
