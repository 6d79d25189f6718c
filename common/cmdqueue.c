/*
 * The long-poll command queue: a ring of unacknowledged commands in sequence
 * order.  Acknowledgement is cumulative (everything <= ack), so a response
 * that was lost is simply delivered again at the next poll with the old ack.
 */
#include "cmdqueue.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

struct cmdqueue {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    struct command *ring;
    size_t capacity;
    size_t head; /* index of the oldest command */
    size_t count;
    uint64_t last_seq; /* last sequence number handed out; 0 = none yet */
    bool closed;
};

struct cmdqueue *cmdqueue_new(size_t capacity)
{
    /* Room for a flush and the command that caused the overflow. */
    if (capacity < 2)
        capacity = 2;
    struct cmdqueue *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return NULL;
    q->ring = calloc(capacity, sizeof(*q->ring));
    if (q->ring == NULL) {
        free(q);
        return NULL;
    }
    q->capacity = capacity;

    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&q->changed, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&q->lock, NULL);
    return q;
}

void cmdqueue_free(struct cmdqueue *q)
{
    if (q == NULL)
        return;
    pthread_cond_destroy(&q->changed);
    pthread_mutex_destroy(&q->lock);
    free(q->ring);
    free(q);
}

static struct command *at(struct cmdqueue *q, size_t i)
{
    return &q->ring[(q->head + i) % q->capacity];
}

static uint64_t append(struct cmdqueue *q, const struct command *cmd)
{
    struct command *slot = at(q, q->count);
    *slot = *cmd;
    slot->seq = ++q->last_seq;
    /* Fixed-size strings from a caller: make sure they stay terminated. */
    slot->kind[sizeof(slot->kind) - 1] = '\0';
    slot->job[sizeof(slot->job) - 1] = '\0';
    slot->node[sizeof(slot->node) - 1] = '\0';
    slot->address[sizeof(slot->address) - 1] = '\0';
    slot->token[sizeof(slot->token) - 1] = '\0';
    q->count++;
    return slot->seq;
}

/* Invalidations and flushes only drop cached state, so a flush covers them. */
static bool covered_by_flush(const struct command *cmd)
{
    return strcmp(cmd->kind, "invalidate") == 0 || strcmp(cmd->kind, "flush") == 0;
}

uint64_t cmdqueue_push(struct cmdqueue *q, const struct command *cmd)
{
    uint64_t seq;
    pthread_mutex_lock(&q->lock);
    if (q->count < q->capacity) {
        seq = append(q, cmd);
    } else {
        log_warnx("command queue full (%zu unacknowledged): replaced by a flush", q->count);
        q->head = 0;
        q->count = 0;
        struct command flush;
        memset(&flush, 0, sizeof(flush));
        strcpy(flush.kind, "flush");
        flush.rank = -1;
        seq = append(q, &flush);
        if (!covered_by_flush(cmd))
            seq = append(q, cmd);
    }
    pthread_cond_broadcast(&q->changed);
    pthread_mutex_unlock(&q->lock);
    return seq;
}

static void drop_acked(struct cmdqueue *q, uint64_t ack)
{
    while (q->count > 0 && at(q, 0)->seq <= ack) {
        q->head = (q->head + 1) % q->capacity;
        q->count--;
    }
    if (q->count == 0)
        q->head = 0;
}

static void deadline_after(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

int cmdqueue_wait(struct cmdqueue *q, uint64_t ack, int wait_ms, struct command *out, int max)
{
    pthread_mutex_lock(&q->lock);
    /* An ack beyond anything handed out comes from a confused client; without
       the clamp it would also swallow commands not yet pushed. */
    if (ack > q->last_seq)
        ack = q->last_seq;
    drop_acked(q, ack);

    if (wait_ms > 0 && q->count == 0 && !q->closed) {
        struct timespec deadline;
        deadline_after(&deadline, wait_ms);
        while (q->count == 0 && !q->closed) {
            int rc = pthread_cond_timedwait(&q->changed, &q->lock, &deadline);
            if (rc == ETIMEDOUT)
                break;
        }
    }

    int n = 0;
    if (!q->closed && out != NULL) {
        for (size_t i = 0; i < q->count && n < max; i++)
            out[n++] = *at(q, i);
    }
    pthread_mutex_unlock(&q->lock);
    return n;
}

void cmdqueue_close(struct cmdqueue *q)
{
    pthread_mutex_lock(&q->lock);
    q->closed = true;
    pthread_cond_broadcast(&q->changed);
    pthread_mutex_unlock(&q->lock);
}

size_t cmdqueue_pending(struct cmdqueue *q)
{
    pthread_mutex_lock(&q->lock);
    size_t n = q->count;
    pthread_mutex_unlock(&q->lock);
    return n;
}
