/* The identity a connecting process presents in its TLS 1.3 ClientHello (the
   external PSK's identity, see tls_psk.h and docs/architecture.md): who
   calls whom in which job, from which cluster, and for reversed
   connections the plan's token.  It travels in clear but is covered by the
   PSK binder, so only a holder of the job secret can have sent it. */
#ifndef QCG_HANDSHAKE_H
#define QCG_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* 3: TLS 1.3 with an external PSK (2 was the HMAC hello). */
#define HS_VERSION 3
#define HS_JOB_MAX 64
#define HS_CLUSTER_MAX 64
#define HS_TOKEN_MAX QCG_HELLO_TOKEN_MAX
/* magic, version, reserved, from, to, job, cluster, token: 208 bytes */
#define HS_IDENTITY_SIZE (4 + 2 + 2 + 4 + 4 + HS_JOB_MAX + HS_CLUSTER_MAX + HS_TOKEN_MAX)

/* Why an acceptor refused a handshake (sent as a TLS alert, tls_psk.c). */
enum hs_status {
    HS_OK = 0,
    HS_DENIED = 1,     /* other job, or not the job secret */
    HS_WRONG_RANK = 2, /* to_rank is not the acceptor's rank, or not the rank announced */
    HS_BAD_VERSION = 3,
    HS_MALFORMED = 5,     /* no qcg identity, bad magic, unterminated string */
    HS_NO_WAITER = 6,     /* a token no connect of the acceptor waits for (it gave up) */
    HS_PLAIN_REFUSED = 7, /* plain asked for, the acceptor's policy demands encryption */
    HS_NO_TLS = 8,        /* encryption asked for from a caller that reads plain sockets only */
};

/* The decoded identity. */
struct hs_hello {
    int32_t from_rank;
    int32_t to_rank;
    char job[HS_JOB_MAX];
    char cluster[HS_CLUSTER_MAX];
    /* Empty, or the plan's one-time token: a reversed connection, made by the
       target's side, names the connect of the acceptor it answers. */
    char token[HS_TOKEN_MAX];
    /* The initiator's technique (enum qcg_technique; 0 from older peers): a
       connection the acceptor took on its listener may have been traversed
       or punched, which only the initiator knows. */
    uint16_t technique;
};

/* Fills h for an identity of rank `from` of job in cluster calling to_rank
   with token (NULL or "" for none) by technique, and encodes it into out.
   0, or -1 (strings too long). */
int hs_identity_build(uint8_t out[HS_IDENTITY_SIZE], struct hs_hello *h, const char *job,
                      int32_t from, const char *cluster, int32_t to_rank, const char *token,
                      uint16_t technique);
/* Decodes a received identity of len bytes: HS_OK, HS_MALFORMED or
   HS_BAD_VERSION; h is filled as far as decoded. */
enum hs_status hs_identity_parse(const uint8_t *in, size_t len, struct hs_hello *h);
const char *hs_status_name(enum hs_status status);

#endif
