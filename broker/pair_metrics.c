/* Setup outcomes per cluster pair for the metrics endpoint; see pair_metrics.h. */
#include "pair_metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "htable.h"
#include "proto.h"

struct tech_counts {
    unsigned long long attempts, ok, failed[FAIL_REASONS];
    double setup_seconds; /* sum over the successes */
};

struct pair {
    char key[2 * QCG_NAME_MAX + 2]; /* from, US (0x1f), to */
    char from[QCG_NAME_MAX], to[QCG_NAME_MAX];
    struct tech_counts tech[TECH_COUNT];
};

struct pair_metrics {
    pthread_mutex_t lock;
    struct htable *pairs; /* of struct pair */
    struct metrics_histogram setup[TECH_COUNT];
    unsigned long long untracked;
};

static const char *const reason_names[FAIL_REASONS] = {"timeout",     "refused",   "reset",
                                                       "unreachable", "handshake", "other"};

const char *failure_reason_name(enum failure_reason r)
{
    return r < FAIL_REASONS ? reason_names[r] : "other";
}

static bool has(const char *s, const char *word)
{
    return strstr(s, word) != NULL;
}

enum failure_reason failure_reason_of(const char *why)
{
    if (why == NULL)
        return FAIL_OTHER;
    if (has(why, "timed out") || has(why, "within") || has(why, "timeout") || has(why, "deadline"))
        return FAIL_TIMEOUT;
    if (has(why, "refused"))
        return FAIL_REFUSED;
    if (has(why, "reset"))
        return FAIL_RESET;
    if (has(why, "unreachable") || has(why, "No route"))
        return FAIL_UNREACHABLE;
    if (has(why, "handshake") || has(why, "token") || has(why, "TLS"))
        return FAIL_HANDSHAKE;
    return FAIL_OTHER;
}

static bool pair_eq(const void *entry, const void *key)
{
    return strcmp(((const struct pair *)entry)->key, key) == 0;
}

struct pair_metrics *pair_metrics_new(void)
{
    struct pair_metrics *pm = calloc(1, sizeof(*pm));
    if (pm == NULL || (pm->pairs = htable_new(pair_eq)) == NULL) {
        free(pm);
        return NULL;
    }
    pthread_mutex_init(&pm->lock, NULL);
    return pm;
}

void pair_metrics_free(struct pair_metrics *pm)
{
    if (pm == NULL)
        return;
    size_t i = 0;
    struct pair *p;
    while ((p = htable_next(pm->pairs, &i)) != NULL)
        free(p);
    htable_free(pm->pairs);
    pthread_mutex_destroy(&pm->lock);
    free(pm);
}

static struct pair *pair_get(struct pair_metrics *pm, const char *from, const char *to)
{
    char key[2 * QCG_NAME_MAX + 2];
    snprintf(key, sizeof(key), "%.*s\x1f%.*s", QCG_NAME_MAX - 1, from, QCG_NAME_MAX - 1, to);
    uint64_t h = htable_hash(key, strlen(key), 0);
    struct pair *p = htable_find(pm->pairs, h, key);
    if (p != NULL)
        return p;
    if (htable_count(pm->pairs) >= PAIR_METRICS_MAX || (p = calloc(1, sizeof(*p))) == NULL)
        return NULL;
    memcpy(p->key, key, sizeof(key));
    snprintf(p->from, sizeof(p->from), "%s", from);
    snprintf(p->to, sizeof(p->to), "%s", to);
    if (htable_insert(pm->pairs, h, p) < 0) {
        free(p);
        return NULL;
    }
    return p;
}

void pair_metrics_record(struct pair_metrics *pm, const char *from, const char *to,
                         enum technique t, bool ok, unsigned setup_ms, const char *why)
{
    if ((int)t <= (int)TECH_NONE || (int)t >= TECH_COUNT)
        return;
    pthread_mutex_lock(&pm->lock);
    struct pair *p = pair_get(pm, from, to);
    if (p == NULL) {
        pm->untracked++;
    } else {
        struct tech_counts *k = &p->tech[t];
        k->attempts++;
        if (ok) {
            k->ok++;
            k->setup_seconds += setup_ms / 1000.0;
        } else {
            k->failed[failure_reason_of(why)]++;
        }
    }
    if (ok)
        metrics_observe(&pm->setup[t], setup_ms / 1000.0);
    pthread_mutex_unlock(&pm->lock);
}

/* Each family over every pair and technique with attempts. */
enum family { F_ATTEMPTS, F_OK, F_FAILED, F_SETUP, F_COUNT };

static void write_family(struct pair_metrics *pm, struct metrics_buf *b, enum family f)
{
    static const struct {
        const char *name, *help;
    } fam[F_COUNT] = {
        {"qcg_broker_pair_attempts_total",
         "connection attempts reported between two clusters, by technique"},
        {"qcg_broker_pair_successes_total", "attempts that connected, by technique"},
        {"qcg_broker_pair_failures_total", "attempts that failed, by technique and reason"},
        {"qcg_broker_pair_setup_seconds_total",
         "setup time of the successful attempts, summed (divide by the successes)"},
    };
    metrics_family(b, fam[f].name, "counter", fam[f].help);
    size_t i = 0;
    const struct pair *p;
    while ((p = htable_next(pm->pairs, &i)) != NULL) {
        for (int t = TECH_DIRECT; t < TECH_COUNT; t++) {
            const struct tech_counts *k = &p->tech[t];
            if (k->attempts == 0)
                continue;
            const char *l[8] = {"from",   p->from,     "to",
                                p->to,    "technique", technique_name((enum technique)t),
                                "reason", NULL};
            if (f == F_FAILED) {
                for (int r = 0; r < FAIL_REASONS; r++) {
                    l[7] = reason_names[r];
                    metrics_sample_v(b, fam[f].name, (double)k->failed[r], l, 4);
                }
                continue;
            }
            double v = f == F_ATTEMPTS ? (double)k->attempts
                       : f == F_OK     ? (double)k->ok
                                       : k->setup_seconds;
            metrics_sample_v(b, fam[f].name, v, l, 3);
        }
    }
}

void pair_metrics_write(struct pair_metrics *pm, struct metrics_buf *b)
{
    pthread_mutex_lock(&pm->lock);
    for (int f = 0; f < F_COUNT; f++)
        write_family(pm, b, (enum family)f);
    metrics_family(b, "qcg_broker_pairs_untracked_total", "counter",
                   "reports not counted per pair: more than the pairs tracked");
    metrics_sample(b, "qcg_broker_pairs_untracked_total", (double)pm->untracked, NULL);
    metrics_family(b, "qcg_connect_setup_seconds", "histogram",
                   "setup time of successful connections, as reported, by technique");
    for (int t = TECH_DIRECT; t < TECH_COUNT; t++) {
        const char *l[2] = {"technique", technique_name((enum technique)t)};
        metrics_histogram_write(b, "qcg_connect_setup_seconds", &pm->setup[t], l, 1);
    }
    pthread_mutex_unlock(&pm->lock);
}
