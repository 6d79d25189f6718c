/*
 * Plans for a pair whose ends share no address family (an IPv6-only node
 * and an IPv4-only one): only the proxy can connect them, each end reaching
 * it in its own family, and the proxy relaying between the two.  Kept apart
 * from the preference order of plan.c, which it short-cuts.
 */
#ifndef BROKER_PLAN_BRIDGE_H
#define BROKER_PLAN_BRIDGE_H

#include <stdbool.h>
#include "plan.h"
#include "proxies.h"

/* Whether the ends share no family; then *d is the plan: the proxy (ok when
   not tried yet, a proxy is usable and the proxies have an address in each
   end's family), or for `only` another technique, not ok with the reason.
   False, *d untouched, when they share one: plan_decide's order applies. */
bool plan_bridge(const struct plan_end *from, const struct plan_end *to,
                 const struct plan_families *fam, unsigned tried, const struct plan_offer *offer,
                 enum technique only, struct plan_decision *d);

/* The family set of an address list (an end's first address and others). */
unsigned plan_families_of(const char *first, const char others[][QCG_ADDR_MAX], int n);

#endif
