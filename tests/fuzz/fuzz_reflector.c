/* libFuzzer harness for the reflector's request line (broker/reflector.h,
   reflector_line.c): what any host on the internet may send the broker's
   reflector port.  Input: the line without its '\n', in a buffer of exactly
   its size. */
#include <arpa/inet.h>

#include "fuzz.h"
#include "reflector.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct reflector_request req;
    char why[128];
    char *line = fuzz_copy(data, size);

    if (reflector_parse(line, size, &req, why, sizeof(why)) < 0) {
        FUZZ_REASON(why);
        free(line);
        return 0;
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
    return 0;
}
