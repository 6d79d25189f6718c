/*
 * The tokens the proxy has seen, by pair id: which sides were used (a token is
 * good once), and the connection waiting on each side for the other.  An
 * entry is kept until its token's expiry + skew has passed, so a replay is
 * recognised for as long as the token itself would be accepted.  Bounded:
 * when full, new pairs are refused rather than old entries forgotten (which
 * would let a token be used twice).
 */
#ifndef PROXY_PAIRTABLE_H
#define PROXY_PAIRTABLE_H

#include <stddef.h>
#include <stdint.h>

#include "token.h"

struct pt_entry {
    struct pt_entry *next; /* pairtable_expire's list of the expired */
    unsigned char pair[TOKEN_PAIR_LEN];
    uint64_t forget_at;    /* unix seconds: the latest expiry + skew seen */
    unsigned char used[2]; /* per side */
    void *waiting[2];      /* per side: the caller's waiting connection, or NULL */
};

struct pairtable;

struct pairtable *pairtable_new(size_t max_entries);
void pairtable_free(struct pairtable *t);
/* The entry for pair, made when new (forget_at raised to at least the given
   one).  NULL when the table is full or out of memory. */
struct pt_entry *pairtable_get(struct pairtable *t, const unsigned char pair[TOKEN_PAIR_LEN],
                               uint64_t forget_at);
/* Frees the entries past forget_at with no connection waiting; returns how
   many. */
size_t pairtable_expire(struct pairtable *t, uint64_t now);
size_t pairtable_count(const struct pairtable *t);

#endif
