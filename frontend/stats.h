/* The frontend's counters: gathered for the stats operation, and printed by
   `qcg-frontend --stats` (aligned lines or one JSON object, as the broker). */
#ifndef FRONTEND_STATS_H
#define FRONTEND_STATS_H

#include <stdbool.h>
#include <stdio.h>

struct frontend;
struct frontend_config;
struct qcg__statsResponse;

struct counter_value {
    const char *name;
    unsigned long long value;
};

#define FRONTEND_STATS_MAX 16

/* Fills out[] with the current counters; returns how many. */
int stats_collect(struct frontend *fe, struct counter_value *out, int max);
/* Prints a stats response, as text or as one JSON object. */
void stats_print(FILE *out, const struct qcg__statsResponse *res, bool json);
/* --stats: asks the frontend at cfg->stats_url with cfg's certificate and
   prints the answer; returns the exit status (0, or 1 with a line on stderr). */
int stats_query(const struct frontend_config *cfg);

#endif
