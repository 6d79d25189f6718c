/* The checks of the message list; see privsep_msg.h. */
#include "privsep_msg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

enum direction { TO_PRIVILEGED, TO_MAIN };

static const struct {
    uint32_t type;
    const char *name;
    size_t size;
    enum direction dir;
} messages[] = {
    {PRIVSEP_START, "START", sizeof(struct privsep_bare), TO_PRIVILEGED},
    {PRIVSEP_WATCH_SYN, "WATCH_SYN", sizeof(struct privsep_watch_syn), TO_PRIVILEGED},
    {PRIVSEP_INJECT, "INJECT", sizeof(struct privsep_inject), TO_PRIVILEGED},
    {PRIVSEP_RULES, "RULES", sizeof(struct privsep_bare), TO_PRIVILEGED},
    {PRIVSEP_READY, "READY", sizeof(struct privsep_status), TO_MAIN},
    {PRIVSEP_ACK, "ACK", sizeof(struct privsep_status), TO_MAIN},
    {PRIVSEP_SYN, "SYN", sizeof(struct privsep_syn), TO_MAIN},
    {PRIVSEP_DONE, "DONE", sizeof(struct privsep_status), TO_MAIN},
    {PRIVSEP_RULES_OK, "RULES_OK", sizeof(struct privsep_rules_ok), TO_MAIN},
};
#define NMESSAGES (sizeof(messages) / sizeof(messages[0]))

const char *privsep_type_name(uint32_t type)
{
    for (size_t i = 0; i < NMESSAGES; i++)
        if (messages[i].type == type)
            return messages[i].name;
    return "unknown";
}

/* Header, type, direction and exact size.  0 or -EBADMSG. */
static int check_frame(const void *msg, size_t len, enum direction dir, char *why, size_t whylen)
{
    struct privsep_hdr h;

    if (len < sizeof(h)) {
        snprintf(why, whylen, "a message of %zu bytes, shorter than a header", len);
        return -EBADMSG;
    }
    memcpy(&h, msg, sizeof(h));
    for (size_t i = 0; i < NMESSAGES; i++) {
        if (messages[i].type != h.type)
            continue;
        if (messages[i].dir != dir) {
            snprintf(why, whylen, "%s goes the other way", messages[i].name);
            return -EBADMSG;
        }
        if (len != messages[i].size) {
            snprintf(why, whylen, "%s of %zu bytes, not %zu", messages[i].name, len,
                     messages[i].size);
            return -EBADMSG;
        }
        return 0;
    }
    snprintf(why, whylen, "unknown message type %u (%zu bytes)", h.type, len);
    return -EBADMSG;
}

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

static int check_watch(const struct privsep_watch_syn *w, char *why, size_t whylen)
{
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

static int check_inject(const struct privsep_inject *in, const struct privsep_limits *lim,
                        char *why, size_t whylen)
{
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

int privsep_request_check(const void *msg, size_t len, const struct privsep_limits *lim, char *why,
                          size_t whylen)
{
    union privsep_msg m;
    int rc = check_frame(msg, len, TO_PRIVILEGED, why, whylen);

    if (rc < 0)
        return rc;
    memcpy(&m, msg, len);
    switch (m.h.type) {
    case PRIVSEP_WATCH_SYN:
        return check_watch(&m.watch, why, whylen);
    case PRIVSEP_INJECT:
        return check_inject(&m.inject, lim, why, whylen);
    default:
        return 0;
    }
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

int privsep_answer_check(const void *msg, size_t len, char *why, size_t whylen)
{
    union privsep_msg m;
    int rc = check_frame(msg, len, TO_MAIN, why, whylen);

    if (rc < 0)
        return rc;
    memcpy(&m, msg, len);
    switch (m.h.type) {
    case PRIVSEP_READY:
    case PRIVSEP_ACK:
    case PRIVSEP_DONE:
        return status_ok(m.status.status, m.status.why, why, whylen);
    case PRIVSEP_SYN:
        if (m.syn.status == 0 && (m.syn.len < PRIVSEP_SYN_MIN || m.syn.len > TRAVERSE_PACKET_MAX)) {
            snprintf(why, whylen, "SYN of %u bytes", m.syn.len);
            return -ERANGE;
        }
        return status_ok(m.syn.status, m.syn.why, why, whylen);
    default:
        return 0;
    }
}
