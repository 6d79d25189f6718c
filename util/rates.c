/* Token buckets per caller; see rates.h. */
#include "rates.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "htable.h"
#include "monotonic.h"
#include "proto.h"
#include "tokenbucket.h"

struct caller {
    char key[2 * QCG_NAME_MAX];
    struct tokenbucket bucket[RATE_KINDS];
};

struct rates {
    pthread_mutex_t lock;
    struct rate limits[RATE_KINDS];
    struct htable *callers; /* of struct caller */
};

static bool caller_eq(const void *entry, const void *key)
{
    return strcmp(((const struct caller *)entry)->key, key) == 0;
}

struct rates *rates_new(const struct rate limits[RATE_KINDS])
{
    struct rates *r = calloc(1, sizeof(*r));
    if (r == NULL || (r->callers = htable_new(caller_eq)) == NULL) {
        free(r);
        return NULL;
    }
    memcpy(r->limits, limits, sizeof(r->limits));
    pthread_mutex_init(&r->lock, NULL);
    return r;
}

void rates_free(struct rates *r)
{
    if (r == NULL)
        return;
    size_t i = 0;
    struct caller *c;
    while ((c = htable_next(r->callers, &i)) != NULL)
        free(c);
    htable_free(r->callers);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

static struct caller *caller_get(struct rates *r, const char *key)
{
    uint64_t h = htable_hash(key, strlen(key), 0);
    struct caller *c = htable_find(r->callers, h, key);
    if (c != NULL || (c = calloc(1, sizeof(*c))) == NULL)
        return c;
    snprintf(c->key, sizeof(c->key), "%s", key);
    if (htable_insert(r->callers, h, c) < 0) {
        free(c);
        return NULL;
    }
    return c;
}

static bool take(struct rates *r, const char *key, enum rate_kind kind, unsigned n, int wait_ms,
                 bool *waited)
{
    const struct rate *lim = &r->limits[kind];
    double wait = 0;
    bool ok = false;

    pthread_mutex_lock(&r->lock);
    struct caller *c = caller_get(r, key);
    if (c != NULL) {
        struct tokenbucket *b = &c->bucket[kind];
        /* A waiter takes its token now, on credit: the bucket goes below
           zero by what it waits for, so waiters keep their order and never
           more than wait_ms' worth of them wait. */
        ok = tokenbucket_take_n(b, monotonic_ms(), lim->per_second, lim->burst, n);
        if (!ok && (n - b->tokens) * 1000.0 / lim->per_second <= wait_ms) {
            wait = (n - b->tokens) * 1000.0 / lim->per_second;
            b->tokens -= n;
            ok = true;
        }
    }
    pthread_mutex_unlock(&r->lock);
    if (wait > 0) {
        struct timespec ts = {.tv_sec = (time_t)(wait / 1000),
                              .tv_nsec = (long)(wait * 1e6) % 1000000000L};
        nanosleep(&ts, NULL);
    }
    *waited = wait > 0;
    return ok;
}

bool rates_take(struct rates *r, const char *key, enum rate_kind kind, int wait_ms)
{
    bool waited;
    return take(r, key, kind, 1, wait_ms, &waited);
}

bool rates_take_n(struct rates *r, const char *key, enum rate_kind kind, unsigned n, int wait_ms)
{
    bool waited;
    return take(r, key, kind, n, wait_ms, &waited);
}

bool rates_take_waited(struct rates *r, const char *key, enum rate_kind kind, int wait_ms,
                       bool *waited)
{
    return take(r, key, kind, 1, wait_ms, waited);
}
