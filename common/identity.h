/* Who is calling: the role and name from the peer certificate's subject
   (O=qcg-connect/OU=<role>/CN=<name>, helper CN = <cluster>/<node>). */
#ifndef QCG_IDENTITY_H
#define QCG_IDENTITY_H

#include <openssl/ssl.h>
#include "proto.h"

struct identity {
    enum qcg_role role;
    char name[2 * QCG_NAME_MAX];  /* the CN as issued */
    char cluster[QCG_NAME_MAX];   /* frontend: its cluster; helper: its cluster */
    char node[QCG_NAME_MAX];      /* helper only */
};

/* Fills id from the certificate the TLS peer presented; -1 (and a log line)
   when there is none or its subject does not follow the rules above. */
int identity_from_ssl(SSL *ssl, struct identity *id);
/* The identity in the (first) certificate of a PEM file, for a daemon checking
   its own certificate at start-up.  expect: the role it must have, or
   QCG_ROLE_NONE for any.  -1 with a one-line reason in err (nothing logged). */
int identity_from_file(const char *path, enum qcg_role expect, struct identity *id, char *err,
                       size_t errlen);
/* The same from a subject's OU and CN; used by identity_from_ssl and tests. */
int identity_from_fields(const char *ou, const char *cn, struct identity *id);

#endif
