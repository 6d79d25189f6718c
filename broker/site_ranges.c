/* The address rules; see site_ranges.h. */
#include "site_ranges.h"

#include <stdio.h>
#include <string.h>

#include "address.h"

bool site_holds_node(const struct reg_cluster *c, const char *address)
{
    for (int i = 0; i < c->nranges; i++) {
        if (addr_range_contains(&c->ranges[i], address))
            return true;
    }
    return false;
}

/* Open and firewalled sites' nodes are reachable at their own addresses. */
static bool nodes_routable(const struct reg_cluster *c)
{
    return c->kind == CLUSTER_OPEN || c->kind == CLUSTER_FIREWALLED;
}

bool site_holds_public(const struct reg_cluster *c, const char *address)
{
    for (int i = 0; i < c->npublic; i++) {
        if (address_equal(c->public_addr[i], address))
            return true;
    }
    for (int i = 0; i < c->nopen; i++) {
        if (addr_range_contains(&c->open[i], address))
            return true;
    }
    return nodes_routable(c) && site_holds_node(c, address);
}

/* Every range of c, public addresses first, each with whether it routes on
   the internet; false past the last. */
static bool range_at(const struct reg_cluster *c, int i, struct addr_range *r, bool *routable)
{
    char why[96];
    if (i < c->npublic) {
        *routable = true;
        return addr_range_parse(c->public_addr[i], r, why, sizeof(why)) == 0;
    }
    i -= c->npublic;
    if (i < c->nranges) {
        *r = c->ranges[i];
        *routable = nodes_routable(c);
        return true;
    }
    /* Open ranges reach the internet whatever the site's kind. */
    i -= c->nranges;
    if (i >= c->nopen)
        return false;
    *r = c->open[i];
    *routable = true;
    return true;
}

int site_ranges_clash(const struct reg_cluster *decl, const struct reg_cluster *other, char *why,
                      size_t whylen)
{
    struct addr_range a, b;
    bool ra, rb;
    int n = decl->npublic + decl->nranges + decl->nopen;
    int m = other->npublic + other->nranges + other->nopen;
    for (int i = 0; i < n; i++) {
        if (!range_at(decl, i, &a, &ra) || addr_range_loopback(&a))
            continue;
        for (int j = 0; j < m; j++) {
            if (!range_at(other, j, &b, &rb) || addr_range_loopback(&b) || (!ra && !rb) ||
                !addr_range_overlap(&a, &b))
                continue;
            char ta[QCG_ADDR_MAX + 4], tb[QCG_ADDR_MAX + 4];
            addr_range_format(&a, ta, sizeof(ta));
            addr_range_format(&b, tb, sizeof(tb));
            snprintf(why, whylen,
                     "%s %s overlaps %s of cluster %s, registered first (only NATed sites' "
                     "private node ranges may overlap)",
                     i < decl->npublic                   ? "public address"
                     : i < decl->npublic + decl->nranges ? "node range"
                                                         : "open range",
                     ta, tb, other->name);
            return -1;
        }
    }
    return 0;
}

bool site_order_address_ok(const struct reg_cluster *from, const struct reg_cluster *to,
                           const char *address, bool public, const char *what, char *why,
                           size_t whylen)
{
    bool held = public ? site_holds_public(from, address) : site_holds_node(from, address);
    if (!held) {
        snprintf(why, whylen, "%s refused: %s %s is not among the %s addresses cluster %s declared",
                 what, public ? "source" : "target", address, public ? "public" : "node",
                 from->name);
        return false;
    }
    if (strcmp(from->name, to->name) == 0)
        return true;
    for (int i = 0; i < to->nranges; i++) {
        if (!addr_range_loopback(&to->ranges[i]) && addr_range_contains(&to->ranges[i], address)) {
            char t[QCG_ADDR_MAX + 4];
            addr_range_format(&to->ranges[i], t, sizeof(t));
            snprintf(why, whylen,
                     "%s refused: %s %s lies in cluster %s's own node range %s: the order would "
                     "reach into that site's LAN",
                     what, public ? "source" : "target", address, to->name, t);
            return false;
        }
    }
    return true;
}
