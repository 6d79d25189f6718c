/*
 * What a failed TLS exchange leaves for the log line that reports it, kept
 * per thread (the thread that ran the handshake or the read): the fatal
 * alert the peer sent (a client refused by a server that checks the CRL
 * reads `certificate revoked`), and the certificate a server refused.
 */
#ifndef QCG_TLS_PEER_NOTE_H
#define QCG_TLS_PEER_NOTE_H

#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>

/* From an info callback: a fatal alert read from the peer is noted, unless
   this side sent one first (it refused the peer); a handshake's start
   forgets what came before. */
void tls_note_alert(int where, int ret);
/* The fatal alert noted by this thread since the last call (its
   description, e.g. SSL_AD_CERTIFICATE_REVOKED), or -1; forgets it. */
int tls_alert_take(void);
/* Whether an alert says the peer refused our certificate. */
bool tls_alert_refuses_cert(int alert);
/* The verify callback to use instead of next (gSOAP's soap->fsslverify,
   which it sets on every connection): it notes, in the thread that runs the
   handshake, the subject and serial of a peer certificate refused, then
   calls next. */
int (*tls_note_refusals(int (*next)(int, X509_STORE_CTX *)))(int, X509_STORE_CTX *);
/* " (certificate SUBJECT, serial HEX)" of the certificate this thread
   refused last, or ""; forgets it. */
void tls_refused_take(char *buf, size_t len);

#endif
