/*
 * The one request the metrics endpoint answers: HTTP/1.x GET (or HEAD)
 * /metrics.  Everything else, from anyone who reaches the port, gets its
 * status code and a short reason; the caller closes after one answer.
 */
#ifndef QCG_METRICS_HTTP_H
#define QCG_METRICS_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#define METRICS_REQUEST_MAX 8192 /* the whole head; longer: 431 */

enum { METRICS_HTTP_MORE = 1 };

/*
 * Reads buf[0..len) as what a client sent so far.  Returns 0 for a whole,
 * valid GET or HEAD of /metrics (*head tells which), METRICS_HTTP_MORE when
 * the head is not complete yet, else the HTTP status to answer (400, 404,
 * 405, 431, 505) with *why a constant sentence.
 */
int metrics_request_parse(const char *buf, size_t len, bool *head, const char **why);

/* The reason phrase of the statuses above and 200, 500, 503. */
const char *metrics_status_text(int status);

#endif
