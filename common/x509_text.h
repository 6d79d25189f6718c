/* Certificates and CRLs in log lines: a serial in hex, a date as OpenSSL
   prints it ("Nov 26 08:00:00 2028 GMT"). */
#ifndef QCG_X509_TEXT_H
#define QCG_X509_TEXT_H

#include <openssl/x509.h>
#include <stddef.h>

void x509_serial_text(const X509 *cert, char *buf, size_t len);
/* "none" when t is NULL. */
void x509_time_text(const ASN1_TIME *t, char *buf, size_t len);

#endif
