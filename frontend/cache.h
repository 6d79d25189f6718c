/*
 * The frontend's plan cache: (job, SHA-256(job ":" verifier), target rank) ->
 * direct plan.  Only plans the broker marked cacheable, with status ok and no
 * token, belong here; a lookup with another verifier has another key and cannot
 * hit.  Bounded, least recently used entry evicted first.  Thread-safe.
 */
#ifndef FRONTEND_CACHE_H
#define FRONTEND_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "jobhash.h"
#include "proto.h"

/* What a cached direct plan holds: status is "ok" and there is no token. */
struct cached_plan {
    char technique[16];
    char cluster[QCG_NAME_MAX];
    char node[QCG_NAME_MAX];
    char address[QCG_ADDR_MAX];
    int port;
    char fallback[QCG_ADDR_MAX]; /* direct over IPv6: the IPv4 address behind it, or "" */
};

struct cache;

/* capacity 0 disables caching (every put is skipped). */
struct cache *cache_new(size_t capacity);
void cache_free(struct cache *cache);

/* 1 and a copy in *out on a hit, 0 on a miss. */
int cache_get(struct cache *cache, const char *job, const unsigned char hash[JOB_HASH_LEN],
              int rank, struct cached_plan *out);

/* Changes on every invalidation.  Read it before asking the broker and pass it
   to cache_put, so an answer that raced with an invalidation is not kept. */
uint64_t cache_generation(struct cache *cache);

/* 0 stored, 1 skipped (an invalidation happened since `generation`, or the
   cache is disabled), -1 out of memory. */
int cache_put(struct cache *cache, const char *job, const unsigned char hash[JOB_HASH_LEN],
              int rank, const struct cached_plan *plan, uint64_t generation);

/* Drops every entry for (job, rank), whatever the verifier; returns how many. */
size_t cache_invalidate(struct cache *cache, const char *job, int rank);
/* Drops everything; returns how many. */
size_t cache_flush(struct cache *cache);
size_t cache_count(struct cache *cache);

#endif
