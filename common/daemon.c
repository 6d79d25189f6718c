/* Signals for a clean stop, a reload on SIGHUP, interruptible sleeps. */
#include "daemon.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "crl.h"
#include "log.h"
#include "tls_reload.h"

/* A signal handler can only reach its target through statics; daemon_signals
   sets them again on every call, so a test can re-arm them. */
static atomic_int *stop_flag;
static void (*stop_hook)(void *);
static void *stop_hook_arg;
/* The first stop signal and its sender, for the line that says why the
   daemon stops: a stop nobody asked for is then explained. */
static atomic_int stop_signo, stop_pid, stop_uid;

static void on_signal(int sig, siginfo_t *si, void *ctx)
{
    (void)ctx;
    int saved_errno = errno;
    int none = 0;
    /* si_code <= 0: sent by a process (kill, tgkill, sigqueue), which it names. */
    if (atomic_compare_exchange_strong(&stop_signo, &none, sig) && si != NULL && si->si_code <= 0) {
        atomic_store(&stop_pid, (int)si->si_pid);
        atomic_store(&stop_uid, (int)si->si_uid);
    }
    if (stop_flag)
        atomic_store(stop_flag, 1);
    if (stop_hook)
        stop_hook(stop_hook_arg);
    errno = saved_errno;
}

/* SIGHUP: the CRL and the service's certificates are read again
   (crl.h, tls_reload.h) by a thread of their own, at once whatever the
   daemon's loop is doing and without blocking it; live connections stay.
   The semaphore is the request (sem_post is async-signal-safe). */
static pthread_once_t reloader_once = PTHREAD_ONCE_INIT;
static sem_t reload_sem;
static atomic_bool reloader_running;

static void *reloader(void *arg)
{
    (void)arg;
    for (;;) {
        if (sem_wait(&reload_sem) < 0)
            continue; /* EINTR */
        /* Signals that came before this reload starts are served by it. */
        while (sem_trywait(&reload_sem) == 0)
            ;
        /* Certificates first: the CRL changes only with CAs that check it. */
        crl_reload(tls_reload_all() > 0);
    }
    return NULL;
}

static void start_reloader(void)
{
    if (sem_init(&reload_sem, 0, 0) < 0) {
        log_warn("SIGHUP will reload nothing: sem_init");
        return;
    }
    /* Signals go to the daemon's other threads, as before this one. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t tid;
    int rc = pthread_create(&tid, &attr, reloader, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        log_warnx("SIGHUP will reload nothing: cannot start its thread: %s", strerror(rc));
    else
        atomic_store(&reloader_running, true);
}

static void on_hup(int sig)
{
    (void)sig;
    int saved_errno = errno;
    if (atomic_load(&reloader_running))
        sem_post(&reload_sem);
    errno = saved_errno;
}

void daemon_signals(atomic_int *stop, void (*on_stop)(void *), void *arg)
{
    stop_flag = stop;
    stop_hook = on_stop;
    stop_hook_arg = arg;
    pthread_once(&reloader_once, start_reloader);

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    /* No SA_RESTART: blocking calls return EINTR so loops notice the stop. */
    sa.sa_flags = SA_SIGINFO;
    sa.sa_sigaction = on_signal;
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

void daemon_stop_cause(char *buf, size_t len)
{
    int sig = atomic_load(&stop_signo), pid = atomic_load(&stop_pid);
    if (sig == 0) {
        snprintf(buf, len, "asked to");
        return;
    }
    if (pid <= 0) {
        snprintf(buf, len, "%s", sig == SIGINT ? "SIGINT" : "SIGTERM");
        return;
    }
    /* The sender's name, if it still runs: a process that signals a pid
       it once started, long gone and now reused, names itself here. */
    char path[64], comm[64] = "gone";
    snprintf(path, sizeof(path), "/proc/%d/comm", pid);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fgets(comm, sizeof(comm), f) != NULL)
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
    }
    snprintf(buf, len, "%s from pid %d (%s), uid %d", sig == SIGINT ? "SIGINT" : "SIGTERM", pid,
             comm, atomic_load(&stop_uid));
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int sleep_unless_stopped(unsigned ms, atomic_int *stop)
{
    int64_t end = now_ms() + ms;
    for (;;) {
        if (stop && atomic_load(stop))
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
