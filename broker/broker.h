/* The broker daemon's state: what the SOAP operations reach through
   soap_server_state().  One struct per broker; tests make as many as they like. */
#ifndef BROKER_BROKER_H
#define BROKER_BROKER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "proto.h"
#include "proxies.h"
#include "ratelimit.h"
#include "rates.h"
#include "registry.h"
#include "traversals.h"

struct issued;
struct lease;
struct outcomes;
struct pair_metrics;
struct proxy_live;
struct reflector_client;
struct reflector_observation;

struct broker_stats {
    atomic_ullong lookups;
    atomic_ullong
        lookup_calls; /* lookup and lookups calls: lookups / lookup_calls is the batching */
    atomic_ullong publishes;
    atomic_ullong withdraws;
    atomic_ullong polls;
    atomic_ullong faults;      /* every refused call */
    atomic_ullong connections; /* connections that made at least one call */
    atomic_ullong plans_reversed;
    atomic_ullong plans_proxy;
    atomic_ullong plans_traversing;
    atomic_ullong plans_holepunch;
    atomic_ullong injects_ordered; /* SYNs handed over and sent to the target */
    atomic_ullong reports_ok;
    atomic_ullong reports_failed;
    atomic_ullong reports_refused;   /* for no plan this broker issued */
    atomic_ullong probes_started;    /* qcg__probe: test endpoints ordered */
    atomic_ullong observations;      /* qcg__observed */
    atomic_ullong orders_refused;    /* a job's share of a cluster's queue, or a full queue */
    atomic_ullong quota_refused;     /* calls over a cluster's rate */
    atomic_ullong addresses_refused; /* nodes, declarations, observations outside the site's */
    atomic_ullong targets_refused;   /* connect-backs and injects the address rules refused */
    atomic_ullong proxy_beats;       /* qcg__proxyAlive calls taken */
};

struct soap_server;

struct broker {
    struct registry *reg;
    struct soap_server *server; /* set once it exists: its handshake stage's counts */
    struct broker_stats stats;
    char name[2 * QCG_NAME_MAX];       /* our certificate's CN, reported by stats */
    struct proxies proxies;            /* set once before serving */
    struct proxy_live *proxy_live;     /* their beats; NULL until set (no proxy usable) */
    struct outcomes *outcomes;         /* what worked between clusters */
    struct pair_metrics *pair_metrics; /* the same, counted for the metrics endpoint */
    struct issued *issued;             /* the plans reports may answer */
    struct traversals traversals;
    struct proxy_key punch_key; /* signs hole-punching and traversing tokens; random per start */
    struct reflector_client *reflector; /* NULL: none configured; hole punching while up */
    char reflector_host[QCG_ADDR_MAX];
    char reflector6_host[QCG_ADDR_MAX]; /* "": hole punching over IPv4 only */
    int reflector_port;
    struct rates *rates; /* per cluster: lookups, reports, probes (rates.h) */
    struct lease *lease; /* NULL: none (clusters stay while the broker runs) */
    int probes_per_node; /* live probe endpoints of one calling node (probes-per-node) */
    /* The rate limit of refusals a caller may repeat at will (service.c). */
};

/* A broker with a fresh epoch (start time and random bits) and a fresh
   punch key; outcome_expiry: seconds a failed technique is avoided between
   two clusters.  NULL on ENOMEM. */
/* limits: each cluster's rates of lookups, reports and probes (rates.h). */
struct broker *broker_new(size_t max_contacts, const char *name, unsigned outcome_expiry,
                          const struct rate limits[RATE_KINDS]);
void broker_free(struct broker *b);

/* The reflector's observe callback (arg = the broker): tallies, per cluster,
   the punches whose observed port was the local one and those a NAT
   changed, for the grid picture.  Thread-safe. */
void broker_reflector_observed(void *arg, const struct reflector_observation *o);

/* For a ticker: drops the clusters whose lease ran out (lease.h). */
void broker_sweep_leases(void *broker);

/* The epoch for a broker started at `now`: never 0, differs between restarts. */
uint64_t broker_make_epoch(uint64_t now);

#endif
