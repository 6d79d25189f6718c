/*
 * The proxy's beats: every `interval` seconds it tells the broker (mutual
 * TLS, its own certificate) that it is alive and how loaded it is
 * (qcg__proxyAlive), so that the broker plans pairs only through live
 * proxies, the least loaded first.  Its own thread; a broker that is down or
 * refuses is retried at the next beat, with a log line when that changes.
 */
#ifndef PROXY_ALIVE_H
#define PROXY_ALIVE_H

#include <stddef.h>

#include "soap_server.h"

struct relay;
struct alive;

struct alive_config {
    const char *url; /* the broker, https://HOST:PORT/ */
    struct tls_files tls;
    int interval; /* seconds between beats */
    struct relay *relay;
};

/* Starts the thread (the first beat at once).  NULL with a reason in err. */
struct alive *alive_start(const struct alive_config *cfg, char *err, size_t errlen);
/* Stops the thread (within a call's timeout) and frees it.  NULL is fine. */
void alive_stop(struct alive *a);

#endif
