/* The broker's state; see registry.h. */
#include "registry.h"
#include "outcomes.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmdqueue.h"
#include "htable.h"
#include "jobhash.h"
#include "plan_bridge.h"
#include "plan_traverse6.h"
#include "site_ranges.h"

#define HASH_LEN JOB_HASH_LEN

/* A probe job a cluster started: live until `expiry`, or until its test
   endpoint, on the node the broker chose, withdraws (the prober is done). */
struct probe_slot {
    uint64_t expiry; /* 0 = free */
    char job[QCG_JOB_MAX];
    char cluster[QCG_NAME_MAX], node[QCG_NAME_MAX]; /* where the endpoint runs */
    char caller_node[QCG_NAME_MAX];                 /* who asked; "" from an older frontend */
};

struct cluster {
    struct reg_cluster decl;
    struct htable *nodes; /* name -> struct reg_node */
    struct cmdqueue *queue;
    struct reg_observation observed;                  /* the last probe's; when 0 = none */
    atomic_ullong punches_kept, punches_changed;      /* counted under the read lock */
    struct probe_slot probes[QCG_PROBES_PER_CLUSTER]; /* this cluster's probe jobs */
    unsigned next_node;                               /* round-robin of probe endpoints */
    size_t contacts;                                  /* published in this cluster */
    struct cluster *next_retired;                     /* in registry.retired once dropped */
};

struct job {
    char id[QCG_JOB_MAX];
    unsigned char hash[HASH_LEN]; /* SHA-256(job ":" verifier) */
    size_t contacts;
};

struct contact {
    struct job *job;
    struct cluster *cluster;
    struct reg_node *node;
    int rank;
    int port;
    char address[QCG_ADDR_MAX];
    char other[QCG_NODE_ADDRS - 1][QCG_ADDR_MAX]; /* further addresses, same port */
    int nother;
};

struct contact_key {
    const char *job;
    int rank;
};

struct registry {
    pthread_rwlock_t lock;
    uint64_t epoch;
    uint64_t seed;
    size_t max_contacts;
    size_t max_contacts_per_cluster; /* one cluster's share of them */
    size_t nodes;
    uint64_t contacts_dropped; /* by new incarnations and revoked frontends */
    bool closed;
    struct htable *clusters; /* name -> struct cluster */
    struct htable *jobs;     /* id -> struct job */
    struct htable *contacts; /* (job, rank) -> struct contact */
    /* Clusters dropped (registry_drop_cluster): a poll may still hold their
       queue, closed, so they are freed with the registry. */
    struct cluster *retired;
    /* Observations restored from the state file for clusters not registered
       since the start (name -> struct remembered): adopted when the cluster
       registers, saved again meanwhile. */
    struct htable *remembered;
    uint64_t observed_generation; /* changes with every observation kept */
    /* The last contacts withdrawn, a ring: a report may arrive after its
       target left (batched at two hops, it can be overtaken by a withdraw
       from another node), and still tells what worked between two clusters. */
    struct gone {
        char job[QCG_JOB_MAX];
        int rank;
        char cluster[QCG_NAME_MAX], node[QCG_NAME_MAX];
    } gone[REG_GONE_KEPT];
    unsigned gone_next;
};

struct remembered {
    char name[QCG_NAME_MAX];
    struct reg_observation o;                     /* when 0: none */
    char addrs[REG_FRONTEND_ADDRS][QCG_ADDR_MAX]; /* its frontend's (registry_frontend_restore) */
    int naddrs;
};

/* The entries start with their name, so one comparison serves three tables. */
static bool cluster_eq(const void *entry, const void *key)
{
    return strcmp(((const struct cluster *)entry)->decl.name, key) == 0;
}

static bool remembered_eq(const void *entry, const void *key)
{
    return strcmp(((const struct remembered *)entry)->name, key) == 0;
}

static bool node_eq(const void *entry, const void *key)
{
    return strcmp(((const struct reg_node *)entry)->name, key) == 0;
}

static bool job_eq(const void *entry, const void *key)
{
    return strcmp(((const struct job *)entry)->id, key) == 0;
}

static bool contact_eq(const void *entry, const void *key)
{
    const struct contact *c = entry;
    const struct contact_key *k = key;
    return c->rank == k->rank && strcmp(c->job->id, k->job) == 0;
}

static uint64_t name_hash(const struct registry *r, const char *name)
{
    return htable_hash(name, strlen(name), r->seed);
}

static uint64_t contact_hash(const struct registry *r, const char *job, int rank)
{
    return htable_hash(&rank, sizeof(rank), name_hash(r, job));
}

static void copy_str(char *dst, size_t len, const char *src)
{
    snprintf(dst, len, "%s", src);
}

const char *reg_status_subcode(enum reg_status s)
{
    switch (s) {
    case REG_OK:
        return "";
    case REG_DENIED:
        return "denied";
    case REG_INVALID:
        return "invalid";
    case REG_BUSY:
        return "busy";
    case REG_RETRY:
        return "retry";
    case REG_NOTFOUND:
        return "notfound";
    case REG_FULL:
        return "unavailable";
    }
    return "invalid";
}

struct registry *registry_new(size_t max_contacts, uint64_t epoch)
{
    struct registry *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    if (RAND_bytes((unsigned char *)&r->seed, sizeof(r->seed)) != 1)
        r->seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)r;
    r->epoch = epoch;
    r->max_contacts = max_contacts;
    r->max_contacts_per_cluster = max_contacts / 4 > 0 ? max_contacts / 4 : 1;
    r->clusters = htable_new(cluster_eq);
    r->jobs = htable_new(job_eq);
    r->contacts = htable_new(contact_eq);
    r->remembered = htable_new(remembered_eq);
    if (r->clusters == NULL || r->jobs == NULL || r->contacts == NULL || r->remembered == NULL ||
        pthread_rwlock_init(&r->lock, NULL) != 0) {
        htable_free(r->remembered);
        htable_free(r->clusters);
        htable_free(r->jobs);
        htable_free(r->contacts);
        free(r);
        return NULL;
    }
    return r;
}

void registry_free(struct registry *r)
{
    if (r == NULL)
        return;
    void *e;
    size_t i = 0;
    while ((e = htable_next(r->contacts, &i)))
        free(e);
    i = 0;
    while ((e = htable_next(r->jobs, &i)))
        free(e);
    i = 0;
    while ((e = htable_next(r->clusters, &i))) {
        struct cluster *c = e;
        size_t j = 0;
        void *n;
        while ((n = htable_next(c->nodes, &j)))
            free(n);
        htable_free(c->nodes);
        cmdqueue_free(c->queue);
        free(c);
    }
    while (r->retired != NULL) {
        struct cluster *c = r->retired;
        r->retired = c->next_retired;
        cmdqueue_free(c->queue);
        free(c);
    }
    i = 0;
    while ((e = htable_next(r->remembered, &i)))
        free(e);
    htable_free(r->remembered);
    htable_free(r->contacts);
    htable_free(r->jobs);
    htable_free(r->clusters);
    pthread_rwlock_destroy(&r->lock);
    free(r);
}

uint64_t registry_epoch(const struct registry *r)
{
    return r->epoch;
}

static struct cluster *find_cluster(const struct registry *r, const char *name)
{
    return htable_find(r->clusters, name_hash(r, name), name);
}

/* The registered cluster `name`, or NULL with why saying so. */
static struct cluster *registered(const struct registry *r, const char *name, char *why,
                                  size_t whylen)
{
    struct cluster *c = find_cluster(r, name);
    if (c == NULL)
        snprintf(why, whylen, "cluster %s is not registered", name);
    return c;
}

static struct reg_node *find_node(const struct registry *r, const struct cluster *c,
                                  const char *name)
{
    return htable_find(c->nodes, name_hash(r, name), name);
}

static struct contact *find_contact(const struct registry *r, const char *job, int rank)
{
    struct contact_key k = {job, rank};
    return htable_find(r->contacts, contact_hash(r, job, rank), &k);
}

static void verifier_hash(const char *job, const char *verifier, unsigned char out[HASH_LEN])
{
    if (job_secret_hash(job, verifier, out) < 0)
        /* A digest that cannot be computed must not match anything stored. */
        RAND_bytes(out, HASH_LEN);
}

static bool verifier_matches(const struct job *j, const char *verifier)
{
    unsigned char h[HASH_LEN];
    verifier_hash(j->id, verifier, h);
    return CRYPTO_memcmp(h, j->hash, HASH_LEN) == 0;
}

/* A cluster registering for the first time since the start takes back the
   observation the state file kept of it, unless its declaration no longer
   holds the public address the probe saw. */
static void adopt_remembered(struct registry *r, struct cluster *c)
{
    struct remembered *m = htable_remove(r->remembered, name_hash(r, c->decl.name), c->decl.name);
    if (m == NULL)
        return;
    if (m->o.when != 0 &&
        (m->o.public_addr[0] == '\0' || site_holds_public(&c->decl, m->o.public_addr)))
        c->observed = m->o;
    free(m);
}

/* Whether two declarations name the same frontend addresses. */
static bool same_frontend(const struct reg_cluster *a, const struct reg_cluster *b)
{
    return a->npublic == b->npublic && strcmp(a->from, b->from) == 0 &&
           memcmp(a->public_addr, b->public_addr, sizeof(a->public_addr[0]) * (size_t)a->npublic) ==
               0;
}

enum reg_status registry_register_cluster(struct registry *r, const struct reg_cluster *decl,
                                          char *why, size_t whylen)
{
    enum reg_status st = REG_OK;
    pthread_rwlock_wrlock(&r->lock);
    size_t i = 0;
    struct cluster *c;
    while ((c = htable_next(r->clusters, &i)) != NULL) {
        if (strcmp(c->decl.name, decl->name) != 0 &&
            site_ranges_clash(decl, &c->decl, why, whylen) < 0) {
            st = REG_DENIED;
            goto out;
        }
    }
    c = find_cluster(r, decl->name);
    if (c != NULL) {
        if (!same_frontend(&c->decl, decl))
            r->observed_generation++;
        c->decl = *decl;
        goto out;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL || (c->nodes = htable_new(node_eq)) == NULL ||
        (c->queue = cmdqueue_new(REG_QUEUE_CAPACITY)) == NULL ||
        htable_insert(r->clusters, name_hash(r, decl->name), c) == -1) {
        if (c != NULL) {
            htable_free(c->nodes);
            cmdqueue_free(c->queue);
            free(c);
        }
        snprintf(why, whylen, "out of memory registering cluster %s", decl->name);
        st = REG_FULL;
        goto out;
    }
    c->decl = *decl;
    adopt_remembered(r, c);
    r->observed_generation++; /* its frontend's addresses are saved */
    if (r->closed)
        cmdqueue_close(c->queue);
out:
    pthread_rwlock_unlock(&r->lock);
    return st;
}

static void contact_drop(struct registry *r, struct contact *ct);

/* Every contact of node n (or, n NULL, of cluster c) goes as a withdraw
   does; the count dropped, which is short of them all only when memory
   runs out. */
static size_t contacts_drop(struct registry *r, const struct cluster *c, const struct reg_node *n)
{
    size_t count = 0, i = 0, k = 0;
    struct contact *ct;
#define DROPS(ct) (n != NULL ? (ct)->node == n : (ct)->cluster == c)
    while ((ct = htable_next(r->contacts, &i)) != NULL)
        count += DROPS(ct);
    if (count == 0)
        return 0;
    struct contact **list = malloc(count * sizeof(*list));
    if (list == NULL)
        return 0;
    i = 0;
    while ((ct = htable_next(r->contacts, &i)) != NULL && k < count) {
        if (DROPS(ct))
            list[k++] = ct;
    }
#undef DROPS
    for (size_t j = 0; j < k; j++)
        contact_drop(r, list[j]);
    free(list);
    r->contacts_dropped += k;
    return k;
}

enum reg_status registry_register_node(struct registry *r, const char *cluster,
                                       const struct reg_node *decl, char *why, size_t whylen)
{
    enum reg_status st = REG_OK;
    pthread_rwlock_wrlock(&r->lock);
    struct cluster *c = registered(r, cluster, why, whylen);
    if (c == NULL) {
        st = REG_NOTFOUND;
        goto out;
    }
    /* Every address, each against the ranges of its family. */
    const char *outside = site_holds_node(&c->decl, decl->address) ? NULL : decl->address;
    for (int i = 0; outside == NULL && i < decl->nother; i++) {
        if (!site_holds_node(&c->decl, decl->other[i]))
            outside = decl->other[i];
    }
    if (outside != NULL) {
        char own[QCG_ADDR_MAX + 4] = "none";
        if (c->decl.ranges_implicit && c->decl.nranges > 0)
            addr_range_format(&c->decl.ranges[0], own, sizeof(own));
        if (c->decl.ranges_implicit)
            snprintf(why, whylen,
                     "address %s of node %s is not the frontend's own address (%s): cluster %s "
                     "declares no node ranges (qcg-frontend option addresses)",
                     outside, decl->name, own, cluster);
        else
            snprintf(why, whylen,
                     "address %s of node %s is outside the node ranges cluster %s "
                     "declared (qcg-frontend option addresses)",
                     outside, decl->name, cluster);
        st = REG_DENIED;
        goto out;
    }
    struct reg_node *n = find_node(r, c, decl->name);
    if (n != NULL) {
        char previous[REG_INCARNATION_MAX];
        copy_str(previous, sizeof(previous), n->incarnation);
        if (decl->incarnation[0] != '\0' && previous[0] != '\0' &&
            strcmp(decl->incarnation, previous) != 0) {
            size_t k = contacts_drop(r, NULL, n); /* its helper restarted */
            if (k > 0)
                snprintf(why, whylen,
                         "node %s restarted: %zu contact%s of its old processes "
                         "dropped",
                         decl->name, k, k == 1 ? "" : "s");
        }
        *n = *decl;
        /* An older frontend relays no incarnation: keep the one we know. */
        if (decl->incarnation[0] == '\0')
            copy_str(n->incarnation, sizeof(n->incarnation), previous);
        goto out;
    }
    if (htable_count(c->nodes) >= REG_MAX_NODES_PER_CLUSTER) {
        snprintf(why, whylen, "cluster %s already has %d nodes", cluster,
                 REG_MAX_NODES_PER_CLUSTER);
        st = REG_FULL;
        goto out;
    }
    n = malloc(sizeof(*n));
    if (n == NULL || htable_insert(c->nodes, name_hash(r, decl->name), n) == -1) {
        free(n);
        snprintf(why, whylen, "out of memory registering node %s", decl->name);
        st = REG_FULL;
        goto out;
    }
    *n = *decl;
    r->nodes++;
out:
    pthread_rwlock_unlock(&r->lock);
    return st;
}

static enum reg_status publish_locked(struct registry *r, const struct reg_contact *in,
                                      const char *verifier, char *why, size_t whylen)
{
    struct cluster *c = registered(r, in->cluster, why, whylen);
    if (c == NULL)
        return REG_NOTFOUND;
    struct reg_node *n = find_node(r, c, in->node);
    if (n == NULL) {
        snprintf(why, whylen, "node %s is not registered in cluster %s", in->node, in->cluster);
        return REG_NOTFOUND;
    }
    if (strcmp(n->address, in->address) != 0) {
        snprintf(why, whylen, "address %s is not node %s's registered address %s", in->address,
                 n->name, n->address);
        return REG_DENIED;
    }
    for (int i = 0; i < in->nother; i++) {
        if (!address_among(in->other[i], (const char(*)[QCG_ADDR_MAX])n->other, n->nother)) {
            snprintf(why, whylen, "address %s is not among node %s's registered addresses",
                     in->other[i], n->name);
            return REG_DENIED;
        }
    }
    if (in->port < n->port_low || in->port > n->port_high) {
        snprintf(why, whylen, "port %d is outside node %s's range %d-%d", in->port, n->name,
                 n->port_low, n->port_high);
        return REG_INVALID;
    }

    struct job *j = htable_find(r->jobs, name_hash(r, in->job), in->job);
    if (j != NULL && !verifier_matches(j, verifier)) {
        snprintf(why, whylen, "wrong secret for job %s (its verifier differs)", in->job);
        return REG_DENIED;
    }
    struct contact *old = j != NULL ? find_contact(r, in->job, in->rank) : NULL;
    if (old != NULL) {
        if (old->cluster == c && old->node == n && old->port == in->port &&
            strcmp(old->address, in->address) == 0)
            return REG_OK; /* the same process publishing again */
        snprintf(why, whylen, "rank %d of job %s is already published by %s/%s at %s port %d",
                 in->rank, in->job, old->cluster->decl.name, old->node->name, old->address,
                 old->port);
        return REG_BUSY;
    }
    if (htable_count(r->contacts) >= r->max_contacts) {
        snprintf(why, whylen, "the broker holds its maximum of %zu contacts (max-contacts)",
                 r->max_contacts);
        return REG_FULL;
    }
    if (c->contacts >= r->max_contacts_per_cluster) {
        snprintf(why, whylen,
                 "cluster %s holds its share of %zu contacts already (max-contacts-per-cluster)",
                 c->decl.name, r->max_contacts_per_cluster);
        return REG_FULL;
    }

    struct contact *ct = calloc(1, sizeof(*ct));
    if (ct == NULL)
        goto nomem;
    bool new_job = j == NULL;
    if (new_job) {
        j = calloc(1, sizeof(*j));
        if (j == NULL)
            goto nomem;
        copy_str(j->id, sizeof(j->id), in->job);
        verifier_hash(j->id, verifier, j->hash);
        if (htable_insert(r->jobs, name_hash(r, j->id), j) == -1) {
            free(j);
            goto nomem;
        }
    }
    ct->job = j;
    ct->cluster = c;
    ct->node = n;
    ct->rank = in->rank;
    ct->port = in->port;
    copy_str(ct->address, sizeof(ct->address), in->address);
    memcpy(ct->other, in->other, sizeof(ct->other));
    ct->nother = in->nother;
    if (htable_insert(r->contacts, contact_hash(r, j->id, ct->rank), ct) == -1) {
        if (new_job) {
            htable_remove(r->jobs, name_hash(r, j->id), j->id);
            free(j);
        }
        goto nomem;
    }
    j->contacts++;
    c->contacts++;
    return REG_OK;
nomem:
    free(ct);
    snprintf(why, whylen, "out of memory publishing rank %d of job %s", in->rank, in->job);
    return REG_FULL;
}

enum reg_status registry_publish(struct registry *r, const struct reg_contact *c,
                                 const char *verifier, char *why, size_t whylen)
{
    pthread_rwlock_wrlock(&r->lock);
    enum reg_status st = publish_locked(r, c, verifier, why, whylen);
    pthread_rwlock_unlock(&r->lock);
    return st;
}

static void queue_invalidate(struct registry *r, const char *job, int rank)
{
    struct command cmd;
    memset(&cmd, 0, sizeof(cmd));
    copy_str(cmd.kind, sizeof(cmd.kind), "invalidate");
    copy_str(cmd.job, sizeof(cmd.job), job);
    cmd.rank = rank;
    size_t i = 0;
    struct cluster *c;
    while ((c = htable_next(r->clusters, &i)))
        cmdqueue_push(c->queue, &cmd);
}

/* A probe's test endpoint withdrawing from the node the broker chose ends
   the probe: its slot frees at once rather than when its seconds run out,
   so that an admin may probe again straight away.  Only that contact does:
   the prober's own, or one published elsewhere with the job's verifier, must
   not free a slot whose endpoint may still start and hold a node's
   resources. */
static void probe_slot_release(struct registry *r, const struct contact *ct)
{
    size_t i = 0;
    struct cluster *c;

    if (ct->rank != QCG_PROBE_ENDPOINT_RANK ||
        strncmp(ct->job->id, QCG_PROBE_JOB_PREFIX, QCG_PROBE_JOB_PREFIX_LEN) != 0)
        return;
    while ((c = htable_next(r->clusters, &i)) != NULL) {
        for (int k = 0; k < QCG_PROBES_PER_CLUSTER; k++) {
            struct probe_slot *ps = &c->probes[k];
            if (ps->expiry != 0 && strcmp(ps->job, ct->job->id) == 0 &&
                strcmp(ps->cluster, ct->cluster->decl.name) == 0 &&
                strcmp(ps->node, ct->node->name) == 0) {
                memset(ps, 0, sizeof(*ps));
                return;
            }
        }
    }
}

static enum reg_status withdraw_locked(struct registry *r, const char *cluster, const char *node,
                                       const char *job, const char *verifier, int rank, char *why,
                                       size_t whylen)
{
    struct job *j = htable_find(r->jobs, name_hash(r, job), job);
    struct contact *ct = j != NULL ? find_contact(r, job, rank) : NULL;
    if (ct == NULL) {
        snprintf(why, whylen, "rank %d of job %s is not published", rank, job);
        return REG_NOTFOUND;
    }
    if (!verifier_matches(j, verifier)) {
        snprintf(why, whylen, "wrong secret for job %s (its verifier differs)", job);
        return REG_DENIED;
    }
    if (strcmp(ct->cluster->decl.name, cluster) != 0 ||
        (node != NULL && node[0] != '\0' && strcmp(ct->node->name, node) != 0)) {
        snprintf(why, whylen, "rank %d of job %s belongs to %s/%s, not to %s%s%s", rank, job,
                 ct->cluster->decl.name, ct->node->name, cluster,
                 node != NULL && node[0] != '\0' ? "/" : "", node != NULL ? node : "");
        return REG_DENIED;
    }
    struct gone *g = &r->gone[r->gone_next++ % REG_GONE_KEPT];
    copy_str(g->job, sizeof(g->job), job);
    g->rank = rank;
    copy_str(g->cluster, sizeof(g->cluster), ct->cluster->decl.name);
    copy_str(g->node, sizeof(g->node), ct->node->name);
    contact_drop(r, ct);
    return REG_OK;
}

static const struct gone *find_gone(const struct registry *r, const char *job, int rank)
{
    for (unsigned i = 0; i < REG_GONE_KEPT; i++) {
        const struct gone *g = &r->gone[(r->gone_next - 1 - i) % REG_GONE_KEPT];
        if (g->job[0] != '\0' && g->rank == rank && strcmp(g->job, job) == 0)
            return g;
    }
    return NULL;
}

/* Removes a contact as a withdraw does: its probe slot, the job with its last
   contact, and an invalidate for every cluster. */
static void contact_drop(struct registry *r, struct contact *ct)
{
    struct job *j = ct->job;
    char job[QCG_JOB_MAX];
    int rank = ct->rank;
    copy_str(job, sizeof(job), j->id);
    probe_slot_release(r, ct);
    struct contact_key k = {job, rank};
    htable_remove(r->contacts, contact_hash(r, job, rank), &k);
    ct->cluster->contacts--;
    free(ct);
    if (--j->contacts == 0) {
        htable_remove(r->jobs, name_hash(r, job), job);
        free(j);
    }
    queue_invalidate(r, job, rank);
}

enum reg_status registry_withdraw(struct registry *r, const char *cluster, const char *node,
                                  const char *job, const char *verifier, int rank, char *why,
                                  size_t whylen)
{
    pthread_rwlock_wrlock(&r->lock);
    enum reg_status st = withdraw_locked(r, cluster, node, job, verifier, rank, why, whylen);
    pthread_rwlock_unlock(&r->lock);
    return st;
}

static void plan_end_of(const struct contact *ct, struct plan_end *e)
{
    e->cluster = ct->cluster->decl.name;
    e->kind = ct->cluster->decl.kind;
    e->open_low = ct->cluster->decl.port_low;
    e->open_high = ct->cluster->decl.port_high;
    e->can_intercept = ct->node->can_intercept;
    e->port = ct->port;
    e->node = ct->node->name;
}

static void contact_copy(const struct contact *ct, struct reg_contact *out)
{
    copy_str(out->job, sizeof(out->job), ct->job->id);
    out->rank = ct->rank;
    copy_str(out->cluster, sizeof(out->cluster), ct->cluster->decl.name);
    copy_str(out->node, sizeof(out->node), ct->node->name);
    copy_str(out->address, sizeof(out->address), ct->address);
    out->port = ct->port;
    memcpy(out->other, ct->other, sizeof(out->other));
    out->nother = ct->nother;
}

/* A lookup's checks and the pair's contacts: *to is NULL when to_rank is
   not published. */
static enum reg_status pair_locked(struct registry *r, const char *cluster, const char *job,
                                   const char *verifier, int from_rank, int to_rank,
                                   struct contact **from, struct contact **to, char *why,
                                   size_t whylen)
{
    struct job *j = htable_find(r->jobs, name_hash(r, job), job);
    *from = j != NULL ? find_contact(r, job, from_rank) : NULL;
    *to = NULL;
    /* Checked in this order so that a caller without the verifier learns nothing
       about which ranks exist. */
    if (j == NULL || !verifier_matches(j, verifier)) {
        snprintf(why, whylen, "job %s: no such job or wrong secret", job);
        return REG_DENIED;
    }
    if (*from == NULL || strcmp((*from)->cluster->decl.name, cluster) != 0) {
        snprintf(why, whylen, "rank %d of job %s is not published in cluster %s", from_rank, job,
                 cluster);
        return REG_DENIED;
    }
    *to = find_contact(r, job, to_rank);
    return REG_OK;
}

enum reg_status registry_pair(struct registry *r, const char *cluster, const char *job,
                              const char *verifier, int from_rank, int to_rank,
                              struct reg_lookup *out, char *why, size_t whylen)
{
    struct contact *from, *to;
    memset(out, 0, sizeof(*out));
    pthread_rwlock_rdlock(&r->lock);
    enum reg_status st =
        pair_locked(r, cluster, job, verifier, from_rank, to_rank, &from, &to, why, whylen);
    if (st == REG_OK && to != NULL) {
        out->found = true;
        contact_copy(from, &out->from);
        contact_copy(to, &out->target);
    } else if (st == REG_OK) {
        /* Where the target was, if it just left: a report may come after. */
        const struct gone *g = find_gone(r, job, to_rank);
        if (g != NULL) {
            out->target_gone = true;
            contact_copy(from, &out->from);
            copy_str(out->target.job, sizeof(out->target.job), job);
            out->target.rank = to_rank;
            copy_str(out->target.cluster, sizeof(out->target.cluster), g->cluster);
            copy_str(out->target.node, sizeof(out->target.node), g->node);
        }
    }
    pthread_rwlock_unlock(&r->lock);
    return st;
}

/* ct's first address of family (AF_INET, AF_INET6), or NULL. */
static const char *address_of(const struct contact *ct, int family)
{
    if (address_family(ct->address) == family)
        return ct->address;
    for (int i = 0; i < ct->nother; i++) {
        if (address_family(ct->other[i]) == family)
            return ct->other[i];
    }
    return NULL;
}

/* The family of a direct plan (plan_prefer_v6): where to connect, and the
   IPv4 address behind an IPv6 one. */
static void choose_family(const struct contact *from, const struct contact *to,
                          const struct plan_end *fe, const struct plan_end *te, unsigned tried,
                          enum technique only, const struct plan_offer *o, struct reg_lookup *out)
{
    const char *to6 = address_of(to, AF_INET6), *to4 = address_of(to, AF_INET);
    struct plan_v6 v6 = {.from_has = address_of(from, AF_INET6) != NULL, .to_has = to6 != NULL};
    for (int i = 0; to6 != NULL && i < to->cluster->decl.nopen; i++)
        v6.to_open = v6.to_open || addr_range_contains(&to->cluster->decl.open[i], to6);
    enum plan_family f = plan_prefer_v6(fe, te, &v6, tried, o, only, &out->decision);
    if (f == PLAN_FAMILY_V4)
        return;
    copy_str(out->direct_address, sizeof(out->direct_address), to6);
    /* Only an initiator with an IPv4 address of its own can use the
       fallback; it is also one whose services are of this version (it
       published several addresses), so its frontend reads the field. */
    if (f == PLAN_FAMILY_V6 && to4 != NULL && address_of(from, AF_INET) != NULL)
        copy_str(out->fallback, sizeof(out->fallback), to4);
}

/* The address families of each end's node. */
static struct plan_families pair_families(const struct contact *from, const struct contact *to)
{
    return (struct plan_families){
        .from = plan_families_of(from->address, from->other, from->nother),
        .to = plan_families_of(to->address, to->other, to->nother),
    };
}

/* Traversing over IPv6 instead of what IPv4 needed (plan_prefer_traverse6),
   or for a lookup of traversing alone (only: plan_only_traverse6): the SYN
   leaves from the initiator's IPv6 address, which the address rules
   check as they check an IPv4 inject's source (a node address of its site,
   outside the target's). */
static void choose_traverse6(const struct contact *from, const struct contact *to,
                             const struct plan_end *fe, const struct plan_end *te, unsigned tried,
                             const struct plan_offer *o, bool only, struct reg_lookup *out)
{
    struct plan_families fam = pair_families(from, to);
    const char *from6 = address_of(from, AF_INET6), *to6 = address_of(to, AF_INET6);
    char why[256];
    if (out->direct_address[0] != '\0' || from6 == NULL || to6 == NULL)
        return;
    bool allowed = site_order_address_ok(&from->cluster->decl, &to->cluster->decl, from6, false,
                                         "traversing over IPv6", why, sizeof(why));
    if (only ? !plan_only_traverse6(fe, te, &fam, allowed, &out->decision)
             : !plan_prefer_traverse6(fe, te, &fam, tried, o, allowed, &out->decision))
        return;
    copy_str(out->traverse6, sizeof(out->traverse6), to6);
    copy_str(out->traverse6_from, sizeof(out->traverse6_from), from6);
}

/* Hole punching over IPv6 instead of what IPv4 needed (plan_prefer_punch6). */
static void choose_punch6(const struct contact *from, const struct contact *to,
                          const struct plan_end *fe, const struct plan_end *te, unsigned tried,
                          const struct plan_offer *o, struct reg_lookup *out)
{
    struct plan_families fam = pair_families(from, to);
    if (out->direct_address[0] == '\0' && out->traverse6[0] == '\0')
        out->punch6 = plan_prefer_punch6(fe, te, &fam, tried, o, &out->decision);
}

/* A pair with no address family in common: the proxy's plan, at once
   (plan_bridge.h). */
static bool bridge_locked(const struct contact *from, const struct contact *to,
                          const struct plan_end *fe, const struct plan_end *te, unsigned tried,
                          enum technique only, const struct plan_offer *o, struct reg_lookup *out)
{
    struct plan_families fam = pair_families(from, to);
    if (!plan_bridge(fe, te, &fam, tried, o, only, &out->decision))
        return false;
    out->refused = 0;
    return true;
}

static enum reg_status lookup_locked(struct registry *r, const char *cluster, const char *job,
                                     const char *verifier, int from_rank, int to_rank,
                                     unsigned tried, enum technique only,
                                     const struct plan_offer *offer, struct outcomes *memory,
                                     struct reg_lookup *out, char *why, size_t whylen)
{
    struct contact *from, *to;
    enum reg_status st =
        pair_locked(r, cluster, job, verifier, from_rank, to_rank, &from, &to, why, whylen);
    /* Not published: out->found stays false, the caller retries. */
    if (st != REG_OK || to == NULL)
        return st;

    out->found = true;
    contact_copy(to, &out->target);
    contact_copy(from, &out->from);
    out->from_kind = from->cluster->decl.kind;
    out->target_kind = to->cluster->decl.kind;
    /* A NAT's nodes appear from its first public address, the others from
       their own. */
    if ((out->from_kind == CLUSTER_NAT || out->from_kind == CLUSTER_SYMNAT) &&
        from->cluster->decl.npublic > 0)
        copy_str(out->from_public, sizeof(out->from_public), from->cluster->decl.public_addr[0]);
    else
        copy_str(out->from_public, sizeof(out->from_public), out->from.address);
    struct plan_end fe, te;
    plan_end_of(from, &fe);
    plan_end_of(to, &te);
    struct plan_offer o = *offer;
    /* The address rules: the target's helper connects back to, or injects a
       SYN from, addresses the initiator's site declared, never into the
       target's own LAN. */
    char back_why[256], inject_why[256];
    const char *back = out->from.address;
    if (address_of(to, AF_INET) == NULL && address_of(from, AF_INET6) != NULL)
        back = address_of(from, AF_INET6);
    copy_str(out->back_address, sizeof(out->back_address), back);
    if (!site_order_address_ok(&from->cluster->decl, &to->cluster->decl, out->back_address, false,
                               "reversed", back_why, sizeof(back_why)))
        o.refused[TECH_REVERSED] = back_why;
    if (!site_order_address_ok(&from->cluster->decl, &to->cluster->decl, out->from_public, true,
                               "traversing", inject_why, sizeof(inject_why)))
        o.refused[TECH_TRAVERSING] = inject_why;
    if (bridge_locked(from, to, &fe, &te, tried, only, &o, out))
        return REG_OK;
    if (only != TECH_NONE) {
        plan_only(&fe, &te, only, &o, &out->decision);
        choose_family(from, to, &fe, &te, tried, only, &o, out);
        if (only == TECH_TRAVERSING)
            choose_traverse6(from, to, &fe, &te, tried, &o, true, out);
        struct plan_families fam = pair_families(from, to);
        out->punch6 = plan_only_punch6(&fe, &te, &fam, &o, &out->decision);
        out->refused = out->decision.refused;
        return REG_OK;
    }
    struct outcome_failing f = {0, 0};
    if (memory != NULL)
        f = outcomes_failing(memory, fe.cluster, te.cluster, job, (uint64_t)time(NULL));
    o.remembered = f.own | f.shared;
    plan_decide(&fe, &te, tried, &o, &out->decision);
    /* Other jobs' failures save time; they never leave a job without a
       technique its own attempts have not ruled out. */
    if (!out->decision.ok && (f.shared & ~f.own) != 0) {
        o.remembered = f.own;
        plan_decide(&fe, &te, tried, &o, &out->decision);
    }
    out->refused = out->decision.refused;
    choose_family(from, to, &fe, &te, tried, TECH_NONE, &o, out);
    choose_traverse6(from, to, &fe, &te, tried, &o, false, out);
    choose_punch6(from, to, &fe, &te, tried, &o, out);
    return REG_OK;
}

enum reg_status registry_lookup(struct registry *r, const char *cluster, const char *job,
                                const char *verifier, int from_rank, int to_rank, unsigned tried,
                                enum technique only, const struct plan_offer *offer,
                                struct outcomes *memory, struct reg_lookup *out, char *why,
                                size_t whylen)
{
    memset(out, 0, sizeof(*out));
    pthread_rwlock_rdlock(&r->lock);
    enum reg_status st = lookup_locked(r, cluster, job, verifier, from_rank, to_rank, tried, only,
                                       offer, memory, out, why, whylen);
    pthread_rwlock_unlock(&r->lock);
    return st;
}

/* The live probe slots of `from` that `caller_node` holds. */
static int probes_of_node(const struct cluster *from, const char *caller_node, uint64_t now)
{
    int n = 0;
    for (int i = 0; i < QCG_PROBES_PER_CLUSTER; i++)
        n += from->probes[i].expiry > now && strcmp(from->probes[i].caller_node, caller_node) == 0;
    return n;
}

enum reg_status registry_probe_start(struct registry *r, const char *caller,
                                     const char *caller_node, int per_node, const char *cluster,
                                     const char *job, uint64_t now, uint64_t expiry,
                                     struct reg_node *node, char *why, size_t whylen)
{
    enum reg_status st = REG_OK;
    pthread_rwlock_wrlock(&r->lock);
    struct cluster *from = registered(r, caller, why, whylen);
    struct cluster *to = from != NULL ? registered(r, cluster, why, whylen) : NULL;
    if (to == NULL) {
        st = REG_NOTFOUND;
        goto out;
    }
    size_t count = htable_count(to->nodes);
    if (count == 0) {
        snprintf(why, whylen, "cluster %s has no registered node", cluster);
        st = REG_NOTFOUND;
        goto out;
    }
    int slot = -1;
    for (int i = 0; i < QCG_PROBES_PER_CLUSTER && slot < 0; i++) {
        if (from->probes[i].expiry <= now)
            slot = i;
    }
    if (slot < 0) {
        snprintf(why, whylen,
                 "cluster %s already has %d probe endpoints alive; try again when "
                 "one expires",
                 caller, QCG_PROBES_PER_CLUSTER);
        st = REG_RETRY;
        goto out;
    }
    if (caller_node[0] != '\0' && probes_of_node(from, caller_node, now) >= per_node) {
        snprintf(why, whylen,
                 "node %s of cluster %s already has %d probe endpoints alive "
                 "(probes-per-node); try again when one expires",
                 caller_node, caller, per_node);
        st = REG_RETRY;
        goto out;
    }
    size_t pick = to->next_node++ % count, i = 0;
    const struct reg_node *n = NULL;
    while ((n = htable_next(to->nodes, &i)) != NULL && pick > 0)
        pick--;
    *node = *n;
    struct probe_slot *ps = &from->probes[slot];
    ps->expiry = expiry;
    copy_str(ps->job, sizeof(ps->job), job);
    copy_str(ps->cluster, sizeof(ps->cluster), cluster);
    copy_str(ps->node, sizeof(ps->node), n->name);
    copy_str(ps->caller_node, sizeof(ps->caller_node), caller_node);
out:
    pthread_rwlock_unlock(&r->lock);
    return st;
}

void registry_probe_cancel(struct registry *r, const char *caller, const char *job)
{
    pthread_rwlock_wrlock(&r->lock);
    struct cluster *from = find_cluster(r, caller);
    for (int i = 0; from != NULL && i < QCG_PROBES_PER_CLUSTER; i++) {
        if (from->probes[i].expiry != 0 && strcmp(from->probes[i].job, job) == 0)
            memset(&from->probes[i], 0, sizeof(from->probes[i]));
    }
    pthread_rwlock_unlock(&r->lock);
}

enum reg_status registry_observe(struct registry *r, const char *cluster,
                                 const struct reg_observation *o, struct reg_cluster *decl,
                                 char *why, size_t whylen)
{
    enum reg_status st = REG_OK;
    pthread_rwlock_wrlock(&r->lock);
    struct cluster *c = registered(r, cluster, why, whylen);
    if (c == NULL) {
        st = REG_NOTFOUND;
    } else if (o->public_addr[0] != '\0' && !site_holds_public(&c->decl, o->public_addr)) {
        snprintf(why, whylen,
                 "node %s appears from %s, which is not among the public addresses cluster %s "
                 "declared (misconfiguration, or an address that is not the site's)",
                 o->node, o->public_addr, cluster);
        st = REG_DENIED;
    } else {
        c->observed = *o;
        r->observed_generation++;
        *decl = c->decl;
    }
    pthread_rwlock_unlock(&r->lock);
    return st;
}

static struct remembered *remember(struct registry *r, const char *cluster);

int registry_observation_restore(struct registry *r, const char *cluster,
                                 const struct reg_observation *o)
{
    int rc = 0;
    pthread_rwlock_wrlock(&r->lock);
    struct cluster *c = find_cluster(r, cluster);
    struct remembered *m = htable_find(r->remembered, name_hash(r, cluster), cluster);
    if (c != NULL) {
        if (c->observed.when < o->when)
            c->observed = *o;
    } else if (m != NULL) {
        if (m->o.when < o->when)
            m->o = *o;
    } else if ((m = remember(r, cluster)) == NULL) {
        rc = -1;
    } else {
        m->o = *o;
    }
    if (rc == 0)
        r->observed_generation++;
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

void registry_observations_each(struct registry *r,
                                void (*fn)(void *arg, const char *cluster,
                                           const struct reg_observation *o),
                                void *arg)
{
    pthread_rwlock_rdlock(&r->lock);
    size_t i = 0;
    struct cluster *c;
    while ((c = htable_next(r->clusters, &i)) != NULL)
        if (c->observed.when != 0)
            fn(arg, c->decl.name, &c->observed);
    i = 0;
    struct remembered *m;
    while ((m = htable_next(r->remembered, &i)) != NULL)
        if (m->o.when != 0)
            fn(arg, m->name, &m->o);
    pthread_rwlock_unlock(&r->lock);
}

/* The remembered entry of an unregistered cluster, made when there is none;
   NULL when REG_REMEMBERED_MAX are held or memory runs out.  Called with the
   write lock held. */
static struct remembered *remember(struct registry *r, const char *cluster)
{
    struct remembered *m = htable_find(r->remembered, name_hash(r, cluster), cluster);
    if (m != NULL)
        return m;
    if (htable_count(r->remembered) >= REG_REMEMBERED_MAX || (m = calloc(1, sizeof(*m))) == NULL)
        return NULL;
    copy_str(m->name, sizeof(m->name), cluster);
    if (htable_insert(r->remembered, name_hash(r, cluster), m) == -1) {
        free(m);
        return NULL;
    }
    return m;
}

int registry_frontend_restore(struct registry *r, const char *cluster,
                              const char (*addrs)[QCG_ADDR_MAX], int n)
{
    int rc = 0;
    if (n > REG_FRONTEND_ADDRS)
        n = REG_FRONTEND_ADDRS;
    pthread_rwlock_wrlock(&r->lock);
    if (find_cluster(r, cluster) != NULL) {
        rc = 1;
    } else {
        struct remembered *m = remember(r, cluster);
        if (m == NULL) {
            rc = -1;
        } else {
            for (int i = 0; i < n; i++)
                copy_str(m->addrs[i], sizeof(m->addrs[i]), addrs[i]);
            m->naddrs = n;
            r->observed_generation++;
        }
    }
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

void registry_frontends_each(struct registry *r,
                             void (*fn)(void *arg, const char *cluster,
                                        const char (*addrs)[QCG_ADDR_MAX], int n),
                             void *arg)
{
    char addrs[REG_FRONTEND_ADDRS][QCG_ADDR_MAX];
    pthread_rwlock_rdlock(&r->lock);
    size_t i = 0;
    struct cluster *c;
    while ((c = htable_next(r->clusters, &i)) != NULL) {
        int n = 0;
        for (int k = 0; k < c->decl.npublic; k++)
            copy_str(addrs[n++], sizeof(addrs[0]), c->decl.public_addr[k]);
        bool listed = c->decl.from[0] == '\0';
        for (int k = 0; k < n && !listed; k++)
            listed = strcmp(addrs[k], c->decl.from) == 0;
        if (!listed)
            copy_str(addrs[n++], sizeof(addrs[0]), c->decl.from);
        if (n > 0)
            fn(arg, c->decl.name, (const char(*)[QCG_ADDR_MAX])addrs, n);
    }
    i = 0;
    struct remembered *m;
    while ((m = htable_next(r->remembered, &i)) != NULL)
        if (m->naddrs > 0)
            fn(arg, m->name, (const char(*)[QCG_ADDR_MAX])m->addrs, m->naddrs);
    pthread_rwlock_unlock(&r->lock);
}

uint64_t registry_observed_generation(struct registry *r)
{
    pthread_rwlock_rdlock(&r->lock);
    uint64_t g = r->observed_generation;
    pthread_rwlock_unlock(&r->lock);
    return g;
}

void registry_punch_seen(struct registry *r, const char *cluster, bool port_kept)
{
    pthread_rwlock_rdlock(&r->lock);
    struct cluster *c = find_cluster(r, cluster);
    if (c != NULL)
        atomic_fetch_add(port_kept ? &c->punches_kept : &c->punches_changed, 1);
    pthread_rwlock_unlock(&r->lock);
}

size_t registry_drop_cluster(struct registry *r, const char *name, size_t *nodes)
{
    *nodes = 0;
    pthread_rwlock_wrlock(&r->lock);
    struct cluster *c = find_cluster(r, name);
    size_t k = c != NULL ? contacts_drop(r, c, NULL) : 0;
    if (c == NULL || c->contacts > 0) {
        /* Unknown, or out of memory: a contact left would point to it. */
        pthread_rwlock_unlock(&r->lock);
        return k;
    }
    void *n;
    size_t i = 0;
    while ((n = htable_next(c->nodes, &i)) != NULL) {
        free(n);
        (*nodes)++;
    }
    htable_free(c->nodes);
    c->nodes = NULL;
    r->nodes -= *nodes;
    htable_remove(r->clusters, name_hash(r, name), name);
    cmdqueue_close(c->queue);
    c->next_retired = r->retired;
    r->retired = c;
    pthread_rwlock_unlock(&r->lock);
    return k;
}

/* By name: what people read comes out in a stable order. */
static int view_cmp(const void *a, const void *b)
{
    return strcmp(((const struct reg_cluster_view *)a)->decl.name,
                  ((const struct reg_cluster_view *)b)->decl.name);
}

int registry_clusters(struct registry *r, struct reg_cluster_view **out, size_t *n)
{
    pthread_rwlock_rdlock(&r->lock);
    size_t count = htable_count(r->clusters), k = 0, i = 0;
    struct reg_cluster_view *v = calloc(count > 0 ? count : 1, sizeof(*v));
    struct cluster *c;
    while (v != NULL && (c = htable_next(r->clusters, &i)) != NULL) {
        v[k].decl = c->decl;
        v[k].nodes = htable_count(c->nodes);
        v[k].observed = c->observed;
        v[k].punches_kept = atomic_load(&c->punches_kept);
        v[k].punches_changed = atomic_load(&c->punches_changed);
        k++;
    }
    pthread_rwlock_unlock(&r->lock);
    if (v != NULL)
        qsort(v, k, sizeof(*v), view_cmp);
    *out = v;
    *n = k;
    return v != NULL ? 0 : -1;
}

void registry_set_cluster_share(struct registry *r, size_t max_contacts_per_cluster)
{
    pthread_rwlock_wrlock(&r->lock);
    r->max_contacts_per_cluster = max_contacts_per_cluster > 0 ? max_contacts_per_cluster : 1;
    pthread_rwlock_unlock(&r->lock);
}

struct cmdqueue *registry_queue(struct registry *r, const char *cluster)
{
    pthread_rwlock_rdlock(&r->lock);
    struct cluster *c = find_cluster(r, cluster);
    pthread_rwlock_unlock(&r->lock);
    return c != NULL ? c->queue : NULL;
}

void registry_close(struct registry *r)
{
    pthread_rwlock_wrlock(&r->lock);
    r->closed = true;
    size_t i = 0;
    struct cluster *c;
    while ((c = htable_next(r->clusters, &i)))
        cmdqueue_close(c->queue);
    pthread_rwlock_unlock(&r->lock);
}

void registry_counts(struct registry *r, struct registry_counts *out)
{
    pthread_rwlock_rdlock(&r->lock);
    out->clusters = htable_count(r->clusters);
    out->nodes = r->nodes;
    out->jobs = htable_count(r->jobs);
    out->contacts = htable_count(r->contacts);
    out->contacts_dropped = r->contacts_dropped;
    pthread_rwlock_unlock(&r->lock);
}
