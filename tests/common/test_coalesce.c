/* common_coalesce: a call alone goes at once in a batch of one; calls that
   come while the batches allowed are on the way wait and go together, at
   most max_batch a batch and never more batches at once than allowed; every
   caller gets its own answer. */
#include <pthread.h>

#include "check.h"
#include "coalesce.h"

struct item {
    int in, out;
};

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_open = PTHREAD_COND_INITIALIZER;
static bool gate_closed;
static atomic_int sending, most_sending, largest;

static void send_items(void *arg, void *const *items, int n)
{
    (void)arg;
    int now = atomic_fetch_add(&sending, 1) + 1;
    for (int seen = atomic_load(&most_sending); now > seen;)
        if (atomic_compare_exchange_weak(&most_sending, &seen, now))
            break;
    if (n > atomic_load(&largest))
        atomic_store(&largest, n);
    pthread_mutex_lock(&gate_lock);
    while (gate_closed)
        pthread_cond_wait(&gate_open, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
    for (int i = 0; i < n; i++) {
        struct item *it = items[i];
        it->out = it->in * 2;
    }
    atomic_fetch_sub(&sending, 1);
}

struct caller {
    struct coalesce *c;
    struct item it;
    pthread_t t;
};

static void *call(void *arg)
{
    struct caller *k = arg;
    coalesce_call(k->c, &k->it);
    return NULL;
}

static void gate(bool closed)
{
    pthread_mutex_lock(&gate_lock);
    gate_closed = closed;
    pthread_cond_broadcast(&gate_open);
    pthread_mutex_unlock(&gate_lock);
}

/* One caller holds the only batch allowed (in_flight 1, or 2 with a second
   holder) while n more queue; then all are let go. */
static void run(int in_flight, int n, int max_batch, unsigned long long want_batches)
{
    struct coalesce *c = coalesce_new(max_batch, in_flight, send_items, NULL);
    REQUIRE(c != NULL);
    struct caller k[64];
    REQUIRE(n + in_flight <= 64);
    unsigned long long batches, items;
    int waiting;
    atomic_store(&most_sending, 0);
    atomic_store(&largest, 0);
    gate(true);
    for (int i = 0; i < n + in_flight; i++) {
        k[i] = (struct caller){.c = c, .it = {.in = i + 1}};
        REQUIRE(pthread_create(&k[i].t, NULL, call, &k[i]) == 0);
        if (i < in_flight)
            WAIT_UNTIL(atomic_load(&sending) == i + 1, 10000, "a holder in send");
    }
    WAIT_UNTIL((coalesce_counts(c, &batches, &items, &waiting), waiting == n), 10000,
               "the others queued");
    CHECK_EQ(batches, (unsigned long long)in_flight);
    gate(false);
    for (int i = 0; i < n + in_flight; i++)
        pthread_join(k[i].t, NULL);
    for (int i = 0; i < n + in_flight; i++)
        CHECKF(k[i].it.out == 2 * k[i].it.in, "caller %d got %d", i, k[i].it.out);
    coalesce_counts(c, &batches, &items, &waiting);
    CHECKF(batches == want_batches, "%d callers, in flight %d, batch %d: %llu batches", n,
           in_flight, max_batch, batches);
    CHECK_EQ(items, (unsigned long long)(n + in_flight));
    CHECK_EQ(waiting, 0);
    CHECK(atomic_load(&most_sending) <= in_flight);
    CHECK(atomic_load(&largest) <= max_batch);
    coalesce_free(c);
}

int main(void)
{
    /* Alone: at once, a batch of one. */
    struct coalesce *c = coalesce_new(8, 2, send_items, NULL);
    REQUIRE(c != NULL);
    struct item one = {.in = 21};
    coalesce_call(c, &one);
    unsigned long long batches, items;
    int waiting;
    coalesce_counts(c, &batches, &items, &waiting);
    CHECK_EQ(one.out, 42);
    CHECK(batches == 1 && items == 1 && waiting == 0);
    coalesce_free(c);

    /* 20 behind one holder: the holder's batch, then 8 + 8 + 4. */
    run(1, 20, 8, 4);
    /* 5 behind one: the holder's, then the 5 together. */
    run(1, 5, 8, 2);
    /* Two holders, 30 behind them, batches of 16: 2, then 16 + 14, at
       most two at once. */
    run(2, 30, 16, 4);
    REQUIRE(coalesce_new(0, 1, send_items, NULL) == NULL);
    return check_result("common_coalesce");
}
