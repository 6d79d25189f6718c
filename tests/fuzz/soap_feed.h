/* What the harnesses of SOAP servers share (fuzz_soap*.c): the
   daemon's SOAP server (common/soap_server.c with its operations) on an
   ephemeral port of 127.0.0.1 in a thread, and the input sent to it over
   loopback TCP as any host reaching that port could: raw bytes, or inside
   mutual TLS as one of the grid's identities.

   Input: byte 0 % (1 + number of identities) picks how the rest is sent:
     0: as it is, on a plain TCP connection (the server expects TLS);
     i: inside TLS with the i-th identity's certificate.
   Then the harness half-closes and reads the answer until the server closes
   (at most SOAP_FEED_READ_MS). */
#ifndef QCG_FUZZ_SOAP_FEED_H
#define QCG_FUZZ_SOAP_FEED_H

#include <stddef.h>
#include <stdint.h>

#include "served.h"

#define SOAP_FEED_READ_MS 3000

/* The identities the input may speak as: PEM files of certs.h, NULL
   ends the list (at most 4). */
void soap_feed_clients(const char *const *pem);
/* Starts the server with pem as its certificate, the daemon's role (its
   share of the operations, served.h) and user as the operations' state, in
   a thread; at exit it is stopped (its connection threads ended) before
   stopped(user) runs, so that what is left is a leak, not a request in
   flight. */
void soap_feed_serve(const char *pem, enum served_role role, void *user,
                     void (*stopped)(void *user));
/* soap_feed.c is the harness's LLVMFuzzerTestOneInput: it sends each input
   as the header says.  The harness defines LLVMFuzzerInitialize, which makes
   the certificates (certs.h), the daemon's state, then calls
   soap_feed_clients and soap_feed_serve. */

#endif
