/* The broker's metrics: its --stats counters, its clusters, the setup
   outcomes per cluster pair (pair_metrics.h) and its reflector's counters
   as the reflector's process last reported them. */
#include "metrics.h"

#include <stdlib.h>

#include "broker.h"
#include "pair_metrics.h"
#include "registry.h"
#include "soap_server.h"
#include "stats.h"

#define C "counter"
#define G "gauge"

static const struct metrics_map map[] = {
    {"clusters", "qcg_broker_clusters", G, NULL, NULL, "clusters whose frontend is registered"},
    {"nodes", "qcg_broker_nodes", G, NULL, NULL, "nodes registered"},
    {"jobs", "qcg_broker_jobs", G, NULL, NULL, "jobs with contacts published"},
    {"contacts", "qcg_broker_contacts", G, NULL, NULL, "contacts held"},
    {"contacts_dropped", "qcg_broker_contacts_dropped_total", C, NULL, NULL,
     "contacts dropped by a node's new incarnation or a revoked frontend"},
    {"lookups", "qcg_broker_lookups_total", C, NULL, NULL, "lookups answered"},
    {"lookup_calls", "qcg_broker_lookup_calls_total", C, NULL, NULL,
     "calls that carried them (lookup, and lookups of up to 256)"},
    {"publishes", "qcg_broker_publishes_total", C, NULL, NULL, "contacts published"},
    {"withdraws", "qcg_broker_withdraws_total", C, NULL, NULL, "contacts withdrawn"},
    {"polls", "qcg_broker_polls_total", C, NULL, NULL, "long-polls of frontends"},
    {"faults", "qcg_broker_faults_total", C, NULL, NULL, "calls answered with a fault"},
    {"connections", "qcg_broker_connections_total", C, NULL, NULL, "control connections accepted"},
    {"plans_reversed", "qcg_broker_plans_total", C, "technique", "reversed",
     "plans that needed the broker, by technique"},
    {"plans_traversing", "qcg_broker_plans_total", C, "technique", "traversing", NULL},
    {"plans_holepunch", "qcg_broker_plans_total", C, "technique", "holepunch", NULL},
    {"plans_proxy", "qcg_broker_plans_total", C, "technique", "proxy", NULL},
    {"injects_ordered", "qcg_broker_injects_ordered_total", C, NULL, NULL,
     "traversing SYNs passed to the target's helper"},
    {"reports_ok", "qcg_broker_reports_total", C, "result", "ok",
     "reports of attempts, by what came of them"},
    {"reports_failed", "qcg_broker_reports_total", C, "result", "failed", NULL},
    {"reports_refused", "qcg_broker_reports_total", C, "result", "refused", NULL},
    {"probes_started", "qcg_broker_probes_started_total", C, NULL, NULL, "qcg-probe tests"},
    {"observations", "qcg_broker_observations_total", C, NULL, NULL,
     "reflector observations of clusters"},
    {"proxy_beats", "qcg_broker_proxy_beats_total", C, NULL, NULL, "proxies' alive beats"},
    {"orders_refused", "qcg_broker_refused_total", C, "reason", "orders",
     "calls refused, by reason"},
    {"quota_refused", "qcg_broker_refused_total", C, "reason", "quota", NULL},
    {"traversals_refused", "qcg_broker_refused_total", C, "reason", "traversals_full", NULL},
    {"addresses_refused", "qcg_broker_refused_total", C, "reason", "address", NULL},
    {"targets_refused", "qcg_broker_refused_total", C, "reason", "target", NULL},
    {"reflector_maps", "qcg_reflector_maps_total", C, NULL, NULL,
     "public mappings the reflector told"},
    {"reflector_punches", "qcg_reflector_punches_total", C, NULL, NULL, "hole punches asked"},
    {"reflector_paired", "qcg_reflector_paired_total", C, NULL, NULL, "hole punches paired"},
    {"reflector_punch_failed", "qcg_reflector_punch_failed_total", C, NULL, NULL,
     "hole punches that failed"},
    {"reflector_dials", "qcg_reflector_dials_total", C, NULL, NULL, "dial-backs of qcg-probe"},
    {"reflector_refused", "qcg_reflector_refused_total", C, "reason", "full",
     "reflector connections refused or cut, by reason"},
    {"reflector_refused_address", "qcg_reflector_refused_total", C, "reason", "per_address", NULL},
    {"reflector_cut", "qcg_reflector_refused_total", C, "reason", "cut", NULL},
    {"reflector_expect_refused", "qcg_reflector_refused_total", C, "reason", "expect", NULL},
    SOAP_STAGE_METRICS("qcg_broker"),
};

static void clusters(struct broker *b, struct metrics_buf *out)
{
    struct reg_cluster_view *v = NULL;
    size_t n = 0;
    metrics_family(out, "qcg_broker_cluster_nodes", "gauge",
                   "nodes registered per cluster (a cluster appears while its frontend is "
                   "registered)");
    if (registry_clusters(b->reg, &v, &n) != 0)
        return;
    for (size_t i = 0; i < n; i++)
        metrics_sample(out, "qcg_broker_cluster_nodes", (double)v[i].nodes, "cluster",
                       v[i].decl.name, "kind", cluster_kind_name(v[i].decl.kind), NULL);
    free(v);
}

void broker_metrics(void *arg, struct metrics_buf *out)
{
    struct broker *b = arg;
    struct stat_counter s[STATS_MAX];
    struct metrics_counter c[STATS_MAX];
    struct soap_stage_counts stage;
    soap_server_counts(__atomic_load_n(&b->server, __ATOMIC_ACQUIRE), &stage);
    int n = stats_collect(b, &stage, s, STATS_MAX);
    for (int i = 0; i < n; i++)
        c[i] = (struct metrics_counter){s[i].name, s[i].value};
    metrics_write_mapped(out, map, sizeof(map) / sizeof(map[0]), c, (size_t)n);
    clusters(b, out);
    if (b->pair_metrics != NULL)
        pair_metrics_write(b->pair_metrics, out);
}
