/* See lease.h. */
#include "lease.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "htable.h"
#include "proto.h"

struct held {
    char cluster[QCG_NAME_MAX];
    uint64_t heard_ms;
};

struct lease {
    uint64_t ms; /* 0: none */
    uint64_t seed;
    pthread_mutex_t lock;
    struct htable *held; /* of struct held, by cluster */
};

/* Expired clusters are handed on in batches, without the lock. */
#define SWEEP_BATCH 64

static bool held_is(const void *entry, const void *key)
{
    return strcmp(((const struct held *)entry)->cluster, key) == 0;
}

static uint64_t hash(const struct lease *l, const char *cluster)
{
    return htable_hash(cluster, strlen(cluster), l->seed);
}

struct lease *lease_new(unsigned seconds)
{
    struct lease *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    l->ms = (uint64_t)seconds * 1000;
    if (getrandom(&l->seed, sizeof(l->seed), 0) != sizeof(l->seed))
        l->seed = (uint64_t)(uintptr_t)l;
    l->held = htable_new(held_is);
    if (l->held == NULL) {
        free(l);
        return NULL;
    }
    pthread_mutex_init(&l->lock, NULL);
    return l;
}

void lease_free(struct lease *l)
{
    if (l == NULL)
        return;
    void *e;
    size_t i = 0;
    while ((e = htable_next(l->held, &i)) != NULL)
        free(e);
    htable_free(l->held);
    pthread_mutex_destroy(&l->lock);
    free(l);
}

unsigned lease_seconds(const struct lease *l)
{
    return (unsigned)(l->ms / 1000);
}

void lease_heard(struct lease *l, const char *cluster, uint64_t now_ms)
{
    if (l == NULL || l->ms == 0 || strlen(cluster) >= QCG_NAME_MAX)
        return;
    uint64_t h = hash(l, cluster);
    pthread_mutex_lock(&l->lock);
    struct held *e = htable_find(l->held, h, cluster);
    if (e == NULL && (e = calloc(1, sizeof(*e))) != NULL) {
        strcpy(e->cluster, cluster);
        if (htable_insert(l->held, h, e) < 0) {
            free(e);
            e = NULL; /* out of memory: this cluster has no lease until the next call */
        }
    }
    if (e != NULL)
        e->heard_ms = now_ms;
    pthread_mutex_unlock(&l->lock);
}

size_t lease_sweep(struct lease *l, uint64_t now_ms,
                   void (*expired)(void *arg, const char *cluster, uint64_t silent_ms), void *arg)
{
    if (l == NULL || l->ms == 0)
        return 0;
    size_t total = 0;
    for (;;) {
        struct held batch[SWEEP_BATCH];
        size_t n = 0, i = 0;
        struct held *e;
        pthread_mutex_lock(&l->lock);
        while (n < SWEEP_BATCH && (e = htable_next(l->held, &i)) != NULL) {
            if (now_ms < e->heard_ms + l->ms)
                continue;
            batch[n++] = *e;
        }
        /* Removed after the walk: the table must not change during it. */
        for (size_t k = 0; k < n; k++)
            free(htable_remove(l->held, hash(l, batch[k].cluster), batch[k].cluster));
        pthread_mutex_unlock(&l->lock);
        for (size_t k = 0; k < n; k++)
            expired(arg, batch[k].cluster, now_ms - batch[k].heard_ms);
        total += n;
        if (n < SWEEP_BATCH)
            return total;
    }
}
