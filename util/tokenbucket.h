/* A token bucket: a caller may spend `burst` at once and `rate` a second
   after that, so a legitimate burst passes where a steady flood does not. */
#ifndef QCG_TOKENBUCKET_H
#define QCG_TOKENBUCKET_H

#include <stdbool.h>
#include <stdint.h>

struct tokenbucket {
    double tokens;
    uint64_t last_ms; /* 0: never used (full) */
};

/* Takes n tokens at now_ms: true when there were n (else none is taken). */
static inline bool tokenbucket_take_n(struct tokenbucket *b, uint64_t now_ms, double rate,
                                      double burst, double n)
{
    if (b->last_ms == 0) {
        b->tokens = burst;
    } else if (now_ms > b->last_ms) {
        b->tokens += (double)(now_ms - b->last_ms) * rate / 1000.0;
        if (b->tokens > burst)
            b->tokens = burst;
    }
    b->last_ms = now_ms == 0 ? 1 : now_ms;
    if (b->tokens < n)
        return false;
    b->tokens -= n;
    return true;
}

/* Takes one token at now_ms: true when there was one. */
static inline bool tokenbucket_take(struct tokenbucket *b, uint64_t now_ms, double rate,
                                    double burst)
{
    return tokenbucket_take_n(b, now_ms, rate, burst, 1.0);
}

/* Whether the bucket would be full at now_ms (nothing to remember). */
static inline bool tokenbucket_full(const struct tokenbucket *b, uint64_t now_ms, double rate,
                                    double burst)
{
    return b->last_ms == 0 || b->tokens + (double)(now_ms - b->last_ms) * rate / 1000.0 >= burst;
}

#endif
