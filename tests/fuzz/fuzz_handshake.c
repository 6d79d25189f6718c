/* libFuzzer harness for the process-to-process handshake
   (libqcgconn/handshake.h): the hello any host may send a process's
   listening port, and the answer a connecting process reads.  Random bytes
   never carry a good MAC, so one mode builds a real hello and answer from
   the input's fields and changes one byte: unchanged they pass, changed they
   must not.

   Input: byte 0 % 3 picks the mode, the rest is
     0: a hello, read by hs_respond from a socket (and hs_hello_check);
     1: an answer, read by hs_initiate from a socket (and hs_accept_check);
     2: to_rank (1) | where (2) | byte (1) | token (the rest, up to its NUL). */
#include <unistd.h>

#include "fuzz.h"
#include "handshake_blocking.h"
#include "internal.h"

#define RANK 3

static const struct hs_self self = {
    .job = "job-42", .rank = RANK, .secret = "the job secret", .cluster = "siteA"};

static void hello_in(const uint8_t *data, size_t size)
{
    uint8_t in[HS_HELLO_SIZE] = {0};
    struct hs_hello h;
    char err[256];

    memcpy(in, data, size < sizeof(in) ? size : sizeof(in));
    enum hs_status st = hs_hello_check(in, &self, &h);
    FUZZ_TERMINATED(h.job);
    FUZZ_TERMINATED(h.cluster);
    FUZZ_TERMINATED(h.token);
    FUZZ_ASSERT(strcmp(hs_status_name(st), "unknown status") != 0);
    /* Only a hello made with the secret (a seed) passes. */
    if (st == HS_OK)
        FUZZ_ASSERT(strcmp(h.job, self.job) == 0 && h.to_rank == RANK);

    int other, fd = fuzz_socket_holding(data, size, &other);
    int rc = hs_respond(fd, &self, now_us() + 1000000, &h, err, sizeof(err));
    if (size >= HS_HELLO_SIZE)
        FUZZ_ASSERT((rc == 0) == (st == HS_OK));
    if (rc < 0)
        FUZZ_REASON(err);
    close(fd);
    close(other);
}

static void answer_in(const uint8_t *data, size_t size)
{
    uint8_t in[HS_ACCEPT_SIZE] = {0}, hello[HS_HELLO_SIZE];
    struct hs_hello h;
    const char *why = NULL;
    char err[256];

    FUZZ_ASSERT(hs_hello_build(hello, &h, &self, 5, NULL) == 0);
    memcpy(in, data, size < sizeof(in) ? size : sizeof(in));
    /* The MAC covers the hello's fresh nonce: no input can forge it. */
    FUZZ_ASSERT(hs_accept_check(in, &h, self.secret, &why) < 0 && why != NULL);
    fuzz_touch(why);

    int other, fd = fuzz_socket_holding(data, size, &other);
    int rc = hs_initiate(fd, &self, 5, now_us() + 1000000, err, sizeof(err));
    FUZZ_ASSERT(rc < 0);
    FUZZ_REASON(err);
    close(fd);
    close(other);
}

static void changed(const uint8_t *data, size_t size)
{
    uint8_t hello[HS_HELLO_SIZE], answer[HS_ACCEPT_SIZE];
    char token[HS_TOKEN_MAX] = "";
    struct hs_hello sent, got;
    const char *why = NULL;

    if (size < 4)
        return;
    int32_t to_rank = data[0] % 8;
    size_t where = ((size_t)data[1] << 8 | data[2]) % (HS_HELLO_SIZE + HS_ACCEPT_SIZE);
    uint8_t byte = data[3];
    size_t n = size - 4 < sizeof(token) - 1 ? size - 4 : sizeof(token) - 1;
    memcpy(token, data + 4, n);

    FUZZ_ASSERT(hs_hello_build(hello, &sent, &self, to_rank, token) == 0);
    enum hs_status st = hs_hello_check(hello, &self, &got);
    FUZZ_ASSERT(st == (to_rank == RANK ? HS_OK : HS_WRONG_RANK));
    FUZZ_ASSERT(strcmp(got.token, token) == 0 && got.from_rank == RANK);
    hs_accept_build(answer, HS_OK, &got, self.secret);
    FUZZ_ASSERT(hs_accept_check(answer, &sent, self.secret, &why) == 0);

    if (where < HS_HELLO_SIZE) {
        if (hello[where] == byte)
            return;
        hello[where] = byte;
        FUZZ_ASSERT(hs_hello_check(hello, &self, &got) != HS_OK);
    } else {
        where -= HS_HELLO_SIZE;
        if (answer[where] == byte)
            return;
        answer[where] = byte;
        FUZZ_ASSERT(hs_accept_check(answer, &sent, self.secret, &why) < 0);
    }
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
