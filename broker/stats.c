/* Counters; see stats.h. */
#include "stats.h"

#include <string.h>

#include "broker.h"
#include "soapH.h"

int stats_collect(struct broker *b, struct stat_counter *out, int max)
{
    struct registry_counts rc;
    registry_counts(b->reg, &rc);
    const struct stat_counter all[] = {
        {"clusters", rc.clusters},
        {"nodes", rc.nodes},
        {"jobs", rc.jobs},
        {"contacts", rc.contacts},
        {"contacts_dropped", rc.contacts_dropped},
        {"lookups", atomic_load(&b->stats.lookups)},
        {"publishes", atomic_load(&b->stats.publishes)},
        {"withdraws", atomic_load(&b->stats.withdraws)},
        {"polls", atomic_load(&b->stats.polls)},
        {"faults", atomic_load(&b->stats.faults)},
        {"connections", atomic_load(&b->stats.connections)},
        {"plans_reversed", atomic_load(&b->stats.plans_reversed)},
        {"plans_proxy", atomic_load(&b->stats.plans_proxy)},
        {"plans_traversing", atomic_load(&b->stats.plans_traversing)},
        {"plans_holepunch", atomic_load(&b->stats.plans_holepunch)},
        {"injects_ordered", atomic_load(&b->stats.injects_ordered)},
        {"reports_ok", atomic_load(&b->stats.reports_ok)},
        {"reports_failed", atomic_load(&b->stats.reports_failed)},
        {"reports_refused", atomic_load(&b->stats.reports_refused)},
        {"probes_started", atomic_load(&b->stats.probes_started)},
        {"observations", atomic_load(&b->stats.observations)},
        {"addresses_refused", atomic_load(&b->stats.addresses_refused)},
        {"orders_refused", atomic_load(&b->stats.orders_refused)},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]) && n < max; i++)
        out[n++] = all[i];
    return n;
}
