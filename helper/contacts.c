/* Contacts held by this helper.  A node runs a few dozen processes at most,
   so a fixed array searched linearly is the whole data structure. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "contacts.h"
#include "log.h"
#include "qcgconn.h"

#define ORPHANS_MAX 1024

struct entry {
    struct contact c;
    uint64_t owner;
    enum contact_state state;
    int used;
};

struct contacts {
    pthread_mutex_t lock;
    pthread_rwlock_t sync;
    struct entry *entries;
    size_t max;
    struct contact *orphans;
    size_t norphans;
};

struct contacts *contacts_new(size_t max)
{
    struct contacts *cs = calloc(1, sizeof(*cs));
    pthread_rwlockattr_t attr;

    if (cs == NULL)
        return NULL;
    cs->max = max;
    cs->entries = calloc(max, sizeof(*cs->entries));
    cs->orphans = calloc(ORPHANS_MAX, sizeof(*cs->orphans));
    if (cs->entries == NULL || cs->orphans == NULL) {
        free(cs->entries);
        free(cs->orphans);
        free(cs);
        return NULL;
    }
    pthread_mutex_init(&cs->lock, NULL);
    /* A re-publish must not wait behind an endless stream of publishes. */
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&cs->sync, &attr);
    pthread_rwlockattr_destroy(&attr);
    return cs;
}

void contacts_free(struct contacts *cs)
{
    if (cs == NULL)
        return;
    pthread_mutex_destroy(&cs->lock);
    pthread_rwlock_destroy(&cs->sync);
    /* Secrets do not outlive us in freed memory. */
    explicit_bzero(cs->entries, cs->max * sizeof(*cs->entries));
    explicit_bzero(cs->orphans, ORPHANS_MAX * sizeof(*cs->orphans));
    free(cs->entries);
    free(cs->orphans);
    free(cs);
}

static struct entry *find(struct contacts *cs, const char *job, int32_t rank)
{
    for (size_t i = 0; i < cs->max; i++) {
        struct entry *e = &cs->entries[i];
        if (e->used && e->c.rank == rank && strcmp(e->c.job, job) == 0)
            return e;
    }
    return NULL;
}

int contacts_reserve(struct contacts *cs, const struct contact *c, uint64_t owner, pid_t *holder,
                     uid_t *holder_uid)
{
    int rc = 0;

    *holder = 0;
    *holder_uid = 0;
    pthread_mutex_lock(&cs->lock);
    struct entry *e = find(cs, c->job, c->rank);
    if (e != NULL) {
        if (e->owner != owner) {
            *holder = e->state == CONTACT_WITHDRAWING ? 0 : e->c.pid;
            *holder_uid = e->c.uid;
            rc = QCG_EBUSY;
        } else if (e->c.port != c->port) {
            rc = QCG_EINVAL;
        }
        goto out;
    }
    for (size_t i = 0; i < cs->max; i++) {
        if (!cs->entries[i].used) {
            e = &cs->entries[i];
            break;
        }
    }
    if (e == NULL) {
        rc = QCG_ENOMEM;
        goto out;
    }
    e->c = *c;
    e->owner = owner;
    e->state = CONTACT_PENDING;
    e->used = 1;
out:
    pthread_mutex_unlock(&cs->lock);
    return rc;
}

void contacts_set_state(struct contacts *cs, const char *job, int32_t rank, uint64_t owner,
                        enum contact_state state)
{
    pthread_mutex_lock(&cs->lock);
    struct entry *e = find(cs, job, rank);
    if (e != NULL && e->owner == owner)
        e->state = state;
    pthread_mutex_unlock(&cs->lock);
}

int contacts_held(struct contacts *cs, const char *job, int32_t rank, uint64_t owner)
{
    pthread_mutex_lock(&cs->lock);
    struct entry *e = find(cs, job, rank);
    int held = e != NULL && (owner == 0 || e->owner == owner);
    pthread_mutex_unlock(&cs->lock);
    return held;
}

void contacts_remove(struct contacts *cs, const char *job, int32_t rank, uint64_t owner)
{
    pthread_mutex_lock(&cs->lock);
    struct entry *e = find(cs, job, rank);
    if (e != NULL && e->owner == owner)
        explicit_bzero(e, sizeof(*e));
    pthread_mutex_unlock(&cs->lock);
}

int contacts_snapshot(struct contacts *cs, struct contact **out, size_t *n)
{
    pthread_mutex_lock(&cs->lock);
    size_t count = 0;
    for (size_t i = 0; i < cs->max; i++)
        count += cs->entries[i].used && cs->entries[i].state == CONTACT_PUBLISHED;
    *out = calloc(count > 0 ? count : 1, sizeof(**out));
    *n = 0;
    if (*out == NULL) {
        pthread_mutex_unlock(&cs->lock);
        return -1;
    }
    for (size_t i = 0; i < cs->max; i++) {
        const struct entry *e = &cs->entries[i];
        if (e->used && e->state == CONTACT_PUBLISHED)
            (*out)[(*n)++] = e->c;
    }
    pthread_mutex_unlock(&cs->lock);
    return 0;
}

size_t contacts_published(struct contacts *cs)
{
    size_t count = 0;

    pthread_mutex_lock(&cs->lock);
    for (size_t i = 0; i < cs->max; i++)
        count += cs->entries[i].used && cs->entries[i].state == CONTACT_PUBLISHED;
    pthread_mutex_unlock(&cs->lock);
    return count;
}

void contacts_orphan_add(struct contacts *cs, const struct contact *c)
{
    pthread_mutex_lock(&cs->lock);
    if (cs->norphans == ORPHANS_MAX) {
        log_warnx("too many withdrawals waiting for the frontend: dropping job %s rank %d",
                  cs->orphans[0].job, cs->orphans[0].rank);
        memmove(cs->orphans, cs->orphans + 1, (ORPHANS_MAX - 1) * sizeof(*cs->orphans));
        cs->norphans--;
    }
    cs->orphans[cs->norphans++] = *c;
    pthread_mutex_unlock(&cs->lock);
}

int contacts_orphans_take(struct contacts *cs, struct contact **out, size_t *n)
{
    pthread_mutex_lock(&cs->lock);
    *n = 0;
    *out = calloc(cs->norphans > 0 ? cs->norphans : 1, sizeof(**out));
    if (*out == NULL) {
        pthread_mutex_unlock(&cs->lock);
        return -1;
    }
    memcpy(*out, cs->orphans, cs->norphans * sizeof(**out));
    *n = cs->norphans;
    explicit_bzero(cs->orphans, cs->norphans * sizeof(*cs->orphans));
    cs->norphans = 0;
    pthread_mutex_unlock(&cs->lock);
    return 0;
}

void contacts_sync_shared(struct contacts *cs)
{
    pthread_rwlock_rdlock(&cs->sync);
}

void contacts_sync_exclusive(struct contacts *cs)
{
    pthread_rwlock_wrlock(&cs->sync);
}

void contacts_sync_end(struct contacts *cs)
{
    pthread_rwlock_unlock(&cs->sync);
}
