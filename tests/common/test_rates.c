/* rates.c: a caller's burst passes, a lookup beyond it waits for its turn
   (bounded), the rest is refused, and other callers are not touched; a
   batch takes all its tokens or none. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "check.h"
#include "log.h"
#include "monotonic.h"
#include "rates.h"

struct taker {
    struct rates *r;
    atomic_int refused;
};

static void *take_one(void *arg)
{
    struct taker *t = arg;
    if (!rates_take(t->r, "c3", RATE_LOOKUP, 300))
        atomic_fetch_add(&t->refused, 1);
    return NULL;
}

int main(void)
{
    log_init("test", LOG_LEVEL_ERROR, false);
    const struct rate limits[RATE_KINDS] = {
        [RATE_LOOKUP] = {10, 20}, [RATE_REPORT] = {10, 5}, [RATE_PROBE] = {1, 1}};
    struct rates *r = rates_new(limits);
    REQUIRE(r != NULL);

    int passed = 0;
    for (int i = 0; i < 30; i++)
        passed += rates_take(r, "c1", RATE_LOOKUP, 0);
    CHECKF(passed >= 20 && passed <= 22, "the burst of 20 passes at once: %d", passed);

    /* Beyond it, a lookup that may wait gets its turn within the bound. */
    uint64_t t0 = monotonic_ms();
    CHECK(rates_take(r, "c1", RATE_LOOKUP, 1000));
    uint64_t waited = monotonic_ms() - t0;
    CHECKF(waited >= 50 && waited <= 1000, "waited %llu ms for a token",
           (unsigned long long)waited);
    /* Sixteen at once, each willing to wait 300 ms: about three tokens
       come in that time, so most are refused at once. */
    for (int i = 0; i < 30; i++)
        rates_take(r, "c3", RATE_LOOKUP, 0);
    pthread_t th[16];
    struct taker tk = {.r = r};
    for (int i = 0; i < 16; i++)
        pthread_create(&th[i], NULL, take_one, &tk);
    for (int i = 0; i < 16; i++)
        pthread_join(th[i], NULL);
    CHECKF(atomic_load(&tk.refused) >= 10 && atomic_load(&tk.refused) <= 15,
           "refused %d of 16 beyond 300 ms of credit", atomic_load(&tk.refused));

    /* Another caller, and another kind, have buckets of their own. */
    CHECK(rates_take(r, "c2", RATE_LOOKUP, 0));
    int reports = 0;
    for (int i = 0; i < 8; i++)
        reports += rates_take(r, "c1", RATE_REPORT, 0);
    CHECK_EQ(reports, 5);
    CHECK(rates_take(r, "c1", RATE_PROBE, 0));
    CHECK(!rates_take(r, "c1", RATE_PROBE, 0));

    /* A take says whether it waited: from the burst it did not, however
       long the thread took; with the bucket empty it did (1 a second). */
    bool had_to_wait = true;
    CHECK(rates_take_waited(r, "c5", RATE_PROBE, 0, &had_to_wait));
    CHECK(!had_to_wait);
    CHECK(rates_take_waited(r, "c5", RATE_PROBE, 1500, &had_to_wait));
    CHECK(had_to_wait);

    /* A batch takes all its tokens or none: 4 of the burst of 5, then 4
       more find 1 and take nothing, unless they may wait for the 3
       missing (300 ms at 10 a second); 20 more would wait 2 s, beyond a
       1 s bound, and are refused at once. */
    CHECK(rates_take_n(r, "c4", RATE_REPORT, 4, 0));
    CHECK(!rates_take_n(r, "c4", RATE_REPORT, 4, 0));
    CHECK(rates_take_n(r, "c4", RATE_REPORT, 4, 1000));
    t0 = monotonic_ms();
    CHECK(!rates_take_n(r, "c4", RATE_REPORT, 20, 1000));
    CHECKF(monotonic_ms() - t0 < 900, "a batch beyond the bound was refused after %llu ms",
           (unsigned long long)(monotonic_ms() - t0));
    rates_free(r);
    return check_result("test_rates");
}
