/*
 * Each uid's share of the helper: its local connections and its requests on
 * the thread pool.  The bounds themselves (max-clients-per-uid,
 * max-requests-per-uid) are applied by local.c; a share only counts, and
 * queues the connections of its uid whose next request waits for one of the
 * uid's requests to end (in order of arrival, so a uid's processes take
 * turns).  Loop thread only.
 */
#ifndef QCG_HELPER_SHARES_H
#define QCG_HELPER_SHARES_H

#include <stdbool.h>
#include <sys/types.h>

#include "dlist.h"
#include "tokenbucket.h"

struct share {
    uid_t uid;
    unsigned conns;         /* local connections of this uid, refused ones included */
    unsigned refusals_held; /* of those, refused ones waiting out their delay */
    unsigned requests;      /* its requests on the thread pool, or waiting in a batch */
    unsigned lookups;       /* of those, first lookups that go in batches */
    struct dlist waiting;   /* connections holding a request back (local.c's struct conn) */
    struct dlink link;      /* in struct shares */
    /* Its first lookups waiting for a batch, oldest first, and its place in
       the helper's turn of uids that have some (local_requests.c). */
    struct dlist batch_wait;
    struct dlink batch_turn;
    unsigned in_batch; /* of its lookups in batch number batch_made */
    uint64_t batch_made;
    /* Rates per uid (lookups-per-uid, reports-per-uid, probes-per-uid,
       publishes-per-uid): the share outlives the uid's connections until
       its buckets are full again, or a uid would get a full bucket by
       reconnecting. */
    struct tokenbucket lookup_rate, reports, probes, publishes;
    uint64_t keep_until_ms;
    /* Its turn on the loop (local_turns.c): the pass it last sent a
       message in, how many in that pass, and whether that spent its turn. */
    uint64_t turn;
    unsigned turn_messages;
    int turn_over;
};

struct shares;

struct shares *shares_new(void);
/* Frees the shares kept for their buckets too (every connection and
   request must have ended). */
void shares_free(struct shares *ss);
/* The share of uid with one more connection; NULL when out of memory. */
struct share *share_join(struct shares *ss, uid_t uid);
/* One connection fewer; the share goes with its last connection and request. */
void share_leave(struct shares *ss, struct share *s);
void share_request_begin(struct share *s);
/* One request fewer (the caller wakes its waiting connections first). */
void share_request_end(struct shares *ss, struct share *s);
/* Takes a token of the share's bucket b (rate a second, burst): true when
   there was one.  Keeps the share until the bucket is full again. */
bool share_take(struct share *s, struct tokenbucket *b, double rate, double burst);
/* Whether a uid other than s's asked for a lookup within the last
   within_ms (its lookup_rate was used): s then shares the node. */
bool share_others_looking_up(const struct shares *ss, const struct share *s, uint64_t within_ms);
/* Whether a uid other than s's looked up, published or withdrew within
   the last within_ms (its lookup_rate or publishes was used). */
/* Whether a uid other than s's has a connection. */
bool share_others_connected(const struct shares *ss, const struct share *s);
bool share_others_active(const struct shares *ss, const struct share *s, uint64_t within_ms);

#endif
