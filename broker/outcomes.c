/* Outcome memory: a chained hash of cluster pairs under one mutex.  Plans
   read it on every lookup; the few hundred pairs of a real grid keep chains
   short. */
#include "outcomes.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

#define BUCKETS 1024

struct entry {
    struct entry *next;
    uint64_t touched; /* last report: the oldest goes first when full */
    struct outcome_entry e;
};

struct outcomes {
    pthread_mutex_t lock;
    unsigned expiry_s;
    size_t count;
    uint64_t generation;
    struct entry *bucket[BUCKETS];
};

struct outcomes *outcomes_new(unsigned expiry_s)
{
    struct outcomes *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return NULL;
    pthread_mutex_init(&o->lock, NULL);
    o->expiry_s = expiry_s;
    return o;
}

void outcomes_free(struct outcomes *o)
{
    if (o == NULL)
        return;
    for (size_t i = 0; i < BUCKETS; i++) {
        struct entry *e = o->bucket[i];
        while (e != NULL) {
            struct entry *next = e->next;
            free(e);
            e = next;
        }
    }
    pthread_mutex_destroy(&o->lock);
    free(o);
}

/* FNV-1a over "from\nto". */
static size_t slot(const char *from, const char *to)
{
    uint32_t h = 2166136261u;
    for (const char *p = from; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    h = (h ^ '\n') * 16777619u;
    for (const char *p = to; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return h % BUCKETS;
}

static struct entry *find(struct outcomes *o, const char *from, const char *to)
{
    for (struct entry *e = o->bucket[slot(from, to)]; e != NULL; e = e->next) {
        if (strcmp(e->e.pair.from, from) == 0 && strcmp(e->e.pair.to, to) == 0)
            return e;
    }
    return NULL;
}

static void forget_oldest(struct outcomes *o)
{
    struct entry **oldest = NULL;
    for (size_t i = 0; i < BUCKETS; i++) {
        for (struct entry **pe = &o->bucket[i]; *pe != NULL; pe = &(*pe)->next) {
            if (oldest == NULL || (*pe)->touched < (*oldest)->touched)
                oldest = pe;
        }
    }
    if (oldest != NULL) {
        struct entry *e = *oldest;
        *oldest = e->next;
        free(e);
        o->count--;
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
    if (o->count >= OUTCOMES_PAIRS_MAX)
        forget_oldest(o);
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    memcpy(e->e.pair.from, from, strlen(from) + 1);
    memcpy(e->e.pair.to, to, strlen(to) + 1);
    size_t s = slot(from, to);
    e->next = o->bucket[s];
    o->bucket[s] = e;
    o->count++;
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
    size_t n = 0;
    pthread_mutex_lock(&o->lock);
    for (size_t i = 0; i < BUCKETS && n < max; i++) {
        for (const struct entry *e = o->bucket[i]; e != NULL && n < max; e = e->next)
            out[n++] = e->e.pair;
    }
    pthread_mutex_unlock(&o->lock);
    return n;
}

void outcomes_each(struct outcomes *o, void (*fn)(void *arg, const struct outcome_entry *e),
                   void *arg)
{
    pthread_mutex_lock(&o->lock);
    for (size_t i = 0; i < BUCKETS; i++) {
        for (const struct entry *e = o->bucket[i]; e != NULL; e = e->next)
            fn(arg, &e->e);
    }
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
