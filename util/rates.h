/*
 * Rates per caller at the layer that knows the caller (a node at the
 * frontend, a cluster at the broker): a token bucket per key and kind of
 * call.  A lookup beyond the burst may wait for its token (back-pressure: an
 * MPI job's connection storm slows down rather than fails) up to a bound;
 * other calls beyond it are refused.  Thread-safe.
 */
#ifndef QCG_RATES_H
#define QCG_RATES_H

#include <stdbool.h>

enum rate_kind { RATE_LOOKUP, RATE_REPORT, RATE_PROBE, RATE_KINDS };

struct rate {
    double per_second;
    double burst;
};

struct rates;

struct rates *rates_new(const struct rate limits[RATE_KINDS]);
void rates_free(struct rates *r);

/* Takes a token of key's bucket for kind, waiting for it up to wait_ms (the
   wait is spent outside the lock).  false when none comes in time (or out of
   memory for a new key's buckets).  Keys are authenticated callers (nodes,
   clusters), so the table grows only with them. */
bool rates_take(struct rates *r, const char *key, enum rate_kind kind, int wait_ms);
/* The same for n tokens at once (a batch): all of them, waiting up to
   wait_ms for those missing, or none. */
bool rates_take_n(struct rates *r, const char *key, enum rate_kind kind, unsigned n, int wait_ms);
/* rates_take that also says, in *waited, whether the bucket was empty so
   that the caller had to wait for its token (a count of real waits: the
   wall time of a take also grows when a loaded machine puts the thread
   aside). */
bool rates_take_waited(struct rates *r, const char *key, enum rate_kind kind, int wait_ms,
                       bool *waited);

#endif
