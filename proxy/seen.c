/* Taken tokens in time buckets of 8-byte records; see seen.h. */
#include "seen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "htable.h"
#include "tally.h"

/* Buckets in the ring: the horizon is cut into SEEN_BUCKETS - 2 widths, so
   a record is kept at most a width (a 62nd of the horizon) too long. */
#define SEEN_BUCKETS 64
#define SEEN_MIN_SLOTS 64
/* What one (owner, job) charge of a bucket costs: the struct, the malloc
   header and its table slot. */
#define SEEN_CHARGE_BYTES (sizeof(struct charge) + 32)

/* How many records of one bucket an owner presented for one job tag: what
   the bucket gives back to the shares when it goes. */
struct charge {
    unsigned n;
    char job[TOKEN_JOB_TAG_TEXT];
    char owner[TALLY_KEY_MAX];
};

struct bucket {
    uint64_t k;      /* its records are forgotten once now >= k x width; 0 = unused */
    uint64_t *slots; /* open addressing, linear probing; 0 = empty */
    size_t cap, n;
    struct htable *charges; /* of struct charge, by owner and job */
};

struct seen {
    struct bucket b[SEEN_BUCKETS];
    unsigned width, horizon;
    size_t max_bytes, bytes, count;
    unsigned per_owner, per_job;
    struct tally *owners, *jobs;
};

/* The record of (pair, side): the pair id's first 8 bytes, random and
   covered by the token's MAC (no client steers them), the side in the
   lowest bit.  0 marks an empty slot, so 0 and 1 become 2 and 3: a false
   replay once in 2^62 pairs. */
static uint64_t record_of(const unsigned char pair[TOKEN_PAIR_LEN], int side)
{
    uint64_t r;

    memcpy(&r, pair, sizeof(r));
    r = (r & ~(uint64_t)1) | (uint64_t)(side & 1);
    return r < 2 ? r + 2 : r;
}

static size_t slot_of(uint64_t record, size_t cap)
{
    return (size_t)((record * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

static bool set_has(const struct bucket *b, uint64_t record)
{
    if (b->cap == 0)
        return false;
    for (size_t i = slot_of(record, b->cap);; i = (i + 1) & (b->cap - 1)) {
        if (b->slots[i] == record)
            return true;
        if (b->slots[i] == 0)
            return false;
    }
}

static void set_put(uint64_t *slots, size_t cap, uint64_t record)
{
    size_t i = slot_of(record, cap);

    while (slots[i] != 0)
        i = (i + 1) & (cap - 1);
    slots[i] = record;
}

/* Room for one more record within 3/4 of the slots: 0, or -1 (no memory,
   or max_bytes would be passed while both arrays exist). */
static int set_reserve(struct seen *s, struct bucket *b, enum seen_result *why)
{
    if ((b->n + 1) * 4 <= b->cap * 3)
        return 0;
    size_t cap = b->cap ? 2 * b->cap : SEEN_MIN_SLOTS;
    if (s->bytes + cap * sizeof(uint64_t) > s->max_bytes) {
        *why = SEEN_FULL;
        return -1;
    }
    uint64_t *slots = calloc(cap, sizeof(uint64_t));
    if (slots == NULL) {
        *why = SEEN_NO_MEMORY;
        return -1;
    }
    for (size_t i = 0; i < b->cap; i++)
        if (b->slots[i] != 0)
            set_put(slots, cap, b->slots[i]);
    free(b->slots);
    s->bytes += (cap - b->cap) * sizeof(uint64_t);
    b->slots = slots;
    b->cap = cap;
    return 0;
}

static bool charge_has_key(const void *entry, const void *key)
{
    const struct charge *c = entry, *k = key;
    return strcmp(c->job, k->job) == 0 && strcmp(c->owner, k->owner) == 0;
}

static uint64_t charge_hash(const struct charge *c)
{
    return htable_hash(c->owner, strlen(c->owner), htable_hash(c->job, strlen(c->job), 0));
}

/* Forgets every record of b and gives its charges back. */
static size_t bucket_drop(struct seen *s, struct bucket *b)
{
    struct charge *c;
    size_t i = 0, freed = b->n;

    while (b->charges != NULL && (c = htable_next(b->charges, &i)) != NULL) {
        tally_give_n(s->owners, c->owner, c->n);
        tally_give_n(s->jobs, c->job, c->n);
        s->bytes -= SEEN_CHARGE_BYTES;
        free(c);
    }
    if (b->charges != NULL)
        htable_clear(b->charges);
    free(b->slots);
    s->bytes -= b->cap * sizeof(uint64_t);
    s->count -= b->n;
    b->slots = NULL;
    b->cap = b->n = 0;
    b->k = 0;
    return freed;
}

struct seen *seen_new(size_t max_bytes, unsigned per_owner, unsigned horizon)
{
    struct seen *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->owners = tally_new();
    s->jobs = tally_new();
    for (int i = 0; i < SEEN_BUCKETS && s->owners && s->jobs; i++)
        if ((s->b[i].charges = htable_new(charge_has_key)) == NULL)
            break;
    if (s->owners == NULL || s->jobs == NULL || s->b[SEEN_BUCKETS - 1].charges == NULL) {
        seen_free(s);
        return NULL;
    }
    s->max_bytes = max_bytes;
    s->per_owner = per_owner;
    s->per_job = per_owner > 1 ? per_owner / 2 : 1;
    s->horizon = horizon ? horizon : 1;
    s->width = (s->horizon + SEEN_BUCKETS - 3) / (SEEN_BUCKETS - 2);
    return s;
}

void seen_free(struct seen *s)
{
    if (s == NULL)
        return;
    for (int i = 0; i < SEEN_BUCKETS; i++) {
        if (s->owners && s->jobs)
            bucket_drop(s, &s->b[i]);
        htable_free(s->b[i].charges);
    }
    tally_free(s->owners);
    tally_free(s->jobs);
    free(s);
}

/* The (owner, job) charge of b, made when new (and paid for). */
static struct charge *charge_get(struct seen *s, struct bucket *b, const char *owner,
                                 const char *job, enum seen_result *why)
{
    struct charge key, *c;

    snprintf(key.owner, sizeof(key.owner), "%s", owner);
    snprintf(key.job, sizeof(key.job), "%s", job);
    uint64_t hash = charge_hash(&key);
    if ((c = htable_find(b->charges, hash, &key)) != NULL)
        return c;
    if (s->bytes + SEEN_CHARGE_BYTES > s->max_bytes) {
        *why = SEEN_FULL;
        return NULL;
    }
    *why = SEEN_NO_MEMORY;
    if ((c = malloc(sizeof(*c))) == NULL)
        return NULL;
    *c = key;
    c->n = 0;
    if (htable_insert(b->charges, hash, c) < 0) {
        free(c);
        return NULL;
    }
    s->bytes += SEEN_CHARGE_BYTES;
    return c;
}

enum seen_result seen_add(struct seen *s, const unsigned char pair[TOKEN_PAIR_LEN], int side,
                          uint64_t forget_at, uint64_t now, const char *owner)
{
    enum seen_result why = SEEN_NO_MEMORY;

    if (forget_at > now + s->horizon)
        return SEEN_TOO_FAR;
    /* The bucket forgotten first after forget_at: k x width > forget_at. */
    uint64_t k = forget_at / s->width + 1;
    struct bucket *b = &s->b[k % SEEN_BUCKETS];
    if (b->k != k) {
        /* Within the horizon, another k in this place has had its time. */
        if (b->k != 0 && b->k * s->width > now)
            return SEEN_TOO_FAR;
        bucket_drop(s, b);
        b->k = k;
    }
    /* A replay carries the same expiry, so it lands in the same bucket. */
    uint64_t record = record_of(pair, side);
    if (set_has(b, record))
        return SEEN_REPLAY;
    char job[TOKEN_JOB_TAG_TEXT];
    token_pair_tag(pair, job);
    if (tally_count(s->owners, owner) >= s->per_owner)
        return SEEN_OWNER_FULL;
    if (tally_count(s->jobs, job) >= s->per_job)
        return SEEN_JOB_FULL;
    if (set_reserve(s, b, &why) < 0)
        return why;
    struct charge *c = charge_get(s, b, owner, job, &why);
    if (c == NULL)
        return why;
    if (!tally_take(s->owners, owner, s->per_owner))
        return SEEN_NO_MEMORY;
    if (!tally_take(s->jobs, job, s->per_job)) {
        tally_give(s->owners, owner);
        return SEEN_NO_MEMORY;
    }
    set_put(b->slots, b->cap, record);
    b->n++;
    c->n++;
    s->count++;
    return SEEN_NEW;
}

bool seen_has(const struct seen *s, const unsigned char pair[TOKEN_PAIR_LEN], int side)
{
    uint64_t record = record_of(pair, side);

    for (int i = 0; i < SEEN_BUCKETS; i++)
        if (s->b[i].n > 0 && set_has(&s->b[i], record))
            return true;
    return false;
}

size_t seen_expire(struct seen *s, uint64_t now)
{
    size_t freed = 0;

    for (int i = 0; i < SEEN_BUCKETS; i++)
        if (s->b[i].k != 0 && s->b[i].k * s->width <= now)
            freed += bucket_drop(s, &s->b[i]);
    return freed;
}

size_t seen_count(const struct seen *s)
{
    return s->count;
}

size_t seen_bytes(const struct seen *s)
{
    return s->bytes;
}

unsigned seen_per_owner(const struct seen *s)
{
    return s->per_owner;
}

unsigned seen_owned(const struct seen *s, const char *owner)
{
    return tally_count(s->owners, owner);
}

unsigned seen_job_owned(const struct seen *s, const char *job)
{
    return tally_count(s->jobs, job);
}
