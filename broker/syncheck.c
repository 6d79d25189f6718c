/* See syncheck.h. */
#include "syncheck.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "hex.h"

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

int syn_check_hex(const char *hex, struct syn_info *out, char *why, size_t whylen)
{
    uint8_t p[QCG_PACKET_MAX];
    size_t n = hex != NULL ? strnlen(hex, 2 * QCG_PACKET_MAX + 1) : 0;
    if (n == 0 || n % 2 != 0 || n > 2 * QCG_PACKET_MAX) {
        snprintf(why, whylen, "not 1 to %d bytes of hex", QCG_PACKET_MAX);
        return -1;
    }
    if (hex_decode(hex, n / 2, p, false) < 0) {
        snprintf(why, whylen, "not lowercase hex");
        return -1;
    }
    size_t len = n / 2, ihl, doff;
    const uint8_t *tcp;
    uint8_t flags;
    if (len >= 60 && p[0] >> 4 == 6) {
        /* IPv6: the TCP header right after the fixed header (a SYN of
           Linux's stack has no extension header). */
        size_t payload = (size_t)p[4] << 8 | p[5];
        if (p[6] != 6 || 40 + payload != len) {
            snprintf(why, whylen,
                     "not TCP right after the IPv6 header, or its length %zu is not the %zu "
                     "bytes sent",
                     40 + payload, len);
            return -1;
        }
        ihl = 40;
        inet_ntop(AF_INET6, p + 8, out->saddr, sizeof(out->saddr));
        inet_ntop(AF_INET6, p + 24, out->daddr, sizeof(out->daddr));
    } else {
        ihl = (size_t)(p[0] & 0x0f) * 4;
        if (len < 40 || p[0] >> 4 != 4 || ihl < 20 || ihl + 20 > len) {
            snprintf(why, whylen, "not an IPv4 or IPv6 packet with a TCP header");
            return -1;
        }
        size_t total = (size_t)p[2] << 8 | p[3];
        if (p[9] != 6 || total != len) {
            snprintf(why, whylen, "not TCP, or its length %zu is not the %zu bytes sent", total,
                     len);
            return -1;
        }
        inet_ntop(AF_INET, p + 12, out->saddr, sizeof(out->saddr));
        inet_ntop(AF_INET, p + 16, out->daddr, sizeof(out->daddr));
    }
    tcp = p + ihl;
    doff = (size_t)(tcp[12] >> 4) * 4;
    flags = tcp[13];
    if (doff < 20 || ihl + doff != len) {
        snprintf(why, whylen, "TCP header length %zu does not fill the packet", doff);
        return -1;
    }
    if ((flags & (TCP_SYN | TCP_ACK | TCP_RST | TCP_FIN)) != TCP_SYN) {
        snprintf(why, whylen, "not a SYN without ACK (flags 0x%02x)", flags);
        return -1;
    }
    out->sport = tcp[0] << 8 | tcp[1];
    out->dport = tcp[2] << 8 | tcp[3];
    if (out->sport == 0 || out->dport == 0) {
        snprintf(why, whylen, "port 0");
        return -1;
    }
    return 0;
}
