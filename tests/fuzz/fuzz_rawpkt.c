/* libFuzzer harness for the packets of traversing TCP: the broker's check of
   a SYN a helper hands over as hex (broker/syncheck.h), the same SYN checked
   and rewritten as the target helper's traverse_inject does before injecting
   it (helper/rawpkt.h), and the packets NFQUEUE hands over, turned into a SYN
   or answered with an ACK as traverse.c does.
   Input: one IPv4 or IPv6 packet, in a buffer of exactly its size. */
#include <arpa/inet.h>

#include "fuzz.h"
#include "rawpkt.h"
#include "syncheck.h"
#include "traverse.h"

/* The node and published port of the seeds (tests/fuzz/corpus/rawpkt). */
#define NODE "198.18.1.11"
#define NODE6 "2001:db8:1::11"
#define PORT 23001

static void reparsed(const uint8_t *pkt, size_t len, struct rawpkt_tcp *p)
{
    char why[128];
    FUZZ_ASSERT(rawpkt_parse(pkt, len, p, why, sizeof(why)) == 0);
    FUZZ_ASSERT(rawpkt_checksums_ok(pkt, len));
}

/* traverse_inject: size, parse, SYN checks, then the source rewritten. */
static void inject(const uint8_t *syn, size_t len, const struct rawpkt_tcp *s)
{
    uint8_t pkt[TRAVERSE_PACKET_MAX];
    struct rawpkt_addr node, pub;
    struct rawpkt_tcp r;
    char why[128];
    int v6 = s->src.family == AF_INET6;

    rawpkt_addr_parse(v6 ? NODE6 : NODE, &node);
    rawpkt_addr_parse(v6 ? "2001:db8:2::5" : "203.0.113.5", &pub);
    if (len > sizeof(pkt))
        return;
    if (rawpkt_check_syn(s, &node, PORT, why, sizeof(why)) < 0) {
        FUZZ_REASON(why);
        return;
    }
    FUZZ_ASSERT(s->payload == 0 && s->dport == PORT && rawpkt_addr_same(&s->dst, &node));
    memcpy(pkt, syn, s->total);
    rawpkt_set_source(pkt, s->total, &pub, 40000);
    reparsed(pkt, s->total, &r);
    FUZZ_ASSERT(rawpkt_addr_same(&r.src, &pub) && r.sport == 40000 && r.seq == s->seq);
}

/* traverse.c on_our_synack: a SYN/ACK sent on as a plain SYN. */
static void synack_to_syn(const uint8_t *pkt, const struct rawpkt_tcp *s)
{
    uint8_t out[TRAVERSE_PACKET_MAX];
    struct rawpkt_tcp r;

    if ((s->flags & (RAWPKT_SYN | RAWPKT_ACK)) != (RAWPKT_SYN | RAWPKT_ACK) ||
        s->total > sizeof(out))
        return;
    memcpy(out, pkt, s->total);
    rawpkt_synack_to_syn(out, s->total);
    reparsed(out, s->total, &r);
    FUZZ_ASSERT((r.flags & RAWPKT_SYN) && !(r.flags & RAWPKT_ACK) && r.ack == 0);
}

/* traverse.c on_their_synack: the third ACK. */
static void third_ack(const struct rawpkt_tcp *s)
{
    uint8_t out[TRAVERSE_PACKET_MAX];
    struct rawpkt_tcp r;

    size_t n = rawpkt_build_ack(s, out, sizeof(out));
    FUZZ_ASSERT(n > 0);
    reparsed(out, n, &r);
    FUZZ_ASSERT(r.flags == RAWPKT_ACK && r.seq == s->seq + 1 && r.ack == s->ack &&
                r.has_ts == s->has_ts && r.window > 0);
}

/* The broker: the packet as the helper's hex, and the input as text. */
static void broker_check(const uint8_t *data, size_t size)
{
    static const char digits[] = "0123456789abcdef";
    char hex[2 * QCG_PACKET_MAX + 3], why[128];
    struct syn_info info;
    size_t n = size < QCG_PACKET_MAX + 1 ? size : QCG_PACKET_MAX + 1;

    for (size_t i = 0; i < n; i++) {
        hex[2 * i] = digits[data[i] >> 4];
        hex[2 * i + 1] = digits[data[i] & 15];
    }
    hex[2 * n] = '\0';
    if (syn_check_hex(hex, &info, why, sizeof(why)) == 0) {
        FUZZ_ASSERT(n <= QCG_PACKET_MAX && info.sport > 0 && info.dport > 0);
        FUZZ_TERMINATED(info.saddr);
        FUZZ_TERMINATED(info.daddr);
    } else {
        FUZZ_REASON(why);
    }
    char *text = malloc(size + 1);
    if (text == NULL)
        abort();
    memcpy(text, data, size);
    text[size] = '\0';
    if (syn_check_hex(text, &info, why, sizeof(why)) < 0)
        FUZZ_REASON(why);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rawpkt_tcp s;
    char why[128];
    broker_check(data, size);
    uint8_t *pkt = fuzz_copy(data, size);

    if (rawpkt_parse(pkt, size, &s, why, sizeof(why)) < 0) {
        FUZZ_REASON(why);
        /* Not parsed: checksums are only asked of what parsed, but must not
           read out of bounds either way. */
        (void)rawpkt_checksums_ok(pkt, size);
        free(pkt);
        return 0;
    }
    FUZZ_ASSERT(s.ip_len + s.tcp_len + s.payload == s.total && s.total <= size);
    FUZZ_ASSERT(!s.has_ws || s.wscale <= 14);
    inject(pkt, size, &s);
    synack_to_syn(pkt, &s);
    third_ack(&s);
    rawpkt_fix_checksums(pkt, size);
    FUZZ_ASSERT(rawpkt_checksums_ok(pkt, size));
    free(pkt);
    return 0;
}
