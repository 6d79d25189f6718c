/* At most one log line per interval for an event that a peer can repeat at
   will, with the count of those left out. */
#ifndef QCG_RATELIMIT_H
#define QCG_RATELIMIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct ratelimit {
    uint64_t last_ms;
    unsigned suppressed;
};

/* True when a line may be logged now; *left_out is then the number of
   events not logged since the last line. */
static inline bool ratelimit_ok(struct ratelimit *r, uint64_t now_ms, uint64_t interval_ms,
                                unsigned *left_out)
{
    if (r->last_ms != 0 && now_ms - r->last_ms < interval_ms) {
        r->suppressed++;
        return false;
    }
    *left_out = r->suppressed;
    r->suppressed = 0;
    r->last_ms = now_ms == 0 ? 1 : now_ms;
    return true;
}

/* The same for threads that share one limiter, without a lock (zeroed =
   ready).  A line racing another may be counted as left out. */
struct ratelimit_shared {
    atomic_ullong last_ms;
    atomic_uint suppressed;
};

static inline bool ratelimit_shared_ok(struct ratelimit_shared *r, uint64_t now_ms,
                                       uint64_t interval_ms, unsigned *left_out)
{
    unsigned long long last = atomic_load(&r->last_ms);
    if ((last != 0 && now_ms - last < interval_ms) ||
        !atomic_compare_exchange_strong(&r->last_ms, &last, now_ms | 1)) {
        atomic_fetch_add(&r->suppressed, 1);
        return false;
    }
    *left_out = atomic_exchange(&r->suppressed, 0);
    return true;
}

#endif
