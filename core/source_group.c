/* See source_group.h. */
#include "source_group.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

void source_group_of(const struct sockaddr_storage *ss, socklen_t len, unsigned prefix6,
                     struct source_group *out)
{
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;

    memset(out, 0, sizeof(*out));
    if (prefix6 < 1 || prefix6 > 128)
        prefix6 = SOURCE_PREFIX6_DEFAULT;
    if (ss->ss_family == AF_INET && len >= (socklen_t)sizeof(*s4)) {
        out->family = AF_INET;
        out->prefix = 32;
        memcpy(out->addr, &s4->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6 && len >= (socklen_t)sizeof(*s6)) {
        if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
            out->family = AF_INET;
            out->prefix = 32;
            memcpy(out->addr, s6->sin6_addr.s6_addr + 12, 4);
            return;
        }
        out->family = AF_INET6;
        out->prefix = (uint8_t)prefix6;
        memcpy(out->addr, s6->sin6_addr.s6_addr, 16);
        for (unsigned bit = prefix6; bit < 128; bit++)
            out->addr[bit / 8] &= (uint8_t) ~(0x80u >> (bit % 8));
    }
}

bool source_group_eq(const struct source_group *a, const struct source_group *b)
{
    return a->family == b->family && a->prefix == b->prefix &&
           memcmp(a->addr, b->addr, sizeof(a->addr)) == 0;
}

void source_group_text(const struct source_group *g, char *out, size_t outlen)
{
    char host[INET6_ADDRSTRLEN];

    if (g->family == 0 || inet_ntop(g->family, g->addr, host, sizeof(host)) == NULL)
        snprintf(out, outlen, "?");
    else if (g->family == AF_INET6 && g->prefix < 128)
        snprintf(out, outlen, "%s/%u", host, g->prefix);
    else
        snprintf(out, outlen, "%s", host);
}
