/*
 * What the metrics endpoint shows of connection setup between clusters: for
 * each ordered cluster pair and technique, the attempts reported, their
 * successes, their failures by a fixed set of reasons, and the setup time of
 * the successes; and, over all pairs, a histogram of setup time per
 * technique.  Labels are cluster names, techniques and reasons only, so the
 * series are bounded by the cluster pairs (at most PAIR_METRICS_MAX; pairs
 * beyond are counted in qcg_broker_pairs_untracked_total).  Thread-safe.
 */
#ifndef BROKER_PAIR_METRICS_H
#define BROKER_PAIR_METRICS_H

#include <stdbool.h>

#include "metrics_text.h"
#include "technique.h"

#define PAIR_METRICS_MAX 4096

enum failure_reason {
    FAIL_TIMEOUT,
    FAIL_REFUSED,
    FAIL_RESET,
    FAIL_UNREACHABLE,
    FAIL_HANDSHAKE,
    FAIL_OTHER,
    FAIL_REASONS
};

/* The reason a report's free text falls under. */
enum failure_reason failure_reason_of(const char *why);
const char *failure_reason_name(enum failure_reason r);

struct pair_metrics;

struct pair_metrics *pair_metrics_new(void);
void pair_metrics_free(struct pair_metrics *pm);
/* One report of an attempt from cluster `from` to cluster `to`. */
void pair_metrics_record(struct pair_metrics *pm, const char *from, const char *to,
                         enum technique t, bool ok, unsigned setup_ms, const char *why);
/* qcg_broker_pair_*_total families and qcg_connect_setup_seconds. */
void pair_metrics_write(struct pair_metrics *pm, struct metrics_buf *b);

#endif
