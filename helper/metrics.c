/* The helper's families: what --status shows.  The local server's counters
   are written on the libuv loop's thread only; this runs on the metrics
   thread and reads them whole (relaxed atomic loads of aligned words). */
#include "metrics.h"

#include "contacts.h"
#include "local_internal.h"
#include "upstream.h"

void helper_metrics(void *arg, struct metrics_buf *out)
{
    struct local_server *srv = arg;
    int connected;
    uint64_t epoch;
    upstream_state(srv->up, &connected, &epoch);
    metrics_family(out, "qcg_helper_upstream_connected", "gauge",
                   "1 while the node is registered with its frontend");
    metrics_sample(out, "qcg_helper_upstream_connected", connected ? 1 : 0, NULL);
    metrics_family(out, "qcg_helper_clients", "gauge", "processes connected to the helper");
    metrics_sample(out, "qcg_helper_clients", __atomic_load_n(&srv->nclients, __ATOMIC_RELAXED),
                   NULL);
    metrics_family(out, "qcg_helper_contacts", "gauge", "contacts published for this node");
    metrics_sample(out, "qcg_helper_contacts", (double)contacts_published(srv->cs), NULL);
    metrics_family(out, "qcg_helper_lookups_total", "counter", "lookups of the node's processes");
    metrics_sample(out, "qcg_helper_lookups_total",
                   (double)__atomic_load_n(&srv->lookups, __ATOMIC_RELAXED), NULL);
    metrics_family(out, "qcg_helper_refused_total", "counter",
                   "requests refused or dropped, by reason");
    metrics_sample(out, "qcg_helper_refused_total",
                   (double)__atomic_load_n(&srv->refused, __ATOMIC_RELAXED), "reason", "rate",
                   NULL);
    metrics_family(out, "qcg_helper_can_intercept", "gauge",
                   "1 when this node takes part in traversing");
    metrics_sample(out, "qcg_helper_can_intercept",
                   __atomic_load_n(&srv->can_intercept, __ATOMIC_RELAXED), NULL);
}
