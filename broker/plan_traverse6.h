/*
 * Traversing over IPv6 (docs/architecture.md, "Plans per family"): where
 * both nodes have IPv6 addresses and the target's site holds new inbound
 * IPv6 connections at a stateful firewall, the initiator's SYN goes over
 * IPv6 and the target's helper injects it there, as over IPv4.  IPv6
 * addresses are global: no NAT rewrites the SYN, so what IPv4 traversing
 * needs of the initiator's site (public, or a NAT that keeps ports) does not
 * apply.  Kept apart from the preference order of plan.c, which it follows.
 */
#ifndef BROKER_PLAN_TRAVERSE6_H
#define BROKER_PLAN_TRAVERSE6_H

#include <stdbool.h>
#include "plan.h"

/* Whether the plan plan_decide made (never a lookup's `only`) becomes
   traversing over IPv6: both ends have IPv6 addresses, two clusters, the
   target's is not open (over IPv6 a NAT's site is a firewall: no NAT66),
   both helpers intercept, the address rules allow the initiator's IPv6
   address as the SYN's source (allowed), traversing was neither tried nor
   failed recently between the clusters, and over IPv4 the pair needs the
   proxy, has nothing left, or needs traversing or hole punching while an
   end has no IPv4 address (a punch that works over IPv4 stays a punch,
   over IPv6 first).  After it failed ("traversing" tried), plan_decide's
   own plan stands (hole punching, over IPv6 first where it applies).
   Adjusts *d (technique, ok, cacheable, reason) when it does. */
bool plan_prefer_traverse6(const struct plan_end *from, const struct plan_end *to,
                           const struct plan_families *fam, unsigned tried,
                           const struct plan_offer *offer, bool allowed, struct plan_decision *d);

/* qcg-probe's `only` traversing (plan_only made *d): over IPv6 wherever the
   pair allows it by the rules above (both ends' IPv6 addresses, sites,
   helpers, address rules), as the `only` punch goes (plan_only_punch6), so
   that the probe shows what traversing does over IPv6, which the IPv4 plan
   may not allow at all (an end without IPv4).  Adjusts *d when it does. */
bool plan_only_traverse6(const struct plan_end *from, const struct plan_end *to,
                         const struct plan_families *fam, bool allowed, struct plan_decision *d);

#endif
