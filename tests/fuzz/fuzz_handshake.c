/* libFuzzer harness for the process-to-process handshake
   (libqcgconn/handshake.h, tls_psk.h): the PSK identity any host may put in
   a ClientHello, and the bytes a listening or connecting process reads
   during the TLS handshake.  Without the job's PSK no input can complete a
   handshake.

   Input: byte 0 % 3 picks the mode, the rest is
     0: an identity (hs_identity_parse), then the same bytes as what a
        connecting peer sends a listener (hs_respond);
     1: what an accepting peer answers a connecting one (hs_initiate);
     2: to_rank (1) | where (2) | byte (1) | token (the rest, up to its NUL):
        a real identity with one byte changed. */
#include <unistd.h>

#include "fuzz.h"
#include "handshake_blocking.h"
#include "internal.h"

#define RANK 3

static const struct hs_self self = {.job = "job-42",
                                    .rank = RANK,
                                    .secret = "the job secret",
                                    .cluster = "siteA",
                                    .policy = QCG_ENCRYPT_NEVER};

static void check_parsed(enum hs_status st, const struct hs_hello *h)
{
    FUZZ_TERMINATED(h->job);
    FUZZ_TERMINATED(h->cluster);
    FUZZ_TERMINATED(h->token);
    FUZZ_ASSERT(st == HS_OK || st == HS_MALFORMED || st == HS_BAD_VERSION);
    FUZZ_ASSERT(strcmp(hs_status_name(st), "unknown status") != 0);
}

static void hello_in(const uint8_t *data, size_t size)
{
    struct hs_hello h;
    char err[256];

    check_parsed(hs_identity_parse(data, size, &h), &h);

    int other, fd = fuzz_socket_holding(data, size, &other);
    int rc = hs_respond(fd, &self, now_us() + 1000000, &h, err, sizeof(err));
    FUZZ_ASSERT(rc < 0);
    FUZZ_REASON(err);
    close(fd);
    close(other);
}

static void answer_in(const uint8_t *data, size_t size)
{
    char err[256];
    int other, fd = fuzz_socket_holding(data, size, &other);
    int rc = hs_initiate(fd, &self, 5, now_us() + 1000000, err, sizeof(err));

    FUZZ_ASSERT(rc < 0);
    FUZZ_REASON(err);
    close(fd);
    close(other);
}

static void changed(const uint8_t *data, size_t size)
{
    uint8_t id[HS_IDENTITY_SIZE];
    char token[HS_TOKEN_MAX] = "";
    struct hs_hello sent, got;

    if (size < 4)
        return;
    int32_t to_rank = data[0] % 8;
    size_t where = ((size_t)data[1] << 8 | data[2]) % HS_IDENTITY_SIZE;
    uint8_t byte = data[3];
    size_t n = size - 4 < sizeof(token) - 1 ? size - 4 : sizeof(token) - 1;
    memcpy(token, data + 4, n);

    FUZZ_ASSERT(hs_identity_build(id, &sent, self.job, RANK, self.cluster, to_rank, token, 0) == 0);
    FUZZ_ASSERT(hs_identity_parse(id, sizeof(id), &got) == HS_OK);
    FUZZ_ASSERT(strcmp(got.token, token) == 0 && got.from_rank == RANK && got.to_rank == to_rank);
    id[where] = byte;
    check_parsed(hs_identity_parse(id, sizeof(id), &got), &got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    switch (data[0] % 3) {
    case 0:
        hello_in(data + 1, size - 1);
        break;
    case 1:
        answer_in(data + 1, size - 1);
        break;
    default:
        changed(data + 1, size - 1);
        break;
    }
    return 0;
}
