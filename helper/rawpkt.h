/*
 * IPv4/TCP packets as bytes: parse, check, rewrite, checksum.  A pure module
 * (no I/O, no state) so that everything traversing TCP does to packets that
 * came from the network is unit-tested on its own.
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

/* What rawpkt_parse found; ports, numbers and window in host order. */
struct rawpkt_tcp {
    struct in_addr src, dst;
    uint16_t sport, dport;
    uint32_t seq, ack;
    uint8_t flags;
    uint16_t window;
    size_t ip_len;  /* IP header length */
    size_t tcp_len; /* TCP header length, options included */
    size_t total;   /* the IP total length (bytes beyond it are ignored) */
    size_t payload; /* bytes of TCP payload */
    int has_ts, has_ws;
    uint32_t tsval, tsecr;
    uint8_t wscale;
};

/* Parses one IPv4 TCP packet: version, header lengths, total length,
   no fragment, well-formed TCP options.  0, or -1 with why. */
int rawpkt_parse(const uint8_t *pkt, size_t len, struct rawpkt_tcp *p, char *why, size_t whylen);

/* The checks before injecting a SYN that came from elsewhere: SYN alone (no
   ACK, RST or FIN), no payload, destination node:port.  0, or -1 with why. */
int rawpkt_check_syn(const struct rawpkt_tcp *p, struct in_addr node, uint16_t port, char *why,
                     size_t whylen);

/* Recomputes the IP header and TCP checksums of a packet rawpkt_parse
   accepted (len at least its total length). */
void rawpkt_fix_checksums(uint8_t *pkt, size_t len);
/* 1 when both checksums are right. */
int rawpkt_checksums_ok(const uint8_t *pkt, size_t len);

/* Sets the source address and port, then fixes the checksums. */
void rawpkt_set_source(uint8_t *pkt, size_t len, struct in_addr src, uint16_t sport);
/* Turns a SYN/ACK into a SYN: clears ACK and the ack number, fixes the
   checksums (the packet must parse). */
void rawpkt_synack_to_syn(uint8_t *pkt, size_t len);

/* Builds in out the ACK that completes the handshake answered by `synack`,
   sent by synack's sender: seq synack.seq + 1, ack synack.ack, the window
   scaled down by synack's window scale, timestamps (when synack has them)
   its TSval and TSecr.  Returns its length, or 0 when outlen is too small. */
size_t rawpkt_build_ack(const struct rawpkt_tcp *synack, uint8_t *out, size_t outlen);

#endif
