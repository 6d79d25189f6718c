#include "store.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmdqueue.h"
#include "log.h"
#include "monotonic.h"
#include "strmap.h"

#define WITHDRAWALS_MAX 10000

struct node_rec {
    struct node_info info;
    struct cmdqueue *queue;
    uint64_t seen_ms; /* monotonic: the helper's last poll or registration */
    int expired;      /* its lease ran out: unknown until it registers again */
};

struct store {
    pthread_mutex_t lock;
    struct strmap *nodes;    /* name -> struct node_rec */
    struct strmap *contacts; /* "job:rank" -> struct contact_info */
    struct withdrawal *withdrawals;
    size_t nwithdrawals;
    size_t queue_capacity;
    uint64_t version; /* bumped on every change the broker must hear of */
    uint64_t dropped; /* contacts dropped by a node's new incarnation */
    int link_up;
    char link_reason[256];
};

#define KEY_MAX (QCG_JOB_MAX + 16)

static void contact_key(char *key, size_t len, const char *job, int rank)
{
    snprintf(key, len, "%s:%d", job, rank);
}

struct store *store_new(size_t queue_capacity)
{
    struct store *store = calloc(1, sizeof(*store));
    if (store == NULL)
        return NULL;
    store->nodes = strmap_new();
    store->contacts = strmap_new();
    store->withdrawals = calloc(WITHDRAWALS_MAX, sizeof(*store->withdrawals));
    if (store->nodes == NULL || store->contacts == NULL || store->withdrawals == NULL) {
        strmap_free(store->nodes, NULL);
        strmap_free(store->contacts, NULL);
        free(store->withdrawals);
        free(store);
        return NULL;
    }
    pthread_mutex_init(&store->lock, NULL);
    store->queue_capacity = queue_capacity;
    snprintf(store->link_reason, sizeof(store->link_reason), "not connected yet");
    return store;
}

static void node_rec_free(void *v)
{
    struct node_rec *rec = v;
    cmdqueue_free(rec->queue);
    free(rec);
}

static void contact_free(void *v)
{
    OPENSSL_cleanse(v, sizeof(struct contact_info));
    free(v);
}

void store_free(struct store *store)
{
    if (store == NULL)
        return;
    strmap_free(store->nodes, node_rec_free);
    strmap_free(store->contacts, contact_free);
    OPENSSL_cleanse(store->withdrawals, WITHDRAWALS_MAX * sizeof(*store->withdrawals));
    free(store->withdrawals);
    pthread_mutex_destroy(&store->lock);
    free(store);
}

void store_link_down(struct store *store, const char *reason)
{
    pthread_mutex_lock(&store->lock);
    store->link_up = 0;
    snprintf(store->link_reason, sizeof(store->link_reason), "%s", reason);
    pthread_mutex_unlock(&store->lock);
}

int store_link_up_if(struct store *store, uint64_t version)
{
    pthread_mutex_lock(&store->lock);
    int ok = store->version == version;
    if (ok)
        store->link_up = 1;
    pthread_mutex_unlock(&store->lock);
    return ok;
}

int store_link(struct store *store, char *reason, size_t len)
{
    pthread_mutex_lock(&store->lock);
    int up = store->link_up;
    if (!up && reason != NULL)
        snprintf(reason, len, "%s", store->link_reason);
    pthread_mutex_unlock(&store->lock);
    return up;
}

/* What node_contacts_take collects: the keys of one node's contacts. */
struct node_keys {
    const char *node;
    char (*keys)[KEY_MAX];
    size_t n, max;
};

static void collect_node_key(const char *key, void *value, void *arg)
{
    struct node_keys *k = arg;
    if (k->n < k->max && strcmp(((struct contact_info *)value)->node, k->node) == 0)
        snprintf(k->keys[k->n++], KEY_MAX, "%s", key);
}

/* Removes every contact of `node`; as withdrawals into out (room for every
   contact held) when not NULL.  The count removed.  With the lock held. */
static size_t node_contacts_take(struct store *store, const char *node, struct withdrawal *out)
{
    struct node_keys k = {node, NULL, 0, strmap_count(store->contacts)};
    if (k.max == 0 || (k.keys = malloc(k.max * sizeof(*k.keys))) == NULL)
        return 0;
    strmap_foreach(store->contacts, collect_node_key, &k);
    for (size_t i = 0; i < k.n; i++) {
        struct contact_info *c = strmap_remove(store->contacts, k.keys[i]);
        if (out != NULL) {
            struct withdrawal *w = &out[i];
            snprintf(w->job, sizeof(w->job), "%s", c->job);
            snprintf(w->verifier, sizeof(w->verifier), "%s", c->verifier);
            w->rank = c->rank;
            snprintf(w->node, sizeof(w->node), "%s", c->node);
        }
        contact_free(c);
    }
    free(k.keys);
    if (k.n > 0)
        store->version++;
    return k.n;
}

int store_node_put(struct store *store, const struct node_info *node, int *was_up)
{
    int rc = 0;
    pthread_mutex_lock(&store->lock);
    *was_up = store->link_up;
    struct node_rec *rec = strmap_get(store->nodes, node->name);
    if (rec != NULL) {
        if (node->incarnation[0] != '\0' && rec->info.incarnation[0] != '\0' &&
            strcmp(node->incarnation, rec->info.incarnation) != 0) {
            size_t n = node_contacts_take(store, node->name, NULL);
            store->dropped += n;
            log_info("node %s restarted (a new incarnation): %zu contacts of its old processes "
                     "dropped",
                     node->name, n);
        }
        rec->info = *node;
    } else {
        rec = calloc(1, sizeof(*rec));
        if (rec == NULL || (rec->queue = cmdqueue_new(store->queue_capacity)) == NULL) {
            free(rec);
            rc = -1;
            goto out;
        }
        rec->info = *node;
        if (strmap_put(store->nodes, node->name, rec, NULL) < 0) {
            node_rec_free(rec);
            rc = -1;
            goto out;
        }
    }
    rec->seen_ms = monotonic_ms();
    rec->expired = 0;
    store->version++;
out:
    pthread_mutex_unlock(&store->lock);
    return rc;
}

/* A registered node whose lease has not run out, or NULL.  With the lock. */
static struct node_rec *node_present(struct store *store, const char *name)
{
    struct node_rec *rec = strmap_get(store->nodes, name);
    return rec != NULL && !rec->expired ? rec : NULL;
}

int store_node_get(struct store *store, const char *name, struct node_info *out)
{
    pthread_mutex_lock(&store->lock);
    struct node_rec *rec = node_present(store, name);
    if (rec != NULL)
        *out = rec->info;
    pthread_mutex_unlock(&store->lock);
    return rec != NULL ? 0 : -1;
}

struct cmdqueue *store_node_queue(struct store *store, const char *name)
{
    pthread_mutex_lock(&store->lock);
    struct node_rec *rec = node_present(store, name);
    if (rec != NULL)
        rec->seen_ms = monotonic_ms();
    struct cmdqueue *q = rec != NULL ? rec->queue : NULL;
    pthread_mutex_unlock(&store->lock);
    return q;
}

uint64_t store_node_push(struct store *store, const char *name, const struct command *cmd)
{
    pthread_mutex_lock(&store->lock);
    struct node_rec *rec = node_present(store, name);
    /* Pushed under the lock: the queue never blocks, and the node cannot
       expire in between. */
    uint64_t seq = rec != NULL ? cmdqueue_push(rec->queue, cmd) : 0;
    int err = rec != NULL ? errno : ENOENT;
    pthread_mutex_unlock(&store->lock);
    errno = err;
    return seq;
}

struct expiry {
    uint64_t deadline_ms; /* nodes seen before it expire */
    const char *names[64];
    size_t n;
};

static void find_expired(const char *key, void *value, void *arg)
{
    struct node_rec *rec = value;
    struct expiry *e = arg;
    if (!rec->expired && rec->seen_ms < e->deadline_ms &&
        e->n < sizeof(e->names) / sizeof(e->names[0]))
        e->names[e->n++] = key;
}

size_t store_expire(struct store *store, uint64_t lease_ms, struct withdrawal **out, size_t *nodes)
{
    uint64_t now = monotonic_ms();
    struct expiry e = {now > lease_ms ? now - lease_ms : 0, {NULL}, 0};
    size_t total = 0;
    *out = NULL;
    *nodes = 0;
    pthread_mutex_lock(&store->lock);
    /* At most 64 nodes a call: the next poll turn takes the rest. */
    strmap_foreach(store->nodes, find_expired, &e);
    size_t held = strmap_count(store->contacts);
    if (e.n > 0 && held > 0 && (*out = calloc(held, sizeof(**out))) == NULL)
        e.n = 0; /* out of memory: tried again on the next turn */
    for (size_t i = 0; i < e.n; i++) {
        struct node_rec *rec = strmap_get(store->nodes, e.names[i]);
        total += node_contacts_take(store, e.names[i], *out != NULL ? *out + total : NULL);
        rec->expired = 1;
    }
    store->version += e.n > 0;
    pthread_mutex_unlock(&store->lock);
    *nodes = e.n;
    return total;
}

size_t store_node_drop(struct store *store, const char *name, struct withdrawal **out)
{
    size_t n = 0;
    *out = NULL;
    pthread_mutex_lock(&store->lock);
    struct node_rec *rec = node_present(store, name);
    size_t held = strmap_count(store->contacts);
    if (rec != NULL && (held == 0 || (*out = calloc(held, sizeof(**out))) != NULL)) {
        n = node_contacts_take(store, name, *out);
        rec->expired = 1;
        store->version++;
    }
    pthread_mutex_unlock(&store->lock);
    return n;
}

static void close_queue(const char *key, void *value, void *arg)
{
    (void)key;
    (void)arg;
    cmdqueue_close(((struct node_rec *)value)->queue);
}

void store_close_queues(struct store *store)
{
    pthread_mutex_lock(&store->lock);
    strmap_foreach(store->nodes, close_queue, NULL);
    pthread_mutex_unlock(&store->lock);
}

/* Called with the lock held. */
static void withdrawal_forget(struct store *store, const char *job, int rank)
{
    size_t j = 0;
    for (size_t i = 0; i < store->nwithdrawals; i++) {
        struct withdrawal *w = &store->withdrawals[i];
        if (w->rank == rank && strcmp(w->job, job) == 0)
            continue;
        if (i != j)
            store->withdrawals[j] = *w;
        j++;
    }
    if (j < store->nwithdrawals)
        OPENSSL_cleanse(&store->withdrawals[j],
                        (store->nwithdrawals - j) * sizeof(*store->withdrawals));
    store->nwithdrawals = j;
}

int store_contact_put(struct store *store, const struct contact_info *contact)
{
    char key[KEY_MAX];
    contact_key(key, sizeof(key), contact->job, contact->rank);
    struct contact_info *c = malloc(sizeof(*c));
    if (c == NULL)
        return -1;
    *c = *contact;
    pthread_mutex_lock(&store->lock);
    void *old = NULL;
    int rc = strmap_put(store->contacts, key, c, &old);
    if (rc == 0) {
        if (old != NULL)
            contact_free(old);
        withdrawal_forget(store, contact->job, contact->rank);
        store->version++;
    }
    pthread_mutex_unlock(&store->lock);
    if (rc < 0)
        contact_free(c);
    return rc;
}

int store_contact_get(struct store *store, const char *job, int rank, struct contact_info *out)
{
    char key[KEY_MAX];
    contact_key(key, sizeof(key), job, rank);
    pthread_mutex_lock(&store->lock);
    struct contact_info *c = strmap_get(store->contacts, key);
    if (c != NULL)
        *out = *c;
    pthread_mutex_unlock(&store->lock);
    return c != NULL ? 0 : -1;
}

int store_contact_remove(struct store *store, const char *job, int rank)
{
    char key[KEY_MAX];
    contact_key(key, sizeof(key), job, rank);
    pthread_mutex_lock(&store->lock);
    struct contact_info *c = strmap_remove(store->contacts, key);
    if (c != NULL)
        store->version++;
    pthread_mutex_unlock(&store->lock);
    if (c == NULL)
        return -1;
    contact_free(c);
    return 0;
}

void store_withdrawal_add(struct store *store, const struct withdrawal *w)
{
    pthread_mutex_lock(&store->lock);
    withdrawal_forget(store, w->job, w->rank);
    if (store->nwithdrawals == WITHDRAWALS_MAX) {
        log_warnx("%d withdrawals wait for the broker: forgetting the oldest (job %s rank %d)",
                  WITHDRAWALS_MAX, store->withdrawals[0].job, store->withdrawals[0].rank);
        memmove(&store->withdrawals[0], &store->withdrawals[1],
                (WITHDRAWALS_MAX - 1) * sizeof(*store->withdrawals));
        store->nwithdrawals--;
    }
    store->withdrawals[store->nwithdrawals++] = *w;
    pthread_mutex_unlock(&store->lock);
}

size_t store_withdrawals_take(struct store *store, struct withdrawal **out)
{
    *out = NULL;
    pthread_mutex_lock(&store->lock);
    size_t n = store->nwithdrawals;
    if (n > 0) {
        *out = malloc(n * sizeof(**out));
        if (*out != NULL) {
            memcpy(*out, store->withdrawals, n * sizeof(**out));
            OPENSSL_cleanse(store->withdrawals, n * sizeof(**out));
            store->nwithdrawals = 0;
        } else {
            n = 0;
        }
    }
    pthread_mutex_unlock(&store->lock);
    return n;
}

struct collect {
    void *array;
    size_t n;
    size_t elem;
};

static void collect_node(const char *key, void *value, void *arg)
{
    (void)key;
    struct collect *c = arg;
    const struct node_rec *rec = value;
    /* An expired node is re-sent when its helper registers again. */
    if (!rec->expired)
        ((struct node_info *)c->array)[c->n++] = rec->info;
}

static void collect_contact(const char *key, void *value, void *arg)
{
    (void)key;
    struct collect *c = arg;
    ((struct contact_info *)c->array)[c->n++] = *(struct contact_info *)value;
}

size_t store_nodes(struct store *store, struct node_info **out, uint64_t *version)
{
    struct collect c = {NULL, 0, sizeof(struct node_info)};
    pthread_mutex_lock(&store->lock);
    size_t n = strmap_count(store->nodes);
    if (n > 0 && (c.array = malloc(n * c.elem)) != NULL)
        strmap_foreach(store->nodes, collect_node, &c);
    if (version != NULL)
        *version = store->version;
    pthread_mutex_unlock(&store->lock);
    *out = c.array;
    return c.n;
}

size_t store_contacts(struct store *store, struct contact_info **out)
{
    struct collect c = {NULL, 0, sizeof(struct contact_info)};
    pthread_mutex_lock(&store->lock);
    size_t n = strmap_count(store->contacts);
    if (n > 0 && (c.array = malloc(n * c.elem)) != NULL)
        strmap_foreach(store->contacts, collect_contact, &c);
    pthread_mutex_unlock(&store->lock);
    *out = c.array;
    return c.n;
}

void store_secrets_free(void *array, size_t elem_size, size_t n)
{
    if (array == NULL)
        return;
    OPENSSL_cleanse(array, elem_size * n);
    free(array);
}

size_t store_node_count(struct store *store)
{
    pthread_mutex_lock(&store->lock);
    size_t n = strmap_count(store->nodes);
    pthread_mutex_unlock(&store->lock);
    return n;
}

size_t store_contact_count(struct store *store)
{
    pthread_mutex_lock(&store->lock);
    size_t n = strmap_count(store->contacts);
    pthread_mutex_unlock(&store->lock);
    return n;
}

uint64_t store_contacts_dropped(struct store *store)
{
    pthread_mutex_lock(&store->lock);
    uint64_t n = store->dropped;
    pthread_mutex_unlock(&store->lock);
    return n;
}
