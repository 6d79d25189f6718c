/*
 * A mutual-TLS gSOAP server with the limits of docs/design.md (gSOAP): one
 * thread per connection up to a cap, timeouts, size limits, and the WSDL
 * generated from qcg_service.h (embedded at build time) served at GET /?wsdl.  Only
 * certificates issued by the grid CA are accepted (no system CAs); the caller's
 * identity is read once per connection and handed to the operations.
 */
#ifndef QCG_SOAP_SERVER_H
#define QCG_SOAP_SERVER_H

#include "served.h"
#include <stdbool.h>
#include <stddef.h>
#include "identity.h"

struct soap;

struct tls_files {
    const char *ca;      /* the grid CA certificate (PEM) */
    const char *certkey; /* this service's certificate chain and key in one PEM */
    const char *crl;     /* optional: the grid's revocation list (PEM; crl.h) */
};

/* Connections are taken at once, whatever their number; until its TLS
   handshake is done and its certificate names a qcg role, a connection is
   in the handshake stage, which holds at most max_handshakes, at most
   handshakes_per_address from one address, each for at most handshake_ms
   (first byte included): an idle or slow client costs one stage slot for a
   few seconds, never a slot of authenticated work.  A full stage makes
   room for a newcomer: the oldest handshake of the address holding the
   most gives way when that is 2 more than the newcomer's address holds,
   else the oldest one once it has waited a fifth of handshake_ms; else
   the newcomer is closed.  A newcomer from a known address (one some
   client was authenticated from, or one the daemon named with
   soap_server_know) first takes the place of the oldest handshake from an
   address not known, at once.  Authenticated, it is
   served if fewer than max_connections are (at most max_per_identity of
   them by one certificate); else it waits for a slot (up to
   SOAP_SERVER_SLOT_WAIT_S) and is then closed.  Refusals are logged at most
   once a second with their count.  0 = the default. */
#define SOAP_SERVER_MAX_CONNECTIONS 1024
#define SOAP_SERVER_MAX_PER_IDENTITY 160
#define SOAP_SERVER_MAX_HANDSHAKES 256
#define SOAP_SERVER_HANDSHAKES_PER_ADDRESS 16
#define SOAP_SERVER_HANDSHAKE_MS 5000
#define SOAP_SERVER_SLOT_WAIT_S 20
/* An address is its group (source_group.h): IPv6 cut to this prefix. */
#define SOAP_SERVER_IPV6_PREFIX 64

struct soap_server_config {
    const char *listen_addr; /* NULL or "" = any */
    int port;
    struct tls_files tls;
    int max_connections;        /* authenticated connections served at once */
    int max_per_identity;       /* of those, by one certificate */
    int max_handshakes;         /* connections in the handshake stage */
    int handshakes_per_address; /* per address group (an IPv6 /ipv6_prefix) */
    int handshake_ms;
    int ipv6_prefix;
    enum served_role role; /* which operations it performs (served.h), and its ?wsdl */
    void *user;            /* the daemon's state, for the operations */
};

struct soap_server;

/* Binds and sets up TLS; NULL with a one-line reason in err on failure. */
struct soap_server *soap_server_new(const struct soap_server_config *cfg, char *err, size_t errlen);
/* Accepts and serves until soap_server_stop; returns 0, or -1 on a fatal error. */
int soap_server_run(struct soap_server *srv);
/* Async-signal-safe: the accept loop notices within a second; then run() calls
   the on_stop hook, shuts open connections down and waits (bounded, ~15 s) for
   their threads. */
void soap_server_stop(struct soap_server *srv);
/* Optional: called by run() in its own thread once it stops accepting, before
   it waits for the connections; a daemon closes its long-poll queues here
   (cmdqueue_close) so waiting operations return at once. */
void soap_server_on_stop(struct soap_server *srv, void (*fn)(void *), void *arg);
/* Optional: a reload's CRL (crl.h) closes every connection whose
   certificate it revokes, at once (a warn line per certificate); when that
   leaves a peer no connection with a certificate still valid, fn(user, id)
   is called from the reloading thread so the daemon drops that peer's state
   as a withdrawal does.  Set before run(). */
void soap_server_on_revoked(struct soap_server *srv,
                            void (*fn)(void *user, const struct identity *id));
void soap_server_free(struct soap_server *srv);
/* Address groups (IPv4 addresses, IPv6 /ipv6_prefix) that may be known
   at once, and prefixes wider than one group. */
#define SOAP_SERVER_KNOWN_MAX 65536
#define SOAP_SERVER_KNOWN_PREFIXES_MAX 256
/* Counts the addresses in `prefix` ("198.51.100.7", "198.51.100.0/24",
   "2001:db8::/48") as known from now on, before any client there logged
   in: a daemon names those of its grid (the broker its clusters'
   frontends, a frontend its nodes' ranges and its broker), so that after
   a restart under attack they are not strangers.  Never forgotten while
   the server runs.  Any thread.  0 (also when known already), or -1 with
   why: not an address or range, wider than /8 (IPv6 /16), or the bound
   above reached. */
int soap_server_know(struct soap_server *srv, const char *prefix, char *why, size_t whylen);

/* What the handshake stage turned away since the start, for the daemons'
   --stats: handshakes past their deadline, cut for a newcomer, and
   newcomers refused for their address's share or a full stage; and what
   the accept loop failed for lack of its own: descriptors (accept's EMFILE,
   ENFILE), memory (accept's ENOBUFS, ENOMEM, a connection's state), a
   thread, or another accept error. */
struct soap_stage_counts {
    unsigned long long expired, cut, refused_address, refused_full;
    unsigned long long accept_failed_descriptors, accept_failed_memory, accept_failed_thread,
        accept_failed_other;
};
/* The stage's counts as rows of a daemon's --stats list (any struct of
   {name, value}), under the names the metrics map below reads. */
// clang-format off
#define SOAP_STAGE_COUNTERS(stage)                                                                 \
    {"handshakes_expired", (stage)->expired},                                                      \
    {"handshakes_cut", (stage)->cut},                                                              \
    {"handshakes_refused_address", (stage)->refused_address},                                      \
    {"handshakes_refused_full", (stage)->refused_full},                                            \
    {"accept_failed_descriptors", (stage)->accept_failed_descriptors},                             \
    {"accept_failed_memory", (stage)->accept_failed_memory},                                       \
    {"accept_failed_thread", (stage)->accept_failed_thread},                                       \
    {"accept_failed_other", (stage)->accept_failed_other}
// clang-format on
/* The same as rows of a daemon's metrics map (metrics_text.h): two
   families, PREFIX_handshakes_dropped_total{reason} and
   PREFIX_accept_failed_total{reason}. */
#define SOAP_STAGE_ROW(prefix, family, counter, reason, help)                                      \
    {                                                                                              \
        counter, prefix family, "counter", "reason", reason, help                                  \
    }
#define SOAP_STAGE_METRICS(prefix)                                                                 \
    SOAP_STAGE_ROW(prefix, "_handshakes_dropped_total", "handshakes_expired", "expired",           \
                   "SOAP connections dropped before their TLS handshake was done, by reason: "     \
                   "expired (past the handshake deadline), cut (the oldest stranger's, for a "     \
                   "newcomer), per_address (its address's or IPv6 prefix's share taken), full "    \
                   "(the stage full)"),                                                            \
        SOAP_STAGE_ROW(prefix, "_handshakes_dropped_total", "handshakes_cut", "cut", NULL),        \
        SOAP_STAGE_ROW(prefix, "_handshakes_dropped_total", "handshakes_refused_address",          \
                       "per_address", NULL),                                                       \
        SOAP_STAGE_ROW(prefix, "_handshakes_dropped_total", "handshakes_refused_full", "full",     \
                       NULL),                                                                      \
        SOAP_STAGE_ROW(prefix, "_accept_failed_total", "accept_failed_descriptors", "descriptors", \
                       "connections the SOAP port could not accept, by what it lacked"),           \
        SOAP_STAGE_ROW(prefix, "_accept_failed_total", "accept_failed_memory", "memory", NULL),    \
        SOAP_STAGE_ROW(prefix, "_accept_failed_total", "accept_failed_thread", "thread", NULL),    \
        SOAP_STAGE_ROW(prefix, "_accept_failed_total", "accept_failed_other", "other", NULL)
/* From an operation's soap (the server it came through). */
void soap_server_stage_counts(struct soap *soap, struct soap_stage_counts *out);
/* The same from the server itself (any thread; NULL: all zero). */
void soap_server_counts(struct soap_server *srv, struct soap_stage_counts *out);
/* The port actually bound (useful when the config said 0). */
int soap_server_port(const struct soap_server *srv);

/* Inside an operation: the daemon state and who is calling. */
void *soap_server_state(struct soap *soap);
/* The role of the server an operation came through (broker if none). */
enum served_role soap_server_role(struct soap *soap);
const struct identity *soap_caller(struct soap *soap);

/* Sets a SOAP fault with subcode "qcg:<subcode>" and returns SOAP_FAULT. */
int soap_qcg_fault(struct soap *soap, const char *subcode, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The qcg fault just raised, taken back as one item's answer of a batch:
   *subcode without "qcg:" and *text, copies in soap's memory; the call
   itself goes on (soap->error cleared).  SOAP_OK. */
int soap_qcg_fault_take(struct soap *soap, char **subcode, char **text);
/* 0 when version matches ours; else sets the qcg:version fault naming both and
   returns SOAP_FAULT. */
int soap_check_version(struct soap *soap, int version);

#endif
