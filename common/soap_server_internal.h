/*
 * What soap_server.c and soap_server_revoke.c share: the server and its
 * connections.
 */
#ifndef QCG_SOAP_SERVER_INTERNAL_H
#define QCG_SOAP_SERVER_INTERNAL_H

#include <openssl/x509.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "address.h"
#include "dlist.h"
#include "htable.h"
#include "identity.h"
#include "ratelimit.h"
#include "soap_server.h"
#include "stdsoap2.h"

struct conn;

/* The connections of one address in the handshake stage. */
struct stage_host {
    char host[64];
    int count;
    bool known; /* a known address group (soap_server_know) */
};

struct soap_server {
    struct soap *master;
    int port;
    int max_connections, max_per_identity, max_handshakes, per_address, handshake_ms;
    int ipv6_prefix; /* an address's group (source_group.h) */
    enum served_role role;
    char *wsdl;  /* the service description of role's operations (served_wsdl) */
    int backlog; /* of the listening socket: max_connections + max_handshakes */
    void *user;
    atomic_int stop; /* set by a signal handler or another thread */
    void (*on_stop)(void *);
    void *on_stop_arg;
    int (*orig_parsehdr)(struct soap *, const char *, const char *);
    int (*orig_closesocket)(struct soap *, SOAP_SOCKET);
    int (*orig_shutdownsocket)(struct soap *, SOAP_SOCKET, int);

    pthread_mutex_t lock; /* protects what follows */
    pthread_cond_t changed;
    int active;                  /* connection threads alive */
    int served;                  /* authenticated connections holding a slot */
    int handshaking;             /* connections in the handshake stage */
    struct dlist conns;          /* of struct conn: theirs, to cut them off at stop */
    struct dlist stage;          /* of struct conn in the handshake stage, by deadline */
    struct htable *stage_hosts;  /* of struct stage_host, by address */
    uint64_t seed;               /* of their hashes */
    struct ratelimit refused_rl; /* the refusal lines */
    struct ratelimit accept_rl;  /* the accept loop's own failures (its thread only) */
    struct soap_stage_counts stage_counts;
    /* Known addresses (soap_server_know): groups a client authenticated
       from or the daemon named (tally.h, count 1), and the prefixes wider
       than a group the daemon named.  A newcomer from one takes the place
       of a stranger's handshake. */
    struct tally *known;
    struct addr_range known_prefixes[SOAP_SERVER_KNOWN_PREFIXES_MAX];
    int nknown_prefixes;
    /* A reload's CRL revoked every live certificate of a peer (soap_server.h). */
    void (*on_revoked)(void *user, const struct identity *id);
};

/* One accepted connection; soap->user of its context points here. */
struct conn {
    struct soap_server *server;
    struct soap *soap;
    struct identity identity;
    int fd; /* -1 once closed; guarded by server->lock */
    char peer[64];
    char host[64];           /* the peer's address group, for the per-address bound */
    struct addr_range group; /* the same as a range (family 0: not an IP address) */
    bool known;              /* that group is known (soap_server_know) */
    struct dlink link;       /* in server->conns */
    /* Guarded by server->lock: */
    struct dlink in_stage; /* in server->stage while staged */
    bool staged;
    bool expired; /* its handshake deadline passed, or cut for another: shut down */
    bool cut;     /* cut for a newcomer (logged then) */
    struct stage_host *stage_host;
    bool authenticated; /* counted against its identity's bound */
    bool serving;       /* holds a slot */
    uint64_t deadline_ms;
    X509 *cert;        /* the peer's, once authenticated: the CRL is checked against it */
    bool revoked;      /* a CRL loaded since revokes it: shut down */
    bool in_handshake; /* its thread's only: in soap_ssl_accept (close lingers) */
};

/* Whether the CRL in force revokes c's certificate, just taken: the
   connection is then refused (a reload may have come between its handshake
   and the certificate's being kept).  Called with srv->lock held. */
bool soap_server_revoked_now(const struct conn *c);
/* Registers srv for the reloads' CRLs (crl.h): each closes the connections
   of the certificates it revokes.  unwatch: before srv is freed. */
void soap_server_watch_crl(struct soap_server *srv);
void soap_server_unwatch_crl(struct soap_server *srv);

#endif
