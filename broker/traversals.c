/* Pending traversals; see traversals.h. */
#include "traversals.h"

#include <openssl/crypto.h>
#include <stdbool.h>
#include <string.h>

#include "log.h"
#include "monotonic.h"

#define TRAVERSALS_LOG_INTERVAL_MS 10000

void traversals_init(struct traversals *t)
{
    memset(t, 0, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
}

void traversals_destroy(struct traversals *t)
{
    pthread_mutex_destroy(&t->lock);
    OPENSSL_cleanse(t->slot, sizeof(t->slot));
}

static bool live(const struct traversal *s, uint64_t now)
{
    return s->expiry != 0 && s->expiry >= now;
}

int traversals_add(struct traversals *t, const struct traversal *tr, uint64_t now)
{
    size_t free_slot = TRAVERSALS_MAX, job = 0, cluster = 0;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < TRAVERSALS_MAX; i++) {
        const struct traversal *s = &t->slot[i];
        if (!live(s, now)) {
            if (free_slot == TRAVERSALS_MAX)
                free_slot = i;
            continue;
        }
        job += strcmp(s->job, tr->job) == 0;
        cluster += strcmp(s->from_cluster, tr->from_cluster) == 0;
    }
    const char *why = free_slot == TRAVERSALS_MAX           ? "the table is full"
                      : job >= TRAVERSALS_JOB_SHARE         ? "the job holds its share"
                      : cluster >= TRAVERSALS_CLUSTER_SHARE ? "the cluster holds its share"
                                                            : NULL;
    if (why == NULL) {
        t->slot[free_slot] = *tr;
    } else {
        unsigned left_out;
        t->refused++;
        if (ratelimit_ok(&t->refused_log, monotonic_ms(), TRAVERSALS_LOG_INTERVAL_MS, &left_out))
            log_warnx("traversal of job %s from cluster %s refused: %s (job %zu, cluster %zu of "
                      "%d; %u such lines left out)",
                      tr->job, tr->from_cluster, why, job, cluster, TRAVERSALS_MAX, left_out);
    }
    pthread_mutex_unlock(&t->lock);
    return why == NULL ? 0 : -1;
}

uint64_t traversals_refused(struct traversals *t)
{
    pthread_mutex_lock(&t->lock);
    uint64_t n = t->refused;
    pthread_mutex_unlock(&t->lock);
    return n;
}

int traversals_take(struct traversals *t, const unsigned char pair[TOKEN_PAIR_LEN], uint64_t now,
                    struct traversal *out)
{
    int rc = -1;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < TRAVERSALS_MAX; i++) {
        struct traversal *s = &t->slot[i];
        if (s->expiry != 0 && memcmp(s->pair, pair, TOKEN_PAIR_LEN) == 0) {
            if (s->expiry >= now) {
                *out = *s;
                rc = 0;
            }
            memset(s, 0, sizeof(*s));
            break;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}
