/* The BIO every process-to-process TLS session reads and writes through. */
#ifndef QCG_TLS_BIO_H
#define QCG_TLS_BIO_H

#include <openssl/bio.h>
#include <stdbool.h>

/* A socket BIO on fd (not closed by it) whose writes never raise SIGPIPE
   in the caller (send(2) with MSG_NOSIGNAL, as the rest of libqcgconn) and
   gather records until BIO_flush or a full buffer; once kernel TLS takes a
   direction, that direction is the socket BIO's.  NULL when out of memory. */
BIO *tls_bio_new(int fd);
/* While on, reads return what the socket holds now, even when it blocks. */
void tls_bio_dontwait(BIO *b, bool on);

#endif
