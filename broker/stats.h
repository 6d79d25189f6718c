/* The broker's counters, gathered for the stats operation. */
#ifndef BROKER_STATS_H
#define BROKER_STATS_H

struct broker;

struct stat_counter {
    const char *name;
    unsigned long long value;
};

#define STATS_MAX 48

/* Fills out[] with the current counters; returns how many. */
int stats_collect(struct broker *b, struct stat_counter *out, int max);

#endif
