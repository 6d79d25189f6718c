/* proxy-pairtable: the seen-token table keeps entries until expiry + skew,
   never past its cap, never forgets a side that is waiting, and gives each
   owner (source address) at most its share. */
#include <string.h>

#include "check.h"
#include "pairtable.h"

static void id(unsigned char pair[TOKEN_PAIR_LEN], unsigned n)
{
    memset(pair, 0, TOKEN_PAIR_LEN);
    /* Spread over buckets and chains alike. */
    memcpy(pair, &n, sizeof(n));
    pair[15] = (unsigned char)n;
}

/* One owner fills its share and no more; the others still get entries; an
   owner's expired entries give its share back. */
static void test_shares(void)
{
    unsigned char p[TOKEN_PAIR_LEN];
    enum pt_refusal why = PT_NO_MEMORY;
    struct pairtable *t = pairtable_new(10, 4);

    for (unsigned i = 0; i < 6; i++) {
        id(p, 1000 + i);
        struct pt_entry *e = pairtable_get(t, p, 100, "203.0.113.1", &why);
        CHECKF((e != NULL) == (i < 4), "flooding owner, entry %u: %s", i, e ? "made" : "refused");
    }
    CHECK(why == PT_OWNER_FULL);
    CHECK(pairtable_owned(t, "203.0.113.1") == 4);
    /* A known pair is found whoever presents it (the other side's token). */
    id(p, 1000);
    CHECK(pairtable_get(t, p, 100, "198.51.100.9", &why) != NULL);
    CHECK(pairtable_owned(t, "198.51.100.9") == 0);
    for (unsigned i = 0; i < 4; i++) {
        id(p, 2000 + i);
        CHECK(pairtable_get(t, p, 200, "198.51.100.9", &why) != NULL);
    }
    /* 8 of 10 taken: a third owner gets the rest, then the table is full. */
    for (unsigned i = 0; i < 3; i++) {
        id(p, 3000 + i);
        struct pt_entry *e = pairtable_get(t, p, 100, "198.18.0.1", &why);
        CHECKF((e != NULL) == (i < 2), "third owner, entry %u", i);
    }
    CHECK(why == PT_TABLE_FULL);
    CHECK(pairtable_expire(t, 150) == 6);
    CHECK(pairtable_owned(t, "203.0.113.1") == 0 && pairtable_owned(t, "198.51.100.9") == 4);
    id(p, 1100);
    CHECK(pairtable_get(t, p, 300, "203.0.113.1", &why) != NULL);
    pairtable_free(t);
}

int main(void)
{
    unsigned char p[TOKEN_PAIR_LEN];
    enum pt_refusal why;
    struct pairtable *t = pairtable_new(5000, 5000);

    CHECK(t != NULL);
    /* More than the initial buckets: the table grows and finds every one. */
    for (unsigned i = 0; i < 5000; i++) {
        id(p, i);
        struct pt_entry *e = pairtable_get(t, p, 100 + i % 2, "a", &why);
        CHECK(e != NULL && e->used[0] == 0 && e->waiting[1] == NULL);
        if (e)
            e->used[i % 2] = 1;
    }
    CHECK(pairtable_count(t) == 5000);
    for (unsigned i = 0; i < 5000; i++) {
        id(p, i);
        struct pt_entry *e = pairtable_get(t, p, 0, "a", &why);
        CHECK(e != NULL && e->used[i % 2] == 1 && e->used[1 - i % 2] == 0);
    }
    /* Full: a new pair is refused, a known one still found. */
    id(p, 99999);
    CHECK(pairtable_get(t, p, 100, "a", &why) == NULL);
    id(p, 7);
    CHECK(pairtable_get(t, p, 100, "a", &why) != NULL);

    /* forget_at only grows. */
    id(p, 8);
    CHECK(pairtable_get(t, p, 50, "a", &why)->forget_at == 100);
    CHECK(pairtable_get(t, p, 500, "a", &why)->forget_at == 500);

    /* Nothing expires before its time; a waiting side is kept past it. */
    CHECK(pairtable_expire(t, 100) == 0);
    id(p, 10);
    static int waiter;
    pairtable_get(t, p, 0, "a", &why)->waiting[0] = &waiter;
    /* The even ids (forget_at 100) but 8 (raised to 500) and 10 (waiting). */
    size_t freed = pairtable_expire(t, 101);
    CHECK(freed == 2500 - 2);
    CHECK(pairtable_count(t) == 2502);
    CHECK(pairtable_get(t, p, 0, "a", &why)->waiting[0] == &waiter);
    pairtable_get(t, p, 0, "a", &why)->waiting[0] = NULL;
    CHECK(pairtable_expire(t, 1000) == 2502);
    CHECK(pairtable_count(t) == 0);
    /* Room again after expiry. */
    id(p, 99999);
    CHECK(pairtable_get(t, p, 100, "a", &why) != NULL);
    pairtable_free(t);
    test_shares();
    return check_result("proxy-pairtable");
}
