/* The broker's counters, gathered for the stats operation. */
#ifndef BROKER_STATS_H
#define BROKER_STATS_H

struct broker;
struct soap_stage_counts;

struct stat_counter {
    const char *name;
    unsigned long long value;
};

#define STATS_MAX 48

/* Fills out[] with the current counters, the SOAP handshake stage's
   (soap_server.h) among them; returns how many. */
int stats_collect(struct broker *b, const struct soap_stage_counts *stage, struct stat_counter *out,
                  int max);

#endif
