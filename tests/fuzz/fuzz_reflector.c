/* libFuzzer harness for the reflector's lines (broker/reflector.h): the
   request line any host on the internet may send the broker's reflector port
   (reflector_line.c), and the answer a helper's hole punch reads back from
   it over plain TCP (helper/punch.h).
   Input: byte 0 even: a request line without its '\n', in a buffer of
   exactly its size; odd: an answer line, NUL-terminated as punch.c reads it
   (at most 511 bytes, no NUL inside). */
#include <arpa/inet.h>

#include "fuzz.h"
#include "punch.h"
#include "reflector.h"

/* The line as a punch of `family` reads it (one per reflector family). */
static void answer_of(const uint8_t *data, size_t size, int family)
{
    char line[512], why[600];
    struct punch_result res;
    struct sockaddr_storage peer;

    size = size < sizeof(line) - 1 ? size : sizeof(line) - 1;
    memcpy(line, data, size);
    line[size] = '\0';
    memset(&res, 0, sizeof(res));
    if (punch_answer_parse(line, family, &res, &peer, why, sizeof(why)) < 0) {
        FUZZ_TERMINATED(why);
        FUZZ_ASSERT(strncmp(why, "reflector: ", 11) == 0);
        return;
    }
    unsigned char bin[16];
    FUZZ_TERMINATED(res.peer_addr);
    FUZZ_TERMINATED(res.own_addr);
    FUZZ_ASSERT(res.peer_port > 0 && res.own_port > 0);
    FUZZ_ASSERT(peer.ss_family == family);
    FUZZ_ASSERT(inet_pton(family, res.peer_addr, bin) == 1 &&
                inet_pton(family, res.own_addr, bin) == 1);
}

static void answer(const uint8_t *data, size_t size)
{
    answer_of(data, size, AF_INET);
    answer_of(data, size, AF_INET6);
}

static void request(const uint8_t *data, size_t size)
{
    struct reflector_request req;
    char why[128];
    char *line = fuzz_copy(data, size);

    if (reflector_parse(line, size, &req, why, sizeof(why)) < 0) {
        FUZZ_REASON(why);
        free(line);
        return;
    }
    FUZZ_ASSERT(size <= REFLECTOR_LINE_MAX);
    switch (req.verb) {
    case REFLECTOR_MAP:
        FUZZ_ASSERT(size == 3);
        break;
    case REFLECTOR_DIAL:
        FUZZ_ASSERT(req.port >= 1 && req.port <= 65535);
        break;
    case REFLECTOR_PUNCH: {
        unsigned char bin[16];
        FUZZ_ASSERT(req.port >= 1 && req.port <= 65535);
        FUZZ_ASSERT(strnlen(req.token, sizeof(req.token)) == TOKEN_TEXT_LEN);
        FUZZ_TERMINATED(req.local_addr);
        FUZZ_ASSERT(inet_pton(AF_INET, req.local_addr, bin) == 1 ||
                    inet_pton(AF_INET6, req.local_addr, bin) == 1);
        break;
    }
    default:
        FUZZ_ASSERT(!"a verb out of the enum");
    }
    free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        answer(data + 1, size - 1);
    else
        request(data + 1, size - 1);
    return 0;
}
