/* proxy-pairtable: the seen-token table keeps entries until expiry + skew,
   never past its cap, and never forgets a side that is waiting. */
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

int main(void)
{
    unsigned char p[TOKEN_PAIR_LEN];
    struct pairtable *t = pairtable_new(5000);

    CHECK(t != NULL);
    /* More than the initial buckets: the table grows and finds every one. */
    for (unsigned i = 0; i < 5000; i++) {
        id(p, i);
        struct pt_entry *e = pairtable_get(t, p, 100 + i % 2);
        CHECK(e != NULL && e->used[0] == 0 && e->waiting[1] == NULL);
        if (e)
            e->used[i % 2] = 1;
    }
    CHECK(pairtable_count(t) == 5000);
    for (unsigned i = 0; i < 5000; i++) {
        id(p, i);
        struct pt_entry *e = pairtable_get(t, p, 0);
        CHECK(e != NULL && e->used[i % 2] == 1 && e->used[1 - i % 2] == 0);
    }
    /* Full: a new pair is refused, a known one still found. */
    id(p, 99999);
    CHECK(pairtable_get(t, p, 100) == NULL);
    id(p, 7);
    CHECK(pairtable_get(t, p, 100) != NULL);

    /* forget_at only grows. */
    id(p, 8);
    CHECK(pairtable_get(t, p, 50)->forget_at == 100);
    CHECK(pairtable_get(t, p, 500)->forget_at == 500);

    /* Nothing expires before its time; a waiting side is kept past it. */
    CHECK(pairtable_expire(t, 100) == 0);
    id(p, 10);
    static int waiter;
    pairtable_get(t, p, 0)->waiting[0] = &waiter;
    /* The even ids (forget_at 100) but 8 (raised to 500) and 10 (waiting). */
    size_t freed = pairtable_expire(t, 101);
    CHECK(freed == 2500 - 2);
    CHECK(pairtable_count(t) == 2502);
    CHECK(pairtable_get(t, p, 0)->waiting[0] == &waiter);
    pairtable_get(t, p, 0)->waiting[0] = NULL;
    CHECK(pairtable_expire(t, 1000) == 2502);
    CHECK(pairtable_count(t) == 0);
    /* Room again after expiry. */
    id(p, 99999);
    CHECK(pairtable_get(t, p, 100) != NULL);
    pairtable_free(t);
    return check_result("proxy-pairtable");
}
