/* Counters; see stats.h. */
#include "stats.h"

#include <string.h>

#include "broker.h"
#include "reflector.h"
#include "soapH.h"
#include "soap_server.h"

int stats_collect(struct broker *b, const struct soap_stage_counts *stage, struct stat_counter *out,
                  int max)
{
    struct registry_counts rc;
    struct reflector_counters rf;
    registry_counts(b->reg, &rc);
    reflector_client_counters(b->reflector, &rf);
    const struct stat_counter all[] = {
        {"clusters", rc.clusters},
        {"nodes", rc.nodes},
        {"jobs", rc.jobs},
        {"contacts", rc.contacts},
        {"contacts_dropped", rc.contacts_dropped},
        {"lookups", atomic_load(&b->stats.lookups)},
        {"lookup_calls", atomic_load(&b->stats.lookup_calls)},
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
        {"orders_refused", atomic_load(&b->stats.orders_refused)},
        {"quota_refused", atomic_load(&b->stats.quota_refused)},
        {"traversals_refused", traversals_refused(&b->traversals)},
        /* The reflector's process, as it last reported (reflector.h). */
        {"reflector_maps", rf.maps},
        {"reflector_punches", rf.punches},
        {"reflector_paired", rf.paired},
        {"reflector_punch_failed", rf.punch_failed},
        {"reflector_dials", rf.dials},
        {"reflector_refused", rf.refused},
        {"reflector_refused_address", rf.refused_address},
        {"reflector_cut", rf.cut},
        {"reflector_expect_refused", rf.expect_refused},
        {"addresses_refused", atomic_load(&b->stats.addresses_refused)},
        {"targets_refused", atomic_load(&b->stats.targets_refused)},
        {"proxy_beats", atomic_load(&b->stats.proxy_beats)},
        /* The SOAP handshake stage and accept loop (soap_server.h). */
        SOAP_STAGE_COUNTERS(stage),
    };
    int n = 0;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]) && n < max; i++)
        out[n++] = all[i];
    return n;
}
