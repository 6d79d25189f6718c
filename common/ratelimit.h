/* At most one log line per interval for an event that a peer can repeat at
   will, with the count of those left out. */
#ifndef QCG_RATELIMIT_H
#define QCG_RATELIMIT_H

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

#endif
