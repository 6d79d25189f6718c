/*
 * How long to wait before trying again: exponential backoff with jitter, one
 * copy for the daemons' upstream links and libqcgconn's retries.
 */
#ifndef QCG_BACKOFF_H
#define QCG_BACKOFF_H

/* The delay in ms after `attempt` failures (0 for the first retry): base_ms
   doubling up to max_ms, then half of it fixed and half random, so that
   clients failing together do not retry together.  Thread-safe. */
unsigned backoff_ms(unsigned attempt, unsigned base_ms, unsigned max_ms);

#endif
