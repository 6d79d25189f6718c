/* Seen tokens by pair id, in the one hash table (htable.h), up to a cap. */
#include "pairtable.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "htable.h"

struct pairtable {
    struct htable *table; /* of struct pt_entry */
    struct tally *owners; /* entries per owner */
    struct tally *jobs;   /* entries per job tag */
    size_t max;
    unsigned per_owner, per_job;
};

static bool entry_has_pair(const void *entry, const void *pair)
{
    return memcmp(((const struct pt_entry *)entry)->pair, pair, TOKEN_PAIR_LEN) == 0;
}

/* Pair ids are random bytes chosen by the broker and covered by the token's
   MAC, so their first bytes are a good hash that no client can steer. */
static uint64_t pair_hash(const unsigned char pair[TOKEN_PAIR_LEN])
{
    uint64_t h;
    memcpy(&h, pair, sizeof(h));
    return h;
}

struct pairtable *pairtable_new(size_t max_entries, unsigned per_owner)
{
    struct pairtable *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->table = htable_new(entry_has_pair);
    t->owners = tally_new();
    t->jobs = tally_new();
    if (t->table == NULL || t->owners == NULL || t->jobs == NULL) {
        pairtable_free(t);
        return NULL;
    }
    t->max = max_entries;
    t->per_owner = per_owner;
    t->per_job = per_owner > 1 ? per_owner / 2 : 1;
    return t;
}

void pairtable_free(struct pairtable *t)
{
    struct pt_entry *e;
    size_t i = 0;

    if (t == NULL)
        return;
    while (t->table != NULL && (e = htable_next(t->table, &i)) != NULL)
        free(e);
    htable_free(t->table);
    tally_free(t->owners);
    tally_free(t->jobs);
    free(t);
}

struct pt_entry *pairtable_get(struct pairtable *t, const unsigned char pair[TOKEN_PAIR_LEN],
                               uint64_t forget_at, const char *owner, enum pt_refusal *why)
{
    uint64_t hash = pair_hash(pair);
    struct pt_entry *e = htable_find(t->table, hash, pair);
    if (e != NULL) {
        if (forget_at > e->forget_at)
            e->forget_at = forget_at;
        return e;
    }
    if (htable_count(t->table) >= t->max) {
        *why = PT_TABLE_FULL;
        return NULL;
    }
    char job[TOKEN_JOB_TAG_TEXT];
    token_pair_tag(pair, job);
    if (tally_count(t->owners, owner) >= t->per_owner) {
        *why = PT_OWNER_FULL;
        return NULL;
    }
    if (tally_count(t->jobs, job) >= t->per_job) {
        *why = PT_JOB_FULL;
        return NULL;
    }
    *why = PT_NO_MEMORY;
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    memcpy(e->pair, pair, TOKEN_PAIR_LEN);
    e->forget_at = forget_at;
    snprintf(e->owner, sizeof(e->owner), "%s", owner);
    memcpy(e->job, job, sizeof(job));
    if (!tally_take(t->owners, e->owner, t->per_owner)) {
        free(e);
        return NULL;
    }
    if (!tally_take(t->jobs, e->job, t->per_job)) {
        tally_give(t->owners, e->owner);
        free(e);
        return NULL;
    }
    if (htable_insert(t->table, hash, e) < 0) {
        tally_give(t->owners, e->owner);
        tally_give(t->jobs, e->job);
        free(e);
        return NULL;
    }
    return e;
}

size_t pairtable_expire(struct pairtable *t, uint64_t now)
{
    struct pt_entry *e, *expired = NULL;
    size_t i = 0, freed = 0;

    /* Listed first, removed after: the table must not change while it is
       iterated. */
    while ((e = htable_next(t->table, &i)) != NULL) {
        if (e->forget_at < now && e->waiting[0] == NULL && e->waiting[1] == NULL) {
            e->next = expired;
            expired = e;
        }
    }
    while ((e = expired) != NULL) {
        expired = e->next;
        htable_remove(t->table, pair_hash(e->pair), e->pair);
        tally_give(t->owners, e->owner);
        tally_give(t->jobs, e->job);
        free(e);
        freed++;
    }
    return freed;
}

size_t pairtable_count(const struct pairtable *t)
{
    return htable_count(t->table);
}

unsigned pairtable_owned(const struct pairtable *t, const char *owner)
{
    return tally_count(t->owners, owner);
}

unsigned pairtable_job_owned(const struct pairtable *t, const char *job)
{
    return tally_count(t->jobs, job);
}
