/* The process-to-process handshake (docs/architecture.md, "Encryption"):
   TLS 1.3 with an external PSK derived from the job secret and the job id
   (HKDF-SHA256), (EC)DHE key exchange (psk_dhe_ke), no certificates, no
   tickets, no early data from the client.  The ClientHello carries our identity
   (handshake.h) and the connecting side's choice as ALPN: "qcg/1-tls"
   keeps the session, "qcg/1-plain" drops it after the handshake and the
   connection goes on on the raw socket.  Refusals are TLS alerts that the
   other side turns back into a reason.  Non-blocking: each step moves the
   handshake as far as the socket allows. */
#ifndef QCG_TLS_PSK_H
#define QCG_TLS_PSK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

#include "handshake.h"

#define TLS_PSK_SIZE 32

/* What one side knows about itself for the handshake. */
struct tls_self {
    const char *job;
    int32_t rank;
    const char *cluster;
    const uint8_t *psk; /* TLS_PSK_SIZE bytes (tls_psk_derive) */
    SSL_CTX *ssl_ctx;   /* tls_ctx_new */
    int policy;         /* enum qcg_encrypt */
};

/* HKDF-SHA256 of the job secret, salted and labelled for this use only
   (the services' verifier uses another label).  0 or -1. */
int tls_psk_derive(uint8_t psk[TLS_PSK_SIZE], const char *secret, const char *job);
/* The context every handshake of a process uses; NULL on failure. */
SSL_CTX *tls_ctx_new(void);

/* Whether self encrypts a connection to (or accepts plain from) a peer in
   peer_cluster. */
bool tls_policy_encrypts(const struct tls_self *self, const char *peer_cluster);

struct tls_hs;

/* Step results besides a negative QCG_E* code. */
enum tls_step {
    TLS_DONE = 0,
    TLS_WANT_READ = 1,
    TLS_WANT_WRITE = 2,
    TLS_CLAIM = 3, /* acceptor: the identity carries a token; tls_hs_claim, then step */
};

/* What the connecting side offers: plain, TLS, or either (the server's
   policy chooses: a reversed connection's target whose own policy is never,
   so that it is "encrypted when the peer asks" there too). */
enum tls_offer { TLS_OFFER_PLAIN = 0, TLS_OFFER_TLS = 1, TLS_OFFER_EITHER = 2 };

/* The connecting side on fd (non-blocking, connected), calling to_rank with
   token (NULL: none), offering an enum tls_offer.  NULL on failure (why
   filled). */
struct tls_hs *tls_hs_client(const struct tls_self *self, int fd, int32_t to_rank,
                             const char *token, uint16_t technique, int offer, char *why,
                             size_t len);
/* The accepting side on fd.  expect_rank: the rank the helper announced
   (a handed-over connection, which carries no token), or -1. */
struct tls_hs *tls_hs_server(const struct tls_self *self, int fd, int32_t expect_rank, char *why,
                             size_t len);
/* Moves the handshake on: an enum tls_step or a negative QCG_E* code with
   the reason in tls_hs_why. */
int tls_hs_step(struct tls_hs *t);
const char *tls_hs_why(const struct tls_hs *t);
/* Bytes read and written so far: a handshake whose count grew is moving
   (connect.c's progress). */
uint64_t tls_hs_bytes(const struct tls_hs *t);
/* After a failed step: the peer gave the connection up without refusing
   it (closed or reset it mid-handshake, or said its connect ended), as a
   peer whose own connect lost a race or moved on does; no refusal. */
bool tls_hs_abandoned(const struct tls_hs *t);
/* Acceptor: our answer (ServerHello..Finished) went out, so the peer's
   ClientHello passed the PSK binder: it holds the job secret. */
bool tls_hs_answered(const struct tls_hs *t);
/* Acceptor: any byte of the peer read (heard), its ClientHello read
   (hello_seen).  A connection with neither is a stranger that may be cut
   for room (accept.c). */
bool tls_hs_heard(const struct tls_hs *t);
bool tls_hs_hello_seen(const struct tls_hs *t);
/* Acceptor: where an unfinished handshake stands, as words for a reason. */
const char *tls_hs_waits_for(const struct tls_hs *t);
int tls_hs_fd(const struct tls_hs *t);
/* Acceptor: the peer's identity (after TLS_CLAIM or TLS_DONE). */
const struct hs_hello *tls_hs_peer(const struct tls_hs *t);
/* Acceptor after TLS_CLAIM: go on (claimed), or refuse (no connect waits).
   early: an encrypted connection may be done once the server's flight is
   out (tls_hs_take); false when another connection carries the same
   token (one is a replay: the one that finishes wins). */
void tls_hs_claim(struct tls_hs *t, bool claimed, bool early);
/* After TLS_DONE: frees t; *session is an encrypted connection's session
   (its QCG_CONN_* bits in *encryption), NULL for a plain one (*encryption
   0).  The server of an encrypted answer to a connect's token is done once
   its flight is out: its session takes the client's Finished later
   (tls_session.h), which saves the connect a round trip.  0, or
   QCG_ENOMEM. */
int tls_hs_take(struct tls_hs *t, struct qcg_tls **session, unsigned *encryption);
void tls_hs_free(struct tls_hs *t);

#endif
