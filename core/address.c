/* See address.h. */
#include "address.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

/* text's family and bytes (network order); a mapped IPv6 address as its
   IPv4 one.  -1 when text is not an address. */
static int addr_parse(const char *text, int *family, unsigned char out[16])
{
    memset(out, 0, 16);
    if (text == NULL || strnlen(text, QCG_ADDR_MAX) >= QCG_ADDR_MAX)
        return -1;
    if (inet_pton(AF_INET, text, out) == 1) {
        *family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, text, out) != 1)
        return -1;
    if (IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)out)) {
        memmove(out, out + 12, 4);
        memset(out + 4, 0, 12);
        *family = AF_INET;
        return 0;
    }
    *family = AF_INET6;
    return 0;
}

int address_family(const char *text)
{
    unsigned char a[16];
    int family;
    return addr_parse(text, &family, a) == 0 ? family : 0;
}

int address_canonical(const char *text, char *out, size_t len)
{
    unsigned char a[16];
    int family;
    if (len > 0)
        out[0] = '\0';
    if (addr_parse(text, &family, a) < 0 || inet_ntop(family, a, out, (socklen_t)len) == NULL) {
        if (len > 0)
            out[0] = '\0';
        return -1;
    }
    return 0;
}

bool address_equal(const char *a, const char *b)
{
    unsigned char x[16], y[16];
    int fx, fy;
    return addr_parse(a, &fx, x) == 0 && addr_parse(b, &fy, y) == 0 && fx == fy &&
           memcmp(x, y, 16) == 0;
}

socklen_t address_sockaddr(const char *address, uint16_t port, struct sockaddr_storage *sa)
{
    unsigned char a[16];
    int family;
    memset(sa, 0, sizeof(*sa));
    if (addr_parse(address, &family, a) < 0)
        return 0;
    if (family == AF_INET) {
        struct sockaddr_in *in4 = (struct sockaddr_in *)sa;
        in4->sin_family = AF_INET;
        in4->sin_port = htons(port);
        memcpy(&in4->sin_addr, a, 4);
        return sizeof(*in4);
    }
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)sa;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    memcpy(&in6->sin6_addr, a, 16);
    return sizeof(*in6);
}

/* The port of "HOST:PORT" after its colon: digits only, 1-65535 (or 0). */
static int port_parse(const char *text, bool port_zero, int *port)
{
    long p = 0;
    if (text[0] == '\0' || strlen(text) > 5)
        return -1;
    for (const char *c = text; *c != '\0'; c++) {
        if (*c < '0' || *c > '9')
            return -1;
        p = p * 10 + (*c - '0');
    }
    if (p > 65535 || (p == 0 && !port_zero))
        return -1;
    *port = (int)p;
    return 0;
}

int hostport_parse(const char *text, bool port_zero, char *host, size_t hostlen, int *port,
                   char *why, size_t whylen)
{
    char h[QCG_ADDR_MAX];
    const char *hs, *colon;
    size_t hl;

    if (hostlen > 0)
        host[0] = '\0';
    *port = 0;
    if (text == NULL || text[0] == '\0') {
        snprintf(why, whylen, "missing: write ADDR:PORT or [IPv6]:PORT");
        return -1;
    }
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL) {
            snprintf(why, whylen, "'%.64s': no ']' after the IPv6 address", text);
            return -1;
        }
        hs = text + 1;
        hl = (size_t)(close - hs);
        colon = close + 1;
        if (*colon != ':') {
            snprintf(why, whylen, "'%.64s': no :PORT after ']'", text);
            return -1;
        }
    } else {
        colon = strrchr(text, ':');
        if (colon != NULL && memchr(text, ':', (size_t)(colon - text)) != NULL) {
            snprintf(why, whylen,
                     "'%.64s': an IPv6 address with a port is written in brackets, "
                     "[ADDR]:PORT",
                     text);
            return -1;
        }
        if (colon == NULL) {
            snprintf(why, whylen, "'%.64s' has no port: write ADDR:PORT or [IPv6]:PORT", text);
            return -1;
        }
        hs = text;
        hl = (size_t)(colon - text);
    }
    if (memchr(hs, '%', hl) != NULL) {
        snprintf(why, whylen,
                 "'%.64s': zone ids (%%IFACE) are not supported: use a global or "
                 "unique-local address, not a link-local one",
                 text);
        return -1;
    }
    if (hl == 0 || hl >= sizeof(h)) {
        snprintf(why, whylen, "'%.64s' is not ADDR:PORT or [IPv6]:PORT", text);
        return -1;
    }
    memcpy(h, hs, hl);
    h[hl] = '\0';
    int family = address_family(h);
    bool bracketed = text[0] == '[';
    if (family == 0 || (bracketed && strchr(h, ':') == NULL) ||
        (!bracketed && family == AF_INET6)) {
        snprintf(why, whylen, "'%.64s': '%s' is not an %s", text, h,
                 bracketed ? "IPv6 address" : "IP address (IPv6 goes in brackets)");
        return -1;
    }
    if (port_parse(colon + 1, port_zero, port) < 0) {
        snprintf(why, whylen, "'%.64s': the port is not %d-65535", text, port_zero ? 0 : 1);
        return -1;
    }
    if (address_canonical(h, host, hostlen) < 0) {
        snprintf(why, whylen, "'%.64s': the address does not fit", text);
        return -1;
    }
    return 0;
}

int hostport_format(const char *host, int port, char *out, size_t len)
{
    if (strchr(host, ':') != NULL)
        return snprintf(out, len, "[%s]:%d", host, port);
    return snprintf(out, len, "%s:%d", host, port);
}

int address_list_format(const char *first, const char others[][QCG_ADDR_MAX], int n, int port,
                        char *out, size_t len)
{
    size_t used = 0;
    if (len > 0)
        out[0] = '\0';
    for (int i = -1; i < n; i++) {
        const char *a = i < 0 ? first : others[i];
        char one[HOSTPORT_MAX];
        if (port > 0)
            hostport_format(a, port, one, sizeof(one));
        else
            snprintf(one, sizeof(one), "%s", a);
        /* Past the end, snprintf only counts. */
        int k = snprintf(used < len ? out + used : NULL, used < len ? len - used : 0, "%s%s",
                         i < 0 ? "" : " and ", one);
        if (k > 0)
            used += (size_t)k;
    }
    return (int)used;
}

int url_local(const char *listen, int port, char *out, size_t len)
{
    char hp[HOSTPORT_MAX];
    const char *host = listen;
    if (host == NULL || host[0] == '\0' || strcmp(host, "0.0.0.0") == 0)
        host = "127.0.0.1";
    else if (strcmp(host, "::") == 0)
        host = "::1";
    hostport_format(host, port, hp, sizeof(hp));
    return snprintf(out, len, "https://%s/", hp);
}

#define NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-."

int url_hostport(const char *url, char *host, size_t hostlen, int *port, char *why, size_t whylen)
{
    char hp[HOSTPORT_MAX];
    if (url == NULL || strncmp(url, "https://", 8) != 0) {
        snprintf(why, whylen, "'%.80s' is not https://HOST:PORT/", url != NULL ? url : "");
        return -1;
    }
    const char *p = url + 8;
    size_t n = strcspn(p, "/");
    if (n == 0 || n >= sizeof(hp) - 4 || (p[n] == '/' && p[n + 1] != '\0')) {
        snprintf(why, whylen, "'%.80s' is not https://HOST:PORT/", url);
        return -1;
    }
    memcpy(hp, p, n);
    hp[n] = '\0';
    /* "https://[2001:db8::1]/" and "https://203.0.113.5/": https's port. */
    if (hp[n - 1] == ']' || strchr(hp, ':') == NULL)
        memcpy(hp + n, ":443", 5);
    char inner[200];
    if (hostport_parse(hp, false, host, hostlen, port, inner, sizeof(inner)) == 0)
        return 0;
    /* A DNS name (gSOAP resolves it; the certificate names it). */
    const char *colon = strrchr(hp, ':');
    size_t nl = (size_t)(colon - hp);
    if (hp[0] != '[' && nl > 0 && nl < hostlen && strspn(hp, NAME_CHARS) == nl &&
        strchr(NAME_CHARS, hp[0]) != NULL && hp[0] != '-' && hp[0] != '.' &&
        port_parse(colon + 1, false, port) == 0) {
        memcpy(host, hp, nl);
        host[nl] = '\0';
        return 0;
    }
    snprintf(why, whylen, "%.80s: %s", url, inner);
    return -1;
}

bool address_valid(const char *text)
{
    return address_family(text) != 0;
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
    /* A mapped range counts its prefix over 128 bits, the IPv4 one over 32. */
    int skip = out->family == AF_INET && strchr(addr, ':') != NULL ? 96 : 0;
    out->bits = max_bits(out->family);
    if (slash != NULL) {
        char *end;
        long bits = strtol(slash + 1, &end, 10);
        if (slash[1] < '0' || slash[1] > '9' || *end != '\0' || bits < skip ||
            bits > max_bits(out->family) + skip) {
            snprintf(why, whylen, "'%.64s': the prefix length is not %d-%d", text, skip,
                     max_bits(out->family) + skip);
            return -1;
        }
        out->bits = (int)bits - skip;
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

int address_list_parse(const char *text, char out[][QCG_ADDR_MAX], int max, char *why,
                       size_t whylen)
{
    int n = 0;
    const char *p = text != NULL ? text : "";
    while (*p != '\0') {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        size_t len = strcspn(p, ", \t");
        if (len == 0)
            break;
        char one[QCG_ADDR_MAX];
        if (len >= sizeof(one)) {
            snprintf(why, whylen, "'%.*s...' is not an IPv4 or IPv6 literal", QCG_ADDR_MAX, p);
            return -1;
        }
        memcpy(one, p, len);
        one[len] = '\0';
        p += len;
        if (n == max) {
            snprintf(why, whylen, "more than %d addresses", max);
            return -1;
        }
        if (address_canonical(one, out[n], QCG_ADDR_MAX) < 0) {
            snprintf(why, whylen, "'%s' is not an IPv4 or IPv6 literal", one);
            return -1;
        }
        for (int i = 0; i < n; i++) {
            if (strcmp(out[i], out[n]) == 0) {
                snprintf(why, whylen, "%s is listed twice", out[n]);
                return -1;
            }
        }
        n++;
    }
    if (n == 0) {
        snprintf(why, whylen, "no address given");
        return -1;
    }
    /* The first IPv4 address to the front, the others in their order. */
    for (int i = 0; i < n; i++) {
        if (address_family(out[i]) == AF_INET) {
            char first[QCG_ADDR_MAX];
            memcpy(first, out[i], QCG_ADDR_MAX);
            memmove(out[1], out[0], (size_t)i * QCG_ADDR_MAX);
            memcpy(out[0], first, QCG_ADDR_MAX);
            break;
        }
    }
    return n;
}

int address_others_take(int n, char *const *in, const char *first, char out[][QCG_ADDR_MAX],
                        int max, char *why, size_t whylen)
{
    if (n < 0 || (n > 0 && in == NULL))
        n = 0;
    if (n > max) {
        snprintf(why, whylen, "more than %d further addresses", max);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (address_canonical(in[i], out[i], QCG_ADDR_MAX) < 0) {
            snprintf(why, whylen, "a further address is not an IP address");
            return -1;
        }
        bool twice = address_equal(out[i], first);
        for (int j = 0; j < i; j++)
            twice = twice || strcmp(out[j], out[i]) == 0;
        if (twice) {
            snprintf(why, whylen, "address %s is given twice", out[i]);
            return -1;
        }
    }
    return n;
}

bool address_among(const char *address, const char list[][QCG_ADDR_MAX], int n)
{
    for (int i = 0; i < n; i++) {
        if (address_equal(address, list[i]))
            return true;
    }
    return false;
}

bool addr_range_within_any(const struct addr_range *r, const struct addr_range *list, int n)
{
    for (int i = 0; i < n; i++) {
        if (list[i].family == r->family && list[i].bits <= r->bits &&
            prefix_equal(r->addr, list[i].addr, list[i].bits))
            return true;
    }
    return false;
}
