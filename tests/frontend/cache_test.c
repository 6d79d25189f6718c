/* frontend-cache: the plan cache keeps what it was given under (job, secret
   hash, rank), never answers another secret, forgets on invalidate and
   flush, ignores answers that raced with an invalidation, and stays within
   its size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "check.h"

static struct cached_plan plan_for(int port)
{
    struct cached_plan p;
    memset(&p, 0, sizeof(p));
    snprintf(p.technique, sizeof(p.technique), "direct");
    snprintf(p.cluster, sizeof(p.cluster), "nata");
    snprintf(p.node, sizeof(p.node), "nata1");
    snprintf(p.address, sizeof(p.address), "198.18.1.%d", port % 250);
    p.port = port;
    return p;
}

static void test_hit_miss(void)
{
    struct cache *cache = cache_new(10);
    unsigned char h1[JOB_HASH_LEN], h2[JOB_HASH_LEN];
    job_secret_hash("job1", "s3cret", h1);
    job_secret_hash("job1", "wrong", h2);
    struct cached_plan p = plan_for(5001), out;

    CHECK(cache_get(cache, "job1", h1, 1, &out) == 0);
    CHECK(cache_put(cache, "job1", h1, 1, &p, cache_generation(cache)) == 0);
    CHECK(cache_count(cache) == 1);
    memset(&out, 0, sizeof(out));
    CHECK(cache_get(cache, "job1", h1, 1, &out) == 1);
    CHECK(out.port == 5001 && strcmp(out.address, p.address) == 0 &&
          strcmp(out.technique, "direct") == 0 && strcmp(out.node, "nata1") == 0);
    /* another secret, rank or job: miss */
    CHECK(cache_get(cache, "job1", h2, 1, &out) == 0);
    CHECK(cache_get(cache, "job1", h1, 2, &out) == 0);
    CHECK(cache_get(cache, "job2", h1, 1, &out) == 0);
    /* "job1:1" must not collide with job "job1:1"-like prefixes of other ranks */
    CHECK(cache_get(cache, "job", h1, 11, &out) == 0);
    cache_free(cache);
}

static void test_invalidate_flush(void)
{
    struct cache *cache = cache_new(100);
    unsigned char h1[JOB_HASH_LEN], h2[JOB_HASH_LEN];
    job_secret_hash("job1", "s3cret", h1);
    job_secret_hash("job1", "other", h2);
    struct cached_plan p = plan_for(6000), out;
    for (int r = 0; r < 5; r++)
        CHECK(cache_put(cache, "job1", h1, r, &p, cache_generation(cache)) == 0);
    CHECK(cache_put(cache, "job1", h2, 3, &p, cache_generation(cache)) == 0);
    CHECK(cache_put(cache, "job2", h1, 3, &p, cache_generation(cache)) == 0);
    CHECK(cache_count(cache) == 7);

    /* (job1, 3) under both secrets goes; job2's rank 3 and job1's others stay */
    CHECK(cache_invalidate(cache, "job1", 3) == 2);
    CHECK(cache_get(cache, "job1", h1, 3, &out) == 0);
    CHECK(cache_get(cache, "job1", h2, 3, &out) == 0);
    CHECK(cache_get(cache, "job2", h1, 3, &out) == 1);
    CHECK(cache_get(cache, "job1", h1, 2, &out) == 1);
    CHECK(cache_count(cache) == 5);
    CHECK(cache_invalidate(cache, "job1", 3) == 0);

    /* an answer fetched before an invalidation is not kept */
    uint64_t gen = cache_generation(cache);
    cache_invalidate(cache, "job1", 4);
    CHECK(cache_put(cache, "job1", h1, 4, &p, gen) == 1);
    CHECK(cache_get(cache, "job1", h1, 4, &out) == 0);

    CHECK(cache_flush(cache) == 4);
    CHECK(cache_count(cache) == 0);
    CHECK(cache_get(cache, "job1", h1, 0, &out) == 0);
    CHECK(cache_get(cache, "job2", h1, 3, &out) == 0);
    /* usable again after a flush */
    CHECK(cache_put(cache, "job1", h1, 0, &p, cache_generation(cache)) == 0);
    CHECK(cache_get(cache, "job1", h1, 0, &out) == 1);
    cache_free(cache);
}

static void test_bounded(void)
{
    enum { CAP = 50 };
    struct cache *cache = cache_new(CAP);
    unsigned char h[JOB_HASH_LEN];
    job_secret_hash("big", "s", h);
    struct cached_plan out;
    for (int r = 0; r < 1000; r++) {
        struct cached_plan p = plan_for(1000 + r);
        CHECK(cache_put(cache, "big", h, r, &p, cache_generation(cache)) == 0);
        CHECK(cache_count(cache) <= CAP);
        /* keep rank 0 in use: the least recently used entry goes first */
        CHECK(cache_get(cache, "big", h, 0, &out) == 1);
    }
    CHECK(cache_count(cache) == CAP);
    CHECK(cache_get(cache, "big", h, 999, &out) == 1 && out.port == 1999);
    CHECK(cache_get(cache, "big", h, 1, &out) == 0);
    CHECK(cache_get(cache, "big", h, 0, &out) == 1 && out.port == 1000);
    cache_free(cache);

    /* size 0: nothing is ever kept */
    cache = cache_new(0);
    struct cached_plan p = plan_for(1);
    CHECK(cache_put(cache, "big", h, 1, &p, cache_generation(cache)) == 1);
    CHECK(cache_get(cache, "big", h, 1, &out) == 0);
    CHECK(cache_count(cache) == 0);
    cache_free(cache);
}

int main(void)
{
    test_hit_miss();
    test_invalidate_flush();
    test_bounded();
    return check_result("frontend-cache");
}
