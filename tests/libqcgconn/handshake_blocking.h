/* The handshake run to completion with blocking waits, for the peers the
   tests play (the library runs it as non-blocking steps in connect.c and
   accept.c, and ships none of this).  The engine is the library's
   (tls_psk.h). */
#ifndef QCG_TEST_HANDSHAKE_BLOCKING_H
#define QCG_TEST_HANDSHAKE_BLOCKING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "handshake.h"
#include "qcgconn.h"

/* read_full: core's (bounded_io.h). */
#include "bounded_io.h"

/* What a test peer knows about itself. */
struct hs_self {
    const char *job;
    int32_t rank;
    const char *secret;
    const char *cluster;
    int policy; /* enum qcg_encrypt; 0: plain only */
};

/* The library's view of self (a context of its own, freed by the caller);
   psk all zero when it cannot be derived. */
struct tls_self;
void hs_tls_self(const struct hs_self *self, struct tls_self *ts, uint8_t psk[32]);

/* The initiator's side over a connected socket (made non-blocking), bounded
   by deadline_us: a plain connection to to_rank.  0 or a negative QCG_E*
   code with a reason in err. */
int hs_initiate(int fd, const struct hs_self *self, int32_t to_rank, uint64_t deadline_us,
                char *err, size_t errlen);
/* ... with a token (NULL: none), encrypted or not; *session receives the
   session of an encrypted connection (session NULL: freed). */
int hs_initiate_ex(int fd, const struct hs_self *self, int32_t to_rank, const char *token,
                   bool encrypt, uint64_t deadline_us, qcg_tls **session, char *err, size_t errlen);
/* The acceptor's side.  peer receives the initiator's identity. */
int hs_respond(int fd, const struct hs_self *self, uint64_t deadline_us, struct hs_hello *peer,
               char *err, size_t errlen);
/* ... a token's connection is claimed (claim) or refused as waited for by
   nobody; *session as above. */
int hs_respond_ex(int fd, const struct hs_self *self, bool claim, uint64_t deadline_us,
                  struct hs_hello *peer, qcg_tls **session, char *err, size_t errlen);

/* Non-blocking steps, for tests that stop a handshake halfway. */
struct tls_hs;
/* Steps t until it needs more than the socket has, or for limit_ms: the
   last step's result (TLS_*). */
int hs_step_until(struct tls_hs *t, int limit_ms);
/* The server's side (self) of a client's ClientHello already on fd, a
   token's connection claimed; *rc its steps' result (TLS_DONE: an
   encrypted answer to a token is done before the client's Finished).
   NULL when it cannot start. */
struct tls_hs *hs_serve(int fd, const struct hs_self *self, struct tls_self *ts, uint8_t psk[32],
                        int *rc);
/* A reversed connection's target (self: the TLS client of to_rank,
   offering offer, with token) on a new non-blocking socketpair sp, its
   ClientHello sent.  NULL on failure. */
struct tls_hs *hs_reversed_hello(int sp[2], const struct hs_self *self, int32_t to_rank,
                                 const char *token, int offer, struct tls_self *cs,
                                 uint8_t psk[32]);

#endif
