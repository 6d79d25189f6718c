/* Milliseconds on the monotonic clock: for deadlines and durations, never
   for dates (it does not follow changes of the wall clock). */
#ifndef QCG_COMMON_MONOTONIC_H
#define QCG_COMMON_MONOTONIC_H

#include <stdint.h>
#include <time.h>

static inline uint64_t monotonic_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

#endif
