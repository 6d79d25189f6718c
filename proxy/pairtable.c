/* Seen tokens by pair id: a chained hash table that grows up to its cap. */
#include "pairtable.h"

#include <stdlib.h>
#include <string.h>

#define PAIRTABLE_MIN_BUCKETS 1024

struct pairtable {
    struct pt_entry **buckets;
    size_t nbuckets; /* a power of two */
    size_t count, max;
};

/* Pair ids are random bytes chosen by the broker and covered by the token's
   MAC, so their first bytes are a good hash that no client can steer. */
static size_t bucket_of(const struct pairtable *t, const unsigned char pair[TOKEN_PAIR_LEN])
{
    uint64_t h;
    memcpy(&h, pair, sizeof(h));
    return (size_t)h & (t->nbuckets - 1);
}

struct pairtable *pairtable_new(size_t max_entries)
{
    struct pairtable *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->nbuckets = PAIRTABLE_MIN_BUCKETS;
    t->buckets = calloc(t->nbuckets, sizeof(*t->buckets));
    if (t->buckets == NULL) {
        free(t);
        return NULL;
    }
    t->max = max_entries;
    return t;
}

void pairtable_free(struct pairtable *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->nbuckets; i++) {
        struct pt_entry *e = t->buckets[i], *next;
        for (; e != NULL; e = next) {
            next = e->next;
            free(e);
        }
    }
    free(t->buckets);
    free(t);
}

/* Doubles the bucket array; on failure the table just gets slower. */
static void grow(struct pairtable *t)
{
    size_t n = t->nbuckets * 2;
    struct pt_entry **b = calloc(n, sizeof(*b));
    if (b == NULL)
        return;
    struct pt_entry **old = t->buckets;
    size_t oldn = t->nbuckets;
    t->buckets = b;
    t->nbuckets = n;
    for (size_t i = 0; i < oldn; i++) {
        struct pt_entry *e = old[i], *next;
        for (; e != NULL; e = next) {
            next = e->next;
            size_t k = bucket_of(t, e->pair);
            e->next = b[k];
            b[k] = e;
        }
    }
    free(old);
}

struct pt_entry *pairtable_get(struct pairtable *t, const unsigned char pair[TOKEN_PAIR_LEN],
                               uint64_t forget_at)
{
    size_t k = bucket_of(t, pair);
    for (struct pt_entry *e = t->buckets[k]; e != NULL; e = e->next) {
        if (memcmp(e->pair, pair, TOKEN_PAIR_LEN) == 0) {
            if (forget_at > e->forget_at)
                e->forget_at = forget_at;
            return e;
        }
    }
    if (t->count >= t->max)
        return NULL;
    struct pt_entry *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    memcpy(e->pair, pair, TOKEN_PAIR_LEN);
    e->forget_at = forget_at;
    if (t->count >= t->nbuckets) {
        grow(t);
        k = bucket_of(t, pair);
    }
    e->next = t->buckets[k];
    t->buckets[k] = e;
    t->count++;
    return e;
}

size_t pairtable_expire(struct pairtable *t, uint64_t now)
{
    size_t freed = 0;
    for (size_t i = 0; i < t->nbuckets; i++) {
        struct pt_entry **pp = &t->buckets[i];
        while (*pp != NULL) {
            struct pt_entry *e = *pp;
            if (e->forget_at < now && e->waiting[0] == NULL && e->waiting[1] == NULL) {
                *pp = e->next;
                free(e);
                freed++;
            } else {
                pp = &e->next;
            }
        }
    }
    t->count -= freed;
    return freed;
}

size_t pairtable_count(const struct pairtable *t)
{
    return t->count;
}
