/* The process-to-process handshake; see handshake.h. */
#include <arpa/inet.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "handshake.h"
#include "internal.h"

static const char hello_magic[4] = {'Q', 'C', 'G', 'H'};
static const char accept_magic[4] = {'Q', 'C', 'G', 'A'};
static const char hello_label[] = "qcg-hello";
static const char accept_label[] = "qcg-accept";

#define HS_CLUSTER_OFFSET (16 + HS_JOB_MAX)
#define HS_TOKEN_OFFSET (HS_CLUSTER_OFFSET + HS_CLUSTER_MAX)
#define HS_NONCE_OFFSET (HS_TOKEN_OFFSET + HS_TOKEN_MAX)
#define HS_MAC_OFFSET (HS_HELLO_SIZE - HS_MAC_SIZE)
_Static_assert(HS_NONCE_OFFSET + HS_NONCE_SIZE == HS_MAC_OFFSET, "hello layout");

static void put32(uint8_t *p, uint32_t v)
{
    v = htonl(v);
    memcpy(p, &v, 4);
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v;

    memcpy(&v, p, 4);
    return ntohl(v);
}

/* HMAC-SHA256(secret, label || data). */
static int mac(uint8_t out[HS_MAC_SIZE], const char *secret, const char *label,
               const uint8_t *data, size_t len)
{
    uint8_t buf[sizeof(accept_label) + HS_HELLO_SIZE];
    size_t ll = strlen(label);
    unsigned int outlen = 0;

    if (ll + len > sizeof(buf))
        return -1;
    memcpy(buf, label, ll);
    memcpy(buf + ll, data, len);
    if (HMAC(EVP_sha256(), secret, (int)strlen(secret), buf, ll + len, out, &outlen) == NULL ||
        outlen != HS_MAC_SIZE)
        return -1;
    return 0;
}

static void encode_hello_body(uint8_t *out, const struct hs_hello *h)
{
    uint16_t v = htons(HS_VERSION), r = 0;

    memcpy(out, hello_magic, 4);
    memcpy(out + 4, &v, 2);
    memcpy(out + 6, &r, 2);
    put32(out + 8, (uint32_t)h->from_rank);
    put32(out + 12, (uint32_t)h->to_rank);
    memcpy(out + 16, h->job, HS_JOB_MAX);
    memcpy(out + HS_CLUSTER_OFFSET, h->cluster, HS_CLUSTER_MAX);
    memcpy(out + HS_TOKEN_OFFSET, h->token, HS_TOKEN_MAX);
    memcpy(out + HS_NONCE_OFFSET, h->nonce, HS_NONCE_SIZE);
}

int hs_hello_build(uint8_t out[HS_HELLO_SIZE], struct hs_hello *h, const struct hs_self *self,
                   int32_t to_rank, const char *token)
{
    memset(h, 0, sizeof(*h));
    if (token == NULL)
        token = "";
    if (strlen(self->job) >= HS_JOB_MAX || strlen(self->cluster) >= HS_CLUSTER_MAX ||
        strlen(token) >= HS_TOKEN_MAX)
        return -1;
    h->from_rank = self->rank;
    h->to_rank = to_rank;
    /* h is zeroed, so the padding the MAC covers is zero too. */
    memcpy(h->job, self->job, strlen(self->job) + 1);
    memcpy(h->cluster, self->cluster, strlen(self->cluster) + 1);
    memcpy(h->token, token, strlen(token) + 1);
    if (random_bytes(h->nonce, HS_NONCE_SIZE) < 0)
        return -1;
    encode_hello_body(out, h);
    return mac(out + HS_MAC_OFFSET, self->secret, hello_label, out, HS_MAC_OFFSET);
}

enum hs_status hs_hello_check(const uint8_t in[HS_HELLO_SIZE], const struct hs_self *self,
                              struct hs_hello *h)
{
    uint8_t expect[HS_MAC_SIZE];
    uint16_t version;

    memset(h, 0, sizeof(*h));
    if (memcmp(in, hello_magic, 4) != 0)
        return HS_MALFORMED;
    memcpy(&version, in + 4, 2);
    if (ntohs(version) != HS_VERSION)
        return HS_BAD_VERSION;
    h->from_rank = (int32_t)get32(in + 8);
    h->to_rank = (int32_t)get32(in + 12);
    memcpy(h->job, in + 16, HS_JOB_MAX);
    memcpy(h->cluster, in + HS_CLUSTER_OFFSET, HS_CLUSTER_MAX);
    memcpy(h->token, in + HS_TOKEN_OFFSET, HS_TOKEN_MAX);
    memcpy(h->nonce, in + HS_NONCE_OFFSET, HS_NONCE_SIZE);
    if (memchr(h->job, '\0', HS_JOB_MAX) == NULL ||
        memchr(h->cluster, '\0', HS_CLUSTER_MAX) == NULL ||
        memchr(h->token, '\0', HS_TOKEN_MAX) == NULL) {
        memset(h->job, 0, HS_JOB_MAX);
        memset(h->cluster, 0, HS_CLUSTER_MAX);
        memset(h->token, 0, HS_TOKEN_MAX);
        return HS_MALFORMED;
    }
    if (strcmp(h->job, self->job) != 0)
        return HS_DENIED;
    if (mac(expect, self->secret, hello_label, in, HS_MAC_OFFSET) < 0 ||
        CRYPTO_memcmp(expect, in + HS_MAC_OFFSET, HS_MAC_SIZE) != 0)
        return HS_DENIED;
    /* Checked after the MAC, so only a holder of the secret learns the rank
       was wrong. */
    if (h->to_rank != self->rank)
        return HS_WRONG_RANK;
    return HS_OK;
}

/* The data the acceptor's MAC covers: nonce || from_rank || to_rank. */
static int accept_mac(uint8_t out[HS_MAC_SIZE], const struct hs_hello *h, const char *secret)
{
    uint8_t data[HS_NONCE_SIZE + 8];

    memcpy(data, h->nonce, HS_NONCE_SIZE);
    put32(data + HS_NONCE_SIZE, (uint32_t)h->from_rank);
    put32(data + HS_NONCE_SIZE + 4, (uint32_t)h->to_rank);
    return mac(out, secret, accept_label, data, sizeof(data));
}

void hs_accept_build(uint8_t out[HS_ACCEPT_SIZE], enum hs_status status, const struct hs_hello *h,
                     const char *secret)
{
    memcpy(out, accept_magic, 4);
    put32(out + 4, (uint32_t)status);
    /* A refusal carries no proof: the acceptor may not share our secret. */
    if (status != HS_OK || accept_mac(out + 8, h, secret) < 0)
        memset(out + 8, 0, HS_MAC_SIZE);
}

int hs_accept_check(const uint8_t in[HS_ACCEPT_SIZE], const struct hs_hello *h,
                    const char *secret, const char **why)
{
    uint8_t expect[HS_MAC_SIZE];
    uint32_t status;

    if (memcmp(in, accept_magic, 4) != 0) {
        *why = "the peer's answer is not a qcg handshake";
        return QCG_EPROTO;
    }
    status = get32(in + 4);
    switch (status) {
    case HS_OK:
        break;
    case HS_DENIED:
        *why = "the peer refused our hello: not the same job secret";
        return QCG_EDENIED;
    case HS_WRONG_RANK:
        *why = "the process at the contact address is not the rank we asked for";
        return QCG_EPEER;
    case HS_REPLAY:
        *why = "the peer saw our nonce before (replay)";
        return QCG_EDENIED;
    case HS_BAD_VERSION:
        *why = "the peer speaks another handshake version";
        return QCG_EPROTO;
    case HS_NO_WAITER:
        *why = "the peer no longer waits for this connection (its connect ended)";
        return QCG_EPEER;
    default:
        *why = "the peer refused our hello as malformed";
        return QCG_EPROTO;
    }
    if (accept_mac(expect, h, secret) < 0 ||
        CRYPTO_memcmp(expect, in + 8, HS_MAC_SIZE) != 0) {
        *why = "the peer's answer does not prove it holds the job secret";
        return QCG_EDENIED;
    }
    return 0;
}

const char *hs_status_name(enum hs_status status)
{
    switch (status) {
    case HS_OK:
        return "ok";
    case HS_DENIED:
        return "wrong job or job secret";
    case HS_WRONG_RANK:
        return "hello addressed to another rank";
    case HS_BAD_VERSION:
        return "unknown handshake version";
    case HS_REPLAY:
        return "replayed hello";
    case HS_MALFORMED:
        return "malformed hello";
    case HS_NO_WAITER:
        return "no connect waits for this token";
    }
    return "unknown status";
}
