/*
 * What the broker knows: clusters as their frontends declared them (with one
 * command queue each), their nodes, jobs (id -> SHA-256(job ":" verifier)) and
 * contacts ((job, rank) -> cluster, node, address, port).  One struct, one
 * rwlock: lookups take the read lock, changes the write lock.
 *
 * Callers (service.c) check who is calling and validate field syntax before;
 * the registry checks what depends on its state (registered cluster/node,
 * verifier, busy ranks, capacity) and says why in `why` when it refuses.
 */
#ifndef BROKER_REGISTRY_H
#define BROKER_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "address.h"
#include "plan.h"
#include "proto.h"

#define REG_MAX_PUBLIC 8  /* public addresses per cluster */
#define REG_MAX_RANGES 16 /* node address ranges per cluster */
#define REG_MAX_NODES_PER_CLUSTER 65536
#define REG_QUEUE_CAPACITY 1024 /* unacknowledged commands per cluster */
#define REG_REMEMBERED_MAX 4096 /* restored observations of clusters not registered yet */

enum reg_status { REG_OK, REG_DENIED, REG_INVALID, REG_BUSY, REG_RETRY, REG_NOTFOUND, REG_FULL };

struct reg_cluster {
    char name[QCG_NAME_MAX];
    enum cluster_kind kind;
    int npublic;
    char public_addr[REG_MAX_PUBLIC][QCG_ADDR_MAX];
    int port_low, port_high; /* open inbound range, 0-0 = none */
    int nranges;
    struct addr_range ranges[REG_MAX_RANGES]; /* where its nodes' addresses lie */
    bool ranges_implicit;                     /* none declared: the frontend's own address alone */
    int nopen;
    struct addr_range open[REG_MAX_RANGES]; /* node ranges that take inbound connections
                                               whatever `kind` says (IPv6, typically) */
    char from[QCG_ADDR_MAX]; /* the address its registration came from; "" = not said */
};

/* The addresses a cluster's frontend connects from: its public addresses
   and the one its registration came from. */
#define REG_FRONTEND_ADDRS (REG_MAX_PUBLIC + 1)

#define REG_INCARNATION_MAX 33 /* 32 hex characters and the NUL */

struct reg_node {
    char name[QCG_NAME_MAX];
    char address[QCG_ADDR_MAX];
    char other[QCG_NODE_ADDRS - 1][QCG_ADDR_MAX]; /* its further addresses */
    int nother;
    int port_low, port_high;
    bool can_intercept;
    char incarnation[REG_INCARNATION_MAX]; /* the helper's start; "" = unknown (older helper) */
};

struct reg_contact {
    char job[QCG_JOB_MAX];
    int rank;
    char cluster[QCG_NAME_MAX];
    char node[QCG_NAME_MAX];
    char address[QCG_ADDR_MAX];
    int port;
    char other[QCG_NODE_ADDRS - 1][QCG_ADDR_MAX]; /* further addresses, same port */
    int nother;
};

/* Withdrawn contacts remembered for late reports (a ring). */
#define REG_GONE_KEPT 1024
_Static_assert((REG_GONE_KEPT & (REG_GONE_KEPT - 1)) == 0,
               "a power of two: the ring's index wraps");

struct reg_lookup {
    bool found; /* false: toRank not published (plan status notfound) */
    /* registry_pair: not found, but withdrawn lately: target has its job,
       rank, cluster and node, from its contact. */
    bool target_gone;
    struct reg_contact target;
    struct reg_contact from; /* the initiator's contact (a connect-back calls it) */
    enum cluster_kind from_kind, target_kind;
    char from_public[QCG_ADDR_MAX]; /* where the initiator's packets appear from (traversing) */
    struct plan_decision decision;
    /* A direct plan over IPv6 (plan_family): where to connect, and the IPv4
       address to try when IPv6 fails ("" none); both "" for the contact's
       first address as before. */
    char direct_address[QCG_ADDR_MAX];
    char fallback[QCG_ADDR_MAX];
    /* Where a reversed plan's target calls back: the initiator's first
       address, or its IPv6 one when the target has no IPv4 address. */
    char back_address[QCG_ADDR_MAX];
    bool punch6; /* hole punching over IPv6 (plan_prefer_punch6): the IPv6 reflector */
    /* Traversing over IPv6 (plan_prefer_traverse6): the target's IPv6
       address and the initiator's, its SYN's source ("" when not). */
    char traverse6[QCG_ADDR_MAX];
    char traverse6_from[QCG_ADDR_MAX];
    unsigned refused; /* techniques the address rules (site_ranges.h) refused for the pair */
};

/* What a probe (qcg-probe) observed of its site: the last one per cluster. */
struct reg_observation {
    uint64_t when; /* unix seconds; 0 = none */
    char node[QCG_NAME_MAX];
    enum cluster_kind kind;
    char public_addr[QCG_ADDR_MAX]; /* "" when unknown */
    int port_preserving;            /* 1, 0, -1 unknown */
    char mapping[24];               /* none | endpoint-independent | endpoint-dependent | unknown */
    char inbound[16];               /* observed_inbound_valid (core/proto.h) */
};

/* A cluster as the grid picture shows it. */
struct reg_cluster_view {
    struct reg_cluster decl;
    size_t nodes;
    struct reg_observation observed;
    uint64_t punches_kept, punches_changed; /* reflector: PUNCH port kept / changed by a NAT */
};

struct outcomes;

struct registry_counts {
    size_t clusters, nodes, jobs, contacts;
    uint64_t
        contacts_dropped; /* by a node registering with a new incarnation, a revoked frontend */
};

struct registry;
struct cmdqueue;

/* max_contacts: publishes beyond are refused with REG_FULL.  NULL on ENOMEM. */
struct registry *registry_new(size_t max_contacts, uint64_t epoch);
/* One cluster's share of max_contacts (a quarter unless set): a publish
   beyond it is refused (REG_FULL), so that one site cannot fill the broker. */
void registry_set_cluster_share(struct registry *r, size_t max_contacts_per_cluster);
void registry_free(struct registry *r);
uint64_t registry_epoch(const struct registry *r);

/* The qcg:<subcode> for a refusal. */
const char *reg_status_subcode(enum reg_status s);

/* Registers or updates a cluster (its nodes and contacts are kept); REG_DENIED
   when its ranges clash with another cluster's (site_ranges_clash). */
enum reg_status registry_register_cluster(struct registry *r, const struct reg_cluster *c,
                                          char *why, size_t whylen);
/* Registers or updates a node of a registered cluster; REG_DENIED when its
   address lies outside the cluster's node ranges.  A node registered before
   with another incarnation (its helper restarted) loses every contact it
   held, each invalidated as a withdraw does; the same incarnation, or none,
   keeps them. */
enum reg_status registry_register_node(struct registry *r, const char *cluster,
                                       const struct reg_node *n, char *why, size_t whylen);
/* c->cluster and c->node must be registered; c->address must be the node's and
   c->port inside its range.  The first publish of a job stores the verifier's
   hash; the same contact again is OK, another contact for (job, rank) REG_BUSY. */
enum reg_status registry_publish(struct registry *r, const struct reg_contact *c,
                                 const char *verifier, char *why, size_t whylen);
/* Removes (job, rank) when it belongs to `cluster` (and `node`, unless NULL or
   empty), and queues invalidate(job, rank) for every cluster.  The job goes
   with its last contact. */
enum reg_status registry_withdraw(struct registry *r, const char *cluster, const char *node,
                                  const char *job, const char *verifier, int rank, char *why,
                                  size_t whylen);
/* For a caller in `cluster` whose from_rank is published there: the plan to
   reach to_rank, skipping the techniques in `tried` and those `memory` (may
   be NULL) holds as failing between the two clusters (plan_decide).  offer's
   `remembered` is ignored: the memory fills it.  `only` other than TECH_NONE:
   exactly that technique, tried and memory ignored (plan_only). */
enum reg_status registry_lookup(struct registry *r, const char *cluster, const char *job,
                                const char *verifier, int from_rank, int to_rank, unsigned tried,
                                enum technique only, const struct plan_offer *offer,
                                struct outcomes *memory, struct reg_lookup *out, char *why,
                                size_t whylen);

/* A report's pair: the lookup's checks, and both contacts (found); or, the
   target not published, where it was if it was withdrawn lately
   (target_gone, REG_GONE_KEPT remembered).  No plan. */
enum reg_status registry_pair(struct registry *r, const char *cluster, const char *job,
                              const char *verifier, int from_rank, int to_rank,
                              struct reg_lookup *out, char *why, size_t whylen);

/* qcg__probe: reserves one of the QCG_PROBES_PER_CLUSTER probe slots of
   `caller` for `job` until `expiry`, or until the test endpoint (rank
   QCG_PROBE_ENDPOINT_RANK on the chosen node) withdraws (REG_BUSY when all
   are live, or when `caller_node` holds `per_node` of them; "": a caller
   that does not say, bounded by the cluster's slots only), and picks a node
   of `cluster` for it, round-robin (REG_NOTFOUND: no such cluster, or no
   node there). */
enum reg_status registry_probe_start(struct registry *r, const char *caller,
                                     const char *caller_node, int per_node, const char *cluster,
                                     const char *job, uint64_t now, uint64_t expiry,
                                     struct reg_node *node, char *why, size_t whylen);
/* Frees the slot a probe_start took when its order could not be queued. */
void registry_probe_cancel(struct registry *r, const char *caller, const char *job);
/* Keeps the last observation of `cluster` (REG_NOTFOUND when not
   registered, REG_DENIED when its public address is not one the cluster
   declared: site_holds_public); *decl gets the cluster as declared, to
   compare. */
enum reg_status registry_observe(struct registry *r, const char *cluster,
                                 const struct reg_observation *o, struct reg_cluster *decl,
                                 char *why, size_t whylen);
/* An observation the state file kept (a restart): the cluster's, or held
   until the cluster registers, then taken unless its declaration no longer
   holds o's public address; the newer of two wins.  -1 when
   REG_REMEMBERED_MAX unregistered clusters are held already, or no memory. */
int registry_observation_restore(struct registry *r, const char *cluster,
                                 const struct reg_observation *o);
/* fn for every observation held (registered clusters' and restored ones),
   under the read lock: fn must not call the registry. */
void registry_observations_each(struct registry *r,
                                void (*fn)(void *arg, const char *cluster,
                                           const struct reg_observation *o),
                                void *arg);
/* A cluster's frontend addresses the state file kept (a restart): held
   until the cluster registers (its registration's then count), and saved
   again meanwhile.  0; 1 when the cluster is registered (nothing kept); -1
   when REG_REMEMBERED_MAX unregistered clusters are held already, or no
   memory. */
int registry_frontend_restore(struct registry *r, const char *cluster,
                              const char (*addrs)[QCG_ADDR_MAX], int n);
/* fn for every cluster's frontend addresses (registered clusters' and
   restored ones; n >= 1), under the read lock: fn must not call the
   registry.  What the broker counts as known addresses (soap_server_know). */
void registry_frontends_each(struct registry *r,
                             void (*fn)(void *arg, const char *cluster,
                                        const char (*addrs)[QCG_ADDR_MAX], int n),
                             void *arg);
/* Changes whenever an observation or a cluster's frontend addresses are
   kept or restored (the state file is written again when it did). */
uint64_t registry_observed_generation(struct registry *r);
/* The reflector saw a PUNCH from `cluster`: its local port kept or not.
   Unknown clusters are ignored. */
void registry_punch_seen(struct registry *r, const char *cluster, bool port_kept);
/* Every registered cluster, by name: a malloc'ed array in *out (free() it), *n of
   them.  0, or -1 when memory runs out. */
int registry_clusters(struct registry *r, struct reg_cluster_view **out, size_t *n);

/* The command queue of a registered cluster (lives as long as the registry),
   or NULL. */
struct cmdqueue *registry_queue(struct registry *r, const char *cluster);
/* Forgets cluster `name` (its frontend's certificate was revoked): every
   contact it held is dropped as a withdraw does (an invalidate for every
   cluster), its nodes go, its queue is closed (a pending poll returns), and
   it is no longer listed; a registerCluster makes it anew.  The contacts
   dropped; *nodes the nodes. */
size_t registry_drop_cluster(struct registry *r, const char *name, size_t *nodes);
/* Closes every queue so pending polls return at once (shutdown). */
void registry_close(struct registry *r);
void registry_counts(struct registry *r, struct registry_counts *out);

#endif
