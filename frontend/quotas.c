/* Per-node token buckets; see quotas.h.  Nodes are authenticated helpers of
   this cluster, so the table grows only with the cluster's own nodes. */
#include "quotas.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "monotonic.h"
#include "strmap.h"
#include "tokenbucket.h"

struct node_quotas {
    pthread_mutex_t lock;
    struct quota_rate rates[QUOTA_KINDS];
    struct strmap *nodes; /* name -> struct tokenbucket[QUOTA_KINDS] */
};

struct node_quotas *node_quotas_new(const struct quota_rate rates[QUOTA_KINDS])
{
    struct node_quotas *q = calloc(1, sizeof(*q));
    if (q == NULL || (q->nodes = strmap_new()) == NULL) {
        free(q);
        return NULL;
    }
    for (int i = 0; i < QUOTA_KINDS; i++)
        q->rates[i] = rates[i];
    pthread_mutex_init(&q->lock, NULL);
    return q;
}

void node_quotas_free(struct node_quotas *q)
{
    if (q == NULL)
        return;
    strmap_free(q->nodes, free);
    pthread_mutex_destroy(&q->lock);
    free(q);
}

static void sleep_ms(double ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                          .tv_nsec = (long)((ms - (double)(time_t)(ms / 1000) * 1000) * 1e6)};
    nanosleep(&ts, NULL);
}

bool node_quotas_take(struct node_quotas *q, const char *node, enum quota_kind kind, int wait_ms)
{
    const struct quota_rate *r = &q->rates[kind];
    double wait = 0;
    bool ok = false;

    pthread_mutex_lock(&q->lock);
    struct tokenbucket *b = strmap_get(q->nodes, node);
    if (b == NULL && (b = calloc(QUOTA_KINDS, sizeof(*b))) != NULL &&
        strmap_put(q->nodes, node, b, NULL) < 0) {
        free(b);
        b = NULL;
    }
    if (b != NULL) {
        b += kind;
        /* A waiter takes its token now, on credit: the bucket goes below
           zero by what it waits for, so waiters queue in order and never
           more than wait_ms' worth of them. */
        ok = tokenbucket_take(b, monotonic_ms(), r->per_second, r->burst);
        if (!ok && (1.0 - b->tokens) * 1000.0 / r->per_second <= wait_ms) {
            wait = (1.0 - b->tokens) * 1000.0 / r->per_second;
            b->tokens -= 1.0;
            ok = true;
        }
    }
    pthread_mutex_unlock(&q->lock);
    if (wait > 0)
        sleep_ms(wait);
    return ok;
}
