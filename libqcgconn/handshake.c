/* The PSK identity of the process-to-process handshake; see handshake.h. */
#include <arpa/inet.h>
#include <string.h>

#include "handshake.h"

static const char identity_magic[4] = {'Q', 'C', 'G', 'I'};

#define HS_JOB_OFFSET 16
#define HS_CLUSTER_OFFSET (HS_JOB_OFFSET + HS_JOB_MAX)
#define HS_TOKEN_OFFSET (HS_CLUSTER_OFFSET + HS_CLUSTER_MAX)
_Static_assert(HS_TOKEN_OFFSET + HS_TOKEN_MAX == HS_IDENTITY_SIZE, "identity layout");

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

int hs_identity_build(uint8_t out[HS_IDENTITY_SIZE], struct hs_hello *h, const char *job,
                      int32_t from, const char *cluster, int32_t to_rank, const char *token,
                      uint16_t technique)
{
    uint16_t v = htons(HS_VERSION), t = htons(technique);

    memset(h, 0, sizeof(*h));
    if (token == NULL)
        token = "";
    if (strlen(job) >= HS_JOB_MAX || strlen(cluster) >= HS_CLUSTER_MAX ||
        strlen(token) >= HS_TOKEN_MAX)
        return -1;
    h->from_rank = from;
    h->to_rank = to_rank;
    h->technique = technique;
    /* h is zeroed, so the padding the binder covers is zero too. */
    memcpy(h->job, job, strlen(job) + 1);
    memcpy(h->cluster, cluster, strlen(cluster) + 1);
    memcpy(h->token, token, strlen(token) + 1);
    memcpy(out, identity_magic, 4);
    memcpy(out + 4, &v, 2);
    memcpy(out + 6, &t, 2);
    put32(out + 8, (uint32_t)h->from_rank);
    put32(out + 12, (uint32_t)h->to_rank);
    memcpy(out + HS_JOB_OFFSET, h->job, HS_JOB_MAX);
    memcpy(out + HS_CLUSTER_OFFSET, h->cluster, HS_CLUSTER_MAX);
    memcpy(out + HS_TOKEN_OFFSET, h->token, HS_TOKEN_MAX);
    return 0;
}

enum hs_status hs_identity_parse(const uint8_t *in, size_t len, struct hs_hello *h)
{
    uint16_t version;

    memset(h, 0, sizeof(*h));
    if (len < 8 || memcmp(in, identity_magic, 4) != 0)
        return HS_MALFORMED;
    memcpy(&version, in + 4, 2);
    if (ntohs(version) != HS_VERSION)
        return HS_BAD_VERSION;
    if (len != HS_IDENTITY_SIZE)
        return HS_MALFORMED;
    memcpy(&version, in + 6, 2);
    h->technique = ntohs(version);
    h->from_rank = (int32_t)get32(in + 8);
    h->to_rank = (int32_t)get32(in + 12);
    memcpy(h->job, in + HS_JOB_OFFSET, HS_JOB_MAX);
    memcpy(h->cluster, in + HS_CLUSTER_OFFSET, HS_CLUSTER_MAX);
    memcpy(h->token, in + HS_TOKEN_OFFSET, HS_TOKEN_MAX);
    if (memchr(h->job, '\0', HS_JOB_MAX) == NULL ||
        memchr(h->cluster, '\0', HS_CLUSTER_MAX) == NULL ||
        memchr(h->token, '\0', HS_TOKEN_MAX) == NULL) {
        memset(h, 0, sizeof(*h));
        return HS_MALFORMED;
    }
    return HS_OK;
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
    case HS_MALFORMED:
        return "malformed hello";
    case HS_NO_WAITER:
        return "no connect waits for this token";
    case HS_PLAIN_REFUSED:
        return "plain connection refused: our policy demands encryption";
    case HS_NO_TLS:
        return "encryption asked for, but this program reads plain sockets only";
    }
    return "unknown status";
}
