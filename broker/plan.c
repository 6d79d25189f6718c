/* The plan table of docs/architecture.md, in the order the doc gives it. */
#include "plan.h"

#include <stdio.h>
#include <string.h>

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

void plan_decide(const struct plan_end *from, const struct plan_end *to, struct plan_decision *d)
{
    char fdesc[96], tdesc[128];
    memset(d, 0, sizeof(*d));
    describe(from, fdesc, sizeof(fdesc));
    describe(to, tdesc, sizeof(tdesc));

    if (strcmp(from->cluster, to->cluster) == 0 || reachable(to)) {
        d->ok = true;
        d->technique = TECH_DIRECT;
        d->cacheable = true;
        if (strcmp(from->cluster, to->cluster) == 0)
            snprintf(d->reason, sizeof(d->reason), "same cluster %s: direct to the private address",
                     to->cluster);
        else
            snprintf(d->reason, sizeof(d->reason), "cluster %s is %s: direct", to->cluster, tdesc);
        return;
    }

    /* Not reachable: name the technique that would be needed, in the preference
       order of DESIGN.md, and say it is missing from this version. */
    d->ok = false;
    d->cacheable = false;
    if (to->kind == CLUSTER_FIREWALLED && !to->can_intercept)
        strncat(tdesc, ", its helper cannot intercept", sizeof(tdesc) - strlen(tdesc) - 1);
    if (reachable(from))
        d->technique = TECH_REVERSED;
    else if (to->kind == CLUSTER_FIREWALLED && to->can_intercept && from->kind != CLUSTER_SYMNAT)
        d->technique = TECH_TRAVERSING;
    else if (from->kind != CLUSTER_SYMNAT && to->kind != CLUSTER_SYMNAT)
        d->technique = TECH_HOLEPUNCH;
    else
        d->technique = TECH_PROXY;
    snprintf(d->reason, sizeof(d->reason),
             "cluster %s is %s and cluster %s is not reachable (%s): needs %s, which is not "
             "available in this version",
             from->cluster, fdesc, to->cluster, tdesc, technique_name(d->technique));
}
