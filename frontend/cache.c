#include "cache.h"

#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlist.h"
#include "strmap.h"

/* Entries of one (job, rank) are chained from the map (one per verifier seen,
   normally one); all entries are also on the LRU list, least recently used
   first. */
struct entry {
    struct entry *chain_next;
    struct dlink lru;
    char job[QCG_JOB_MAX];
    int rank;
    unsigned char hash[JOB_HASH_LEN];
    struct cached_plan plan;
};

struct cache {
    pthread_mutex_t lock;
    struct strmap *map; /* "job:rank" -> first entry of the chain */
    struct dlist lru;   /* of struct entry, least recently used first */
    size_t count, capacity;
    uint64_t generation;
};

static void make_key(char *key, size_t len, const char *job, int rank)
{
    snprintf(key, len, "%s:%d", job, rank);
}

#define KEY_MAX (QCG_JOB_MAX + 16)

struct cache *cache_new(size_t capacity)
{
    struct cache *cache = calloc(1, sizeof(*cache));
    if (cache == NULL)
        return NULL;
    cache->map = strmap_new();
    if (cache->map == NULL) {
        free(cache);
        return NULL;
    }
    pthread_mutex_init(&cache->lock, NULL);
    cache->capacity = capacity;
    return cache;
}

static struct entry *entry_of(struct dlink *link)
{
    return dlist_entry_or_null(link, struct entry, lru);
}

/* Takes e off its chain (and the map when the chain empties) and the LRU list. */
static void entry_drop(struct cache *cache, struct entry *e)
{
    char key[KEY_MAX];
    make_key(key, sizeof(key), e->job, e->rank);
    struct entry *head = strmap_get(cache->map, key);
    if (head == e) {
        if (e->chain_next != NULL)
            strmap_put(cache->map, key, e->chain_next, NULL); /* replaces: cannot fail */
        else
            strmap_remove(cache->map, key);
    } else {
        for (struct entry *p = head; p != NULL; p = p->chain_next)
            if (p->chain_next == e) {
                p->chain_next = e->chain_next;
                break;
            }
    }
    dlist_remove(&cache->lru, &e->lru);
    cache->count--;
    free(e);
}

static void free_nothing(void *v)
{
    (void)v;
}

size_t cache_flush(struct cache *cache)
{
    pthread_mutex_lock(&cache->lock);
    size_t n = cache->count;
    struct entry *e = entry_of(cache->lru.head);
    while (e != NULL) {
        struct entry *next = entry_of(e->lru.next);
        free(e);
        e = next;
    }
    strmap_clear(cache->map, free_nothing);
    cache->lru.head = cache->lru.tail = NULL;
    cache->count = 0;
    cache->generation++;
    pthread_mutex_unlock(&cache->lock);
    return n;
}

void cache_free(struct cache *cache)
{
    if (cache == NULL)
        return;
    cache_flush(cache);
    strmap_free(cache->map, NULL);
    pthread_mutex_destroy(&cache->lock);
    free(cache);
}

static struct entry *chain_find(struct cache *cache, const char *job,
                                const unsigned char hash[JOB_HASH_LEN], int rank)
{
    char key[KEY_MAX];
    make_key(key, sizeof(key), job, rank);
    for (struct entry *e = strmap_get(cache->map, key); e != NULL; e = e->chain_next)
        if (CRYPTO_memcmp(e->hash, hash, JOB_HASH_LEN) == 0)
            return e;
    return NULL;
}

int cache_get(struct cache *cache, const char *job, const unsigned char hash[JOB_HASH_LEN],
              int rank, struct cached_plan *out)
{
    pthread_mutex_lock(&cache->lock);
    struct entry *e = chain_find(cache, job, hash, rank);
    if (e != NULL) {
        dlist_remove(&cache->lru, &e->lru);
        dlist_append(&cache->lru, &e->lru);
        *out = e->plan;
    }
    pthread_mutex_unlock(&cache->lock);
    return e != NULL;
}

uint64_t cache_generation(struct cache *cache)
{
    pthread_mutex_lock(&cache->lock);
    uint64_t g = cache->generation;
    pthread_mutex_unlock(&cache->lock);
    return g;
}

int cache_put(struct cache *cache, const char *job, const unsigned char hash[JOB_HASH_LEN],
              int rank, const struct cached_plan *plan, uint64_t generation)
{
    if (strlen(job) >= QCG_JOB_MAX)
        return 1;
    int rc = 0;
    pthread_mutex_lock(&cache->lock);
    if (cache->capacity == 0 || generation != cache->generation) {
        rc = 1;
        goto out;
    }
    struct entry *e = chain_find(cache, job, hash, rank);
    if (e != NULL) {
        e->plan = *plan;
        dlist_remove(&cache->lru, &e->lru);
        dlist_append(&cache->lru, &e->lru);
        goto out;
    }
    while (cache->count >= cache->capacity && cache->lru.head != NULL)
        entry_drop(cache, entry_of(cache->lru.head));
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        rc = -1;
        goto out;
    }
    snprintf(e->job, sizeof(e->job), "%s", job);
    e->rank = rank;
    memcpy(e->hash, hash, JOB_HASH_LEN);
    e->plan = *plan;
    char key[KEY_MAX];
    make_key(key, sizeof(key), job, rank);
    e->chain_next = strmap_get(cache->map, key);
    if (strmap_put(cache->map, key, e, NULL) < 0) {
        free(e);
        rc = -1;
        goto out;
    }
    dlist_append(&cache->lru, &e->lru);
    cache->count++;
out:
    pthread_mutex_unlock(&cache->lock);
    return rc;
}

size_t cache_invalidate(struct cache *cache, const char *job, int rank)
{
    char key[KEY_MAX];
    make_key(key, sizeof(key), job, rank);
    size_t n = 0;
    pthread_mutex_lock(&cache->lock);
    struct entry *e = strmap_remove(cache->map, key);
    while (e != NULL) {
        struct entry *next = e->chain_next;
        dlist_remove(&cache->lru, &e->lru);
        free(e);
        cache->count--;
        n++;
        e = next;
    }
    cache->generation++;
    pthread_mutex_unlock(&cache->lock);
    return n;
}

size_t cache_count(struct cache *cache)
{
    pthread_mutex_lock(&cache->lock);
    size_t n = cache->count;
    pthread_mutex_unlock(&cache->lock);
    return n;
}
