/* libFuzzer harness for the local protocol (libqcgconn/localproto.h): what a
   process of any uid sends the helper, and what the helper sends back to the
   library.  The helper's own dispatch (helper/local.c) is a static table
   behind these same two checks, so the harness drives the checks directly,
   then lmsg_read, the library's reader, over a real Unix socket pair.

   Input: the bytes of a stream of messages (header + payload, repeated). */
#include <fcntl.h>
#include <unistd.h>

#include "fuzz.h"
#include "lmsg.h"
#include "qcgconn.h"

/* What a checked payload promises to whoever uses it next. */
static void accepted(uint16_t type, const union local_payload *p)
{
    switch (type) {
    case LOCAL_HELLO:
        FUZZ_ASSERT(p->hello.version >= LOCAL_VERSION_OLDEST && p->hello.version <= LOCAL_VERSION);
        FUZZ_TERMINATED(p->hello.job);
        FUZZ_TERMINATED(p->hello.secret);
        break;
    case LOCAL_PLAN:
        FUZZ_TERMINATED(p->plan.address);
        FUZZ_TERMINATED(p->plan.token);
        break;
    case LOCAL_INCOMING:
        FUZZ_ASSERT(p->incoming.role <= LOCAL_ROLE_HELLO);
        FUZZ_TERMINATED(p->incoming.token);
        break;
    case LOCAL_REPORT:
        FUZZ_ASSERT(p->report.ok <= 1);
        FUZZ_TERMINATED(p->report.why);
        break;
    case LOCAL_LOOKUP:
        FUZZ_ASSERT(p->lookup.only <= QCG_TECH_PROXY);
        break;
    case LOCAL_SITE_OK:
        FUZZ_ASSERT(p->site.proxies <= LOCAL_PROXIES_MAX);
        FUZZ_ASSERT(p->site.clusters <= LOCAL_CLUSTERS_MAX);
        for (uint32_t i = 0; i < p->site.clusters; i++)
            fuzz_touch(p->site.peer[i].name);
        break;
    case LOCAL_PROBE:
        FUZZ_ASSERT(p->probe.cluster[0] != '\0');
        FUZZ_ASSERT(p->probe.seconds >= 1 && p->probe.seconds <= LOCAL_PROBE_SECONDS_MAX);
        break;
    case LOCAL_PUNCHING_OK:
        for (int f = 0; f < 2; f++) {
            FUZZ_ASSERT(p->punching.family[f].hops >= -1 && p->punching.family[f].hops <= 255);
            fuzz_touch(p->punching.family[f].why);
        }
        break;
    case LOCAL_OBSERVED:
        FUZZ_ASSERT(p->observed.port_preserving >= -1 && p->observed.port_preserving <= 1);
        fuzz_touch(p->observed.kind);
        fuzz_touch(p->observed.mapping);
        fuzz_touch(p->observed.inbound);
        break;
    default:
        break;
    }
}

/* The checks alone, message after message, as helper/local.c applies them. */
static void check_stream(const uint8_t *data, size_t size)
{
    while (size >= sizeof(struct local_header)) {
        struct local_header h;
        union local_payload p;

        memcpy(&h, data, sizeof(h));
        data += sizeof(h);
        size -= sizeof(h);
        if (local_header_check(&h) != 0)
            return;
        FUZZ_ASSERT(h.type > 0 && h.type < LOCAL_TYPE_COUNT && h.length <= sizeof(p));
        if (size < h.length)
            return;
        memset(&p, 0, sizeof(p));
        memcpy(&p, data, h.length);
        data += h.length;
        size -= h.length;
        if (local_payload_check(h.type, &p) == 0)
            accepted(h.type, &p);
    }
}

/* The same bytes through the library's reader, from a socket. */
static void read_stream(const uint8_t *data, size_t size)
{
    int writer, fd = fuzz_socket_holding(data, size, &writer);
    fcntl(fd, F_SETFL, O_NONBLOCK);

    struct lmsg_reader r;
    lmsg_reader_init(&r);
    /* Each message is at least a header: the loop ends. */
    for (size_t n = 0; n <= size / sizeof(struct local_header); n++) {
        int rc = lmsg_read(fd, &r);
        if (rc != 1) {
            FUZZ_ASSERT(rc == QCG_ENOHELPER || rc == QCG_EPROTO);
            break;
        }
        FUZZ_ASSERT(local_header_check(&r.hdr) == 0);
        accepted(r.hdr.type, &r.payload);
        lmsg_reader_reset(&r);
    }
    lmsg_reader_reset(&r);
    close(fd);
    close(writer);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_stream(data, size);
    read_stream(data, size);
    return 0;
}
