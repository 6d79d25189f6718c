/* IPv4/TCP and IPv6/TCP packet parsing and rewriting; see rawpkt.h. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "rawpkt.h"

#define IP_MIN 20
#define IP6_LEN 40
#define TCP_MIN 20
#define IP_MF 0x2000
#define IP_OFFMASK 0x1fff
#define IP_DF 0x4000
#define OPT_EOL 0
#define OPT_NOP 1
#define OPT_WS 3
#define OPT_TS 8
#define ACK_TTL 64
/* RFC 7323: the largest shift a window scale option may carry. */
#define WS_MAX 14

static uint16_t get16(const uint8_t *b)
{
    return (uint16_t)(b[0] << 8 | b[1]);
}

static uint32_t get32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static void put16(uint8_t *b, uint16_t v)
{
    b[0] = (uint8_t)(v >> 8);
    b[1] = (uint8_t)v;
}

static void put32(uint8_t *b, uint32_t v)
{
    b[0] = (uint8_t)(v >> 24);
    b[1] = (uint8_t)(v >> 16);
    b[2] = (uint8_t)(v >> 8);
    b[3] = (uint8_t)v;
}

static int fail(char *why, size_t whylen, const char *what)
{
    snprintf(why, whylen, "%s", what);
    return -1;
}

/* Timestamps and window scale; anything else is skipped by its length. */
static int parse_options(const uint8_t *o, size_t n, struct rawpkt_tcp *p, char *why, size_t whylen)
{
    size_t i = 0;

    while (i < n) {
        uint8_t kind = o[i];

        if (kind == OPT_EOL)
            break;
        if (kind == OPT_NOP) {
            i++;
            continue;
        }
        if (i + 2 > n || o[i + 1] < 2 || i + o[i + 1] > n)
            return fail(why, whylen, "malformed TCP option");
        if (kind == OPT_TS) {
            if (o[i + 1] != 10)
                return fail(why, whylen, "malformed TCP timestamp option");
            p->has_ts = 1;
            p->tsval = get32(o + i + 2);
            p->tsecr = get32(o + i + 6);
        } else if (kind == OPT_WS) {
            if (o[i + 1] != 3)
                return fail(why, whylen, "malformed TCP window scale option");
            p->has_ws = 1;
            p->wscale = o[i + 2] > WS_MAX ? WS_MAX : o[i + 2];
        }
        i += o[i + 1];
    }
    return 0;
}

struct rawpkt_addr rawpkt_addr_v4(struct in_addr a)
{
    struct rawpkt_addr r;

    memset(&r, 0, sizeof(r));
    r.family = AF_INET;
    r.u.v4 = a;
    return r;
}

int rawpkt_addr_parse(const char *text, struct rawpkt_addr *out)
{
    memset(out, 0, sizeof(*out));
    if (text != NULL && inet_pton(AF_INET, text, &out->u.v4) == 1)
        out->family = AF_INET;
    else if (text != NULL && inet_pton(AF_INET6, text, &out->u.v6) == 1)
        out->family = AF_INET6;
    return out->family != 0 ? 0 : -1;
}

int rawpkt_addr_same(const struct rawpkt_addr *a, const struct rawpkt_addr *b)
{
    if (a->family != b->family)
        return 0;
    return a->family == AF_INET6 ? memcmp(&a->u.v6, &b->u.v6, 16) == 0
                                 : a->u.v4.s_addr == b->u.v4.s_addr;
}

const char *rawpkt_addr_text(const struct rawpkt_addr *a, char *buf)
{
    if (inet_ntop(a->family, &a->u, buf, RAWPKT_ADDR_TEXT) == NULL)
        snprintf(buf, RAWPKT_ADDR_TEXT, "?");
    return buf;
}

/* The IP layer of either family: ip_len, total, the addresses. */
static int parse_ip(const uint8_t *pkt, size_t len, struct rawpkt_tcp *p, char *why, size_t whylen)
{
    if (pkt != NULL && len >= IP6_LEN && pkt[0] >> 4 == 6) {
        p->ip_len = IP6_LEN;
        p->total = IP6_LEN + get16(pkt + 4);
        if (p->total < IP6_LEN + TCP_MIN || p->total > len)
            return fail(why, whylen, "IPv6 payload length does not fit the packet");
        if (pkt[6] != IPPROTO_TCP)
            return fail(why, whylen, "not TCP right after the IPv6 header");
        p->src.family = p->dst.family = AF_INET6;
        memcpy(&p->src.u.v6, pkt + 8, 16);
        memcpy(&p->dst.u.v6, pkt + 24, 16);
        return 0;
    }
    if (pkt == NULL || len < IP_MIN)
        return fail(why, whylen, "shorter than an IPv4 header");
    if (pkt[0] >> 4 != 4)
        return fail(why, whylen, "neither IPv4 nor IPv6");
    p->ip_len = (size_t)(pkt[0] & 0x0f) * 4;
    p->total = get16(pkt + 2);
    if (p->ip_len < IP_MIN || p->ip_len > len)
        return fail(why, whylen, "bad IPv4 header length");
    if (p->total < p->ip_len + TCP_MIN || p->total > len)
        return fail(why, whylen, "IPv4 total length does not fit the packet");
    if (pkt[9] != IPPROTO_TCP)
        return fail(why, whylen, "not TCP");
    if (get16(pkt + 6) & (IP_MF | IP_OFFMASK))
        return fail(why, whylen, "a fragment");
    p->src.family = p->dst.family = AF_INET;
    memcpy(&p->src.u.v4, pkt + 12, 4);
    memcpy(&p->dst.u.v4, pkt + 16, 4);
    return 0;
}

int rawpkt_parse(const uint8_t *pkt, size_t len, struct rawpkt_tcp *p, char *why, size_t whylen)
{
    memset(p, 0, sizeof(*p));
    if (parse_ip(pkt, len, p, why, whylen) < 0)
        return -1;

    const uint8_t *t = pkt + p->ip_len;

    p->tcp_len = (size_t)(t[12] >> 4) * 4;
    if (p->tcp_len < TCP_MIN || p->ip_len + p->tcp_len > p->total)
        return fail(why, whylen, "bad TCP header length");
    p->sport = get16(t);
    p->dport = get16(t + 2);
    p->seq = get32(t + 4);
    p->ack = get32(t + 8);
    p->flags = t[13];
    p->window = get16(t + 14);
    p->payload = p->total - p->ip_len - p->tcp_len;
    return parse_options(t + TCP_MIN, p->tcp_len - TCP_MIN, p, why, whylen);
}

int rawpkt_check_syn(const struct rawpkt_tcp *p, const struct rawpkt_addr *node, uint16_t port,
                     char *why, size_t whylen)
{
    char want[RAWPKT_ADDR_TEXT], got[RAWPKT_ADDR_TEXT];

    if (!(p->flags & RAWPKT_SYN) || (p->flags & (RAWPKT_ACK | RAWPKT_RST | RAWPKT_FIN))) {
        snprintf(why, whylen, "not a plain SYN (flags 0x%02x)", p->flags);
        return -1;
    }
    if (p->payload != 0) {
        snprintf(why, whylen, "a SYN carrying %zu bytes of data", p->payload);
        return -1;
    }
    if (!rawpkt_addr_same(&p->dst, node)) {
        snprintf(why, whylen, "destination %s is not this node (%s)",
                 rawpkt_addr_text(&p->dst, got), rawpkt_addr_text(node, want));
        return -1;
    }
    if (p->dport != port) {
        snprintf(why, whylen, "destination port %u is not the published port %u", p->dport, port);
        return -1;
    }
    return 0;
}

/* RFC 1071 ones' complement sum, folded at the end. */
static uint32_t sum16(uint32_t sum, const uint8_t *b, size_t n)
{
    size_t i;

    for (i = 0; i + 1 < n; i += 2)
        sum += get16(b + i);
    if (i < n)
        sum += (uint32_t)b[i] << 8;
    return sum;
}

static uint16_t fold(uint32_t sum)
{
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)~sum;
}

static uint16_t ip_checksum(const uint8_t *pkt, size_t ip_len)
{
    return fold(sum16(0, pkt, ip_len));
}

/* Over the pseudo header (addresses, protocol, TCP length) and the segment:
   ip_len 40 is IPv6's (its addresses at 8, 32 bytes), else IPv4's (at 12). */
static uint32_t pseudo_sum(const uint8_t *pkt, size_t ip_len, size_t total)
{
    uint32_t sum =
        ip_len == IP6_LEN && pkt[0] >> 4 == 6 ? sum16(0, pkt + 8, 32) : sum16(0, pkt + 12, 8);

    return sum + IPPROTO_TCP + (uint32_t)(total - ip_len);
}

static uint16_t tcp_checksum(const uint8_t *pkt, size_t ip_len, size_t total)
{
    return fold(sum16(pseudo_sum(pkt, ip_len, total), pkt + ip_len, total - ip_len));
}

/* The header lengths of a packet whose checksums can be summed: 0, or -1.
   len is checked before any byte is read (the fuzzer's empty packet read
   four bytes past it). */
static int sizes(const uint8_t *pkt, size_t len, size_t *ip_len, size_t *total)
{
    if (len >= IP6_LEN && pkt[0] >> 4 == 6) {
        *ip_len = IP6_LEN;
        *total = IP6_LEN + get16(pkt + 4);
        return *total > len || *total < IP6_LEN + TCP_MIN ? -1 : 0;
    }
    if (len < IP_MIN)
        return -1;
    *ip_len = (size_t)(pkt[0] & 0x0f) * 4;
    *total = get16(pkt + 2);
    return *ip_len < IP_MIN || *total > len || *total < *ip_len + TCP_MIN ? -1 : 0;
}

static int is_v6(const uint8_t *pkt, size_t ip_len)
{
    return ip_len == IP6_LEN && pkt[0] >> 4 == 6;
}

void rawpkt_fix_checksums(uint8_t *pkt, size_t len)
{
    size_t ip_len, total;

    if (sizes(pkt, len, &ip_len, &total) < 0)
        return;
    if (!is_v6(pkt, ip_len)) {
        put16(pkt + 10, 0);
        put16(pkt + 10, ip_checksum(pkt, ip_len));
    }
    put16(pkt + ip_len + 16, 0);
    put16(pkt + ip_len + 16, tcp_checksum(pkt, ip_len, total));
}

int rawpkt_checksums_ok(const uint8_t *pkt, size_t len)
{
    size_t ip_len, total;

    if (sizes(pkt, len, &ip_len, &total) < 0)
        return 0;
    /* Summing a correct header or segment, checksum included, gives zero
       (IPv6 has no header checksum). */
    if (!is_v6(pkt, ip_len) && fold(sum16(0, pkt, ip_len)) != 0)
        return 0;
    return fold(sum16(pseudo_sum(pkt, ip_len, total), pkt + ip_len, total - ip_len)) == 0;
}

/* The IP header length of a packet big enough for its TCP header, or 0. */
static size_t header_len(const uint8_t *pkt, size_t len)
{
    size_t ip_len;

    if (len >= IP6_LEN + TCP_MIN && pkt[0] >> 4 == 6)
        return IP6_LEN;
    if (len < IP_MIN)
        return 0;
    ip_len = (size_t)(pkt[0] & 0x0f) * 4;
    return ip_len < IP_MIN || ip_len + TCP_MIN > len || pkt[0] >> 4 != 4 ? 0 : ip_len;
}

void rawpkt_set_source(uint8_t *pkt, size_t len, const struct rawpkt_addr *src, uint16_t sport)
{
    size_t ip_len = header_len(pkt, len);

    if (ip_len == 0 || (is_v6(pkt, ip_len) ? AF_INET6 : AF_INET) != src->family)
        return;
    if (src->family == AF_INET6)
        memcpy(pkt + 8, &src->u.v6, 16);
    else
        memcpy(pkt + 12, &src->u.v4, 4);
    put16(pkt + ip_len, sport);
    rawpkt_fix_checksums(pkt, len);
}

void rawpkt_synack_to_syn(uint8_t *pkt, size_t len)
{
    size_t ip_len = header_len(pkt, len);

    if (ip_len == 0)
        return;
    pkt[ip_len + 13] &= (uint8_t)~RAWPKT_ACK;
    put32(pkt + ip_len + 8, 0);
    rawpkt_fix_checksums(pkt, len);
}

/* The IP header of the ACK rawpkt_build_ack makes: from synack's source to
   its destination; its length. */
static size_t ack_header(const struct rawpkt_tcp *synack, uint8_t *out, size_t tcp_len)
{
    if (synack->src.family == AF_INET6) {
        out[0] = 0x60;
        put16(out + 4, (uint16_t)tcp_len);
        out[6] = IPPROTO_TCP;
        out[7] = ACK_TTL;
        memcpy(out + 8, &synack->src.u.v6, 16);
        memcpy(out + 24, &synack->dst.u.v6, 16);
        return IP6_LEN;
    }
    out[0] = 0x45;
    put16(out + 2, (uint16_t)(IP_MIN + tcp_len));
    put16(out + 6, IP_DF);
    out[8] = ACK_TTL;
    out[9] = IPPROTO_TCP;
    memcpy(out + 12, &synack->src.u.v4, 4);
    memcpy(out + 16, &synack->dst.u.v4, 4);
    return IP_MIN;
}

size_t rawpkt_build_ack(const struct rawpkt_tcp *synack, uint8_t *out, size_t outlen)
{
    size_t tcp_len = TCP_MIN + (synack->has_ts ? 12 : 0);
    size_t total = (synack->src.family == AF_INET6 ? IP6_LEN : IP_MIN) + tcp_len;
    uint32_t window = synack->window;

    if (outlen < total)
        return 0;
    memset(out, 0, total);

    uint8_t *t = out + ack_header(synack, out, tcp_len);

    put16(t, synack->sport);
    put16(t + 2, synack->dport);
    put32(t + 4, synack->seq + 1);
    put32(t + 8, synack->ack);
    t[12] = (uint8_t)(tcp_len / 4) << 4;
    t[13] = RAWPKT_ACK;
    /* A SYN/ACK's window is never scaled; every later segment's is. */
    if (synack->has_ws)
        window >>= synack->wscale;
    put16(t + 14, (uint16_t)(window ? window : 1));
    if (synack->has_ts) {
        t[20] = OPT_NOP;
        t[21] = OPT_NOP;
        t[22] = OPT_TS;
        t[23] = 10;
        put32(t + 24, synack->tsval);
        put32(t + 28, synack->tsecr);
    }
    rawpkt_fix_checksums(out, total);
    return total;
}
