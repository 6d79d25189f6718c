/* The frontend's families for its metrics endpoint (common/metrics_server.h). */
#ifndef FRONTEND_METRICS_H
#define FRONTEND_METRICS_H

#include "metrics_text.h"

/* A metrics_render_fn; arg is the struct frontend. */
void frontend_metrics(void *arg, struct metrics_buf *out);

#endif
