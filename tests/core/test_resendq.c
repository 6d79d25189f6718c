/* core-resendq: numbering, cumulative acks releasing in order, counts that
   go back or beyond what was sent refused, 32-bit counts widened across the
   wrap, clear releasing the rest. */
#include <stdlib.h>

#include "check.h"
#include "resendq.h"

struct item {
    struct resendq_item it;
    int id;
};

static int released[64], nreleased;

static void on_release(struct resendq_item *it, void *arg)
{
    (void)arg;
    released[nreleased++] = ((struct item *)it)->id;
    free(it);
}

static struct item *item(int id)
{
    struct item *i = calloc(1, sizeof(*i));
    REQUIRE(i != NULL);
    i->id = id;
    return i;
}

int main(void)
{
    struct resendq q;

    resendq_init(&q, on_release, NULL);
    for (int i = 1; i <= 10; i++)
        CHECK_EQ(resendq_push(&q, &item(i)->it, 100), (uint64_t)i);
    CHECK_EQ(q.bytes, (size_t)1000);
    CHECK(resendq_ack(&q, 11) == -1); /* never sent */
    CHECK_EQ(nreleased, 0);
    CHECK(resendq_ack(&q, 4) == 0);
    CHECK_EQ(nreleased, 4);
    CHECK(released[0] == 1 && released[3] == 4);
    CHECK_EQ(q.bytes, (size_t)600);
    CHECK(resendq_ack(&q, 3) == -1); /* goes back */
    CHECK(resendq_ack(&q, 4) == 0);  /* the same again: nothing */
    CHECK_EQ(nreleased, 4);
    CHECK(resendq_first(&q) != NULL && resendq_first(&q)->seq == 5);
    int n = 0;
    for (struct resendq_item *it = resendq_first(&q); it != NULL; it = it->next)
        n++;
    CHECK_EQ(n, 6);
    /* 32-bit counts: near the wrap, and a little behind. */
    q.acked = 0xfffffff0ull;
    CHECK_EQ(resendq_widen(&q, 0x00000005u), 0x100000005ull);
    CHECK_EQ(resendq_widen(&q, 0xffffffe0u), 0xffffffe0ull);
    q.acked = 4;
    resendq_clear(&q);
    CHECK_EQ(nreleased, 10);
    CHECK(released[9] == 10);
    CHECK_EQ(q.bytes, (size_t)0);
    CHECK(resendq_first(&q) == NULL);
    return check_result("core-resendq");
}
