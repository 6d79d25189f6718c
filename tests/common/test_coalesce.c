/* common_coalesce: a call alone goes out alone and at once; calls made
   while the flights are all on the way go out together in the next batch,
   every item answered once, none lost; no batch above max. */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "check.h"
#include "coalesce.h"

struct item {
    int in, out, sent;
};

static atomic_int batches, largest, on_way, most_on_way;
static atomic_int hold_ms; /* how long a batch stays on the way */

static void send(void *arg, void *const *items, int n)
{
    (void)arg;
    int now = atomic_fetch_add(&on_way, 1) + 1;
    for (int m = atomic_load(&most_on_way); now > m;)
        if (atomic_compare_exchange_weak(&most_on_way, &m, now))
            break;
    atomic_fetch_add(&batches, 1);
    for (int l = atomic_load(&largest); n > l;)
        if (atomic_compare_exchange_weak(&largest, &l, n))
            break;
    usleep((unsigned)atomic_load(&hold_ms) * 1000u);
    for (int i = 0; i < n; i++) {
        struct item *it = items[i];
        it->out = it->in * 2;
        it->sent++;
    }
    atomic_fetch_sub(&on_way, 1);
}

static struct coalesce *co;

static void *caller(void *arg)
{
    coalesce_call(co, arg);
    return NULL;
}

static void reset(void)
{
    atomic_store(&batches, 0);
    atomic_store(&largest, 0);
    atomic_store(&most_on_way, 0);
}

int main(void)
{
    enum { N = 200 };
    static struct item items[N];
    static pthread_t th[N];

    /* Alone: one call, one batch of one. */
    co = coalesce_new(send, NULL, 16, 2);
    REQUIRE(co != NULL);
    struct item one = {.in = 21};
    coalesce_call(co, &one);
    CHECK_EQ(one.out, 42);
    CHECK_EQ(one.sent, 1);
    CHECK_EQ(atomic_load(&batches), 1);

    /* 200 at once, each batch 20 ms on the way: batches of up to 16, at
       most 2 on the way, far fewer batches than calls. */
    reset();
    atomic_store(&hold_ms, 20);
    for (int i = 0; i < N; i++) {
        items[i] = (struct item){.in = i};
        REQUIRE(pthread_create(&th[i], NULL, caller, &items[i]) == 0);
    }
    for (int i = 0; i < N; i++)
        REQUIRE(pthread_join(th[i], NULL) == 0);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(items[i].out, 2 * i);
        CHECK_EQ(items[i].sent, 1);
    }
    CHECK(atomic_load(&largest) <= 16);
    CHECK(atomic_load(&largest) > 1);
    CHECK(atomic_load(&most_on_way) <= 2);
    CHECK(atomic_load(&batches) < N / 2);
    coalesce_free(co);

    /* max 1: every call its own batch, still all answered. */
    reset();
    atomic_store(&hold_ms, 1);
    co = coalesce_new(send, NULL, 1, 3);
    for (int i = 0; i < 50; i++) {
        items[i] = (struct item){.in = i};
        REQUIRE(pthread_create(&th[i], NULL, caller, &items[i]) == 0);
    }
    for (int i = 0; i < 50; i++)
        REQUIRE(pthread_join(th[i], NULL) == 0);
    for (int i = 0; i < 50; i++)
        CHECK_EQ(items[i].sent, 1);
    CHECK_EQ(atomic_load(&batches), 50);
    CHECK_EQ(atomic_load(&largest), 1);
    CHECK(atomic_load(&most_on_way) <= 3);
    coalesce_free(co);
    return check_result("common_coalesce");
}
