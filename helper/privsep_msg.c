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

    (void)ctx;
    char a[INET_ADDRSTRLEN];

    if (!unicast(w->dst)) {
        inet_ntop(AF_INET, &w->dst, a, sizeof(a));
        snprintf(why, whylen, "WATCH_SYN towards %s, not a unicast address", a);
        return -ERANGE;
    }
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
    char a[INET_ADDRSTRLEN];

    if (!unicast(in->pub)) {
        inet_ntop(AF_INET, &in->pub, a, sizeof(a));
        snprintf(why, whylen, "INJECT from %s, not a unicast address", a);
        return -ERANGE;
    }
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
