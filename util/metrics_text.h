/*
 * The Prometheus text exposition format (version 0.0.4), written into a
 * growing buffer: each family once with its HELP and TYPE, then its samples.
 * Names follow Prometheus' conventions (qcg_<daemon>_<what>_<unit>, _total
 * for counters).  Label values are escaped here; the callers keep them
 * bounded (cluster names, techniques, reasons: never a job, rank or address).
 */
#ifndef QCG_METRICS_TEXT_H
#define QCG_METRICS_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct metrics_buf {
    char *p;
    size_t len, cap;
    bool failed; /* out of memory: the scrape is answered with 500 */
};

void metrics_buf_free(struct metrics_buf *b);

/* "# HELP name help" and "# TYPE name type" (counter, gauge, histogram). */
void metrics_family(struct metrics_buf *b, const char *name, const char *type, const char *help);
/* One sample: name{k1="v1",...} value.  The labels are name/value pairs
   ending with NULL. */
void metrics_sample(struct metrics_buf *b, const char *name, double value, ...)
    __attribute__((sentinel));
/* The same, with the labels in an array of 2 * nlabels strings. */
void metrics_sample_v(struct metrics_buf *b, const char *name, double value,
                      const char *const *labels, int nlabels);

/*
 * A daemon's --stats counters (name, value) as metrics: each entry of map
 * names a counter and the sample it becomes; entries of one family follow
 * each other (its HELP and TYPE come from the first).  label/value: one
 * label of the sample, or NULL.  Counters not in map are not written.
 */
struct metrics_counter {
    const char *name;
    unsigned long long value;
};
struct metrics_map {
    const char *counter, *metric, *type, *label, *value, *help;
};
void metrics_write_mapped(struct metrics_buf *b, const struct metrics_map *map, size_t nmap,
                          const struct metrics_counter *c, size_t n);

/*
 * A histogram of durations in seconds with fixed buckets, thread-safe.
 * Written as name_bucket{...,le="..."}, name_sum and name_count.
 */
#define METRICS_BUCKETS 12
extern const double metrics_setup_buckets[METRICS_BUCKETS]; /* 1 ms .. 30 s */

struct metrics_histogram {
    uint64_t bucket[METRICS_BUCKETS]; /* observations <= bound (not cumulative) */
    uint64_t count;                   /* every observation, +Inf included */
    double sum;
};

void metrics_observe(struct metrics_histogram *h, double value);
/* Adds h into into (a total over several). */
void metrics_histogram_add(struct metrics_histogram *into, const struct metrics_histogram *h);
/* The family line is the caller's; labels as in metrics_sample_v. */
void metrics_histogram_write(struct metrics_buf *b, const char *name,
                             const struct metrics_histogram *h, const char *const *labels,
                             int nlabels);

#endif
