/* The frontend's state: one per daemon, shared by the operations (one thread
   per helper connection) and the upstream loop. */
#ifndef FRONTEND_FRONTEND_H
#define FRONTEND_FRONTEND_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "proto.h"
#include "soap_client.h"

struct cache;
struct rates;
struct report_item;
struct reports;
struct frontend_config;
struct soap_pool;
struct soap_server;
struct store;

struct frontend_counters {
    atomic_ullong lookups_received;
    atomic_ullong lookups_from_cache;
    atomic_ullong lookups_forwarded;
    atomic_ullong publishes;
    atomic_ullong withdraws;
    atomic_ullong denied;
    atomic_ullong upstream_epoch; /* the broker's, 0 before the first registration */
    atomic_ullong upstream_registrations;
    atomic_ullong orders_refused;    /* for a node whose queue holds the job's share, or is full */
    atomic_ullong quota_refused;     /* calls refused by a per-node rate (rates.h) */
    atomic_ullong quota_waited;      /* lookups that waited for their turn */
    atomic_ullong contacts_expired;  /* their node's lease ran out (node-lease) */
    atomic_ullong reports_forwarded; /* recorded by the broker */
    atomic_ullong reports_refused;   /* refused by the broker (its log says why) */
    atomic_ullong reports_dropped;   /* queue full, or the broker unreachable */
};

struct frontend {
    const struct frontend_config *cfg;
    const char *cluster; /* cfg->cluster_name */
    uint64_t epoch;      /* ours, for the helpers; chosen at start */
    struct store *store;
    struct cache *cache;
    struct soap_client_config upstream; /* how to reach the broker */
    struct soap_pool *pool;             /* relayed helper calls */
    struct frontend_counters counters;
    struct rates *rates;              /* per-node rates (rates.h) */
    struct reports *reports;          /* the nodes' reports, sent on in batches (report_batch.h) */
    struct soap_server *server;       /* set once it exists: its handshake stage's counts */
    atomic_int broker_single_reports; /* an older broker: no qcg__reports */
    atomic_int broker_single_lookups; /* ... no qcg__lookups */
};

/* Sizes: contexts in the pool of relayed calls, commands held per helper. */
#define FRONTEND_POOL_SIZE 8
#define FRONTEND_HELPER_QUEUE 1000

/* cfg must outlive the frontend.  NULL with a reason in err. */
struct frontend *frontend_new(const struct frontend_config *cfg, char *err, size_t errlen);
/* Stops the reports first (their last batch is sent). */
void frontend_free(struct frontend *fe);
/* reports_send_fn for fe->reports (operations.c). */
void frontend_send_reports(void *fe, const struct report_item *items, int n);

#endif
