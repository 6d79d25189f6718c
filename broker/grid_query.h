/* `qcg-broker --grid`: asks a running broker for its picture of the grid
   (the grid operation, with the daemon's own certificate like --stats) and
   prints it: a clusters table and a technique matrix, or one JSON object. */
#ifndef BROKER_GRID_QUERY_H
#define BROKER_GRID_QUERY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "soap_server.h"

struct qcg__gridResponse;

/* Calls grid at url; prints to stdout.  Returns the exit status: 0, or 1
   with one line on stderr starting with program. */
int grid_query(const char *program, const char *url, const struct tls_files *tls, bool json);

/* now: unix seconds the ages are counted to. */
void grid_print(FILE *out, const struct qcg__gridResponse *g, bool json, uint64_t now);

#endif
