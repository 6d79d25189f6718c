/* See soap_util.h. */
#include "soap_util.h"

#include <pthread.h>
#include <stdio.h>

#include "crl.h"
#include "soapH.h"
#include "soap_server.h"
#include "tls_reload.h"

static pthread_once_t ssl_once = PTHREAD_ONCE_INIT;

static void ssl_init(void)
{
    soap_ssl_init();
}

void soap_tls_init_once(void)
{
    pthread_once(&ssl_once, ssl_init);
}

void soap_error_text(struct soap *soap, char *buf, size_t len)
{
    soap_set_fault(soap);
    const char *s = soap_fault_string(soap);
    const char *d = soap_fault_detail(soap);
    snprintf(buf, len, "%s%s%s", s ? s : "unknown error", d && *d ? ": " : "", d && *d ? d : "");
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
}

int soap_tls_peer_policy(struct soap *soap, bool peers_are_servers, const struct tls_files *tls,
                         char *err, size_t errlen)
{
    int purpose = peers_are_servers ? X509_PURPOSE_SSL_SERVER : X509_PURPOSE_SSL_CLIENT;
    if (soap->ctx == NULL || SSL_CTX_set_purpose(soap->ctx, purpose) != 1) {
        snprintf(err, errlen, "TLS setup: cannot require %s certificates",
                 peers_are_servers ? "server (serverAuth)" : "client (clientAuth)");
        return -1;
    }
    if (crl_attach(soap->ctx, tls->crl, tls->ca, err, errlen) < 0)
        return -1;
    return tls_reload_attach(soap->ctx, tls, !peers_are_servers, err, errlen);
}
