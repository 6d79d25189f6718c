/*
 * The broker's memory of what worked: for each ordered pair of clusters and
 * each technique, how attempts ended (reported by the initiator's side after
 * every attempt, for a plan the broker issued: issued.h).  A failure is held
 * against the technique between the two clusters until the memory expires,
 * and a success by anyone clears it.  Who failed matters
 * (docs/architecture.md, "What the broker learns from reports"): the job
 * that failed skips the technique at once, so a wrong declaration costs it
 * one failed attempt, not one per connection; other jobs skip it only once
 * OUTCOMES_CORROBORATION different jobs from as many different nodes failed,
 * so that one user's reports cannot steer everyone else's plans.
 * Thread-safe; bounded (the oldest pair is forgotten when full; each
 * technique keeps its OUTCOMES_WITNESSES latest failing jobs).
 */
#ifndef BROKER_OUTCOMES_H
#define BROKER_OUTCOMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

#define OUTCOMES_PAIRS_MAX 4096
/* Each technique, and hole punching over IPv6 apart (TECH_PUNCH6). */
#define OUTCOMES_TECHNIQUES TECH_ATTEMPTS
#define OUTCOMES_WITNESSES 4
#define OUTCOMES_CORROBORATION 2

struct outcome_tally {
    uint64_t ok, failed;
    bool last_ok;
    uint64_t last;          /* unix seconds of the last report, 0 = never */
    unsigned last_setup_ms; /* of the last success */
};

/* One ordered cluster pair. */
struct outcome_pair {
    char from[QCG_NAME_MAX], to[QCG_NAME_MAX];
    struct outcome_tally tech[OUTCOMES_TECHNIQUES];
};

/* A job that saw a technique fail, from which node, when (unix seconds; 0: free). */
struct outcome_witness {
    char job[QCG_JOB_MAX];
    char node[QCG_NAME_MAX];
    uint64_t at;
};
/* A pair with the witnesses of each technique's failures since its last success. */
struct outcome_entry {
    struct outcome_pair pair;
    struct outcome_witness seen[OUTCOMES_TECHNIQUES][OUTCOMES_WITNESSES];
};

struct outcomes;

/* expiry_s: how long a failure is held against a technique.  NULL on ENOMEM. */
struct outcomes *outcomes_new(unsigned expiry_s);
void outcomes_free(struct outcomes *o);

/* An attempt of `job`, from node `node` of cluster `from` to cluster `to`. */
void outcomes_record(struct outcomes *o, const char *from, const char *to, enum technique t,
                     bool ok, unsigned setup_ms, uint64_t now, const char *job, const char *node);

/* The techniques (TECH_BIT) that failed from `from` to `to` less than the
   expiry ago with no success since: `own` those that failed for `job`
   itself, `shared` those that failed for OUTCOMES_CORROBORATION jobs from
   as many nodes (whether or not `job` is one of them). */
struct outcome_failing {
    unsigned own, shared;
};
struct outcome_failing outcomes_failing(struct outcomes *o, const char *from, const char *to,
                                        const char *job, uint64_t now);
/* Calls fn for every pair, under the lock (fn must not call back), for the
   state file. */
void outcomes_each(struct outcomes *o, void (*fn)(void *arg, const struct outcome_entry *e),
                   void *arg);
/* Puts back a pair as outcomes_each gave it (a restart): replaces what is
   known of it.  0, or -1 when the names are not valid or memory is short. */
int outcomes_restore(struct outcomes *o, const struct outcome_entry *e);
/* Changes on every outcomes_record and outcomes_restore: the state file is
   written again only when it moved. */
uint64_t outcomes_generation(struct outcomes *o);
/* Copies up to max pairs (in no particular order); returns how many. */
size_t outcomes_snapshot(struct outcomes *o, struct outcome_pair *out, size_t max);

#endif
