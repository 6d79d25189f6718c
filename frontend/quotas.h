/*
 * Per-node rates at the frontend, the layer that knows which node calls:
 * a token bucket per node and kind of call.  A lookup beyond the burst waits
 * for its token (back-pressure: an MPI job's connection storm slows down
 * rather than fails) up to a bound; reports and probes beyond it are refused.
 * Thread-safe.
 */
#ifndef FRONTEND_QUOTAS_H
#define FRONTEND_QUOTAS_H

#include <stdbool.h>

enum quota_kind { QUOTA_LOOKUP, QUOTA_REPORT, QUOTA_PROBE, QUOTA_KINDS };

struct quota_rate {
    double per_second;
    double burst;
};

struct node_quotas;

struct node_quotas *node_quotas_new(const struct quota_rate rates[QUOTA_KINDS]);
void node_quotas_free(struct node_quotas *q);

/* Takes a token of node's bucket for kind, waiting for it up to wait_ms (the
   wait is spent outside the lock).  false when none comes in time (or out of
   memory for a new node's buckets). */
bool node_quotas_take(struct node_quotas *q, const char *node, enum quota_kind kind, int wait_ms);

#endif
