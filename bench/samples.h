/*
 * Latency samples of the benchmarks (microseconds): sorted once, then read
 * as a median or a percentile, the same way in every tool that prints them.
 * The clock is core's now_us (bounded_io.h, monotonic).
 */
#ifndef QCG_BENCH_SAMPLES_H
#define QCG_BENCH_SAMPLES_H

#include <stddef.h>
#include <stdint.h>

/* Sorts v[0..n) in increasing order. */
void samples_sort(uint64_t *v, size_t n);
/* The pct-th percentile of sorted v[0..n) by nearest rank (the sample at
   or below which pct% of them lie: p50 of 4 is the 2nd, p99 of 200 the
   198th); 0 when n is 0. */
uint64_t samples_percentile(const uint64_t *sorted, size_t n, unsigned pct);
/* Sorts v, then its median: the middle sample, or the mean of the two
   middle ones; 0 when n is 0. */
uint64_t samples_median(uint64_t *v, size_t n);

#endif
