/* daemon.c: backoff bounds and growth, interruptible sleep, signal handling. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "backoff.h"
#include "daemon.h"
#include "log.h"

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void test_backoff(void)
{
    /* Within [d/2, d] for d = min(base * 2^attempt, max); never above max. */
    for (unsigned attempt = 0; attempt < 40; attempt++) {
        unsigned long d = 200;
        for (unsigned i = 0; i < attempt && d < 10000; i++)
            d *= 2;
        if (d > 10000)
            d = 10000;
        unsigned lo = ~0u, hi = 0;
        for (int k = 0; k < 200; k++) {
            unsigned v = backoff_ms(attempt, 200, 10000);
            if (v < lo)
                lo = v;
            if (v > hi)
                hi = v;
        }
        if (lo < d / 2 || hi > d)
            fprintf(stderr, "attempt %u: %u..%u outside %lu..%lu\n", attempt, lo, hi, d / 2, d);
        CHECK(lo >= d / 2 && hi <= d);
        /* Jitter: 200 draws are not all the same. */
        CHECK(hi > lo);
    }
    CHECK(backoff_ms(1000000, 200, 10000) <= 10000);
    CHECK(backoff_ms(0, 0, 0) <= 1);
    CHECK(backoff_ms(3, 500, 100) <= 500); /* max below base: base wins */
}

static atomic_int stop_flag;
static atomic_int hook_calls;

static void on_stop(void *arg)
{
    (void)arg;
    hook_calls++;
}

/* Sets the flag 300 ms from now: the delay is what test_sleep measures
   against, not a wait for an event. */
static void *raise_later(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL);
    stop_flag = 1;
    return NULL;
}

static void test_sleep(void)
{
    stop_flag = 0;
    long t0 = now_ms();
    CHECK(sleep_unless_stopped(250, &stop_flag) == 0);
    long ms = now_ms() - t0;
    CHECK(ms >= 240 && ms < 2000);

    /* Another thread sets the flag: the sleep ends within ~100 ms of it. */
    pthread_t t;
    pthread_create(&t, NULL, raise_later, NULL);
    t0 = now_ms();
    CHECK(sleep_unless_stopped(10000, &stop_flag) == 1);
    ms = now_ms() - t0;
    CHECK(ms >= 250 && ms < 2000);
    pthread_join(t, NULL);

    /* Already stopped: returns at once, not after the 5 s (the bound leaves
       room for a loaded machine). */
    t0 = now_ms();
    CHECK(sleep_unless_stopped(5000, &stop_flag) == 1);
    CHECK(now_ms() - t0 < 2000);
}

static void test_signals(void)
{
    stop_flag = 0;
    hook_calls = 0;
    daemon_signals(&stop_flag, on_stop, NULL);
    char why[160];
    daemon_stop_cause(why, sizeof(why));
    CHECK(strcmp(why, "asked to") == 0);
    raise(SIGPIPE); /* ignored: we are still here */
    CHECK(stop_flag == 0);
    kill(getpid(), SIGTERM);
    CHECK(stop_flag == 1);
    CHECK(hook_calls == 1);
    /* The stop line names the sender: here ourselves, still running. */
    char want[96];
    snprintf(want, sizeof(want), "SIGTERM from pid %d (", (int)getpid());
    daemon_stop_cause(why, sizeof(why));
    CHECK(strncmp(why, want, strlen(want)) == 0 && strstr(why, "(gone)") == NULL &&
          strstr(why, ", uid ") != NULL);
    stop_flag = 0;
    raise(SIGINT);
    CHECK(stop_flag == 1);
    CHECK(hook_calls == 2);

    /* No SA_RESTART: a blocking call is interrupted. */
    struct sigaction sa;
    sigaction(SIGTERM, NULL, &sa);
    CHECK((sa.sa_flags & SA_RESTART) == 0);
    sigaction(SIGPIPE, NULL, &sa);
    CHECK(sa.sa_handler == SIG_IGN);
}

int main(void)
{
    log_init("test", LOG_LEVEL_ERROR, false);
    test_backoff();
    test_sleep();
    test_signals();
    return check_result("test_daemon");
}
