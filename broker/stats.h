/* The broker's counters: gathered for the stats operation, and printed by
   `qcg-broker --stats` (aligned lines or one JSON object). */
#ifndef BROKER_STATS_H
#define BROKER_STATS_H

#include <stdbool.h>
#include <stdio.h>

struct broker;
struct qcg__statsResponse;

struct stat_counter {
    const char *name;
    unsigned long long value;
};

#define STATS_MAX 16

/* Fills out[] with the current counters; returns how many. */
int stats_collect(struct broker *b, struct stat_counter *out, int max);

/* Prints a stats response, as text or as one JSON object. */
void stats_print(FILE *out, const struct qcg__statsResponse *res, bool json);

#endif
