/*
 * The broker's decision of how process A reaches process B (docs/architecture.md,
 * "Plans"): a pure function of what the two frontends declared about their
 * clusters and of the two contacts.  No locks, no allocation, no logging.
 */
#ifndef BROKER_PLAN_H
#define BROKER_PLAN_H

#include <stdbool.h>
#include "proto.h"

/* One end of a connection: its cluster as declared, and its contact. */
struct plan_end {
    const char *cluster;
    enum cluster_kind kind;
    int open_low, open_high; /* the cluster's open inbound port range, 0-0 = none */
    bool can_intercept;      /* the contact's node helper can intercept/inject */
    int port;                /* the contact's listening port */
};

struct plan_decision {
    bool ok;                  /* false: status "unavailable" in this version */
    enum technique technique; /* the technique used, or the one that would be needed */
    bool cacheable;
    char reason[400]; /* a sentence naming the clusters and their kinds */
};

/* Decides how `from` (the initiator) reaches `to`; always fills *d. */
void plan_decide(const struct plan_end *from, const struct plan_end *to, struct plan_decision *d);

#endif
