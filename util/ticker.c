/* Periodic calls in a thread of their own; see ticker.h. */
#include "ticker.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ticker {
    unsigned interval_s;
    bool at_once;
    void (*fn)(void *arg);
    void *arg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
};

static void *ticker_main(void *arg)
{
    struct ticker *t = arg;
    if (t->at_once)
        t->fn(t->arg);
    pthread_mutex_lock(&t->lock);
    while (!t->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += t->interval_s;
        while (!t->stop && pthread_cond_timedwait(&t->wake, &t->lock, &until) != ETIMEDOUT)
            ;
        if (t->stop)
            break;
        pthread_mutex_unlock(&t->lock);
        t->fn(t->arg);
        pthread_mutex_lock(&t->lock);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

struct ticker *ticker_start(unsigned interval_s, bool at_once, void (*fn)(void *arg), void *arg,
                            char *err, size_t errlen)
{
    struct ticker *t = calloc(1, sizeof(*t));
    pthread_condattr_t ca;
    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    *t = (struct ticker){.interval_s = interval_s, .at_once = at_once, .fn = fn, .arg = arg};
    pthread_mutex_init(&t->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->wake, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&t->thread, NULL, ticker_main, t);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start a thread: %s", strerror(rc));
        pthread_cond_destroy(&t->wake);
        pthread_mutex_destroy(&t->lock);
        free(t);
        return NULL;
    }
    return t;
}

void ticker_stop(struct ticker *t)
{
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->lock);
    t->stop = true;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    pthread_cond_destroy(&t->wake);
    pthread_mutex_destroy(&t->lock);
    free(t);
}
