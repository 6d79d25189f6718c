/*
 * The tokens the proxy has taken, so that each is good once: one 8-byte
 * record per (pair, side), kept until the token's expiry + skew has passed,
 * so a replay is recognised for as long as the token itself would be
 * accepted.  Records sit in time buckets (by the second they may be
 * forgotten) and a bucket goes whole once its time has passed: no per-record
 * timer, list or pointer, so a remembered token costs 8 bytes in an open
 * hash set (10 to 22 with its slack; core's htable would hold a pointer and
 * a hash per slot, then the entry: several times that).
 *
 * Bounded by memory: when a new record would pass max_bytes, tokens are
 * refused rather than old records forgotten (that would let a token be used
 * twice).  Shared fairly: each record is charged to the source (tally.h key)
 * that presented it, which holds at most per_owner, and to the pair id's job
 * tag (token.h), which holds at most half of that, so that one job of a site
 * leaves room for the site's other jobs.  A token names only its pair, side
 * and expiry, not its job's id, so the address and the tag are what the
 * proxy can tell clients apart by.
 */
#ifndef PROXY_SEEN_H
#define PROXY_SEEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "token.h"

enum seen_result {
    SEEN_NEW,        /* remembered now */
    SEEN_REPLAY,     /* this (pair, side) was taken before */
    SEEN_FULL,       /* max_bytes reached */
    SEEN_OWNER_FULL, /* the source holds per_owner */
    SEEN_JOB_FULL,   /* the job tag holds half of per_owner */
    SEEN_TOO_FAR,    /* forget_at beyond now + horizon */
    SEEN_NO_MEMORY,
};

struct seen;

/* horizon: the latest forget_at, in seconds from now, that can be
   remembered (tokens beyond it are refused: SEEN_TOO_FAR). */
struct seen *seen_new(size_t max_bytes, unsigned per_owner, unsigned horizon);
void seen_free(struct seen *s);
/* Remembers (pair, side) until forget_at (unix seconds), charged to owner,
   unless it was taken before or a bound says no. */
enum seen_result seen_add(struct seen *s, const unsigned char pair[TOKEN_PAIR_LEN], int side,
                          uint64_t forget_at, uint64_t now, const char *owner);
/* Whether (pair, side) is remembered. */
bool seen_has(const struct seen *s, const unsigned char pair[TOKEN_PAIR_LEN], int side);
/* Forgets the buckets whose time has passed; returns the records freed. */
size_t seen_expire(struct seen *s, uint64_t now);
size_t seen_count(const struct seen *s);
/* Bytes held now (the records' sets and their charges). */
size_t seen_bytes(const struct seen *s);
unsigned seen_per_owner(const struct seen *s);
/* The records owner holds now; those of a job tag. */
unsigned seen_owned(const struct seen *s, const char *owner);
unsigned seen_job_owned(const struct seen *s, const char *job);

#endif
