/* libFuzzer harness for qcg-probe's port-mapping answers
   (tools/probe/portmap.c): a NAT-PMP, PCP or SSDP datagram from whatever
   answers on the site's gateway address or the SSDP group.
   Input: byte 0 % 3 picks the protocol (enum portmap_protocol), the rest is
   the datagram, in a buffer of exactly its size. */
#include "fuzz.h"
#include "probe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char detail[160];

    if (size == 0)
        return 0;
    enum portmap_protocol proto = (enum portmap_protocol)(data[0] % 3);
    size_t n = size - 1;
    unsigned char *b = fuzz_copy(data + 1, n);
    detail[0] = '\0';
    int rc = portmap_parse(proto, b, n, detail, sizeof(detail));
    FUZZ_ASSERT(rc >= -1 && rc <= 1);
    if (rc >= 0) {
        /* A line for a terminal and for JSON: printable ASCII only. */
        FUZZ_REASON(detail);
        for (const char *c = detail; *c != '\0'; c++)
            FUZZ_ASSERT(*c >= 0x20 && *c < 0x7f);
    }
    free(b);
    return 0;
}
