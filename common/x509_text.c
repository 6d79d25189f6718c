/* See x509_text.h. */
#include "x509_text.h"

#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <stdio.h>

void x509_serial_text(const X509 *cert, char *buf, size_t len)
{
    BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), NULL);
    char *hex = bn ? BN_bn2hex(bn) : NULL;
    snprintf(buf, len, "%s", hex ? hex : "?");
    OPENSSL_free(hex);
    BN_free(bn);
}

void x509_time_text(const ASN1_TIME *t, char *buf, size_t len)
{
    snprintf(buf, len, "none");
    BIO *b = t ? BIO_new(BIO_s_mem()) : NULL;
    if (b != NULL && ASN1_TIME_print(b, t) == 1) {
        int n = BIO_read(b, buf, (int)len - 1);
        buf[n > 0 ? n : 0] = '\0';
    }
    BIO_free(b);
}
