/* proxy-seen: a taken token is refused again until its expiry + skew has
   passed and forgotten after; memory bounds the records, and each owner
   (source address) and job gets at most its share. */
#include <string.h>

#include "check.h"
#include "seen.h"

#define NOW 1700000000u
#define HORIZON 1200u /* 600 + 2 x 300: the relay's with the default skew */

/* A pair id of job tag `job` (the last 4 bytes, as token_pair_new makes). */
static void id(unsigned char pair[TOKEN_PAIR_LEN], unsigned n, unsigned job)
{
    memset(pair, 0, TOKEN_PAIR_LEN);
    /* Spread over the slots alike. */
    for (int i = 0; i < 8; i++)
        pair[i] = (unsigned char)((n * 2654435761u) >> (i * 3));
    memcpy(pair + 8, &n, sizeof(n));
    memcpy(pair + 12, &job, sizeof(job));
}

/* Single use per side, for exactly as long as the token would be taken. */
static void test_replay(void)
{
    unsigned char p[TOKEN_PAIR_LEN];
    struct seen *s = seen_new(1 << 20, 1000, HORIZON);

    CHECK(s != NULL);
    id(p, 1, 1);
    CHECK(seen_add(s, p, 0, NOW + 360, NOW, "a") == SEEN_NEW);
    CHECK(seen_add(s, p, 0, NOW + 360, NOW + 1, "b") == SEEN_REPLAY);
    CHECK(seen_has(s, p, 0) && !seen_has(s, p, 1));
    CHECK(seen_add(s, p, 1, NOW + 360, NOW + 1, "b") == SEEN_NEW);
    CHECK(seen_add(s, p, 1, NOW + 360, NOW + 2, "b") == SEEN_REPLAY);
    /* Kept up to forget_at (when the token is still accepted)... */
    CHECK(seen_expire(s, NOW + 360) == 0);
    CHECK(seen_add(s, p, 0, NOW + 360, NOW + 360, "a") == SEEN_REPLAY);
    /* ... and gone a bucket's width (horizon / 62) after it. */
    CHECK(seen_expire(s, NOW + 360 + HORIZON / 62 + 1) == 2);
    CHECK(seen_count(s) == 0 && seen_owned(s, "a") == 0 && seen_owned(s, "b") == 0);
    CHECK(seen_bytes(s) == 0);
    /* Beyond the horizon: refused, not kept too short a time. */
    id(p, 2, 1);
    CHECK(seen_add(s, p, 0, NOW + HORIZON + 1, NOW, "a") == SEEN_TOO_FAR);
    CHECK(seen_add(s, p, 0, NOW + HORIZON, NOW, "a") == SEEN_NEW);
    /* Every place of the ring in use: each record still found. */
    for (unsigned t = 0; t <= HORIZON; t += 7) {
        id(p, 100 + t, 1);
        CHECK(seen_add(s, p, 1, NOW + t, NOW, "a") == SEEN_NEW);
    }
    for (unsigned t = 0; t <= HORIZON; t += 7) {
        id(p, 100 + t, 1);
        CHECKF(seen_add(s, p, 1, NOW + t, NOW, "a") == SEEN_REPLAY, "forget_at +%u", t);
    }
    /* A bucket's place reused later by another time: the old one is gone. */
    CHECK(seen_expire(s, NOW + 2 * HORIZON + 100) > 0 && seen_count(s) == 0);
    seen_free(s);
}

/* 200,000 tokens of one owner and job: every one found, about 16 bytes
   each, and max_bytes refuses rather than forgets. */
static void test_many(void)
{
    unsigned char p[TOKEN_PAIR_LEN];
    const unsigned n = 200000;
    struct seen *s = seen_new(64 << 20, 1000000, HORIZON);

    CHECK(s != NULL);
    for (unsigned i = 0; i < n; i++) {
        id(p, i, 7);
        /* Spread over 60 s of expiries, as a storm's tokens are. */
        enum seen_result r = seen_add(s, p, (int)(i & 1), NOW + 300 + i % 60, NOW, "site");
        if (r != SEEN_NEW)
            CHECKF(r == SEEN_NEW, "token %u: %d", i, (int)r);
    }
    CHECK(seen_count(s) == n && seen_owned(s, "site") == n);
    size_t per = seen_bytes(s) / n;
    printf("%u tokens in %zu bytes: %zu bytes each\n", n, seen_bytes(s), per);
    CHECKF(per <= 24, "%zu bytes per token", per);
    unsigned replays = 0;
    for (unsigned i = 0; i < n; i++) {
        id(p, i, 7);
        replays += seen_add(s, p, (int)(i & 1), NOW + 300 + i % 60, NOW, "site") == SEEN_REPLAY;
    }
    CHECK(replays == n);
    seen_free(s);

    /* 64 KiB: a few thousand tokens, then full, and nothing forgotten. */
    s = seen_new(64 << 10, 1000000, HORIZON);
    unsigned taken = 0;
    for (unsigned i = 0; i < 100000; i++) {
        id(p, i, 7);
        enum seen_result r = seen_add(s, p, 0, NOW + 300, NOW, "site");
        if (r != SEEN_NEW) {
            CHECK(r == SEEN_FULL);
            break;
        }
        taken++;
    }
    printf("64 KiB: %u tokens, then full\n", taken);
    CHECK(taken > 2000 && taken < 8192 && seen_bytes(s) <= (64 << 10));
    id(p, 0, 7);
    CHECK(seen_add(s, p, 0, NOW + 300, NOW, "site") == SEEN_REPLAY);
    seen_free(s);
}

/* One owner fills its share and no more; within it one job half; expiry
   gives the shares back. */
static void test_shares(void)
{
    unsigned char p[TOKEN_PAIR_LEN];
    struct seen *s = seen_new(1 << 20, 8, HORIZON);
    unsigned n = 0;

    /* Job 1 from 203.0.113.1: half of 8. */
    for (unsigned i = 0; i < 6; i++) {
        id(p, ++n, 1);
        enum seen_result r = seen_add(s, p, 0, NOW + 100, NOW, "203.0.113.1");
        CHECKF(r == (i < 4 ? SEEN_NEW : SEEN_JOB_FULL), "job 1, token %u: %d", i, (int)r);
    }
    /* Job 2 from the same address: the address's other half. */
    for (unsigned i = 0; i < 6; i++) {
        id(p, ++n, 2);
        enum seen_result r = seen_add(s, p, 0, NOW + 200, NOW, "203.0.113.1");
        CHECKF(r == (i < 4 ? SEEN_NEW : SEEN_OWNER_FULL), "job 2, token %u: %d", i, (int)r);
    }
    CHECK(seen_owned(s, "203.0.113.1") == 8);
    /* Another address is not refused for it (a job of its own). */
    id(p, ++n, 3);
    CHECK(seen_add(s, p, 0, NOW + 100, NOW, "198.51.100.9") == SEEN_NEW);
    /* Job 1's tokens expire: its share and the address's come back. */
    CHECK(seen_expire(s, NOW + 150) == 5);
    CHECK(seen_owned(s, "203.0.113.1") == 4 && seen_job_owned(s, "01000000") == 0);
    id(p, ++n, 1);
    CHECK(seen_add(s, p, 0, NOW + 300, NOW + 150, "203.0.113.1") == SEEN_NEW);
    seen_free(s);
}

int main(void)
{
    test_replay();
    test_many();
    test_shares();
    return check_result("proxy-seen");
}
