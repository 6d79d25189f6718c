/* Plans across address families; see plan_bridge.h. */
#include "plan_bridge.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "address.h"

unsigned plan_families_of(const char *first, const char others[][QCG_ADDR_MAX], int n)
{
    unsigned f = 0;
    for (int i = -1; i < n; i++) {
        int af = address_family(i < 0 ? first : others[i]);
        f |= af == AF_INET ? FAMILY_V4 : af == AF_INET6 ? FAMILY_V6 : 0;
    }
    return f;
}

static const char *family_text(unsigned f)
{
    return f == FAMILY_V6 ? "IPv6" : f == FAMILY_V4 ? "IPv4" : "no address";
}

/* "cluster v6 (node v61) has IPv6 only and cluster fw (node fw1) IPv4 only:
   no address family in common". */
static void bridge_situation(const struct plan_end *from, const struct plan_end *to,
                             const struct plan_families *fam, struct plan_decision *d)
{
    snprintf(d->reason, sizeof(d->reason),
             "cluster %s (node %s) has %s only and cluster %s (node %s) %s only: no address "
             "family in common",
             from->cluster, from->node != NULL ? from->node : "?", family_text(fam->from),
             to->cluster, to->node != NULL ? to->node : "?", family_text(fam->to));
}

static void append(struct plan_decision *d, const char *text)
{
    size_t used = strlen(d->reason);
    snprintf(d->reason + used, sizeof(d->reason) - used, "%s", text);
}

bool plan_bridge(const struct plan_end *from, const struct plan_end *to,
                 const struct plan_families *fam, unsigned tried, const struct plan_offer *offer,
                 enum technique only, struct plan_decision *d)
{
    if ((fam->from & fam->to) != 0 || fam->from == 0 || fam->to == 0)
        return false;
    memset(d, 0, sizeof(*d));
    bridge_situation(from, to, fam, d);
    d->technique = only != TECH_NONE ? only : TECH_PROXY;
    if (d->technique != TECH_PROXY) {
        char tail[96];
        snprintf(tail, sizeof(tail), " \u2192 %s cannot work, only the proxy can bridge them",
                 technique_name(d->technique));
        append(d, tail);
        return true;
    }
    if (only == TECH_NONE && (tried & TECH_BIT(TECH_PROXY))) {
        append(d, ": proxy already tried; no technique left");
        return true;
    }
    if (!offer->proxy) {
        append(d, offer->proxies_dead ? ": proxy needed, but the broker has no live proxy (none "
                                        "heard from lately)"
                                      : ": proxy needed, but the broker has no proxy configured");
        return true;
    }
    unsigned lacking = (fam->from | fam->to) & ~offer->proxy_families;
    if (lacking != 0) {
        char tail[160];
        snprintf(tail, sizeof(tail),
                 ": proxy needed, but the broker's proxies have no %s address to bridge them",
                 family_text(lacking));
        append(d, tail);
        return true;
    }
    if (!offer->proxy_bridge) {
        append(d, ": proxy needed, but no live proxy has both an IPv4 and an IPv6 address to "
                  "bridge them");
        return true;
    }
    d->ok = true;
    char tail[64];
    snprintf(tail, sizeof(tail), ": proxy, bridging %s to %s", family_text(fam->from),
             family_text(fam->to));
    append(d, tail);
    return true;
}
