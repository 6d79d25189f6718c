/* A deadline that fires well after it was due saw its process stopped: the
   machine froze, or the scheduler left the process runnable but unrun for
   seconds (seen in the lab's 80-rank storm on two cores: services waited up
   to 7 s).  The peer it waits for may not have run either, and what the peer
   sent may sit unread in a socket, since libuv runs due timers before it
   polls for I/O.  That time is nobody's lack of progress (issue 29), so the
   deadline moves by it, from a budget the caller gives (its own length: a
   wait at most doubles), and ends only when it fires on time.  The one copy
   of the arithmetic; times in milliseconds of one monotonic clock. */
#ifndef QCG_STALL_H
#define QCG_STALL_H

#include <stdint.h>

/* Later than this is a stop, not a busy loop's usual lag. */
#define STALL_LATE_MS 250u

struct stall_deadline {
    uint64_t due_ms;  /* when it should fire */
    uint64_t left_ms; /* what postponing may still add */
};

/* A deadline of ms from now, allowed to move by up to ms in all. */
static inline void stall_deadline_set(struct stall_deadline *d, uint64_t now, uint64_t ms)
{
    d->due_ms = now + ms;
    d->left_ms = ms;
}

/* At its timer (now): how long to wait still, 0 when it is over.  A timer
   that fired on time ends it; one late by more than STALL_LATE_MS moves
   the deadline by its lateness, within the budget. */
static inline uint64_t stall_deadline_postpone(struct stall_deadline *d, uint64_t now)
{
    if (now < d->due_ms)
        return d->due_ms - now; /* a timer early by the loop's rounding */
    uint64_t late = now - d->due_ms;
    if (late <= STALL_LATE_MS || d->left_ms == 0)
        return 0;
    if (late > d->left_ms)
        late = d->left_ms;
    d->left_ms -= late;
    d->due_ms = now + late;
    return late;
}

#endif
