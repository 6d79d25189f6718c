/*
 * The tokens the proxy has seen, by pair id: which sides were used (a token is
 * good once), and the connection waiting on each side for the other.  An
 * entry is kept until its token's expiry + skew has passed, so a replay is
 * recognised for as long as the token itself would be accepted.  Bounded:
 * when full, new pairs are refused rather than old entries forgotten (which
 * would let a token be used twice).
 *
 * Shared fairly: each entry is charged to its owner, the source (tally.h
 * key) of the connection that presented the pair's first token, and an owner
 * holds at most per_owner entries.  A token names only its pair, side and
 * expiry (common/token.h), not its job, so the source address is what the
 * proxy can tell clients apart by: one host, or one NATed site, that floods
 * valid tokens fills its own share and no one else's.  Within it, the pair
 * id's job tag (token.h) holds at most half of an owner's share, so that one
 * job of a site leaves room for the site's other jobs.
 */
#ifndef PROXY_PAIRTABLE_H
#define PROXY_PAIRTABLE_H

#include <stddef.h>
#include <stdint.h>

#include "tally.h"
#include "token.h"

struct pt_entry {
    struct pt_entry *next; /* pairtable_expire's list of the expired */
    unsigned char pair[TOKEN_PAIR_LEN];
    uint64_t forget_at;    /* unix seconds: the latest expiry + skew seen */
    unsigned char used[2]; /* per side */
    void *waiting[2];      /* per side: the caller's waiting connection, or NULL */
    char owner[TALLY_KEY_MAX];
    char job[TOKEN_JOB_TAG_TEXT]; /* the pair id's job tag (token.h) */
};

/* Why pairtable_get found no room. */
enum pt_refusal { PT_TABLE_FULL, PT_OWNER_FULL, PT_JOB_FULL, PT_NO_MEMORY };

struct pairtable;

struct pairtable *pairtable_new(size_t max_entries, unsigned per_owner);
void pairtable_free(struct pairtable *t);
/* The entry for pair, made when new and charged to owner and to its job tag
   (forget_at raised to at least the given one).  NULL with *why when the
   table is full, owner or the job holds its share already, or memory runs
   out. */
struct pt_entry *pairtable_get(struct pairtable *t, const unsigned char pair[TOKEN_PAIR_LEN],
                               uint64_t forget_at, const char *owner, enum pt_refusal *why);
/* Frees the entries past forget_at with no connection waiting; returns how
   many. */
size_t pairtable_expire(struct pairtable *t, uint64_t now);
size_t pairtable_count(const struct pairtable *t);
/* The entries owner holds now; those of a job tag. */
unsigned pairtable_owned(const struct pairtable *t, const char *owner);
unsigned pairtable_job_owned(const struct pairtable *t, const char *job);

#endif
