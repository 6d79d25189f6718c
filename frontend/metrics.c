/* The frontend's families for its metrics endpoint: its --stats counters. */
#include "metrics.h"

#include "frontend.h"
#include "soap_server.h"
#include "stats.h"

#define C "counter"
#define G "gauge"

static const struct metrics_map map[] = {
    {"lookups_received", "qcg_frontend_lookups_total", C, NULL, NULL, "lookups from helpers"},
    {"lookups_from_cache", "qcg_frontend_lookups_answered_total", C, "from", "cache",
     "lookups answered, by where the plan came from"},
    {"lookups_forwarded", "qcg_frontend_lookups_answered_total", C, "from", "broker", NULL},
    {"publishes", "qcg_frontend_publishes_total", C, NULL, NULL, "contacts published"},
    {"withdraws", "qcg_frontend_withdraws_total", C, NULL, NULL, "contacts withdrawn"},
    {"denied", "qcg_frontend_refused_total", C, "reason", "denied", "calls refused, by reason"},
    {"orders_refused", "qcg_frontend_refused_total", C, "reason", "orders", NULL},
    {"quota_refused", "qcg_frontend_refused_total", C, "reason", "quota", NULL},
    {"quota_waited", "qcg_frontend_quota_waits_total", C, NULL, NULL,
     "lookups that waited for their node's rate"},
    {"nodes", "qcg_frontend_nodes", G, NULL, NULL, "nodes registered"},
    {"contacts", "qcg_frontend_contacts", G, NULL, NULL, "contacts held"},
    {"contacts_expired", "qcg_frontend_contacts_expired_total", C, NULL, NULL,
     "contacts whose node's lease ran out"},
    {"contacts_dropped", "qcg_frontend_contacts_dropped_total", C, NULL, NULL,
     "contacts dropped by a node's new incarnation"},
    {"cache_entries", "qcg_frontend_cache_entries", G, NULL, NULL, "plans cached"},
    {"upstream_connected", "qcg_frontend_upstream_connected", G, NULL, NULL,
     "1 while the cluster is registered with the broker"},
    {"upstream_registrations", "qcg_frontend_upstream_registrations_total", C, NULL, NULL,
     "registrations with the broker (1 plus one per broker restart or lost link)"},
    SOAP_STAGE_METRICS("qcg_frontend"),
};

void frontend_metrics(void *arg, struct metrics_buf *out)
{
    struct counter_value s[FRONTEND_STATS_MAX];
    struct metrics_counter c[FRONTEND_STATS_MAX];
    struct frontend *fe = arg;
    struct soap_stage_counts stage;
    soap_server_counts(__atomic_load_n(&fe->server, __ATOMIC_ACQUIRE), &stage);
    int n = stats_collect(fe, &stage, s, FRONTEND_STATS_MAX);
    for (int i = 0; i < n; i++)
        c[i] = (struct metrics_counter){s[i].name, s[i].value};
    metrics_write_mapped(out, map, sizeof(map) / sizeof(map[0]), c, (size_t)n);
}
