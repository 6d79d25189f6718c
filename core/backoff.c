/* Exponential backoff with jitter; see backoff.h. */
#include "backoff.h"

#include <stdint.h>
#include <time.h>
#include <unistd.h>

/* xorshift64*: jitter needs no cryptographic quality, only independence between
   processes started together, hence the per-thread seed from time, pid, address. */
static uint64_t jitter_random(void)
{
    static _Thread_local uint64_t state;
    if (state == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        state = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^
                (uint64_t)(uintptr_t)&state;
        if (state == 0)
            state = 0x9e3779b97f4a7c15ULL;
    }
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545f4914f6cdd1dULL;
}

unsigned backoff_ms(unsigned attempt, unsigned base_ms, unsigned max_ms)
{
    if (base_ms == 0)
        base_ms = 1;
    if (max_ms < base_ms)
        max_ms = base_ms;
    uint64_t d = base_ms;
    for (unsigned i = 0; i < attempt && d < max_ms; i++)
        d <<= 1;
    if (d > max_ms)
        d = max_ms;
    /* "Equal jitter": half fixed, half random, so the delay still grows but
       daemons that failed together do not retry together. */
    uint64_t half = d / 2;
    return (unsigned)(d - half + jitter_random() % (half + 1));
}
