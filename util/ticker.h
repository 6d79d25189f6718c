/*
 * A thread that calls a function every `interval` seconds until stopped: the
 * broker's state file saver, the proxy's beats.  Stopping wakes the thread at
 * once and waits for a call in progress to end.
 */
#ifndef QCG_TICKER_H
#define QCG_TICKER_H

#include <stdbool.h>
#include <stddef.h>

struct ticker;

/* Starts the thread: fn(arg) at once when at_once, then every interval_s
   seconds.  NULL with a reason in err. */
struct ticker *ticker_start(unsigned interval_s, bool at_once, void (*fn)(void *arg), void *arg,
                            char *err, size_t errlen);
/* Stops the thread and frees the ticker.  NULL is fine. */
void ticker_stop(struct ticker *t);

#endif
