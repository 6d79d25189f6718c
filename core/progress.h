/* A deadline that measures lack of progress rather than wall time (issue
   29): a wait ends when nothing has moved for `idle`, or at its hard cap,
   whichever comes first.  Under load every step of a connection setup is
   slower (helpers, broker, the peer process all share the CPU), so a fixed
   bound on the whole cut setups that were moving; a bound on silence does
   not, and the cap still ends a wait that keeps trickling forever.  What
   counts as progress is the caller's (libqcgconn/README.md); this is the
   one copy of the arithmetic.  Times are CLOCK_MONOTONIC microseconds. */
#ifndef QCG_PROGRESS_H
#define QCG_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

struct progress {
    uint64_t start_us, last_us; /* the wait's start, its last progress */
    uint64_t idle_us;           /* silence that ends it */
    uint64_t cap_us;            /* absolute: the latest it may end */
};

/* Starts a wait at now: idle_ms of silence end it, and it never lasts
   beyond cap_ms (>= idle_ms) nor beyond the absolute `limit_us` (0: none),
   an enclosing wait's end. */
static inline void progress_start(struct progress *p, uint64_t now, uint64_t idle_ms,
                                  uint64_t cap_ms, uint64_t limit_us)
{
    if (cap_ms < idle_ms)
        cap_ms = idle_ms;
    p->start_us = p->last_us = now;
    p->idle_us = idle_ms * 1000u;
    p->cap_us = now + cap_ms * 1000u;
    if (limit_us != 0 && p->cap_us > limit_us)
        p->cap_us = limit_us;
}

/* Something moved at now: the silence starts again. */
static inline void progress_mark(struct progress *p, uint64_t now)
{
    if (now > p->last_us)
        p->last_us = now;
}

/* When the wait ends if nothing moves before. */
static inline uint64_t progress_due(const struct progress *p)
{
    uint64_t idle_end = p->last_us + p->idle_us;

    return idle_end < p->cap_us ? idle_end : p->cap_us;
}

static inline bool progress_over(const struct progress *p, uint64_t now)
{
    return now >= progress_due(p);
}

/* Whether the cap, not silence, ends the wait (for the message). */
static inline bool progress_capped(const struct progress *p)
{
    return p->cap_us <= p->last_us + p->idle_us;
}

/* The wait's length so far and its silence, in ms, for messages. */
static inline unsigned progress_elapsed_ms(const struct progress *p, uint64_t now)
{
    return now > p->start_us ? (unsigned)((now - p->start_us) / 1000u) : 0;
}

static inline unsigned progress_idle_ms(const struct progress *p, uint64_t now)
{
    return now > p->last_us ? (unsigned)((now - p->last_us) / 1000u) : 0;
}

#endif
