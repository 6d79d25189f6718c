/*
 * The metrics endpoint of a daemon: HTTP GET /metrics in the Prometheus text
 * format, on its own thread, off unless `metrics-listen ADDR:PORT` is set.
 * Bound to a loopback address it answers anyone there; on any other address
 * it refuses to start without `metrics-allow` (the ranges that may scrape)
 * or `metrics-tls` (HTTPS with the daemon's own certificate, and only
 * clients with a certificate of the grid CA for the role "monitor":
 * `qcg-certs issue monitor NAME`): the counters tell who uses the grid and
 * how.  Like every public port it runs on the event engine (engine.h, one
 * libuv loop on the endpoint's thread): a cap of connections per source
 * address and in all (a newcomer is refused when full, nobody is cut for
 * it), a deadline to send the request and one to read the answer, refusals
 * logged at most once a second.  The TLS handshake and the HTTP exchange
 * are the endpoint's own, non-blocking on the watched socket.
 */
#ifndef QCG_METRICS_SERVER_H
#define QCG_METRICS_SERVER_H

#include <stddef.h>

#include "config.h"
#include "metrics_text.h"

/* The three settings, for a daemon's option table (its struct has the
   fields char *metrics_listen, *metrics_allow and int metrics_tls). */
// clang-format off
#define METRICS_CONFIG_OPTIONS(type)                                                        \
    {"metrics-listen", CONFIG_STRING, offsetof(type, metrics_listen), 0, 0, NULL,           \
     "ADDR:PORT or [IPv6]:PORT to serve Prometheus metrics on (GET /metrics); off unless "  \
     "set; "                                                                                \
     "a non-loopback address needs metrics-allow"},                                         \
    {"metrics-allow", CONFIG_STRING, offsetof(type, metrics_allow), 0, 0, NULL,             \
     "comma-separated addresses or CIDR ranges that may scrape metrics-listen "             \
     "(default: anyone, which only a loopback metrics-listen or metrics-tls allows)"},      \
    {"metrics-tls", CONFIG_BOOL, offsetof(type, metrics_tls), 0, 0, "no",                   \
     "serve metrics-listen over TLS with this daemon's ca, cert and crl, to clients "       \
     "with a grid certificate of role monitor only (qcg-certs issue monitor NAME)"}
// clang-format on

/* Writes the daemon's own families; called on the server's thread. */
typedef void (*metrics_render_fn)(void *arg, struct metrics_buf *b);

struct tls_files;

/* The role a scraper's certificate must have over TLS (its OU). */
#define METRICS_TLS_ROLE "monitor"

struct metrics_server_config {
    const char *listen;          /* ADDR:PORT, [V6]:PORT */
    const struct tls_files *tls; /* non-NULL: HTTPS, clients need a monitor certificate */
    const char *allow;           /* NULL: anyone (loopback only) */
    const char *daemon;          /* "broker", ...: the build info's label */
    metrics_render_fn render;
    void *arg;
    int max_connections; /* 0: 32 */
    int per_address;     /* 0: 4 */
    int timeout_ms;      /* to send the request, and to read the answer; 0: 5000 */
};

struct metrics_server;

/* Binds and starts the thread; NULL with one line in err (a bad address, a
   non-loopback address without allow or tls, a port taken, certificates
   that do not load). */
struct metrics_server *metrics_server_start(const struct metrics_server_config *cfg, char *err,
                                            size_t errlen);
/* The port bound (for listen ports of 0, in tests). */
int metrics_server_port(const struct metrics_server *s);
/* Stops the thread, closes every connection; NULL is fine. */
void metrics_server_stop(struct metrics_server *s);

/* Starts the endpoint when listen is set: 0 (also when not set), or -1 with
   "PROGRAM: metrics-listen ...: why" in err. */
int metrics_start_if(const char *program, const struct metrics_server_config *cfg,
                     struct metrics_server **out, char *err, size_t errlen);

#endif
