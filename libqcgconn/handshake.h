/* The process-to-process handshake run on every new connection (see
   docs/architecture.md): the initiator proves it holds the job secret with an
   HMAC over its hello, the acceptor answers with an HMAC over the nonce.  The
   secret never crosses the network. */
#ifndef QCG_HANDSHAKE_H
#define QCG_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

/* 2: the hello carries a token (reversed connections). */
#define HS_VERSION 2
#define HS_JOB_MAX 64
#define HS_CLUSTER_MAX 64
#define HS_TOKEN_MAX 64
#define HS_NONCE_SIZE 16
#define HS_MAC_SIZE 32
/* magic, version, reserved, from, to, job, cluster, token, nonce, mac: 256 bytes */
#define HS_HELLO_SIZE                                                                              \
    (4 + 2 + 2 + 4 + 4 + HS_JOB_MAX + HS_CLUSTER_MAX + HS_TOKEN_MAX + HS_NONCE_SIZE + HS_MAC_SIZE)
/* magic, status, mac */
#define HS_ACCEPT_SIZE (4 + 4 + HS_MAC_SIZE)

/* Acceptor's answer. */
enum hs_status {
    HS_OK = 0,
    HS_DENIED = 1,      /* other job, or MAC wrong: not the job secret */
    HS_WRONG_RANK = 2,  /* to_rank is not the acceptor's rank */
    HS_BAD_VERSION = 3,
    HS_REPLAY = 4,      /* a nonce seen before */
    HS_MALFORMED = 5,   /* bad magic, unterminated string */
    HS_NO_WAITER = 6,   /* a token no connect of the acceptor waits for (it gave up) */
};

/* The decoded hello. */
struct hs_hello {
    int32_t from_rank;
    int32_t to_rank;
    char job[HS_JOB_MAX];
    char cluster[HS_CLUSTER_MAX];
    /* Empty, or the plan's one-time token: a reversed connection, made by the
       target's side, names the connect of the acceptor it answers. */
    char token[HS_TOKEN_MAX];
    uint8_t nonce[HS_NONCE_SIZE];
};

/* What one side knows about itself. */
struct hs_self {
    const char *job;
    int32_t rank;
    const char *secret;
    const char *cluster;
    /* Acceptor only, optional: returns 1 if the nonce was seen before, else
       records it and returns 0. */
    int (*nonce_seen)(void *arg, const uint8_t nonce[HS_NONCE_SIZE]);
    void *nonce_arg;
};

/* Fills h for a hello from self to to_rank carrying token (NULL or "" for
   none), with a fresh random nonce, and encodes it into out.  0 or -1 (no
   randomness, strings too long). */
int hs_hello_build(uint8_t out[HS_HELLO_SIZE], struct hs_hello *h, const struct hs_self *self,
                   int32_t to_rank, const char *token);
/* Decodes and checks a received hello against the acceptor self: magic,
   version, job, to_rank, MAC (constant time).  Returns an hs_status; h is
   filled as far as decoded. */
enum hs_status hs_hello_check(const uint8_t in[HS_HELLO_SIZE], const struct hs_self *self,
                              struct hs_hello *h);
/* Encodes the acceptor's answer to h. */
void hs_accept_build(uint8_t out[HS_ACCEPT_SIZE], enum hs_status status, const struct hs_hello *h,
                     const char *secret);
/* Checks the answer to our hello h: 0, or a negative QCG_E* code
   (QCG_EDENIED, QCG_EPEER, QCG_EPROTO) with a reason in why. */
int hs_accept_check(const uint8_t in[HS_ACCEPT_SIZE], const struct hs_hello *h,
                    const char *secret, const char **why);
const char *hs_status_name(enum hs_status status);

#endif
