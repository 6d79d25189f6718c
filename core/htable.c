/* Open addressing with linear probing; see htable.h. */
#include "htable.h"

#include <stdlib.h>
#include <string.h>

struct slot {
    uint64_t hash;
    void *entry; /* NULL = empty */
};

struct htable {
    struct slot *slots;
    size_t mask; /* capacity - 1; capacity is a power of two */
    size_t count;
    htable_eq_fn eq;
};

#define HTABLE_MIN_CAPACITY 16

struct htable *htable_new(htable_eq_fn eq)
{
    struct htable *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->slots = calloc(HTABLE_MIN_CAPACITY, sizeof(*t->slots));
    if (t->slots == NULL) {
        free(t);
        return NULL;
    }
    t->mask = HTABLE_MIN_CAPACITY - 1;
    t->eq = eq;
    return t;
}

void htable_free(struct htable *t)
{
    if (t == NULL)
        return;
    free(t->slots);
    free(t);
}

void *htable_find(const struct htable *t, uint64_t hash, const void *key)
{
    for (size_t i = hash & t->mask;; i = (i + 1) & t->mask) {
        const struct slot *s = &t->slots[i];
        if (s->entry == NULL)
            return NULL;
        if (s->hash == hash && t->eq(s->entry, key))
            return s->entry;
    }
}

static void place(struct slot *slots, size_t mask, uint64_t hash, void *entry)
{
    size_t i = hash & mask;
    while (slots[i].entry != NULL)
        i = (i + 1) & mask;
    slots[i].hash = hash;
    slots[i].entry = entry;
}

static int grow(struct htable *t)
{
    size_t cap = (t->mask + 1) * 2;
    struct slot *slots = calloc(cap, sizeof(*slots));
    if (slots == NULL)
        return -1;
    for (size_t i = 0; i <= t->mask; i++)
        if (t->slots[i].entry != NULL)
            place(slots, cap - 1, t->slots[i].hash, t->slots[i].entry);
    free(t->slots);
    t->slots = slots;
    t->mask = cap - 1;
    return 0;
}

int htable_insert(struct htable *t, uint64_t hash, void *entry)
{
    /* Keep the load at most 3/4: probe sequences stay short. */
    if ((t->count + 1) * 4 > (t->mask + 1) * 3 && grow(t) == -1)
        return -1;
    place(t->slots, t->mask, hash, entry);
    t->count++;
    return 0;
}

void *htable_remove(struct htable *t, uint64_t hash, const void *key)
{
    size_t i = hash & t->mask;
    for (;; i = (i + 1) & t->mask) {
        if (t->slots[i].entry == NULL)
            return NULL;
        if (t->slots[i].hash == hash && t->eq(t->slots[i].entry, key))
            break;
    }
    void *entry = t->slots[i].entry;
    /* Backward shift: move later entries of the run into the hole when their
       home slot does not lie cyclically in (hole, j]. */
    size_t hole = i;
    for (size_t j = (i + 1) & t->mask; t->slots[j].entry != NULL; j = (j + 1) & t->mask) {
        size_t home = t->slots[j].hash & t->mask;
        if (((j - home) & t->mask) >= ((j - hole) & t->mask)) {
            t->slots[hole] = t->slots[j];
            hole = j;
        }
    }
    t->slots[hole].entry = NULL;
    t->slots[hole].hash = 0;
    t->count--;
    return entry;
}

size_t htable_count(const struct htable *t)
{
    return t->count;
}

void htable_clear(struct htable *t)
{
    memset(t->slots, 0, (t->mask + 1) * sizeof(*t->slots));
    t->count = 0;
}

void *htable_next(const struct htable *t, size_t *iter)
{
    while (*iter <= t->mask) {
        void *e = t->slots[(*iter)++].entry;
        if (e != NULL)
            return e;
    }
    return NULL;
}

uint64_t htable_hash(const void *data, size_t len, uint64_t seed)
{
    /* FNV-1a, then a splitmix64 finalizer so the low bits (the slot index) depend
       on every input byte.  Keys come from authenticated frontends only, so a
       seeded non-cryptographic hash is enough. */
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ULL ^ seed;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return h;
}
