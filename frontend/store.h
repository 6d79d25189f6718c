/*
 * What the frontend holds for its cluster: the nodes its helpers registered
 * (each with the queue its helper long-polls), the contacts published through
 * it (with their jobs' verifiers, never a secret; in memory only), the
 * withdrawals the broker has not heard of yet, and whether the link to the
 * broker is up.  Everything here is re-sent to the broker when it restarts or
 * comes back.  Thread-safe.
 */
#ifndef FRONTEND_STORE_H
#define FRONTEND_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "verifier.h"

struct cmdqueue;
struct command;

#define STORE_INCARNATION_MAX 33 /* 32 hex characters and the NUL */

struct node_info {
    char name[QCG_NAME_MAX];
    char address[QCG_ADDR_MAX];
    char other[QCG_NODE_ADDRS - 1][QCG_ADDR_MAX]; /* its further addresses */
    int nother;
    int port_low, port_high;
    int can_intercept;
    char incarnation[STORE_INCARNATION_MAX]; /* its helper's start; "" from an older helper */
};

struct contact_info {
    char job[QCG_JOB_MAX];
    char verifier[QCG_VERIFIER_LEN + 1];
    int rank;
    char node[QCG_NAME_MAX];
    char address[QCG_ADDR_MAX];
    int port;
    char other[QCG_NODE_ADDRS - 1][QCG_ADDR_MAX]; /* further addresses, same port */
    int nother;
};

/* A withdrawal the broker did not acknowledge (it was unreachable). */
struct withdrawal {
    char job[QCG_JOB_MAX];
    char verifier[QCG_VERIFIER_LEN + 1];
    int rank;
    char node[QCG_NAME_MAX];
};

struct store;

/* queue_capacity: commands held per node for its helper (see cmdqueue.h). */
struct store *store_new(size_t queue_capacity);
void store_free(struct store *store);

/* The upstream link.  Down: operations that need the broker fail at once with
   `reason`.  Up only when nothing changed since the snapshot that was
   re-registered (version from store_nodes): returns 1 when set up, 0 when the
   held state changed meanwhile and must be re-sent first. */
void store_link_down(struct store *store, const char *reason);
int store_link_up_if(struct store *store, uint64_t version);
/* 1 when up; 0 and the reason it is down. */
int store_link(struct store *store, char *reason, size_t len);

/* Adds or updates a node, present from now on; *was_up tells whether the
   link was up at that moment (then the caller relays it, else the upstream
   loop will).  A node registered before with another incarnation (its
   helper restarted) loses the contacts held for it: the broker drops them
   too when it hears of the registration.  -1 when out of memory. */
int store_node_put(struct store *store, const struct node_info *node, int *was_up);
/* -1 for an unknown node, or one whose lease ran out (store_expire) and
   that has not registered again. */
int store_node_get(struct store *store, const char *name, struct node_info *out);
/* The node's helper queue, for its helper's poll: the node counts as present
   now.  NULL for an unknown or expired node (its helper then registers
   again and re-publishes).  Queues live as long as the store. */
struct cmdqueue *store_node_queue(struct store *store, const char *name);
/* Queues an order for a present node's helper, without renewing its
   presence; its sequence number, or 0 with errno ENOENT for an unknown or
   expired node, or cmdqueue_push's errno when its queue refused it. */
uint64_t store_node_push(struct store *store, const char *name, const struct command *cmd);
/* The lease: nodes whose helper neither polled nor registered for lease_ms
   become expired, and their contacts move into *out (malloc'd, verifiers
   included: withdraw them upstream, then store_secrets_free).  Returns how
   many contacts; *nodes gets how many nodes expired. */
size_t store_expire(struct store *store, uint64_t lease_ms, struct withdrawal **out, size_t *nodes);
/* Wakes every helper's pending poll for good (shutdown). */
void store_close_queues(struct store *store);
/* The node is gone at once, as if its lease had run out (its helper's
   certificate was revoked): its contacts as withdrawals in *out (free with
   store_secrets_free), their count returned; 0 when it was not there. */
size_t store_node_drop(struct store *store, const char *name, struct withdrawal **out);

/* Adds or replaces (job, rank); forgets a pending withdrawal of it.  -1 when
   out of memory. */
int store_contact_put(struct store *store, const struct contact_info *contact);
int store_contact_get(struct store *store, const char *job, int rank, struct contact_info *out);
/* 0 removed, -1 not held. */
int store_contact_remove(struct store *store, const char *job, int rank);

/* Bounded: the oldest is dropped (with a warning) when full. */
void store_withdrawal_add(struct store *store, const struct withdrawal *w);
/* Moves the pending withdrawals into a malloc'd array (*out, count returned). */
size_t store_withdrawals_take(struct store *store, struct withdrawal **out);

/* Snapshots (malloc'd arrays; NULL and 0 when empty or out of memory).  The
   version identifies the state they were taken from (see store_link_up_if). */
size_t store_nodes(struct store *store, struct node_info **out, uint64_t *version);
size_t store_contacts(struct store *store, struct contact_info **out);
/* Frees a contact or withdrawal snapshot, wiping the verifiers first. */
void store_secrets_free(void *array, size_t elem_size, size_t n);

size_t store_node_count(struct store *store);
/* Contacts dropped so far because their node registered with a new
   incarnation. */
uint64_t store_contacts_dropped(struct store *store);
size_t store_contact_count(struct store *store);

#endif
