/*
 * The broker's memory of what worked: for each ordered pair of clusters and
 * each technique, how attempts ended (reported by the initiator's side after
 * every attempt).  A technique whose last attempt between two clusters failed
 * is skipped for the next plans between them until the memory expires, so a
 * wrong declaration costs one failed attempt, not one per connection; a
 * success clears it.  Thread-safe; bounded (the oldest pair is forgotten when
 * full).
 */
#ifndef BROKER_OUTCOMES_H
#define BROKER_OUTCOMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

#define OUTCOMES_PAIRS_MAX 4096
#define OUTCOMES_TECHNIQUES (TECH_PROXY + 1)

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

struct outcomes;

/* expiry_s: how long a failure is held against a technique.  NULL on ENOMEM. */
struct outcomes *outcomes_new(unsigned expiry_s);
void outcomes_free(struct outcomes *o);

void outcomes_record(struct outcomes *o, const char *from, const char *to, enum technique t,
                     bool ok, unsigned setup_ms, uint64_t now);
/* The techniques (TECH_BIT) whose last attempt from `from` to `to` failed
   less than the expiry ago. */
unsigned outcomes_failing(struct outcomes *o, const char *from, const char *to, uint64_t now);
/* Copies up to max pairs (in no particular order); returns how many. */
size_t outcomes_snapshot(struct outcomes *o, struct outcome_pair *out, size_t max);

#endif
