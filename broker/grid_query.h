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
struct qcg__gridCluster;
struct qcg__outcome;

/* Calls grid at url; prints to stdout, or with html (a path, "-" for
   stdout) writes the page of grid_html.h there.  Returns the exit status: 0,
   or 1 with one line on stderr starting with program. */
int grid_query(const char *program, const char *url, const struct tls_files *tls, bool json,
               const char *html);

/* The observation contradicts the declaration: another kind, or (behind a
   NAT) a public address the frontend does not declare. */
bool grid_cluster_mismatch(const struct qcg__gridCluster *c);

/* Whether outcome o worked more recently than best (NULL: o if it worked).
   Ages are whole seconds: a tie goes to the technique the broker prefers
   (technique.h's order), so that the picture does not change from one
   look to the next. */
bool grid_newer_ok(const struct qcg__outcome *o, const struct qcg__outcome *best);

/* now: unix seconds the ages are counted to. */
void grid_print(FILE *out, const struct qcg__gridResponse *g, bool json, uint64_t now);

#endif
