/* `qcg-broker --stats`: calls the stats operation of a running broker. */
#ifndef BROKER_STATS_CLIENT_H
#define BROKER_STATS_CLIENT_H

#include "broker_config.h"

/* Prints the counters to stdout; returns the exit status (0, or 1 with a line
   on stderr when the call failed). */
int stats_client_run(const struct broker_config *cfg);

#endif
