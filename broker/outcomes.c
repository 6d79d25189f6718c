/* Outcome memory: the project's hash table (core/htable.h) of cluster
   pairs under one mutex.  Plans read it on every lookup. */
#include "outcomes.h"

#include <openssl/rand.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "htable.h"
#include "plan.h"

struct entry {
    uint64_t touched; /* last report: the oldest goes first when full */
    struct outcome_entry e;
};

struct outcomes {
    pthread_mutex_t lock;
    unsigned expiry_s;
    uint64_t generation;
    uint64_t seed; /* of the hash: names are chosen by sites */
    struct htable *pairs;
};

struct pair_key {
    const char *from, *to;
};

static bool pair_eq(const void *entry, const void *key)
{
    const struct entry *e = entry;
    const struct pair_key *k = key;
    return strcmp(e->e.pair.from, k->from) == 0 && strcmp(e->e.pair.to, k->to) == 0;
}

static uint64_t pair_hash(const struct outcomes *o, const char *from, const char *to)
{
    /* The terminating NUL separates the two names. */
    return htable_hash(to, strlen(to), htable_hash(from, strlen(from) + 1, o->seed));
}

struct outcomes *outcomes_new(unsigned expiry_s)
{
    struct outcomes *o = calloc(1, sizeof(*o));
    if (o == NULL || (o->pairs = htable_new(pair_eq)) == NULL) {
        free(o);
        return NULL;
    }
    if (RAND_bytes((unsigned char *)&o->seed, sizeof(o->seed)) != 1)
        o->seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)o;
    pthread_mutex_init(&o->lock, NULL);
    o->expiry_s = expiry_s;
    return o;
}

void outcomes_free(struct outcomes *o)
{
    if (o == NULL)
        return;
    struct entry *e;
    size_t i = 0;
    while ((e = htable_next(o->pairs, &i)) != NULL)
        free(e);
    htable_free(o->pairs);
    pthread_mutex_destroy(&o->lock);
    free(o);
}

static struct entry *find(const struct outcomes *o, const char *from, const char *to)
{
    const struct pair_key k = {from, to};
    return htable_find(o->pairs, pair_hash(o, from, to), &k);
}

static void forget_oldest(struct outcomes *o)
{
    struct entry *oldest = NULL, *e;
    size_t i = 0;
    while ((e = htable_next(o->pairs, &i)) != NULL) {
        if (oldest == NULL || e->touched < oldest->touched)
            oldest = e;
    }
    if (oldest != NULL) {
        const struct pair_key k = {oldest->e.pair.from, oldest->e.pair.to};
        htable_remove(o->pairs, pair_hash(o, k.from, k.to), &k);
        free(oldest);
    }
}

/* The job's own slot, else a free or the oldest one: one job holds one slot
   whatever it reports. */
static void witness_add(struct outcome_witness seen[OUTCOMES_WITNESSES], const char *job,
                        const char *node, uint64_t now)
{
    struct outcome_witness *w = &seen[0];
    for (int i = 0; i < OUTCOMES_WITNESSES; i++) {
        if (seen[i].at != 0 && strcmp(seen[i].job, job) == 0) {
            w = &seen[i];
            break;
        }
        if (seen[i].at < w->at)
            w = &seen[i];
    }
    memcpy(w->job, job, strlen(job) + 1);
    memcpy(w->node, node, strlen(node) + 1);
    w->at = now;
}

/* The pair's entry, made when new (the oldest forgotten when full); NULL
   on ENOMEM.  Under the lock. */
static struct entry *find_or_add(struct outcomes *o, const char *from, const char *to)
{
    struct entry *e = find(o, from, to);
    if (e != NULL)
        return e;
    if (htable_count(o->pairs) >= OUTCOMES_PAIRS_MAX)
        forget_oldest(o);
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    memcpy(e->e.pair.from, from, strlen(from) + 1);
    memcpy(e->e.pair.to, to, strlen(to) + 1);
    if (htable_insert(o->pairs, pair_hash(o, from, to), e) < 0) {
        free(e);
        return NULL;
    }
    return e;
}

void outcomes_record(struct outcomes *o, const char *from, const char *to, enum technique t,
                     bool ok, unsigned setup_ms, uint64_t now, const char *job, const char *node)
{
    if ((int)t <= (int)TECH_NONE || (int)t >= OUTCOMES_TECHNIQUES || strlen(from) >= QCG_NAME_MAX ||
        strlen(to) >= QCG_NAME_MAX || strlen(job) >= QCG_JOB_MAX || strlen(node) >= QCG_NAME_MAX)
        return;
    pthread_mutex_lock(&o->lock);
    struct entry *e = find_or_add(o, from, to);
    if (e == NULL) {
        pthread_mutex_unlock(&o->lock);
        return;
    }
    o->generation++;
    struct outcome_tally *k = &e->e.pair.tech[t];
    if (ok) {
        k->ok++;
        k->last_setup_ms = setup_ms;
        memset(e->e.seen[t], 0, sizeof(e->e.seen[t]));
    } else {
        k->failed++;
        witness_add(e->e.seen[t], job, node, now);
    }
    k->last_ok = ok;
    k->last = now;
    e->touched = now;
    pthread_mutex_unlock(&o->lock);
}

/* Whether the live witnesses hold OUTCOMES_CORROBORATION different jobs
   from as many different nodes (greedy: each new witness must differ from
   every one counted in both). */
static bool corroborated(const struct outcome_witness seen[OUTCOMES_WITNESSES], uint64_t since)
{
    const struct outcome_witness *counted[OUTCOMES_WITNESSES];
    int n = 0;
    for (int i = 0; i < OUTCOMES_WITNESSES && n < OUTCOMES_CORROBORATION; i++) {
        if (seen[i].at == 0 || seen[i].at <= since)
            continue;
        bool distinct = true;
        for (int k = 0; k < n && distinct; k++)
            distinct = strcmp(seen[i].job, counted[k]->job) != 0 &&
                       strcmp(seen[i].node, counted[k]->node) != 0;
        if (distinct)
            counted[n++] = &seen[i];
    }
    return n >= OUTCOMES_CORROBORATION;
}

struct outcome_failing outcomes_failing(struct outcomes *o, const char *from, const char *to,
                                        const char *job, uint64_t now)
{
    struct outcome_failing f = {0, 0};
    uint64_t since = now > o->expiry_s ? now - o->expiry_s : 0;
    pthread_mutex_lock(&o->lock);
    const struct entry *e = find(o, from, to);
    for (int t = TECH_DIRECT; e != NULL && t < OUTCOMES_TECHNIQUES; t++) {
        for (int i = 0; i < OUTCOMES_WITNESSES; i++) {
            if (e->e.seen[t][i].at > since && strcmp(e->e.seen[t][i].job, job) == 0)
                f.own |= TECH_BIT(t);
        }
        if (corroborated(e->e.seen[t], since))
            f.shared |= TECH_BIT(t);
    }
    pthread_mutex_unlock(&o->lock);
    return f;
}

size_t outcomes_snapshot(struct outcomes *o, struct outcome_pair *out, size_t max)
{
    size_t n = 0, i = 0;
    const struct entry *e;
    pthread_mutex_lock(&o->lock);
    while (n < max && (e = htable_next(o->pairs, &i)) != NULL)
        out[n++] = e->e.pair;
    pthread_mutex_unlock(&o->lock);
    return n;
}

void outcomes_each(struct outcomes *o, void (*fn)(void *arg, const struct outcome_entry *e),
                   void *arg)
{
    size_t i = 0;
    const struct entry *e;
    pthread_mutex_lock(&o->lock);
    while ((e = htable_next(o->pairs, &i)) != NULL)
        fn(arg, &e->e);
    pthread_mutex_unlock(&o->lock);
}

/* The latest report about the pair: what its place among the oldest is. */
static uint64_t last_touched(const struct outcome_entry *in)
{
    uint64_t last = 0;
    for (int t = 0; t < OUTCOMES_TECHNIQUES; t++) {
        if (in->pair.tech[t].last > last)
            last = in->pair.tech[t].last;
    }
    return last;
}

int outcomes_restore(struct outcomes *o, const struct outcome_entry *in)
{
    if (!name_valid(in->pair.from) || !name_valid(in->pair.to))
        return -1;
    for (int t = 0; t < OUTCOMES_TECHNIQUES; t++) {
        for (int i = 0; i < OUTCOMES_WITNESSES; i++) {
            const struct outcome_witness *w = &in->seen[t][i];
            if (w->at != 0 && (!job_valid(w->job) || !name_valid(w->node)))
                return -1;
        }
    }
    pthread_mutex_lock(&o->lock);
    struct entry *e = find_or_add(o, in->pair.from, in->pair.to);
    if (e != NULL) {
        e->e = *in;
        e->touched = last_touched(in);
        o->generation++;
    }
    pthread_mutex_unlock(&o->lock);
    return e != NULL ? 0 : -1;
}

uint64_t outcomes_generation(struct outcomes *o)
{
    pthread_mutex_lock(&o->lock);
    uint64_t g = o->generation;
    pthread_mutex_unlock(&o->lock);
    return g;
}
