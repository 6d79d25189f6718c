/* portmap_parse: what the gateway's answers to NAT-PMP, PCP and SSDP say,
   and that no datagram, however malformed, makes it misbehave. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "probe.h"

static char detail[240];

static int parse(enum portmap_protocol p, const void *b, size_t n)
{
    memset(detail, 'Z', sizeof(detail));
    return portmap_parse(p, b, n, detail, sizeof(detail));
}

static void test_natpmp(void)
{
    /* version 0, op 128, result 0, epoch 0x1234, external 203.0.113.66 */
    const unsigned char ok[12] = {0, 128, 0, 0, 0, 0, 0x12, 0x34, 203, 0, 113, 66};
    CHECK(parse(PORTMAP_NATPMP, ok, sizeof(ok)) == 1);
    CHECK_STR(detail, "external address 203.0.113.66");

    /* miniupnpd with a reserved external address: result 3, 12 bytes */
    const unsigned char failure[12] = {0, 128, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0};
    CHECK(parse(PORTMAP_NATPMP, failure, sizeof(failure)) == 0);
    CHECK_HAS(detail, "result 3 (network failure)");
    /* an error answer may stop after the epoch */
    CHECK(parse(PORTMAP_NATPMP, failure, 8) == 0);
    CHECK(parse(PORTMAP_NATPMP, failure, 4) == 0);
    const unsigned char odd[8] = {0, 128, 0, 77, 0, 0, 0, 1};
    CHECK(parse(PORTMAP_NATPMP, odd, sizeof(odd)) == 0);
    CHECK_HAS(detail, "result 77 (unknown result)");
    /* success needs the address */
    CHECK(parse(PORTMAP_NATPMP, ok, 11) == 0);

    /* a PCP-only server answers in PCP's format (unsupported version) */
    unsigned char pcp[24] = {2, 0x80, 0, 1};
    CHECK(parse(PORTMAP_NATPMP, pcp, sizeof(pcp)) == 0);
    CHECK_HAS(detail, "a PCP server answered: NAT-PMP is not offered");

    /* not answers: too short, a request echoed back, another opcode, junk */
    CHECK(parse(PORTMAP_NATPMP, ok, 3) == -1);
    const unsigned char request[2] = {0, 0};
    CHECK(parse(PORTMAP_NATPMP, request, sizeof(request)) == -1);
    const unsigned char other[12] = {0, 129, 0, 0};
    CHECK(parse(PORTMAP_NATPMP, other, sizeof(other)) == -1);
    CHECK(parse(PORTMAP_NATPMP, "HTTP/1.1 200 OK\r\n", 17) == -1);
    CHECK(parse(PORTMAP_NATPMP, "", 0) == -1);
}

static void test_pcp(void)
{
    unsigned char ok[24] = {2, 0x80, 0, 0};
    CHECK(parse(PORTMAP_PCP, ok, sizeof(ok)) == 1);
    CHECK_HAS(detail, "success");
    CHECK(parse(PORTMAP_PCP, ok, 23) == -1);

    unsigned char denied[24] = {2, 0x80, 0, 2};
    CHECK(parse(PORTMAP_PCP, denied, sizeof(denied)) == 0);
    CHECK_HAS(detail, "result 2 (not authorized)");
    denied[3] = 200;
    CHECK(parse(PORTMAP_PCP, denied, sizeof(denied)) == 0);
    CHECK_HAS(detail, "unknown result");

    /* a NAT-PMP-only server: version 0, op 128 (0x80 | 0), unsupported version */
    const unsigned char natpmp[8] = {0, 128, 0, 1, 0, 0, 0, 9};
    CHECK(parse(PORTMAP_PCP, natpmp, sizeof(natpmp)) == 0);
    CHECK_HAS(detail, "a NAT-PMP server answered: PCP is not offered (unsupported version)");

    /* our own request (R bit clear) and a MAP response are not ANNOUNCE answers */
    unsigned char request[24] = {2, 0};
    CHECK(parse(PORTMAP_PCP, request, sizeof(request)) == -1);
    unsigned char map[60] = {2, 0x81};
    CHECK(parse(PORTMAP_PCP, map, sizeof(map)) == -1);
}

static void test_ssdp(void)
{
    static const char ok[] = "HTTP/1.1 200 OK\r\nCACHE-CONTROL: max-age=120\r\n"
                             "ST: urn:schemas-upnp-org:device:InternetGatewayDevice:1\r\n"
                             "Location:   http://198.18.1.1:46547/rootDesc.xml\r\n\r\n";
    CHECK(parse(PORTMAP_UPNP, ok, strlen(ok)) == 1);
    CHECK_STR(detail, "an Internet gateway device at http://198.18.1.1:46547/rootDesc.xml");

    static const char noloc[] = "HTTP/1.1 200 OK\r\nST: upnp:rootdevice\r\n\r\n";
    CHECK(parse(PORTMAP_UPNP, noloc, strlen(noloc)) == 1);
    CHECK_HAS(detail, "no LOCATION");

    /* What a device sends reaches a terminal and JSON: printable ASCII only. */
    static const char evil[] = "HTTP/1.1 200 OK\r\nLOCATION: http://x/\033[2J\x80\xff\"\\\r\n\r\n";
    CHECK(parse(PORTMAP_UPNP, evil, strlen(evil)) == 1);
    CHECK_STR(detail, "an Internet gateway device at http://x/?[2J??\"\\");

    static const char notfound[] = "HTTP/1.1 404 Not Found\r\n\r\n";
    CHECK(parse(PORTMAP_UPNP, notfound, strlen(notfound)) == -1);
    static const char notify[] = "NOTIFY * HTTP/1.1\r\nLOCATION: http://x/\r\n\r\n";
    CHECK(parse(PORTMAP_UPNP, notify, strlen(notify)) == -1);
    CHECK(parse(PORTMAP_UPNP, ok, 11) == -1);
}

/* xorshift: the same mutations every run. */
static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_random(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Random mutations of valid answers (bytes changed, cut, grown with junk),
   and pure junk: the verdict is one of the three, the detail a terminated
   line of printable characters, and nothing is read past the datagram
   (ASan in CI). */
static void test_mutations(void)
{
    static const unsigned char natpmp[12] = {0, 128, 0, 0, 0, 0, 0x12, 0x34, 203, 0, 113, 66};
    static const unsigned char pcp[24] = {2, 0x80, 0, 0};
    static const char ssdp[] = "HTTP/1.1 200 OK\r\nLOCATION: http://198.18.1.1:1/r.xml\r\n\r\n";
    const struct {
        enum portmap_protocol p;
        const unsigned char *b;
        size_t n;
    } seeds[] = {{PORTMAP_NATPMP, natpmp, sizeof(natpmp)},
                 {PORTMAP_PCP, pcp, sizeof(pcp)},
                 {PORTMAP_UPNP, (const unsigned char *)ssdp, sizeof(ssdp) - 1}};
    int bad = 0, verdicts[3] = {0, 0, 0};

    for (int round = 0; round < 300000 && bad == 0; round++) {
        int which = (int)(next_random() % 3);
        size_t n = seeds[which].n + next_random() % 16;
        if (next_random() % 4 == 0)
            n = next_random() % (seeds[which].n + 1);
        unsigned char *buf = malloc(n > 0 ? n : 1); /* exactly n: ASan sees overreads */
        for (size_t i = 0; i < n; i++)
            buf[i] = i < seeds[which].n ? seeds[which].b[i] : (unsigned char)next_random();
        for (int k = (int)(next_random() % 4); k > 0 && n > 0; k--)
            buf[next_random() % n] = (unsigned char)next_random();
        enum portmap_protocol as =
            next_random() % 8 == 0 ? (enum portmap_protocol)(next_random() % 3) : seeds[which].p;
        int v = parse(as, buf, n);
        size_t len = strnlen(detail, sizeof(detail));
        if (v < -1 || v > 1 || (v >= 0 && len == sizeof(detail))) {
            fprintf(stderr, "round %d: verdict %d, detail of %zu bytes\n", round, v, len);
            bad++;
        }
        for (size_t i = 0; v >= 0 && i < len; i++) {
            if (detail[i] < 0x20 || detail[i] > 0x7e) {
                fprintf(stderr, "round %d: byte 0x%02x in the detail\n", round,
                        (unsigned char)detail[i]);
                bad++;
                break;
            }
        }
        verdicts[v + 1]++;
        free(buf);
    }
    CHECK(bad == 0);
    /* The mutations reach every verdict. */
    CHECK(verdicts[0] > 0 && verdicts[1] > 0 && verdicts[2] > 0);
    printf("300000 mutated answers: %d ignored, %d answered without offering, %d offered\n",
           verdicts[0], verdicts[1], verdicts[2]);
}

int main(void)
{
    test_natpmp();
    test_pcp();
    test_ssdp();
    test_mutations();
    return check_result("probe-portmap");
}
