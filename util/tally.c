/* Counts per holder in the one hash table (htable.h); see tally.h. */
#include "tally.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "htable.h"
#include "monotonic.h"
#include "source_group.h"

struct holder {
    unsigned n;
    char key[TALLY_KEY_MAX];
};

struct tally {
    struct htable *table; /* of struct holder */
    uint64_t seed;
};

static bool holder_has_key(const void *entry, const void *key)
{
    return strcmp(((const struct holder *)entry)->key, key) == 0;
}

/* The key as stored: cut to TALLY_KEY_MAX - 1 characters. */
static void key_of(const char *key, char out[TALLY_KEY_MAX])
{
    snprintf(out, TALLY_KEY_MAX, "%s", key);
}

static uint64_t key_hash(const struct tally *t, const char *key)
{
    return htable_hash(key, strlen(key), t->seed);
}

struct tally *tally_new(void)
{
    struct tally *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->table = htable_new(holder_has_key);
    if (t->table == NULL) {
        free(t);
        return NULL;
    }
    if (getrandom(&t->seed, sizeof(t->seed), 0) != (ssize_t)sizeof(t->seed))
        t->seed = monotonic_ms() ^ (uint64_t)(uintptr_t)t;
    return t;
}

void tally_free(struct tally *t)
{
    struct holder *h;
    size_t i = 0;

    if (t == NULL)
        return;
    while ((h = htable_next(t->table, &i)) != NULL)
        free(h);
    htable_free(t->table);
    free(t);
}

unsigned tally_count(const struct tally *t, const char *key)
{
    char k[TALLY_KEY_MAX];
    key_of(key, k);
    const struct holder *h = htable_find(t->table, key_hash(t, k), k);
    return h ? h->n : 0;
}

bool tally_take(struct tally *t, const char *key, unsigned max)
{
    char k[TALLY_KEY_MAX];
    key_of(key, k);
    uint64_t hash = key_hash(t, k);
    struct holder *h = htable_find(t->table, hash, k);
    if (h != NULL) {
        if (h->n >= max)
            return false;
        h->n++;
        return true;
    }
    if (max == 0 || (h = calloc(1, sizeof(*h))) == NULL)
        return false;
    memcpy(h->key, k, sizeof(k));
    h->n = 1;
    if (htable_insert(t->table, hash, h) < 0) {
        free(h);
        return false;
    }
    return true;
}

void tally_give(struct tally *t, const char *key)
{
    tally_give_n(t, key, 1);
}

void tally_give_n(struct tally *t, const char *key, unsigned n)
{
    char k[TALLY_KEY_MAX];
    key_of(key, k);
    uint64_t hash = key_hash(t, k);
    struct holder *h = htable_find(t->table, hash, k);
    if (h == NULL || n == 0)
        return;
    h->n = h->n > n ? h->n - n : 0;
    if (h->n == 0) {
        htable_remove(t->table, hash, k);
        free(h);
    }
}

size_t tally_holders(const struct tally *t)
{
    return htable_count(t->table);
}

void tally_source_key(const struct sockaddr_storage *ss, socklen_t len, char out[TALLY_KEY_MAX])
{
    tally_source_key_prefix(ss, len, SOURCE_PREFIX6_DEFAULT, out);
}

void tally_source_key_prefix(const struct sockaddr_storage *ss, socklen_t len, unsigned prefix6,
                             char out[TALLY_KEY_MAX])
{
    struct source_group g;

    source_group_of(ss, len, prefix6, &g);
    source_group_text(&g, out, TALLY_KEY_MAX);
}
