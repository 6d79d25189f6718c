/*
 * The group a peer's address is counted under wherever a per-address limit
 * exists (the SOAP servers, the reflector, the proxy, a rank's listener):
 * the IPv4 address, an IPv4-mapped IPv6 address as IPv4, and an IPv6
 * address cut to its first prefix bits (64 by default: a single host
 * commonly has a whole /64, so counting exact addresses would give one
 * attacker an unlimited number of them).
 */
#ifndef QCG_SOURCE_GROUP_H
#define QCG_SOURCE_GROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#define SOURCE_PREFIX6_DEFAULT 64

struct source_group {
    uint8_t family; /* AF_INET, AF_INET6, or 0: not an IP address */
    uint8_t prefix; /* bits kept (32 for IPv4) */
    uint8_t addr[16];
};

/* ss's group; prefix6 from 1 to 128 (out of range: the default). */
void source_group_of(const struct sockaddr_storage *ss, socklen_t len, unsigned prefix6,
                     struct source_group *out);
bool source_group_eq(const struct source_group *a, const struct source_group *b);
/* "203.0.113.7", or "2001:db8::/64"; "?" for a group of no IP address.
   out holds at least SOURCE_GROUP_TEXT_MAX. */
#define SOURCE_GROUP_TEXT_MAX 64
void source_group_text(const struct source_group *g, char *out, size_t outlen);

#endif
