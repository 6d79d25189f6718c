/*
 * Mutual-TLS gSOAP clients towards an upstream service (helper -> frontend,
 * frontend -> broker), with timeouts and keep-alive, and the mapping of a failed
 * call to something a daemon can act on.
 */
#ifndef QCG_SOAP_CLIENT_H
#define QCG_SOAP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include "soap_server.h"

struct soap;

struct soap_client_config {
    const char *url; /* https://host:port/ */
    struct tls_files tls;
    int connect_timeout; /* seconds */
    int io_timeout;      /* seconds for send/recv of ordinary calls */
    /* Whom the URL must lead to, checked after each TLS handshake: the role
       of the server's certificate (QCG_ROLE_NONE: any) and, for a frontend,
       its cluster (NULL: any).  The server must be a TLS server (serverAuth)
       and not revoked (tls.crl). */
    enum qcg_role expect_role;
    const char *expect_cluster;
};

/* A new client context; NULL with a reason in err.  The caller owns it. */
struct soap *soap_client_new(const struct soap_client_config *cfg, char *err, size_t errlen);
void soap_client_free(struct soap *soap);
/* Before a long-poll of `wait` seconds: the receive timeout must exceed it.
   wait_seconds = 0 restores the ordinary timeouts (soap_pool_put does). */
void soap_client_set_wait(struct soap *soap, int wait_seconds);
/* The URL the context was made for (owned by the context). */
const char *soap_client_url(struct soap *soap);
/* Frees what the last call allocated (soap_destroy + soap_end). */
void soap_client_reset(struct soap *soap);

enum call_status {
    CALL_OK,
    CALL_UNREACHABLE, /* transport: refused, timed out, TLS failed, EOF */
    CALL_FAULT,       /* the server answered with a fault */
};

/* Classifies the result of soap_call_*: for faults, subcode is set to the text
   after "qcg:" (e.g. "denied") or "" and msg to the fault string; for transport
   errors msg says what happened.  Returns the status. */
enum call_status soap_call_status(struct soap *soap, int rc, char *subcode, size_t subcode_len,
                                  char *msg, size_t msg_len);

/* Whether a call's fault says the server lacks the operation (an older
   service, not a refusal): the caller then uses the older operations. */
bool soap_call_unknown_op(enum call_status st, const char *subcode, const char *msg);

/* Whether the last soap_call_status of this thread was a transport error
   because the server refused our certificate (its TLS alert: revoked,
   expired, unknown CA...): retrying soon will not help. */
bool soap_call_cert_refused(void);

/* A small pool of client contexts for threads that call upstream concurrently. */
struct soap_pool;
struct soap_pool *soap_pool_new(const struct soap_client_config *cfg, int size, char *err,
                                size_t errlen);
/* Blocks until a context is free.  Give it back with soap_pool_put (after
   soap_client_reset); pass broken=1 to have it reconnect next time. */
struct soap *soap_pool_get(struct soap_pool *pool);
void soap_pool_put(struct soap_pool *pool, struct soap *soap, int broken);
void soap_pool_free(struct soap_pool *pool);
const char *soap_pool_url(const struct soap_pool *pool);

#endif
