/* The plans the broker issued: a table of (cluster, job) buckets, each a
   list of its plans in order of issue (at most ISSUED_PER_JOB_MAX), a table
   of the plans by (bucket, rank, technique) so that a record or a check
   costs the same whatever the job's size, and a list of the buckets in order
   of use, whose head is checked for expiry on every record so that a quiet
   table empties itself. */
#include "issued.h"

#include <openssl/rand.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dlist.h"
#include "htable.h"
#include "log.h"
#include "monotonic.h"
#include "ratelimit.h"

struct bucket;

struct plan {
    struct dlink link; /* in its bucket, oldest first */
    const struct bucket *bucket;
    int rank;
    enum technique t;
    uint64_t until;
};

struct plan_key {
    const struct bucket *bucket;
    int rank;
    enum technique t;
};

struct owner;

struct bucket {
    struct dlink used;     /* in issued.buckets, least recently used first */
    struct dlink by_owner; /* in its owner's, the same order */
    struct owner *owner;
    char cluster[QCG_NAME_MAX];
    char job[QCG_JOB_MAX];
    struct dlist plans;
    size_t count;
    uint64_t until; /* the latest of its plans' */
};

struct key {
    const char *cluster, *job;
};

/* A cluster's buckets. */
struct owner {
    char cluster[QCG_NAME_MAX];
    struct dlist buckets;
    size_t count;
};

struct issued {
    pthread_mutex_t lock;
    struct htable *table;        /* (cluster, job) -> struct bucket */
    struct htable *owners;       /* cluster -> struct owner */
    struct htable *plans_by_key; /* (bucket, rank, t) -> struct plan */
    struct dlist buckets;
    size_t buckets_max;
    size_t plans;
    uint64_t seed;
    struct ratelimit full_log;
};

static bool bucket_eq(const void *entry, const void *key)
{
    const struct bucket *b = entry;
    const struct key *k = key;
    return strcmp(b->cluster, k->cluster) == 0 && strcmp(b->job, k->job) == 0;
}

static bool plan_eq(const void *entry, const void *key)
{
    const struct plan *p = entry;
    const struct plan_key *k = key;
    return p->bucket == k->bucket && p->rank == k->rank && p->t == k->t;
}

static uint64_t plan_hash(const struct issued *s, const struct plan_key *k)
{
    uint64_t h = htable_hash(&k->bucket, sizeof(k->bucket), s->seed);
    h = htable_hash(&k->rank, sizeof(k->rank), h);
    return htable_hash(&k->t, sizeof(k->t), h);
}

static bool owner_eq(const void *entry, const void *key)
{
    return strcmp(((const struct owner *)entry)->cluster, key) == 0;
}

static uint64_t owner_hash(const struct issued *s, const char *cluster)
{
    return htable_hash(cluster, strlen(cluster), s->seed);
}

static uint64_t key_hash(const struct issued *s, const char *cluster, const char *job)
{
    /* Length-prefixed by the terminating NUL: "a","bc" and "ab","c" differ. */
    return htable_hash(job, strlen(job) + 1, htable_hash(cluster, strlen(cluster) + 1, s->seed));
}

struct issued *issued_new(size_t buckets_max)
{
    struct issued *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->table = htable_new(bucket_eq);
    s->owners = htable_new(owner_eq);
    s->plans_by_key = htable_new(plan_eq);
    if (s->table == NULL || s->owners == NULL || s->plans_by_key == NULL ||
        RAND_bytes((unsigned char *)&s->seed, sizeof(s->seed)) != 1) {
        htable_free(s->table);
        htable_free(s->owners);
        htable_free(s->plans_by_key);
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->lock, NULL);
    s->buckets_max = buckets_max > 0 ? buckets_max : ISSUED_BUCKETS_MAX;
    return s;
}

static void plan_drop(struct issued *s, struct bucket *b, struct plan *p)
{
    struct plan_key k = {b, p->rank, p->t};
    htable_remove(s->plans_by_key, plan_hash(s, &k), &k);
    dlist_remove(&b->plans, &p->link);
    free(p);
    b->count--;
    s->plans--;
}

static void bucket_drop(struct issued *s, struct bucket *b)
{
    htable_remove(s->table, key_hash(s, b->cluster, b->job),
                  &(struct key){.cluster = b->cluster, .job = b->job});
    dlist_remove(&s->buckets, &b->used);
    struct owner *o = b->owner;
    dlist_remove(&o->buckets, &b->by_owner);
    if (--o->count == 0) {
        htable_remove(s->owners, owner_hash(s, o->cluster), o->cluster);
        free(o);
    }
    while (b->plans.head != NULL)
        plan_drop(s, b, dlist_entry(b->plans.head, struct plan, link));
    free(b);
}

void issued_free(struct issued *s)
{
    if (s == NULL)
        return;
    while (s->buckets.head != NULL)
        bucket_drop(s, dlist_entry(s->buckets.head, struct bucket, used));
    htable_free(s->table);
    htable_free(s->owners);
    htable_free(s->plans_by_key);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static struct bucket *find(struct issued *s, const char *cluster, const char *job)
{
    return htable_find(s->table, key_hash(s, cluster, job),
                       &(struct key){.cluster = cluster, .job = job});
}

/* cluster's owner entry, made if needed; NULL on ENOMEM. */
static struct owner *owner_of(struct issued *s, const char *cluster)
{
    struct owner *o = htable_find(s->owners, owner_hash(s, cluster), cluster);
    if (o != NULL)
        return o;
    o = calloc(1, sizeof(*o));
    if (o == NULL)
        return NULL;
    memcpy(o->cluster, cluster, strlen(cluster) + 1);
    if (htable_insert(s->owners, owner_hash(s, cluster), o) < 0) {
        free(o);
        return NULL;
    }
    return o;
}

/* The table is full and `mine` (possibly new, count 0) wants one more: the
   least recently used bucket of the cluster holding the most, mine's own
   when it holds at least as many as any other. */
static struct bucket *victim(struct issued *s, const struct owner *mine)
{
    const struct owner *most = mine, *o;
    size_t it = 0;
    while ((o = htable_next(s->owners, &it)) != NULL)
        if (o->count > most->count)
            most = o;
    if (most->buckets.head == NULL) /* mine, new, and nobody holds any */
        return dlist_entry_or_null(s->buckets.head, struct bucket, used);
    return dlist_entry(most->buckets.head, struct bucket, by_owner);
}

/* The plan for (rank, t) in b, unless expired (then dropped). */
static struct plan *plan_find(struct issued *s, struct bucket *b, int rank, enum technique t,
                              uint64_t now)
{
    struct plan_key k = {b, rank, t};
    struct plan *p = htable_find(s->plans_by_key, plan_hash(s, &k), &k);
    if (p != NULL && p->until <= now) {
        plan_drop(s, b, p);
        return NULL;
    }
    return p;
}

void issued_record(struct issued *s, const char *cluster, const char *job, int rank,
                   enum technique t, uint64_t until, uint64_t now)
{
    if (strlen(cluster) >= QCG_NAME_MAX || strlen(job) >= QCG_JOB_MAX)
        return;
    pthread_mutex_lock(&s->lock);
    /* A quiet table empties itself: the least recently used buckets go
       once all their plans have expired. */
    for (int i = 0; i < 8 && s->buckets.head != NULL; i++) {
        struct bucket *old = dlist_entry(s->buckets.head, struct bucket, used);
        if (old->until > now)
            break;
        bucket_drop(s, old);
    }
    struct bucket *b = find(s, cluster, job);
    if (b == NULL) {
        struct owner *o = owner_of(s, cluster);
        if (o == NULL) {
            pthread_mutex_unlock(&s->lock);
            return;
        }
        o->count++; /* held while a victim is chosen and dropped */
        struct bucket *old = htable_count(s->table) >= s->buckets_max ? victim(s, o) : NULL;
        if (old != NULL) {
            unsigned left_out;
            if (ratelimit_ok(&s->full_log, monotonic_ms(), 60000, &left_out))
                log_warnx("plans of job %s for cluster %s forgotten: %zu (cluster, job) pairs "
                          "held, %zu by %s (%u more not logged)",
                          old->job, old->cluster, s->buckets_max, old->owner->count,
                          old->owner->cluster, left_out);
            bucket_drop(s, old);
        }
        o->count--;
        b = calloc(1, sizeof(*b));
        if (b == NULL || htable_insert(s->table, key_hash(s, cluster, job), b) < 0) {
            free(b);
            if (o->count == 0) {
                htable_remove(s->owners, owner_hash(s, o->cluster), o->cluster);
                free(o);
            }
            pthread_mutex_unlock(&s->lock);
            return;
        }
        memcpy(b->cluster, cluster, strlen(cluster) + 1);
        memcpy(b->job, job, strlen(job) + 1);
        b->owner = o;
        o->count++;
    } else {
        dlist_remove(&s->buckets, &b->used);
        dlist_remove(&b->owner->buckets, &b->by_owner);
    }
    dlist_append(&s->buckets, &b->used);
    dlist_append(&b->owner->buckets, &b->by_owner);
    /* The oldest expired plans go as new ones come (a few at a time). */
    for (int i = 0; i < 8 && b->plans.head != NULL; i++) {
        struct plan *old = dlist_entry(b->plans.head, struct plan, link);
        if (old->until > now)
            break;
        plan_drop(s, b, old);
    }
    struct plan *p = plan_find(s, b, rank, t, now);
    if (p != NULL) {
        dlist_remove(&b->plans, &p->link);
    } else {
        if (b->count >= ISSUED_PER_JOB_MAX)
            plan_drop(s, b, dlist_entry(b->plans.head, struct plan, link));
        p = calloc(1, sizeof(*p));
        struct plan_key k = {b, rank, t};
        if (p == NULL) {
            pthread_mutex_unlock(&s->lock);
            return;
        }
        *p = (struct plan){.bucket = b, .rank = rank, .t = t};
        if (htable_insert(s->plans_by_key, plan_hash(s, &k), p) < 0) {
            free(p);
            pthread_mutex_unlock(&s->lock);
            return;
        }
        b->count++;
        s->plans++;
    }
    if (until > p->until)
        p->until = until;
    if (p->until > b->until)
        b->until = p->until;
    dlist_append(&b->plans, &p->link);
    pthread_mutex_unlock(&s->lock);
}

bool issued_check(struct issued *s, const char *cluster, const char *job, int rank,
                  enum technique t, uint64_t now)
{
    pthread_mutex_lock(&s->lock);
    struct bucket *b = find(s, cluster, job);
    bool ok = b != NULL && plan_find(s, b, rank, t, now) != NULL;
    pthread_mutex_unlock(&s->lock);
    return ok;
}

size_t issued_count(struct issued *s)
{
    pthread_mutex_lock(&s->lock);
    size_t n = s->plans;
    pthread_mutex_unlock(&s->lock);
    return n;
}
