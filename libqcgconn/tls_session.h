/* An encrypted connection's session as the caller holds it (qcg_tls_*). */
#ifndef QCG_TLS_SESSION_H
#define QCG_TLS_SESSION_H

#include <openssl/ssl.h>
#include <stdbool.h>
#include <stdint.h>

struct qcg_tls {
    SSL *ssl;
    unsigned encryption; /* QCG_CONN_* */
    /* The last read wanted the socket: what the session holds is part of a
       record at most, which only more bytes from the socket complete. */
    bool starved;
    /* A server that wrote before the client's Finished (tls_psk.c,
       early_done): until the Finished is in, writes are 0.5-RTT data and
       reads go record by record; past finish_by_us both fail. */
    bool unfinished;
    uint64_t finish_by_us;
    /* Our close_notify is made but OpenSSL holds it: the socket (kernel TLS)
       or our full BIO refused it, and BIO_flush does not reach it. */
    bool bye_held;
    char err[256];
};

/* Takes ssl (a handshake done, or unfinished as above); NULL when out of
   memory. */
struct qcg_tls *tls_session_new(SSL *ssl, unsigned encryption, bool unfinished);
/* QCG_CONN_* of ssl as it is now. */
unsigned tls_session_encryption(SSL *ssl);

#endif
