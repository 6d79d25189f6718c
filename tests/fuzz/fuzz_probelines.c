/* libFuzzer harness for qcg-probe's reading of the observers' answers
   (tools/probe/lines.c): the line the broker's reflector or a proxy sends
   back, read from a socket, then taken as "MAPPED <address> <port>" or
   "DIALED <address> <port> <result>" as site.c does.  Whoever answers in the
   observer's place chooses these bytes.
   Input: the bytes the observer sends, then EOF. */
#include <unistd.h>

#include "address.h"
#include "fuzz.h"
#include "probe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char line[256], why[160], addr[LOCAL_ADDR_MAX], result[16];
    int writer, port;
    int fd = fuzz_socket_holding(data, size, &writer);

    memset(why, 'x', sizeof(why));
    if (probe_exchange_line(fd, "MAP\n", 4, line, sizeof(line), 1000, why, sizeof(why)) < 0) {
        FUZZ_REASON(why);
    } else {
        FUZZ_ASSERT(strlen(line) < sizeof(line) && strchr(line, '\n') == NULL);
        if (probe_mapped_parse(line, addr, sizeof(addr), &port) == 0)
            FUZZ_ASSERT(address_valid(addr) && port >= 1 && port <= 65535);
        if (probe_dialed_parse(line, addr, sizeof(addr), &port, result, sizeof(result)) == 0) {
            FUZZ_ASSERT(address_valid(addr) && port >= 1 && port <= 65535);
            FUZZ_TERMINATED(result);
        }
    }
    close(fd);
    close(writer);
    return 0;
}
