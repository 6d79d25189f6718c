/* A libuv timer for a deadline that does not count time its process did
   not run (core/stall.h): the one copy of arming it and of moving it in its
   callback. */
#ifndef QCG_UTIL_STALL_TIMER_H
#define QCG_UTIL_STALL_TIMER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "stall.h"

/* Starts t to call cb in ms; d may move by up to ms in all. */
static inline void stall_timer_start(uv_timer_t *t, struct stall_deadline *d, uv_timer_cb cb,
                                     uint64_t ms)
{
    stall_deadline_set(d, uv_now(t->loop), ms);
    uv_timer_start(t, cb, ms, 0);
}

/* First in cb: true when the deadline moved (t calls cb again later, so cb
   returns), false when it is over. */
static inline bool stall_timer_postponed(uv_timer_t *t, struct stall_deadline *d, uv_timer_cb cb)
{
    uint64_t more = stall_deadline_postpone(d, uv_now(t->loop));

    if (more == 0)
        return false;
    uv_timer_start(t, cb, more, 0);
    return true;
}

#endif
