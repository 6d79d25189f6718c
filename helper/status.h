/* `qcg-helper --status`: asks a running helper for its state over its socket. */
#ifndef QCG_HELPER_STATUS_H
#define QCG_HELPER_STATUS_H

#include <stdbool.h>
#include <stdio.h>

/* Prints the state (aligned lines, or one JSON object) to out.  Returns the
   exit status: 0, or 1 with one line on err when no helper answers. */
int helper_status(const char *socket_path, bool json, FILE *out, FILE *err);

#endif
