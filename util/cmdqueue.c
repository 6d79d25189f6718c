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
#include "monotonic.h"
#include "ratelimit.h"

#define CMDQUEUE_LOG_INTERVAL_MS 10000

struct cmdqueue {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    struct command *ring;
    size_t capacity;
    size_t head; /* index of the oldest command */
    size_t count;
    uint64_t last_seq; /* last sequence number handed out; 0 = none yet */
    size_t orders;     /* held commands that a flush does not cover */
    size_t job_share;  /* orders of one job held at most */
    struct ratelimit full_log, refused_log;
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
    q->job_share = capacity * 3 / 4 > 0 ? capacity * 3 / 4 : 1;

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

/* Invalidations and flushes only drop cached state, so a flush covers them. */
static bool covered_by_flush(const struct command *cmd)
{
    return strcmp(cmd->kind, "invalidate") == 0 || strcmp(cmd->kind, "flush") == 0;
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
    if (!covered_by_flush(slot))
        q->orders++;
    return slot->seq;
}

/* Drops the invalidations and flushes held, keeping the orders in sequence
   order; returns how many went. */
static size_t drop_covered(struct cmdqueue *q)
{
    size_t kept = 0, n = q->count;
    for (size_t i = 0; i < n; i++) {
        struct command *c = at(q, i);
        if (covered_by_flush(c))
            continue;
        if (kept != i)
            *at(q, kept) = *c;
        kept++;
    }
    for (size_t i = kept; i < n; i++)
        memset(at(q, i), 0, sizeof(struct command));
    q->count = kept;
    return n - kept;
}

static size_t job_orders(struct cmdqueue *q, const char *job)
{
    size_t n = 0;
    for (size_t i = 0; i < q->count; i++) {
        const struct command *c = at(q, i);
        if (!covered_by_flush(c) && strncmp(c->job, job, sizeof(c->job)) == 0)
            n++;
    }
    return n;
}

/* Whether an order may take a slot; errno says why not. */
static bool order_fits(struct cmdqueue *q, const struct command *cmd)
{
    unsigned left_out;
    int err = q->orders + 1 >= q->capacity              ? ENOSPC
              : job_orders(q, cmd->job) >= q->job_share ? EDQUOT
                                                        : 0;
    if (err == 0)
        return true;
    if (ratelimit_ok(&q->refused_log, monotonic_ms(), CMDQUEUE_LOG_INTERVAL_MS, &left_out))
        log_warnx("command queue: %s for job %.63s refused: %s (%u such lines left out)", cmd->kind,
                  cmd->job,
                  err == ENOSPC ? "orders fill the queue" : "the job holds its share of it",
                  left_out);
    errno = err;
    return false;
}

uint64_t cmdqueue_push(struct cmdqueue *q, const struct command *cmd)
{
    uint64_t seq = 0;
    bool order = !covered_by_flush(cmd);
    pthread_mutex_lock(&q->lock);
    if (order && !order_fits(q, cmd)) {
        pthread_mutex_unlock(&q->lock);
        return 0;
    }
    if (q->count == q->capacity) {
        /* Orders never fill every slot, so something goes. */
        size_t dropped = drop_covered(q);
        unsigned left_out;
        if (ratelimit_ok(&q->full_log, monotonic_ms(), CMDQUEUE_LOG_INTERVAL_MS, &left_out))
            log_warnx("command queue full (%zu unacknowledged): %zu invalidations replaced by a "
                      "flush, %zu orders kept (%u such lines left out)",
                      q->capacity, dropped, q->count, left_out);
        struct command flush;
        memset(&flush, 0, sizeof(flush));
        strcpy(flush.kind, "flush");
        flush.rank = -1;
        seq = append(q, &flush);
    }
    if (order || seq == 0)
        seq = append(q, cmd);
    pthread_cond_broadcast(&q->changed);
    pthread_mutex_unlock(&q->lock);
    return seq;
}

void cmdqueue_set_job_share(struct cmdqueue *q, size_t max)
{
    pthread_mutex_lock(&q->lock);
    q->job_share = max > 0 ? max : 1;
    pthread_mutex_unlock(&q->lock);
}

static void drop_acked(struct cmdqueue *q, uint64_t ack)
{
    while (q->count > 0 && at(q, 0)->seq <= ack) {
        if (!covered_by_flush(at(q, 0)))
            q->orders--;
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
