/* The proxy's families: the relay's counters, as --stats shows them. */
#include "metrics.h"

#include "relay.h"
#include "soap_server.h"

#define C "counter"
#define G "gauge"

static const struct metrics_map map[] = {
    {"pairs_active", "qcg_proxy_pairs_active", G, NULL, NULL, "pairs relaying now"},
    {"pairs_max", "qcg_proxy_pairs_max", G, NULL, NULL, "pairs this proxy relays at most"},
    {"pairs_total", "qcg_proxy_pairs_total", C, NULL, NULL, "pairs joined"},
    {"bytes_relayed", "qcg_proxy_bytes_relayed_total", C, NULL, NULL,
     "bytes relayed, both directions"},
    {"refused_bad_token", "qcg_proxy_refused_total", C, "reason", "bad_token",
     "connections refused, by reason"},
    {"refused_replay", "qcg_proxy_refused_total", C, "reason", "replay", NULL},
    {"refused_expired", "qcg_proxy_refused_total", C, "reason", "expired", NULL},
    {"refused_full", "qcg_proxy_refused_total", C, "reason", "full", NULL},
    {"refused_peer_gone", "qcg_proxy_refused_total", C, "reason", "peer_gone", NULL},
    {"refused_address_hellos", "qcg_proxy_refused_total", C, "reason", "per_address_hellos", NULL},
    {"refused_address_tokens", "qcg_proxy_refused_total", C, "reason", "per_address_tokens", NULL},
    {"refused_job_tokens", "qcg_proxy_refused_total", C, "reason", "per_job_tokens", NULL},
    {"pairs_stalled", "qcg_proxy_pairs_stalled_total", C, NULL, NULL,
     "pairs aborted: a side acknowledged nothing"},
    {"unpaired_timeouts", "qcg_proxy_unpaired_timeouts_total", C, NULL, NULL,
     "connections whose token or peer did not come in time"},
    {"unpaired_waiting", "qcg_proxy_unpaired_waiting", G, NULL, NULL,
     "connections waiting for their peer now"},
    {"hellos_waiting", "qcg_proxy_hellos_waiting", G, NULL, NULL,
     "connections that have not sent their hello yet"},
    {"hello_timeouts", "qcg_proxy_hello_timeouts_total", C, NULL, NULL, "no whole hello in time"},
    {"hellos_cut", "qcg_proxy_hellos_cut_total", C, NULL, NULL,
     "the oldest waiting hello cut for a new connection: the handshake stage was full"},
    {"tokens_remembered", "qcg_proxy_tokens_remembered", G, NULL, NULL,
     "tokens kept against replay until their expiry + token-skew"},
    {"token_bytes", "qcg_proxy_token_bytes", G, NULL, NULL, "memory the remembered tokens take"},
    {"pipes_short", "qcg_proxy_pipes_short_total", C, NULL, NULL,
     "pipes smaller than pipe-size: the user's pipe memory (fs.pipe-user-pages-soft) was spent"},
    SOAP_STAGE_METRICS("qcg_proxy"),
};

size_t proxy_counters(struct relay *relay, const struct soap_stage_counts *stage,
                      struct metrics_counter *out, size_t max)
{
    struct relay_counters k;
    relay_counters(relay, &k);
    const struct metrics_counter c[] = {
        {"pairs_active", k.pairs_active},
        {"pairs_total", k.pairs_total},
        {"bytes_relayed", k.bytes_relayed},
        {"refused_bad_token", k.refused_bad_token},
        {"refused_replay", k.refused_replay},
        {"refused_expired", k.refused_expired},
        {"refused_full", k.refused_full},
        {"refused_peer_gone", k.refused_peer_gone},
        {"pairs_stalled", k.pairs_stalled},
        {"unpaired_timeouts", k.unpaired_timeouts},
        {"unpaired_waiting", k.unpaired_waiting},
        {"hellos_waiting", k.hellos_waiting},
        {"hello_timeouts", k.hello_timeouts},
        {"hellos_cut", k.hellos_cut},
        {"refused_address_hellos", k.refused_address_hellos},
        {"refused_address_tokens", k.refused_address_tokens},
        {"refused_job_tokens", k.refused_job_tokens},
        {"tokens_remembered", k.tokens_remembered},
        {"token_bytes", k.token_bytes},
        {"pipes_short", k.pipes_short},
        SOAP_STAGE_COUNTERS(stage),
    };
    size_t n = 0;
    for (; n < sizeof(c) / sizeof(c[0]) && n < max; n++)
        out[n] = c[n];
    return n;
}

void proxy_metrics(void *arg, struct metrics_buf *out)
{
    const struct proxy_metrics *pm = arg;
    struct metrics_counter c[PROXY_COUNTERS_MAX + 1];
    struct soap_stage_counts stage;
    soap_server_counts(pm->control, &stage);
    size_t n = proxy_counters(pm->relay, &stage, c, PROXY_COUNTERS_MAX);
    c[n++] = (struct metrics_counter){"pairs_max", (unsigned long long)pm->max_pairs};
    metrics_write_mapped(out, map, sizeof(map) / sizeof(map[0]), c, n);
}
