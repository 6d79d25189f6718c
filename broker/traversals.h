/*
 * Traversing plans waiting for their SYN: the broker answers the initiator
 * with a plan and a token, and orders the target's helper only once the
 * initiator's helper hands over the SYN its process sent (qcg__traverse).
 * Each entry is taken at most once, and only before it expires.  Fixed size,
 * one mutex: a traversal is one per connection set up, not per lookup.
 */
#ifndef BROKER_TRAVERSALS_H
#define BROKER_TRAVERSALS_H

#include <pthread.h>
#include <stdint.h>

#include "proto.h"
#include "ratelimit.h"
#include "token.h"

#define TRAVERSALS_MAX 4096
#define TRAVERSAL_LIFETIME 30 /* seconds from the plan to the SYN */
/* What one job, and one initiating cluster, may hold of the table: a storm of
   one job, or of one site, leaves room for the others. */
#define TRAVERSALS_JOB_SHARE (TRAVERSALS_MAX / 4)
#define TRAVERSALS_CLUSTER_SHARE (TRAVERSALS_MAX / 2)

struct traversal {
    unsigned char pair[TOKEN_PAIR_LEN];
    uint64_t expiry; /* unix seconds; 0 = free slot */
    char job[QCG_JOB_MAX];
    int from_rank, target_rank;
    char from_cluster[QCG_NAME_MAX];
    char from_public[QCG_ADDR_MAX]; /* where the initiator's SYN appears from */
    char target_cluster[QCG_NAME_MAX];
    char target_node[QCG_NAME_MAX];
    char target_address[QCG_ADDR_MAX];
    int target_port;
};

struct traversals {
    pthread_mutex_t lock;
    struct ratelimit refused_log;
    uint64_t refused; /* adds refused: table full, or a job's or cluster's share held */
    struct traversal slot[TRAVERSALS_MAX];
};

void traversals_init(struct traversals *t);
void traversals_destroy(struct traversals *t);
/* 0, or -1 when every slot holds an unexpired traversal, or tr's job or
   initiating cluster holds its share (a rate-limited warning says which). */
int traversals_add(struct traversals *t, const struct traversal *tr, uint64_t now);
/* Removes and copies the traversal of `pair`: 0, or -1 when there is none
   (never planned, already taken, or expired). */
int traversals_take(struct traversals *t, const unsigned char pair[TOKEN_PAIR_LEN], uint64_t now,
                    struct traversal *out);
uint64_t traversals_refused(struct traversals *t);

#endif
