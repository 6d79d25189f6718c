/* The proxy's families for its metrics endpoint (common/metrics_server.h). */
#ifndef PROXY_METRICS_H
#define PROXY_METRICS_H

#include "metrics_text.h"

struct relay;

struct proxy_metrics {
    struct relay *relay;
    int max_pairs; /* as raised to what the descriptors allow (nofile.h) */
};

#define PROXY_COUNTERS_MAX 24

/* The relay's counters by their --stats names (the stats operation's and
   the metrics' one list); returns how many. */
size_t proxy_counters(struct relay *relay, struct metrics_counter *out, size_t max);

/* A metrics_render_fn; arg is a struct proxy_metrics. */
void proxy_metrics(void *arg, struct metrics_buf *out);

#endif
