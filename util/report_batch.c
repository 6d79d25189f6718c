/* Reports gathered for the service above; see report_batch.h. */
#include "report_batch.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct reports {
    reports_send_fn send;
    void *arg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* a batch is full, a flush, or stop */
    pthread_cond_t idle; /* a batch went: for reports_flush */
    bool stop, flush, sending;
    size_t head, count; /* a ring of REPORTS_QUEUED_MAX */
    struct report_item *queue;
    struct report_item batch[QCG_REPORTS_MAX]; /* the thread's own */
};

static void deadline_in(struct timespec *ts, unsigned ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_nsec += (long)(ms % 1000u) * 1000000L;
    ts->tv_sec += ms / 1000u + ts->tv_nsec / 1000000000L;
    ts->tv_nsec %= 1000000000L;
}

/* Waits until a batch is full, QCG_REPORTS_FLUSH_MS after the first report
   of one, or stop; then sends the batch outside the lock. */
static void *run(void *arg)
{
    struct reports *r = arg;

    pthread_mutex_lock(&r->lock);
    for (;;) {
        while (r->count == 0 && !r->stop)
            pthread_cond_wait(&r->wake, &r->lock);
        if (r->count == 0)
            break;
        struct timespec until;
        deadline_in(&until, QCG_REPORTS_FLUSH_MS);
        while (r->count < QCG_REPORTS_MAX && !r->stop && !r->flush &&
               pthread_cond_timedwait(&r->wake, &r->lock, &until) != ETIMEDOUT)
            ;
        r->flush = false;
        int n = 0;
        while (r->count > 0 && n < QCG_REPORTS_MAX) {
            r->batch[n++] = r->queue[r->head];
            r->head = (r->head + 1) % REPORTS_QUEUED_MAX;
            r->count--;
        }
        r->sending = true;
        pthread_mutex_unlock(&r->lock);
        r->send(r->arg, r->batch, n);
        pthread_mutex_lock(&r->lock);
        r->sending = false;
        pthread_cond_broadcast(&r->idle);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

struct reports *reports_new(reports_send_fn send, void *arg, char *err, size_t errlen)
{
    struct reports *r = calloc(1, sizeof(*r));
    pthread_condattr_t ca;

    if (r == NULL || (r->queue = calloc(REPORTS_QUEUED_MAX, sizeof(*r->queue))) == NULL) {
        free(r);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->send = send;
    r->arg = arg;
    pthread_mutex_init(&r->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->wake, &ca);
    pthread_cond_init(&r->idle, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&r->thread, NULL, run, r);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the reports' thread: %s", strerror(rc));
        pthread_cond_destroy(&r->wake);
        pthread_cond_destroy(&r->idle);
        pthread_mutex_destroy(&r->lock);
        free(r->queue);
        free(r);
        return NULL;
    }
    return r;
}

bool reports_add(struct reports *r, const struct report_item *item)
{
    pthread_mutex_lock(&r->lock);
    bool room = r->count < REPORTS_QUEUED_MAX && !r->stop;
    if (room) {
        r->queue[(r->head + r->count) % REPORTS_QUEUED_MAX] = *item;
        /* The first wakes the thread to start its clock; a full batch ends it. */
        if (++r->count == 1 || r->count == QCG_REPORTS_MAX)
            pthread_cond_signal(&r->wake);
    }
    pthread_mutex_unlock(&r->lock);
    return room;
}

void reports_flush(struct reports *r)
{
    struct timespec until;

    deadline_in(&until, REPORTS_FLUSH_WAIT_MS);
    pthread_mutex_lock(&r->lock);
    while ((r->count > 0 || r->sending) && !r->stop) {
        r->flush = true;
        pthread_cond_signal(&r->wake);
        if (pthread_cond_timedwait(&r->idle, &r->lock, &until) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&r->lock);
}

void reports_free(struct reports *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->lock);
    r->stop = true;
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->lock);
    pthread_join(r->thread, NULL);
    pthread_cond_destroy(&r->wake);
    pthread_cond_destroy(&r->idle);
    pthread_mutex_destroy(&r->lock);
    free(r->queue);
    free(r);
}
