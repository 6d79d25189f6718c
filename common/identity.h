/* Who is calling: the role and name from the peer certificate's subject
   (O=qcg-connect/OU=<role>/CN=<name>, helper CN = <cluster>/<node>). */
#ifndef QCG_IDENTITY_H
#define QCG_IDENTITY_H

#include <openssl/ssl.h>
#include <stdbool.h>
#include "proto.h"

struct identity {
    enum qcg_role role;
    char name[2 * QCG_NAME_MAX]; /* the CN as issued */
    char cluster[QCG_NAME_MAX];  /* frontend: its cluster; helper: its cluster */
    char node[QCG_NAME_MAX];     /* helper only */
};

/* Fills id from the certificate the TLS peer presented; -1 (and a log line)
   when there is none or its subject does not follow the rules above. */
int identity_from_ssl(SSL *ssl, struct identity *id);
/* The same from a certificate (a service's own, when it reloads it). */
int identity_from_cert(X509 *cert, struct identity *id);
/* The identity in the (first) certificate of a PEM file, for a daemon checking
   its own certificate at start-up.  expect: the role it must have, or
   QCG_ROLE_NONE for any.  -1 with a one-line reason in err (nothing logged). */
int identity_from_file(const char *path, enum qcg_role expect, struct identity *id, char *err,
                       size_t errlen);
/* 0 when the TLS peer's certificate names the extended key usage of its
   side: serverAuth when it is the server (peer_is_server), clientAuth when it
   is the client.  A certificate without the extension is refused too (OpenSSL
   would take it for any use).  -1 with a one-line reason in err. */
int identity_check_usage(SSL *ssl, bool peer_is_server, char *err, size_t errlen);
/* The same for a certificate: 0 when it names the usage of a TLS server
   (server) or client. */
int identity_cert_usage(X509 *cert, bool server, char *err, size_t errlen);
/* "helper c1/n1" into buf, for messages. */
const char *identity_text(const struct identity *id, char *buf, size_t len);
/* The same from a subject's OU and CN; used by identity_from_ssl and tests. */
int identity_from_fields(const char *ou, const char *cn, struct identity *id);

#endif
