/* The broker's state; see broker.h. */
#include "broker.h"
#include "rates.h"
#include "issued.h"
#include "lease.h"
#include "log.h"
#include "monotonic.h"
#include "outcomes.h"
#include "pair_metrics.h"
#include "proxy_live.h"
#include "reflector.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

uint64_t broker_make_epoch(uint64_t now)
{
    uint32_t rnd = 0;
    if (RAND_bytes((unsigned char *)&rnd, sizeof(rnd)) != 1)
        rnd = (uint32_t)clock();
    /* The time keeps epochs increasing across restarts; the random half keeps two
       brokers started in the same second apart. */
    return (now << 32) | rnd | 1;
}

struct broker *broker_new(size_t max_contacts, const char *name, unsigned outcome_expiry,
                          const struct rate limits[RATE_KINDS])
{
    struct broker *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return NULL;
    b->reg = registry_new(max_contacts, broker_make_epoch((uint64_t)time(NULL)));
    b->outcomes = outcomes_new(outcome_expiry);
    b->issued = issued_new(ISSUED_BUCKETS_MAX);
    b->rates = rates_new(limits);
    b->probes_per_node = QCG_PROBES_PER_NODE_DEFAULT;
    b->pair_metrics = pair_metrics_new();
    if (b->reg == NULL || b->outcomes == NULL || b->pair_metrics == NULL || b->issued == NULL ||
        b->rates == NULL || RAND_bytes(b->punch_key.bytes, sizeof(b->punch_key.bytes)) != 1) {
        registry_free(b->reg);
        outcomes_free(b->outcomes);
        issued_free(b->issued);
        rates_free(b->rates);
        pair_metrics_free(b->pair_metrics);
        free(b);
        return NULL;
    }
    traversals_init(&b->traversals);
    snprintf(b->name, sizeof(b->name), "%s", name != NULL ? name : "broker");
    return b;
}

void broker_free(struct broker *b)
{
    if (b == NULL)
        return;
    registry_free(b->reg);
    outcomes_free(b->outcomes);
    issued_free(b->issued);
    rates_free(b->rates);
    pair_metrics_free(b->pair_metrics);
    traversals_destroy(&b->traversals);
    proxies_clear(&b->proxies);
    proxy_live_free(b->proxy_live);
    lease_free(b->lease);
    OPENSSL_cleanse(&b->punch_key, sizeof(b->punch_key));
    free(b);
}

void broker_reflector_observed(void *arg, const struct reflector_observation *o)
{
    struct broker *b = arg;
    /* Only a PUNCH names its cluster and the local port it came from. */
    if (o->cluster == NULL || o->local_port <= 0)
        return;
    registry_punch_seen(b->reg, o->cluster, o->port == o->local_port);
}

static void lease_expired(void *arg, const char *cluster, uint64_t silent_ms)
{
    struct broker *b = arg;
    size_t nodes;
    size_t n = registry_drop_cluster(b->reg, cluster, &nodes);
    log_warnx("cluster %s dropped: its frontend has not polled for %llu s (cluster-lease %u); "
              "%zu node%s, %zu contact%s withdrawn until it registers again",
              cluster, (unsigned long long)(silent_ms / 1000), lease_seconds(b->lease), nodes,
              nodes == 1 ? "" : "s", n, n == 1 ? "" : "s");
}

void broker_sweep_leases(void *broker)
{
    struct broker *b = broker;
    lease_sweep(b->lease, monotonic_ms(), lease_expired, b);
}
