/* Signals for a clean stop, backoff with jitter, interruptible sleeps. */
#include "daemon.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "crl.h"
#include "log.h"

/* A signal handler can only reach its target through statics; daemon_signals
   sets them again on every call, so a test can re-arm them. */
static volatile sig_atomic_t *stop_flag;
static void (*stop_hook)(void *);
static void *stop_hook_arg;

static void on_signal(int sig)
{
    (void)sig;
    int saved_errno = errno;
    if (stop_flag)
        *stop_flag = 1;
    if (stop_hook)
        stop_hook(stop_hook_arg);
    errno = saved_errno;
}

/* SIGHUP: the CRL is read again before the next certificate check (crl.h);
   live connections stay. */
static void on_hup(int sig)
{
    (void)sig;
    crl_reload_request();
}

void daemon_signals(volatile sig_atomic_t *stop, void (*on_stop)(void *), void *arg)
{
    stop_flag = stop;
    stop_hook = on_stop;
    stop_hook_arg = arg;

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    /* No SA_RESTART: blocking calls return EINTR so loops notice the stop. */
    sa.sa_flags = 0;
    sa.sa_handler = on_signal;
    if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0)
        log_warn("sigaction");

    sa.sa_handler = on_hup;
    sa.sa_flags = SA_RESTART; /* a reload request must not interrupt anything */
    if (sigaction(SIGHUP, &sa, NULL) < 0)
        log_warn("sigaction(SIGHUP)");

    sa.sa_flags = 0;
    sa.sa_handler = SIG_IGN;
    if (sigaction(SIGPIPE, &sa, NULL) < 0)
        log_warn("sigaction(SIGPIPE)");
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int sleep_unless_stopped(unsigned ms, volatile sig_atomic_t *stop)
{
    int64_t end = now_ms() + ms;
    for (;;) {
        if (stop && *stop)
            return 1;
        int64_t left = end - now_ms();
        if (left <= 0)
            return 0;
        if (left > 100)
            left = 100;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)left * 1000000L};
        nanosleep(&ts, NULL); /* EINTR: the loop re-checks the flag */
    }
}
