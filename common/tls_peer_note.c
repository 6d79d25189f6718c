/* See tls_peer_note.h. */
#include "tls_peer_note.h"

#include <openssl/x509.h>
#include <stdio.h>

#include "x509_text.h"

static __thread int alert = -1;
static __thread char refused[320];
/* gSOAP's callback (soap->fsslverify), the same for every context. */
static int (*next_verify)(int, X509_STORE_CTX *);

/* -2: we sent a fatal alert ourselves (we refused the peer): what the peer
   sends after is no news. */
#define WE_REFUSED (-2)

void tls_note_alert(int where, int ret)
{
    bool fatal = (where & SSL_CB_ALERT) && (ret >> 8) == SSL3_AL_FATAL;
    if (where & SSL_CB_HANDSHAKE_START)
        alert = -1; /* nothing of an earlier connection */
    else if (fatal && (where & SSL_CB_WRITE))
        alert = WE_REFUSED;
    else if (fatal && (where & SSL_CB_READ) && alert != WE_REFUSED)
        alert = ret & 0xff;
}

int tls_alert_take(void)
{
    int a = alert;
    alert = -1;
    return a >= 0 ? a : -1;
}

bool tls_alert_refuses_cert(int a)
{
    return a == SSL_AD_CERTIFICATE_REVOKED || a == SSL_AD_BAD_CERTIFICATE ||
           a == SSL_AD_CERTIFICATE_EXPIRED || a == SSL_AD_CERTIFICATE_UNKNOWN ||
           a == SSL_AD_UNSUPPORTED_CERTIFICATE || a == SSL_AD_UNKNOWN_CA;
}

static int note_verify(int ok, X509_STORE_CTX *ctx)
{
    if (!ok && X509_STORE_CTX_get_error_depth(ctx) == 0) {
        X509 *cert = X509_STORE_CTX_get_current_cert(ctx);
        char subject[200] = "?", serial[80] = "?";
        BIO *b = BIO_new(BIO_s_mem());
        if (cert != NULL && b != NULL &&
            X509_NAME_print_ex(b, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253) >= 0) {
            int n = BIO_read(b, subject, (int)sizeof(subject) - 1);
            subject[n > 0 ? n : 0] = '\0';
        }
        BIO_free(b);
        if (cert != NULL)
            x509_serial_text(cert, serial, sizeof(serial));
        snprintf(refused, sizeof(refused), " (certificate %s, serial %s)", subject, serial);
    }
    return next_verify != NULL ? next_verify(ok, ctx) : ok;
}

int (*tls_note_refusals(int (*next)(int, X509_STORE_CTX *)))(int, X509_STORE_CTX *)
{
    next_verify = next;
    return note_verify;
}

void tls_refused_take(char *buf, size_t len)
{
    snprintf(buf, len, "%s", refused);
    refused[0] = '\0';
}
