/*
 * Blocking calls of one kind made by many threads at once, sent upstream as
 * few calls carrying many (lookups in a storm: one SOAP call per connection
 * cost the broker and the frontends most of their CPU).  No thread of its
 * own and no timer: a caller that finds fewer than `flights` calls on the
 * way sends at once, with whatever waits beside it; one that finds them all
 * busy waits, and the first of those to see a call come back sends the next
 * batch.  Alone, a call goes out as it did; under load, batches grow.
 */
#ifndef QCG_COALESCE_H
#define QCG_COALESCE_H

/* Sends n (1..max) items, each the pointer a caller gave coalesce_call, and
   fills in their answers; runs on one of the callers' threads. */
typedef void (*coalesce_send_fn)(void *arg, void *const *items, int n);

/* The most items one batch carries (its arrays are on the sender's stack). */
#define COALESCE_MAX 256

struct coalesce;

/* max: items per batch, 1..COALESCE_MAX; flights: batches on the way at
   once.  NULL when out of memory. */
struct coalesce *coalesce_new(coalesce_send_fn send, void *arg, int max, int flights);
/* Returns once item was sent (its answer filled in by send). */
void coalesce_call(struct coalesce *c, void *item);
void coalesce_free(struct coalesce *c);

#endif
