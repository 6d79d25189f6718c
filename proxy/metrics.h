/* The proxy's families for its metrics endpoint (common/metrics_server.h). */
#ifndef PROXY_METRICS_H
#define PROXY_METRICS_H

#include "metrics_text.h"

struct relay;
struct soap_stage_counts;
struct soap_server;

struct proxy_metrics {
    struct relay *relay;
    struct soap_server *control; /* its handshake stage */
    int max_pairs;               /* as raised to what the descriptors allow (nofile.h) */
};

#define PROXY_COUNTERS_MAX 32

/* The relay's counters and the control port's handshake stage (stage) by
   their --stats names (the stats operation's and the metrics' one list);
   returns how many. */
size_t proxy_counters(struct relay *relay, const struct soap_stage_counts *stage,
                      struct metrics_counter *out, size_t max);

/* A metrics_render_fn; arg is a struct proxy_metrics. */
void proxy_metrics(void *arg, struct metrics_buf *out);

#endif
