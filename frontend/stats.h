/* The frontend's counters, gathered for the stats operation. */
#ifndef FRONTEND_STATS_H
#define FRONTEND_STATS_H

struct frontend;
struct soap_stage_counts;

struct counter_value {
    const char *name;
    unsigned long long value;
};

#define FRONTEND_STATS_MAX 32

/* Fills out[] with the current counters, the SOAP handshake stage's
   (soap_server.h) among them; returns how many. */
int stats_collect(struct frontend *fe, const struct soap_stage_counts *stage,
                  struct counter_value *out, int max);

#endif
