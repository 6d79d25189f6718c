#include "stats.h"

#include <string.h>

#include "cache.h"
#include "frontend.h"
#include "frontend_config.h"
#include "soapH.h"
#include "soap_server.h"
#include "soap_client.h"
#include "store.h"

int stats_collect(struct frontend *fe, const struct soap_stage_counts *stage,
                  struct counter_value *out, int max)
{
    const struct frontend_counters *c = &fe->counters;
    const struct counter_value all[] = {
        {"lookups_received", atomic_load(&c->lookups_received)},
        {"lookups_from_cache", atomic_load(&c->lookups_from_cache)},
        {"lookups_forwarded", atomic_load(&c->lookups_forwarded)},
        {"publishes", atomic_load(&c->publishes)},
        {"withdraws", atomic_load(&c->withdraws)},
        {"denied", atomic_load(&c->denied)},
        {"nodes", store_node_count(fe->store)},
        {"contacts", store_contact_count(fe->store)},
        {"cache_entries", cache_count(fe->cache)},
        {"upstream_connected", (unsigned long long)store_link(fe->store, NULL, 0)},
        {"upstream_epoch", atomic_load(&c->upstream_epoch)},
        {"upstream_registrations", atomic_load(&c->upstream_registrations)},
        {"orders_refused", atomic_load(&c->orders_refused)},
        {"quota_refused", atomic_load(&c->quota_refused)},
        {"quota_waited", atomic_load(&c->quota_waited)},
        {"contacts_expired", atomic_load(&c->contacts_expired)},
        {"contacts_dropped", store_contacts_dropped(fe->store)},
        {"reports_forwarded", atomic_load(&c->reports_forwarded)},
        {"reports_refused", atomic_load(&c->reports_refused)},
        {"reports_dropped", atomic_load(&c->reports_dropped)},
        /* The SOAP handshake stage and accept loop (soap_server.h). */
        SOAP_STAGE_COUNTERS(stage),
    };
    int n = 0;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]) && n < max; i++)
        out[n++] = all[i];
    return n;
}
