/*
 * IPv4/TCP and IPv6/TCP packets as bytes: parse, check, rewrite, checksum.
 * A pure module (no I/O, no state) so that everything traversing TCP does to
 * packets that came from the network is unit-tested on its own.  An IPv6
 * packet's TCP header must follow the fixed header (no extension header: a
 * SYN or SYN/ACK of Linux's own stack never has one).
 */
#ifndef QCG_HELPER_RAWPKT_H
#define QCG_HELPER_RAWPKT_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#define RAWPKT_FIN 0x01
#define RAWPKT_SYN 0x02
#define RAWPKT_RST 0x04
#define RAWPKT_PSH 0x08
#define RAWPKT_ACK 0x10

/* An address of either family; compare with rawpkt_addr_same. */
struct rawpkt_addr {
    int family; /* AF_INET or AF_INET6 */
    union {
        struct in_addr v4;
        struct in6_addr v6;
    } u;
};

/* From an in_addr, from text (0, or -1 when not an address). */
struct rawpkt_addr rawpkt_addr_v4(struct in_addr a);
int rawpkt_addr_parse(const char *text, struct rawpkt_addr *out);
/* Same family, same address. */
int rawpkt_addr_same(const struct rawpkt_addr *a, const struct rawpkt_addr *b);
/* inet_ntop's text; buf of RAWPKT_ADDR_TEXT. */
#define RAWPKT_ADDR_TEXT 46
const char *rawpkt_addr_text(const struct rawpkt_addr *a, char *buf);

/* What rawpkt_parse found; ports, numbers and window in host order. */
struct rawpkt_tcp {
    struct rawpkt_addr src, dst;
    uint16_t sport, dport;
    uint32_t seq, ack;
    uint8_t flags;
    uint16_t window;
    size_t ip_len;  /* IP header length (40 for IPv6) */
    size_t tcp_len; /* TCP header length, options included */
    size_t total;   /* the IP total length (IPv6: 40 + payload length; bytes beyond
                       it are ignored) */
    size_t payload; /* bytes of TCP payload */
    int has_ts, has_ws;
    uint32_t tsval, tsecr;
    uint8_t wscale;
};

/* Parses one IPv4 or IPv6 TCP packet: version, header lengths, total
   length, no fragment (IPv6: no extension header), well-formed TCP options.
   0, or -1 with why. */
int rawpkt_parse(const uint8_t *pkt, size_t len, struct rawpkt_tcp *p, char *why, size_t whylen);

/* The checks before injecting a SYN that came from elsewhere: SYN alone (no
   ACK, RST or FIN), no payload, destination node:port (node's family too).
   0, or -1 with why. */
int rawpkt_check_syn(const struct rawpkt_tcp *p, const struct rawpkt_addr *node, uint16_t port,
                     char *why, size_t whylen);

/* Recomputes the IP header (IPv4) and TCP checksums of a packet
   rawpkt_parse accepted (len at least its total length). */
void rawpkt_fix_checksums(uint8_t *pkt, size_t len);
/* 1 when both checksums are right. */
int rawpkt_checksums_ok(const uint8_t *pkt, size_t len);

/* Sets the source address and port, then fixes the checksums; nothing when
   src is not of the packet's family. */
void rawpkt_set_source(uint8_t *pkt, size_t len, const struct rawpkt_addr *src, uint16_t sport);
/* Turns a SYN/ACK into a SYN: clears ACK and the ack number, fixes the
   checksums (the packet must parse). */
void rawpkt_synack_to_syn(uint8_t *pkt, size_t len);

/* Builds in out the ACK that completes the handshake answered by `synack`,
   sent by synack's sender, in synack's family: seq synack.seq + 1, ack synack.ack, the window
   scaled down by synack's window scale, timestamps (when synack has them)
   its TSval and TSecr.  Returns its length, or 0 when outlen is too small. */
size_t rawpkt_build_ack(const struct rawpkt_tcp *synack, uint8_t *out, size_t outlen);

#endif
