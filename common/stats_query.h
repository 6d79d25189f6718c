/* `--stats` of the daemons: asks a running service for its counters with the
   stats operation and prints them, as aligned lines or one JSON object. */
#ifndef QCG_STATS_QUERY_H
#define QCG_STATS_QUERY_H

#include <stdbool.h>
#include <stdio.h>
#include "soap_server.h"

struct qcg__statsResponse;

/* Calls stats at url with the given certificate; prints to stdout.  Returns
   the exit status: 0, or 1 with one line on stderr starting with program. */
int stats_query(const char *program, const char *url, const struct tls_files *tls, bool json);

void stats_print(FILE *out, const struct qcg__statsResponse *res, bool json);

#endif
