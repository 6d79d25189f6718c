/* The helper's families for its metrics endpoint (common/metrics_server.h). */
#ifndef HELPER_METRICS_H
#define HELPER_METRICS_H

#include "metrics_text.h"

/* A metrics_render_fn; arg is the struct local_server. */
void helper_metrics(void *arg, struct metrics_buf *out);

#endif
