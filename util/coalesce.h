/*
 * Calls that wait for their answer, gathered into batches: a thread hands
 * its item over and blocks until a batch carried it.  No timer: a batch goes
 * as soon as fewer than `in_flight` are on the way, so alone a call goes at
 * once, and under load what came while the others were on the way goes
 * together (as the helper's first lookups do, helper/local_requests.c).  The
 * sending runs on one of the waiting threads, so there is no thread of its
 * own; the frontend relays its helpers' fallback lookups and failure
 * reports to the broker this way.
 */
#ifndef QCG_COALESCE_H
#define QCG_COALESCE_H

/* Sends n (1..max_batch) items and fills in their answers; called on one
   of the callers' threads, with no lock held. */
typedef void (*coalesce_send_fn)(void *arg, void *const *items, int n);

struct coalesce;

/* NULL when out of memory. */
struct coalesce *coalesce_new(int max_batch, int in_flight, coalesce_send_fn send, void *arg);
/* Returns once a batch carrying `item` was sent (send filled its answer). */
void coalesce_call(struct coalesce *c, void *item);
/* Batches sent and the items they carried, since the start; items that
   wait now. */
void coalesce_counts(struct coalesce *c, unsigned long long *batches, unsigned long long *items,
                     int *waiting);
/* No call may be pending. */
void coalesce_free(struct coalesce *c);

#endif
