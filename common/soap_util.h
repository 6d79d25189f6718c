/* What the SOAP server and client glue share (internal to common/). */
#ifndef QCG_SOAP_UTIL_H
#define QCG_SOAP_UTIL_H

#include <stdbool.h>
#include <stddef.h>

struct soap;
struct tls_files;

/* soap_ssl_init() exactly once per process, before any TLS context. */
void soap_tls_init_once(void);
/* What a TLS context checks of its peers beyond the grid CA: the key usage
   of their side (peers_are_servers: serverAuth, else clientAuth) and the
   CRL in tls->crl (optional; crl.h); and its own certificate, key and CAs
   reloaded on SIGHUP (tls_reload.h).  -1 with a one-line reason in err. */
int soap_tls_peer_policy(struct soap *soap, bool peers_are_servers, const struct tls_files *tls,
                         char *err, size_t errlen);
/* One-line text for the error held in soap (for logs and err buffers). */
void soap_error_text(struct soap *soap, char *buf, size_t len);

#endif
