/* An encrypted connection's session as the caller holds it (qcg_tls_*). */
#ifndef QCG_TLS_SESSION_H
#define QCG_TLS_SESSION_H

#include <openssl/ssl.h>
#include <stdbool.h>

struct qcg_tls {
    SSL *ssl;
    unsigned encryption; /* QCG_CONN_* */
    /* The last read wanted the socket: what the session holds is part of a
       record at most, which only more bytes from the socket complete. */
    bool starved;
    char err[256];
};

/* Takes ssl (a finished handshake); NULL when out of memory. */
struct qcg_tls *tls_session_new(SSL *ssl, unsigned encryption);

#endif
