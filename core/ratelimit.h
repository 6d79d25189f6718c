/* At most N log lines per window for an event that a peer can repeat at
   will (a burst is seen in full, a flood is not written out), with the count
   of those left out on the first line after a flood. */
#ifndef QCG_RATELIMIT_H
#define QCG_RATELIMIT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* Zeroed = no line yet. */
struct ratelimit {
    uint64_t window_ms; /* when the current window began; 0 = none yet */
    unsigned lines;     /* logged in the current window */
    unsigned suppressed;
};

/* True when a line may be logged now: fewer than burst lines in the window
   of window_ms that began with the first line logged in it.  *left_out is
   then the number of events not logged since the last line. */
static inline bool ratelimit_burst_ok(struct ratelimit *r, uint64_t now_ms, uint64_t window_ms,
                                      unsigned burst, unsigned *left_out)
{
    if (r->window_ms == 0 || now_ms - r->window_ms >= window_ms) {
        r->window_ms = now_ms == 0 ? 1 : now_ms;
        r->lines = 0;
    }
    if (r->lines >= burst) {
        r->suppressed++;
        return false;
    }
    r->lines++;
    *left_out = r->suppressed;
    r->suppressed = 0;
    return true;
}

/* One line per interval. */
static inline bool ratelimit_ok(struct ratelimit *r, uint64_t now_ms, uint64_t interval_ms,
                                unsigned *left_out)
{
    return ratelimit_burst_ok(r, now_ms, interval_ms, 1, left_out);
}

/* The burst limiter for threads that share one (a daemon's refusal lines). */
struct ratelimit_locked {
    pthread_mutex_t lock;
    struct ratelimit rl;
};
#define RATELIMIT_LOCKED_INIT                                                                      \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER,                                                                 \
        {                                                                                          \
            0, 0, 0                                                                                \
        }                                                                                          \
    }

static inline bool ratelimit_locked_ok(struct ratelimit_locked *r, uint64_t now_ms,
                                       uint64_t window_ms, unsigned burst, unsigned *left_out)
{
    pthread_mutex_lock(&r->lock);
    bool ok = ratelimit_burst_ok(&r->rl, now_ms, window_ms, burst, left_out);
    pthread_mutex_unlock(&r->lock);
    return ok;
}

#endif
