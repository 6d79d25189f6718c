/*
 * The certificate revocation list a service may load (`crl = PATH`, made by
 * `qcg-certs revoke`/`crl`): one per process, checked for every peer
 * certificate of the TLS contexts it is attached to (X509_V_FLAG_CRL_CHECK),
 * and reloaded after SIGHUP.  A reload tells its watchers (soap_server.c
 * closes the connections of the certificates it revokes) and refuses a list
 * that is expired or older than the one in force, unless crl-accept-older.
 */
#ifndef QCG_CRL_H
#define QCG_CRL_H

#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>

/* Makes ctx check peers against the CRL in path (signed by the CA in ca).
   The first call loads it; later calls with the same path share it.  path
   NULL or "": nothing to do.  -1 with a one-line reason in err. */
int crl_attach(SSL_CTX *ctx, const char *path, const char *ca, char *err, size_t errlen);
/* Has store look the CRL up here (a trust store made after crl_attach, by a
   certificate reload: tls_reload.h); whether it is checked is up to the
   verify flags of the context (set by crl_attach). */
void crl_store_hook(X509_STORE *store);
/* Reads the CRL again (after SIGHUP: daemon.c) and logs the outcome; on
   failure the CRL loaded before stays, as it does (an error line) when the
   new one is expired or older (a lower CRL number, else an earlier
   thisUpdate) unless crl_set_accept_older.  A CRL loaded is checked against
   the service's own certificates (tls_reload.h) and handed to the
   watchers.  skip: a certificate set was
   refused in the same reload (tls_reload.h), and the CRL stays with the
   CAs it was checked against (logged). */
void crl_reload(bool skip);
/* 0 when no CRL is configured or the configured file is signed by the CA in
   ca (a CA file about to be trusted); else -1 with a reason in err. */
int crl_check_file(const char *ca, char *err, size_t errlen);

/* Whether crl lists cert (same issuer, its serial revoked). */
bool crl_lists(const X509_CRL *crl, X509 *cert);
/* The CRL in force with a reference (X509_CRL_free it), or NULL. */
X509_CRL *crl_current(void);
/* crl-accept-older: reloads take an expired or older CRL too. */
void crl_set_accept_older(bool yes);
/* fn(arg, crl) after each reload that loads a CRL, from the reloading
   thread; at most 32 watchers (-1 beyond).  crl_unwatch waits for a call
   in progress. */
int crl_watch(void (*fn)(void *, const X509_CRL *), void *arg);
void crl_unwatch(void (*fn)(void *, const X509_CRL *), void *arg);

#endif
