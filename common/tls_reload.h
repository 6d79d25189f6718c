/*
 * A service's own certificate, key and trusted CAs, read again after SIGHUP
 * (with the CRL, crl.h) so that a renewed certificate is used without a
 * restart: every TLS handshake after the reload, accepted or made, presents
 * the new certificate and trusts the new CA file; connections made before
 * keep what they were made with.
 */
#ifndef QCG_TLS_RELOAD_H
#define QCG_TLS_RELOAD_H

#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>

struct tls_files;

/* Makes each handshake of ctx present the certificate and key of
   tls->certkey and trust the CAs of tls->ca as last loaded; server: ctx
   accepts connections (its certificate must be a TLS server's), else it
   makes them (a TLS client's).  Contexts with the same two files share one
   set, read at the first call (logged at debug level: file, identity,
   serial, expiry); later calls read no file, so ctx itself need hold no
   certificate, key or CA (a client's holds none: soap_client.c), and one
   made after a refused reload works with the set in force.  Server
   contexts resume no session: a resumed session would skip both the
   certificate in use and the CRL.  -1 with a one-line reason in err. */
int tls_reload_attach(SSL_CTX *ctx, const struct tls_files *tls, bool server, char *err,
                      size_t errlen);
/* Reads every set again (after SIGHUP: daemon.c) and returns how many
   were refused.  One that loads replaces the old one for new handshakes
   (an info line: file, identity, serial, expiry).  One that does not -- a
   file unreadable, the key not the certificate's, the certificate not
   issued by the CA in the CA file, expired, not for the side it is used on
   (serverAuth/clientAuth), for another service than the one loaded
   before, or a CA file that does not check the configured CRL (crl.h) --
   is refused as a whole: an error line names the file and why, and the old
   set stays. */
int tls_reload_all(void);
/* An error line for each of the service's own certificates that crl (just
   loaded from crl_path) revokes; called by crl.c. */
void tls_reload_own_revoked(const X509_CRL *crl, const char *crl_path);

#endif
