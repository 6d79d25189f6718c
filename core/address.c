/* See address.h. */
#include "address.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

bool address_valid(const char *text)
{
    unsigned char buf[sizeof(struct in6_addr)];

    if (text == NULL || strnlen(text, QCG_ADDR_MAX) >= QCG_ADDR_MAX)
        return false;
    return inet_pton(AF_INET, text, buf) == 1 || inet_pton(AF_INET6, text, buf) == 1;
}

static int addr_parse(const char *text, int *family, unsigned char out[16])
{
    memset(out, 0, 16);
    if (inet_pton(AF_INET, text, out) == 1) {
        *family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, text, out) == 1) {
        *family = AF_INET6;
        return 0;
    }
    return -1;
}

static int max_bits(int family)
{
    return family == AF_INET ? 32 : 128;
}

/* Whether the first `bits` bits of a and b are equal. */
static bool prefix_equal(const unsigned char *a, const unsigned char *b, int bits)
{
    int whole = bits / 8, rest = bits % 8;
    if (memcmp(a, b, (size_t)whole) != 0)
        return false;
    if (rest == 0)
        return true;
    unsigned char mask = (unsigned char)(0xff << (8 - rest));
    return (a[whole] & mask) == (b[whole] & mask);
}

int addr_range_parse(const char *text, struct addr_range *out, char *why, size_t whylen)
{
    char addr[QCG_ADDR_MAX];
    memset(out, 0, sizeof(*out));
    if (text == NULL || strnlen(text, QCG_ADDR_MAX + 4) >= QCG_ADDR_MAX + 4) {
        snprintf(why, whylen, "missing or too long");
        return -1;
    }
    const char *slash = strchr(text, '/');
    size_t alen = slash != NULL ? (size_t)(slash - text) : strlen(text);
    if (alen >= sizeof(addr)) {
        snprintf(why, whylen, "'%.64s' is not an address range", text);
        return -1;
    }
    memcpy(addr, text, alen);
    addr[alen] = '\0';
    if (addr_parse(addr, &out->family, out->addr) < 0) {
        snprintf(why, whylen, "'%.64s' is not an IPv4 or IPv6 address range", text);
        return -1;
    }
    out->bits = max_bits(out->family);
    if (slash != NULL) {
        char *end;
        long bits = strtol(slash + 1, &end, 10);
        if (slash[1] < '0' || slash[1] > '9' || *end != '\0' || bits < 0 ||
            bits > max_bits(out->family)) {
            snprintf(why, whylen, "'%.64s': the prefix length is not 0-%d", text,
                     max_bits(out->family));
            return -1;
        }
        out->bits = (int)bits;
    }
    struct addr_range net = *out;
    for (int i = out->bits; i < max_bits(out->family); i++)
        net.addr[i / 8] &= (unsigned char)~(0x80 >> (i % 8));
    if (memcmp(net.addr, out->addr, 16) != 0) {
        char fixed[QCG_ADDR_MAX + 4];
        addr_range_format(&net, fixed, sizeof(fixed));
        snprintf(why, whylen, "'%.64s' has host bits set (the range is %s)", text, fixed);
        return -1;
    }
    return 0;
}

void addr_range_format(const struct addr_range *r, char *out, size_t len)
{
    char a[INET6_ADDRSTRLEN];
    if (inet_ntop(r->family, r->addr, a, sizeof(a)) == NULL)
        snprintf(a, sizeof(a), "?");
    snprintf(out, len, "%s/%d", a, r->bits);
}

bool addr_range_contains(const struct addr_range *r, const char *address)
{
    unsigned char a[16];
    int family;
    if (address == NULL || addr_parse(address, &family, a) < 0 || family != r->family)
        return false;
    return prefix_equal(a, r->addr, r->bits);
}

bool addr_range_overlap(const struct addr_range *a, const struct addr_range *b)
{
    if (a->family != b->family)
        return false;
    return prefix_equal(a->addr, b->addr, a->bits < b->bits ? a->bits : b->bits);
}

bool addr_range_loopback(const struct addr_range *r)
{
    static const unsigned char v6_loopback[16] = {[15] = 1};
    if (r->family == AF_INET)
        return r->bits >= 8 && r->addr[0] == 127;
    return r->bits == 128 && memcmp(r->addr, v6_loopback, 16) == 0;
}

int addr_range_declarable(const struct addr_range *r, char *why, size_t whylen)
{
    char text[QCG_ADDR_MAX + 4];
    addr_range_format(r, text, sizeof(text));
    if (addr_range_loopback(r)) {
        snprintf(why, whylen, "%s is a loopback range: every host's own, no site's", text);
        return -1;
    }
    if (r->bits < (r->family == AF_INET ? 8 : 16)) {
        snprintf(why, whylen, "%s is wider than /%d", text, r->family == AF_INET ? 8 : 16);
        return -1;
    }
    return 0;
}
