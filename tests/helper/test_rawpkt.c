/* Unit tests of helper/rawpkt.c: parsing, the checks before an injection,
   rewriting and checksums, against a SYN captured from Linux 6.18. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rawpkt.h"

/* A connect() from 198.18.101.11:40380 to 198.51.100.201:5201 as NFQUEUE
   delivered it (checksums completed by the kernel): MSS 1460, SACK
   permitted, timestamps (TSval 0x76eefc90), window scale 10. */
static const uint8_t kernel_syn[] = {
    0x45, 0x00, 0x00, 0x3c, 0xb2, 0x0d, 0x40, 0x00, 0x40, 0x06, 0x32, 0x94, 0xc6, 0x12, 0x65,
    0x0b, 0xc6, 0x33, 0x64, 0xc9, 0x9d, 0xbc, 0x14, 0x51, 0x50, 0x6e, 0xa5, 0xc4, 0x00, 0x00,
    0x00, 0x00, 0xa0, 0x02, 0xfa, 0xf0, 0xdb, 0x31, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04,
    0x02, 0x08, 0x0a, 0x76, 0xee, 0xfc, 0x90, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x0a,
};

static struct rawpkt_addr addr(const char *s)
{
    struct rawpkt_addr a;

    CHECK(rawpkt_addr_parse(s, &a) == 0);
    return a;
}

/* addr's, for the calls that take a pointer (a test's one at a time). */
static const struct rawpkt_addr *ap(const char *s)
{
    static struct rawpkt_addr a;

    a = addr(s);
    return &a;
}

/* Whether a is the address text s. */
static int is(const struct rawpkt_addr *a, const char *s)
{
    struct rawpkt_addr b = addr(s);

    return rawpkt_addr_same(a, &b);
}

static uint16_t get16(const uint8_t *b)
{
    return (uint16_t)(b[0] << 8 | b[1]);
}

static void test_parse(void)
{
    struct rawpkt_tcp p;
    char why[128];

    CHECK(rawpkt_parse(kernel_syn, sizeof(kernel_syn), &p, why, sizeof(why)) == 0);
    CHECK(is(&p.src, "198.18.101.11"));
    CHECK(is(&p.dst, "198.51.100.201"));
    CHECK(p.sport == 40380 && p.dport == 5201);
    CHECK(p.seq == 0x506ea5c4 && p.ack == 0);
    CHECK(p.flags == RAWPKT_SYN);
    CHECK(p.window == 64240);
    CHECK(p.ip_len == 20 && p.tcp_len == 40 && p.total == 60 && p.payload == 0);
    CHECK(p.has_ts && p.tsval == 0x76eefc90 && p.tsecr == 0);
    CHECK(p.has_ws && p.wscale == 10);
    CHECK(rawpkt_checksums_ok(kernel_syn, sizeof(kernel_syn)));
    CHECK(rawpkt_check_syn(&p, ap("198.51.100.201"), 5201, why, sizeof(why)) == 0);
    /* Bytes beyond the IP total length (link padding) are ignored. */
    uint8_t padded[sizeof(kernel_syn) + 6] = {0};
    memcpy(padded, kernel_syn, sizeof(kernel_syn));
    CHECK(rawpkt_parse(padded, sizeof(padded), &p, why, sizeof(why)) == 0 && p.total == 60);
}

/* Parses pkt (len bytes), expecting a failure whose reason contains want. */
static void parse_fails(const uint8_t *pkt, size_t len, const char *want)
{
    struct rawpkt_tcp p;
    char why[128] = "";

    CHECK(rawpkt_parse(pkt, len, &p, why, sizeof(why)) < 0);
    CHECK_HAS(why, want);
}

static void test_malformed(void)
{
    uint8_t b[sizeof(kernel_syn)];

    parse_fails(NULL, 0, "shorter");
    parse_fails(kernel_syn, 19, "shorter");
    /* Every truncation is refused, never read beyond. */
    for (size_t n = 20; n < sizeof(kernel_syn); n++) {
        struct rawpkt_tcp p;
        char why[128];

        CHECK(rawpkt_parse(kernel_syn, n, &p, why, sizeof(why)) < 0);
    }
    memcpy(b, kernel_syn, sizeof(b));
    b[0] = 0x75;
    parse_fails(b, sizeof(b), "neither IPv4 nor IPv6");
    memcpy(b, kernel_syn, sizeof(b));
    b[0] = 0x44;
    parse_fails(b, sizeof(b), "header length");
    memcpy(b, kernel_syn, sizeof(b));
    b[0] = 0x4f; /* 60-byte IP header: no room left for TCP */
    parse_fails(b, sizeof(b), "length");
    memcpy(b, kernel_syn, sizeof(b));
    b[3] = 0x50; /* total length 80 > 60 */
    parse_fails(b, sizeof(b), "total length");
    memcpy(b, kernel_syn, sizeof(b));
    b[9] = IPPROTO_UDP;
    parse_fails(b, sizeof(b), "not TCP");
    memcpy(b, kernel_syn, sizeof(b));
    b[6] = 0x20; /* more fragments */
    parse_fails(b, sizeof(b), "fragment");
    memcpy(b, kernel_syn, sizeof(b));
    b[32] = 0xf0; /* data offset 60 > 40 */
    parse_fails(b, sizeof(b), "TCP header length");
    memcpy(b, kernel_syn, sizeof(b));
    b[32] = 0x40; /* data offset 16 < 20 */
    parse_fails(b, sizeof(b), "TCP header length");
    memcpy(b, kernel_syn, sizeof(b));
    b[45] = 0x20; /* SACK-permitted option claiming 32 bytes */
    parse_fails(b, sizeof(b), "option");
    memcpy(b, kernel_syn, sizeof(b));
    b[47] = 0x09; /* timestamps of the wrong length */
    parse_fails(b, sizeof(b), "option");
    memcpy(b, kernel_syn, sizeof(b));
    b[41] = 0x00; /* option length 0 would loop for ever */
    parse_fails(b, sizeof(b), "option");
}

/* The SYN with one thing changed must fail rawpkt_check_syn, saying want. */
static void syn_refused(size_t off, uint8_t v, struct rawpkt_addr node, uint16_t port,
                        const char *want)
{
    uint8_t b[sizeof(kernel_syn)];
    struct rawpkt_tcp p;
    char why[128] = "";

    memcpy(b, kernel_syn, sizeof(b));
    b[off] = v;
    CHECK(rawpkt_parse(b, sizeof(b), &p, why, sizeof(why)) == 0);
    CHECK(rawpkt_check_syn(&p, &node, port, why, sizeof(why)) < 0);
    CHECK_HAS(why, want);
}

static void test_check_syn(void)
{
    struct rawpkt_addr node = addr("198.51.100.201"), other = addr("198.51.100.202");

    syn_refused(33, RAWPKT_SYN, node, 5202, "not the published port");
    syn_refused(33, RAWPKT_SYN, other, 5201, "not this node");
    syn_refused(33, RAWPKT_SYN | RAWPKT_ACK, node, 5201, "not a plain SYN");
    syn_refused(33, RAWPKT_ACK, node, 5201, "not a plain SYN");
    syn_refused(33, RAWPKT_SYN | RAWPKT_RST, node, 5201, "not a plain SYN");
    syn_refused(33, RAWPKT_SYN | RAWPKT_FIN, node, 5201, "not a plain SYN");
    syn_refused(33, 0, node, 5201, "not a plain SYN");

    /* A SYN carrying data (TCP Fast Open) is not injected either. */
    uint8_t b[sizeof(kernel_syn) + 4];
    struct rawpkt_tcp p;
    char why[128] = "";

    memcpy(b, kernel_syn, sizeof(kernel_syn));
    memcpy(b + sizeof(kernel_syn), "data", 4);
    b[3] = (uint8_t)sizeof(b);
    CHECK(rawpkt_parse(b, sizeof(b), &p, why, sizeof(why)) == 0 && p.payload == 4);
    CHECK(rawpkt_check_syn(&p, &node, 5201, why, sizeof(why)) < 0);
    CHECK_HAS(why, "data");
}

static void test_rewrite(void)
{
    uint8_t b[sizeof(kernel_syn)];
    struct rawpkt_tcp p;
    char why[128];

    /* Expected values computed independently (RFC 1071, by hand in Python). */
    memcpy(b, kernel_syn, sizeof(b));
    rawpkt_set_source(b, sizeof(b), ap("203.0.113.201"), 40380);
    CHECK(get16(b + 10) == 0x20e8);
    CHECK(get16(b + 36) == 0xc985);
    CHECK(rawpkt_checksums_ok(b, sizeof(b)));
    CHECK(rawpkt_parse(b, sizeof(b), &p, why, sizeof(why)) == 0);
    CHECK(is(&p.src, "203.0.113.201") && p.sport == 40380);
    /* Only the source changed. */
    CHECK(memcmp(b + 16, kernel_syn + 16, 4) == 0);
    CHECK(memcmp(b + 22, kernel_syn + 22, 14) == 0);
    CHECK(memcmp(b + 38, kernel_syn + 38, sizeof(b) - 38) == 0);

    /* A corrupted byte is seen; fixing the checksums repairs it. */
    memcpy(b, kernel_syn, sizeof(b));
    b[50]++;
    CHECK(!rawpkt_checksums_ok(b, sizeof(b)));
    rawpkt_fix_checksums(b, sizeof(b));
    CHECK(rawpkt_checksums_ok(b, sizeof(b)));
    rawpkt_set_source(b, sizeof(b), ap("198.18.101.11"), 40380);
    b[50]--;
    CHECK(!rawpkt_checksums_ok(b, sizeof(b)));
}

/* The kernel's SYN turned into the target's SYN/ACK: our own test vector. */
static void make_synack(uint8_t *b)
{
    memcpy(b, kernel_syn, sizeof(kernel_syn));
    memcpy(b + 12, kernel_syn + 16, 4); /* 198.51.100.201:5201 -> 203.0.113.201:40380 */
    memcpy(b + 16, (uint8_t[]){203, 0, 113, 201}, 4);
    memcpy(b + 20, kernel_syn + 22, 2);
    memcpy(b + 22, kernel_syn + 20, 2);
    memcpy(b + 24, (uint8_t[]){0x11, 0x22, 0x33, 0x44}, 4); /* seq */
    memcpy(b + 28, (uint8_t[]){0x50, 0x6e, 0xa5, 0xc5}, 4); /* ack: their seq + 1 */
    b[33] = RAWPKT_SYN | RAWPKT_ACK;
    memcpy(b + 52, (uint8_t[]){0x76, 0xee, 0xfc, 0x90}, 4); /* TSecr: their TSval */
    memcpy(b + 48, (uint8_t[]){0x00, 0x00, 0x12, 0x34}, 4); /* TSval */
    b[59] = 7;                                              /* window scale */
    rawpkt_fix_checksums(b, sizeof(kernel_syn));
}

static void test_synack_to_syn(void)
{
    uint8_t b[sizeof(kernel_syn)];
    struct rawpkt_tcp p;
    char why[128];

    make_synack(b);
    CHECK(rawpkt_parse(b, sizeof(b), &p, why, sizeof(why)) == 0);
    CHECK(p.flags == (RAWPKT_SYN | RAWPKT_ACK) && p.ack == 0x506ea5c5);
    rawpkt_synack_to_syn(b, sizeof(b));
    CHECK(rawpkt_checksums_ok(b, sizeof(b)));
    CHECK(rawpkt_parse(b, sizeof(b), &p, why, sizeof(why)) == 0);
    CHECK(p.flags == RAWPKT_SYN && p.ack == 0 && p.seq == 0x11223344);
    CHECK(p.has_ts && p.tsval == 0x1234 && p.has_ws && p.wscale == 7);
}

static void test_build_ack(void)
{
    uint8_t synack[sizeof(kernel_syn)], ack[80];
    struct rawpkt_tcp s, a;
    char why[128];
    size_t n;

    /* The initiator's SYN/ACK arriving at the target: 203.0.113.201:40380 ->
       198.51.100.201:5201, seq its ISN, acking ours (0x11223344 + 1). */
    memcpy(synack, kernel_syn, sizeof(synack));
    memcpy(synack + 12, (uint8_t[]){203, 0, 113, 201}, 4);
    synack[33] = RAWPKT_SYN | RAWPKT_ACK;
    memcpy(synack + 28, (uint8_t[]){0x11, 0x22, 0x33, 0x45}, 4);
    memcpy(synack + 52, (uint8_t[]){0x00, 0x00, 0x12, 0x34}, 4);
    rawpkt_fix_checksums(synack, sizeof(synack));
    CHECK(rawpkt_parse(synack, sizeof(synack), &s, why, sizeof(why)) == 0);

    CHECK(rawpkt_build_ack(&s, ack, 40) == 0);
    n = rawpkt_build_ack(&s, ack, sizeof(ack));
    CHECK(n == 52);
    CHECK(rawpkt_checksums_ok(ack, n));
    CHECK(rawpkt_parse(ack, n, &a, why, sizeof(why)) == 0);
    CHECK(rawpkt_addr_same(&a.src, &s.src) && rawpkt_addr_same(&a.dst, &s.dst));
    CHECK(a.sport == 40380 && a.dport == 5201);
    CHECK(a.flags == RAWPKT_ACK);
    CHECK(a.seq == 0x506ea5c5 && a.ack == 0x11223345);
    CHECK(a.has_ts && a.tsval == 0x76eefc90 && a.tsecr == 0x1234);
    CHECK(a.window == (64240 >> 10));
    CHECK(a.payload == 0);

    /* Without timestamps nor window scale: a 40-byte ACK, window as is. */
    s.has_ts = 0;
    s.has_ws = 0;
    n = rawpkt_build_ack(&s, ack, sizeof(ack));
    CHECK(n == 40 && rawpkt_checksums_ok(ack, n));
    CHECK(rawpkt_parse(ack, n, &a, why, sizeof(why)) == 0 && !a.has_ts && a.window == 64240);
}

/* The kernel's SYN's TCP header behind an IPv6 header: 2001:db8:65::b port
   40380 -> 2001:db8:64::c9 port 5201, checksum fixed. */
static size_t make_syn6(uint8_t *b)
{
    memset(b, 0, 40);
    b[0] = 0x60;
    b[5] = 40; /* payload length: the TCP header */
    b[6] = IPPROTO_TCP;
    b[7] = 64;
    inet_pton(AF_INET6, "2001:db8:65::b", b + 8);
    inet_pton(AF_INET6, "2001:db8:64::c9", b + 24);
    memcpy(b + 40, kernel_syn + 20, 40);
    rawpkt_fix_checksums(b, 80);
    return 80;
}

/* IPv6: parsed, checked, rewritten and answered as IPv4 is. */
static void test_ipv6(void)
{
    uint8_t b[96], ack[96];
    struct rawpkt_tcp p, a;
    char why[128] = "";
    size_t n = make_syn6(b);

    CHECK(rawpkt_parse(b, n, &p, why, sizeof(why)) == 0);
    CHECK(p.src.family == AF_INET6 && is(&p.src, "2001:db8:65::b") &&
          is(&p.dst, "2001:db8:64::c9"));
    CHECK(p.ip_len == 40 && p.tcp_len == 40 && p.total == 80 && p.payload == 0);
    CHECK(p.sport == 40380 && p.dport == 5201 && p.flags == RAWPKT_SYN && p.has_ts && p.has_ws);
    CHECK(rawpkt_checksums_ok(b, n));
    CHECK(rawpkt_check_syn(&p, ap("2001:db8:64::c9"), 5201, why, sizeof(why)) == 0);
    CHECK(rawpkt_check_syn(&p, ap("2001:db8:64::ca"), 5201, why, sizeof(why)) < 0);
    CHECK_HAS(why, "destination 2001:db8:64::c9 is not this node (2001:db8:64::ca)");
    /* The same host's IPv4 address is another family: not this node. */
    CHECK(rawpkt_check_syn(&p, ap("198.51.100.201"), 5201, why, sizeof(why)) < 0);
    /* A damaged segment fails the checksum: the pseudo header has the
       IPv6 addresses. */
    b[30]++;
    CHECK(!rawpkt_checksums_ok(b, n));
    b[30]--;

    /* The source rewritten (an IPv4 one leaves it alone). */
    rawpkt_set_source(b, n, ap("203.0.113.201"), 1);
    CHECK(rawpkt_parse(b, n, &p, why, sizeof(why)) == 0 && p.sport == 40380);
    rawpkt_set_source(b, n, ap("2001:db8:cb::c9"), 40381);
    CHECK(rawpkt_checksums_ok(b, n));
    CHECK(rawpkt_parse(b, n, &p, why, sizeof(why)) == 0);
    CHECK(is(&p.src, "2001:db8:cb::c9") && p.sport == 40381);

    /* Turned into a SYN/ACK and back, then answered with the third ACK. */
    b[53] = RAWPKT_SYN | RAWPKT_ACK;
    memcpy(b + 48, (uint8_t[]){0x11, 0x22, 0x33, 0x45}, 4);
    rawpkt_fix_checksums(b, n);
    CHECK(rawpkt_parse(b, n, &p, why, sizeof(why)) == 0);
    size_t m = rawpkt_build_ack(&p, ack, sizeof(ack));
    CHECK(m == 72 && rawpkt_checksums_ok(ack, m));
    CHECK(rawpkt_parse(ack, m, &a, why, sizeof(why)) == 0);
    CHECK(rawpkt_addr_same(&a.src, &p.src) && rawpkt_addr_same(&a.dst, &p.dst));
    CHECK(a.flags == RAWPKT_ACK && a.seq == p.seq + 1 && a.ack == 0x11223345 && ack[7] == 64);
    rawpkt_synack_to_syn(b, n);
    CHECK(rawpkt_checksums_ok(b, n));
    CHECK(rawpkt_parse(b, n, &p, why, sizeof(why)) == 0 && p.flags == RAWPKT_SYN && p.ack == 0);

    /* An extension header, a payload length past the packet, too short. */
    make_syn6(b);
    b[6] = 0; /* hop-by-hop options */
    parse_fails(b, n, "not TCP right after the IPv6 header");
    make_syn6(b);
    b[5] = 41;
    parse_fails(b, n, "IPv6 payload length does not fit the packet");
    make_syn6(b);
    b[5] = 19;
    parse_fails(b, n, "IPv6 payload length does not fit the packet");
    for (size_t len = 0; len < 60; len++) {
        uint8_t *h = malloc(len ? len : 1);

        memcpy(h, b, len);
        CHECK(rawpkt_parse(h, len, &p, why, sizeof(why)) < 0);
        CHECK(!rawpkt_checksums_ok(h, len));
        free(h);
    }
}

/* Random damage to the kernel's SYN (fixed seed): whatever parses must be
   safe to check, rewrite and answer; under ASan any overread shows. */
static void test_mutations(void)
{
    uint32_t seed = 12345;
    unsigned parsed = 0;

    for (int round = 0; round < 200000; round++) {
        uint8_t b[sizeof(kernel_syn)], out[80];
        struct rawpkt_tcp p;
        char why[128];

        memcpy(b, kernel_syn, sizeof(b));
        for (int k = 0; k < 1 + round % 4; k++) {
            seed = seed * 1103515245u + 12345u;
            b[(seed >> 8) % sizeof(b)] = (uint8_t)(seed >> 20);
        }
        seed = seed * 1103515245u + 12345u;
        size_t len = (seed >> 16) % 4 == 0 ? (seed >> 8) % sizeof(b) : sizeof(b);
        /* A heap copy of exactly len bytes, so that ASan sees any overread. */
        uint8_t *h = malloc(len ? len : 1);

        memcpy(h, b, len);
        if (rawpkt_parse(h, len, &p, why, sizeof(why)) == 0) {
            parsed++;
            CHECK(p.total <= len && p.ip_len + p.tcp_len + p.payload == p.total);
            rawpkt_check_syn(&p, ap("198.51.100.201"), 5201, why, sizeof(why));
            rawpkt_set_source(h, p.total, ap("203.0.113.201"), 1);
            CHECK(rawpkt_checksums_ok(h, p.total));
            rawpkt_synack_to_syn(h, p.total);
            CHECK(rawpkt_build_ack(&p, out, sizeof(out)) > 0);
        }
        free(h);
    }
    CHECK(parsed > 1000);
}

/* Found by fuzz-rawpkt (tests/fuzz/corpus/rawpkt/crash-empty): the checksum
   and rewrite helpers read the header before checking len; a buffer shorter
   than an IPv4 header is refused without a byte read past it (ASan). */
static void test_short_buffers(void)
{
    for (size_t len = 0; len < 20; len++) {
        uint8_t *h = malloc(len ? len : 1);

        memcpy(h, kernel_syn, len);
        CHECK(!rawpkt_checksums_ok(h, len));
        rawpkt_fix_checksums(h, len);
        rawpkt_set_source(h, len, ap("203.0.113.201"), 1);
        rawpkt_synack_to_syn(h, len);
        CHECK(memcmp(h, kernel_syn, len) == 0);
        free(h);
    }
}

int main(void)
{
    test_parse();
    test_malformed();
    test_check_syn();
    test_rewrite();
    test_synack_to_syn();
    test_build_ack();
    test_ipv6();
    test_mutations();
    test_short_buffers();
    return check_result("test_rawpkt");
}
