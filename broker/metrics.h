/* The broker's families for its metrics endpoint (common/metrics_server.h). */
#ifndef BROKER_METRICS_H
#define BROKER_METRICS_H

#include "metrics_text.h"

/* A metrics_render_fn; arg is the struct broker. */
void broker_metrics(void *arg, struct metrics_buf *out);

#endif
