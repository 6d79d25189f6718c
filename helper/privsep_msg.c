/* The message list's table and field checks; see privsep_msg.h. */
#include "privsep_msg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Where a SYN may come from or go to: one host, not this one's loopback. */
static int unicast(uint32_t addr_be)
{
    uint32_t a = ntohl(addr_be);

    return a != 0 && (a >> 24) != 127 && (a >> 28) < 14 && a != 0xffffffffu;
}

/* The same for IPv6: no ::, ::1, multicast, link-local (it needs a zone),
   nor an IPv4-mapped address (IPv4 goes as IPv4). */
static int unicast6(const struct in6_addr *a)
{
    return !IN6_IS_ADDR_UNSPECIFIED(a) && !IN6_IS_ADDR_LOOPBACK(a) && !IN6_IS_ADDR_MULTICAST(a) &&
           !IN6_IS_ADDR_LINKLOCAL(a) && !IN6_IS_ADDR_V4MAPPED(a);
}

struct rawpkt_addr privsep_addr(uint8_t family, const uint8_t bytes[PRIVSEP_ADDR_LEN])
{
    struct rawpkt_addr a;

    memset(&a, 0, sizeof(a));
    a.family = family;
    memcpy(&a.u, bytes, family == AF_INET6 ? 16 : 4);
    return a;
}

/* A message's address: of a family this node has an address of, unicast,
   not one of the node's own; what (the message and its role) names it in
   why. */
static int address_ok(uint8_t family, const uint8_t bytes[PRIVSEP_ADDR_LEN],
                      const struct privsep_limits *lim, const char *what, char *why, size_t whylen)
{
    static const uint8_t zeros[PRIVSEP_ADDR_LEN - 4];
    char a[RAWPKT_ADDR_TEXT];
    struct rawpkt_addr addr = privsep_addr(family, bytes);
    const struct rawpkt_addr *own = family == AF_INET6 ? &lim->node6 : &lim->node;

    if (family != AF_INET && family != AF_INET6) {
        snprintf(why, whylen, "%s of address family %u", what, family);
        return -ERANGE;
    }
    if (family == AF_INET && memcmp(bytes + 4, zeros, sizeof(zeros)) != 0) {
        snprintf(why, whylen, "%s an IPv4 address with bytes after it", what);
        return -ERANGE;
    }
    rawpkt_addr_text(&addr, a);
    if (family == AF_INET6 ? !unicast6(&addr.u.v6) : !unicast(addr.u.v4.s_addr)) {
        snprintf(why, whylen, "%s %s, not a unicast address", what, a);
        return -ERANGE;
    }
    if (own->family != family) {
        snprintf(why, whylen, "%s %s: this node has no %s address", what, a,
                 family == AF_INET6 ? "IPv6" : "IPv4");
        return -ERANGE;
    }
    if (rawpkt_addr_same(&addr, own)) {
        snprintf(why, whylen, "%s %s, this node's own address", what, a);
        return -ERANGE;
    }
    return 0;
}

static int timeout_ok(uint32_t ms, char *why, size_t whylen)
{
    if (ms >= 1 && ms <= PRIVSEP_TIMEOUT_MAX_MS)
        return 0;
    snprintf(why, whylen, "a timeout of %u ms (1 to %u)", ms, PRIVSEP_TIMEOUT_MAX_MS);
    return -ERANGE;
}

static int check_watch(const void *msg, const void *ctx, char *why, size_t whylen)
{
    const struct privsep_watch_syn *w = msg;
    int rc = address_ok(w->family, w->dst, ctx, "WATCH_SYN towards", why, whylen);

    if (rc < 0)
        return rc;
    if (w->dport == 0 || w->zero != 0) {
        snprintf(why, whylen, "WATCH_SYN with port %u, padding %u", w->dport, w->zero);
        return -ERANGE;
    }
    return timeout_ok(w->timeout_ms, why, whylen);
}

static int check_inject(const void *msg, const void *ctx, char *why, size_t whylen)
{
    const struct privsep_inject *in = msg;
    const struct privsep_limits *lim = ctx;
    int rc = address_ok(in->family, in->pub, lim, "INJECT from", why, whylen);

    if (rc < 0)
        return rc;
    if (in->pub_port == 0 || in->zero != 0) {
        snprintf(why, whylen, "INJECT from port %u, padding %u", in->pub_port, in->zero);
        return -ERANGE;
    }
    if (in->allowed_port < lim->port_low || in->allowed_port > lim->port_high) {
        snprintf(why, whylen, "INJECT to port %u, outside this node's range %u-%u",
                 in->allowed_port, lim->port_low, lim->port_high);
        return -ERANGE;
    }
    if (in->len < PRIVSEP_SYN_MIN || in->len > TRAVERSE_PACKET_MAX) {
        snprintf(why, whylen, "INJECT of a %u-byte packet (%d to %d)", in->len, PRIVSEP_SYN_MIN,
                 TRAVERSE_PACKET_MAX);
        return -ERANGE;
    }
    /* The SYN is of its source's family (the engine checks the rest). */
    if (in->syn[0] >> 4 != (in->family == AF_INET6 ? 6 : 4)) {
        snprintf(why, whylen, "INJECT of an IPv%u packet from an IPv%c address", in->syn[0] >> 4,
                 in->family == AF_INET6 ? '6' : '4');
        return -ERANGE;
    }
    return timeout_ok(in->timeout_ms, why, whylen);
}

static int status_ok(int32_t status, const char *text, char *why, size_t whylen)
{
    if (status > 0 || status < -4095) {
        snprintf(why, whylen, "status %d", status);
        return -ERANGE;
    }
    if (memchr(text, '\0', PRIVSEP_WHY_MAX) == NULL) {
        snprintf(why, whylen, "an unterminated reason");
        return -ERANGE;
    }
    return 0;
}

static int check_status(const void *msg, const void *ctx, char *why, size_t whylen)
{
    const struct privsep_status *m = msg;

    (void)ctx;
    return status_ok(m->status, m->why, why, whylen);
}

static int check_syn(const void *msg, const void *ctx, char *why, size_t whylen)
{
    const struct privsep_syn *m = msg;

    (void)ctx;
    if (m->status == 0 && (m->len < PRIVSEP_SYN_MIN || m->len > TRAVERSE_PACKET_MAX)) {
        snprintf(why, whylen, "SYN of %u bytes", m->len);
        return -ERANGE;
    }
    return status_ok(m->status, m->why, why, whylen);
}

const struct imsg_type privsep_types[IMSG_TYPES] = {
    [PRIVSEP_START] = {"START", sizeof(struct privsep_bare), 0, NULL},
    [PRIVSEP_WATCH_SYN] = {"WATCH_SYN", sizeof(struct privsep_watch_syn), 0, check_watch},
    [PRIVSEP_INJECT] = {"INJECT", sizeof(struct privsep_inject), 0, check_inject},
    [PRIVSEP_RULES] = {"RULES", sizeof(struct privsep_bare), 0, NULL},
    [PRIVSEP_READY] = {"READY", sizeof(struct privsep_status), 0, check_status},
    [PRIVSEP_ACK] = {"ACK", sizeof(struct privsep_status), 0, check_status},
    [PRIVSEP_SYN] = {"SYN", sizeof(struct privsep_syn), 0, check_syn},
    [PRIVSEP_DONE] = {"DONE", sizeof(struct privsep_status), 0, check_status},
    [PRIVSEP_RULES_OK] = {"RULES_OK", sizeof(struct privsep_rules_ok), 0, NULL},
};
