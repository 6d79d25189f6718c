/* The assertions of every C test, one line per failure ("FAIL file:line:
   what failed") on stderr.
     CHECK, CHECKF, CHECK_STR, CHECK_HAS, CHECK_EQ  count the failure and go on;
     REQUIRE, REQUIRE_EQ  stop the test (exit 1): for what the rest relies on;
     WAIT_UNTIL  a bounded wait on something observable, never a fixed sleep.
   main returns check_result(name).  Whatever main returns, a process with a
   failed check exits 1: a test that forgets check_result can still fail. */
#ifndef QCG_TEST_CHECK_H
#define QCG_TEST_CHECK_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Atomic: threads of a test check too. */
static atomic_int check_failures;

__attribute__((format(printf, 3, 4))) static inline void check_failf(const char *file, int line,
                                                                     const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* One write per line: threads' failures do not interleave. */
    fprintf(stderr, "FAIL %s:%d: %s\n", file, line, msg);
    check_failures++;
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            check_failf(__FILE__, __LINE__, "%s", #cond);                                          \
    } while (0)

/* CHECK with a message (printf arguments), for the values worth seeing. */
#define CHECKF(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            char check_msg_[768];                                                                  \
            snprintf(check_msg_, sizeof(check_msg_), __VA_ARGS__);                                 \
            check_failf(__FILE__, __LINE__, "%s: %s", #cond, check_msg_);                          \
        }                                                                                          \
    } while (0)

#define CHECK_STR(got, want)                                                                       \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        if (g_ == NULL || strcmp(g_, w_) != 0)                                                     \
            check_failf(__FILE__, __LINE__, "%s is \"%s\", expected \"%s\"", #got,                 \
                        g_ ? g_ : "(null)", w_);                                                   \
    } while (0)

/* got contains the substring want. */
#define CHECK_HAS(got, want)                                                                       \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        if (g_ == NULL || strstr(g_, w_) == NULL)                                                  \
            check_failf(__FILE__, __LINE__, "%s is \"%s\", expected it to contain \"%s\"", #got,   \
                        g_ ? g_ : "(null)", w_);                                                   \
    } while (0)

static inline bool check_eq(const char *file, int line, const char *what, long long a, long long b)
{
    if (a == b)
        return true;
    check_failf(file, line, "%s (%lld != %lld)", what, a, b);
    return false;
}

/* a == b as integers; both values shown when not. */
#define CHECK_EQ(a, b)                                                                             \
    ((void)check_eq(__FILE__, __LINE__, #a " == " #b, (long long)(a), (long long)(b)))

#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            check_failf(__FILE__, __LINE__, "%s", #cond);                                          \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define REQUIRE_EQ(a, b)                                                                           \
    do {                                                                                           \
        if (!check_eq(__FILE__, __LINE__, #a " == " #b, (long long)(a), (long long)(b)))           \
            exit(1);                                                                               \
    } while (0)

static inline uint64_t check_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline void check_pause_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000u, .tv_nsec = (long)(ms % 1000u) * 1000000L};

    nanosleep(&ts, NULL);
}

/* Evaluates cond every 10 ms until it holds, for timeout_ms at most; a failed
   check naming what (a string) if it never did.  cond may have side effects
   (a request, a read): it is evaluated once per round. */
#define WAIT_UNTIL(cond, timeout_ms, what)                                                         \
    do {                                                                                           \
        uint64_t wait_end_ = check_now_ms() + (uint64_t)(timeout_ms);                              \
        bool wait_ok_;                                                                             \
        while (!(wait_ok_ = (cond)) && check_now_ms() < wait_end_)                                 \
            check_pause_ms(10);                                                                    \
        if (!wait_ok_)                                                                             \
            check_failf(__FILE__, __LINE__, "waited %d ms for %s (%s)", (int)(timeout_ms), what,   \
                        #cond);                                                                    \
    } while (0)

static inline int check_result(const char *name)
{
    if (check_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, (int)check_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

static void check_exit_status(void)
{
    if (check_failures) {
        fflush(NULL);
        _exit(1);
    }
}

__attribute__((constructor)) static void check_at_exit(void)
{
    atexit(check_exit_status);
}

#endif
