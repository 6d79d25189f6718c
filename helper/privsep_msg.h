/*
 * The message list between qcg-helper's two processes (privsep.h): the main
 * process, which holds no capability and talks to the world, and the
 * privileged process, which keeps CAP_NET_ADMIN and CAP_NET_RAW, runs the
 * packet engine (traverse.h) and talks to nobody else.
 *
 * One message per datagram of a SOCK_SEQPACKET socketpair, fixed layout,
 * host byte order except addresses and ports as noted, every size checked
 * against this list before anything is read (privsep_request_check,
 * privsep_answer_check).  Every message starts with privsep_hdr; a request's
 * id comes back in its answers.
 *
 *   main -> privileged      answer(s)
 *   START                   READY: the engine started (status 0) or why not;
 *                           sent once, after the main process owns its socket
 *   WATCH_SYN               ACK: the rule is in place (0) or refused (why);
 *                           then SYN: the first SYN towards dst:dport, or why
 *                           not within timeout_ms
 *   INJECT                  ACK: injected, rules in place (0) or refused (why);
 *                           then DONE: the handshake completed (0), or why not
 *                           within timeout_ms
 *   RULES                   RULES_OK: the interception rules installed now
 *
 * What a request may ask, checked by the privileged process before the engine
 * sees it (the engine's own checks on the packet stay): WATCH_SYN a unicast
 * destination and a port; INJECT a SYN of 40 to TRAVERSE_PACKET_MAX bytes
 * towards this node's address and a port in this node's range (the only
 * ports a process may publish), from a unicast address; timeouts of 1 ms to
 * PRIVSEP_TIMEOUT_MAX_MS; at most PRIVSEP_PENDING_MAX plans at once.  Anything
 * else (a wrong size, an unknown type, a field out of range, an answer type)
 * is refused with an ACK carrying the request's id (0 when the datagram is
 * too short to hold one) and a rate-limited log line.
 */
#ifndef QCG_HELPER_PRIVSEP_MSG_H
#define QCG_HELPER_PRIVSEP_MSG_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "traverse.h"

#define PRIVSEP_WHY_MAX 200
#define PRIVSEP_TIMEOUT_MAX_MS 60000u
/* Plans (watches and injections) in progress at once. */
#define PRIVSEP_PENDING_MAX 512
/* The shortest SYN worth parsing: IPv4 and TCP headers without options. */
#define PRIVSEP_SYN_MIN 40

enum privsep_type {
    /* main -> privileged */
    PRIVSEP_START = 1,
    PRIVSEP_WATCH_SYN = 2,
    PRIVSEP_INJECT = 3,
    PRIVSEP_RULES = 4,
    /* privileged -> main */
    PRIVSEP_READY = 101,
    PRIVSEP_ACK = 102,
    PRIVSEP_SYN = 103,
    PRIVSEP_DONE = 104,
    PRIVSEP_RULES_OK = 105,
};

struct privsep_hdr {
    uint32_t type; /* enum privsep_type */
    uint32_t id;   /* the request's; 0 for START and READY */
};

/* START and RULES: the header alone. */
struct privsep_bare {
    struct privsep_hdr h;
};

struct privsep_watch_syn {
    struct privsep_hdr h;
    uint32_t dst;   /* network order */
    uint16_t dport; /* host order, like every port here */
    uint16_t zero;
    uint32_t timeout_ms;
};

struct privsep_inject {
    struct privsep_hdr h;
    uint32_t pub; /* the initiator's public address, network order */
    uint16_t pub_port;
    uint16_t allowed_port; /* the port a process of the job published here */
    uint32_t timeout_ms;
    uint16_t len; /* bytes of syn used */
    uint16_t zero;
    uint8_t syn[TRAVERSE_PACKET_MAX];
};

/* READY, ACK and DONE: 0, or a negative errno and a one-line reason. */
struct privsep_status {
    struct privsep_hdr h;
    int32_t status;
    char why[PRIVSEP_WHY_MAX]; /* NUL-terminated */
};

struct privsep_syn {
    struct privsep_hdr h;
    int32_t status; /* 0: pkt holds the SYN */
    uint16_t len;
    uint16_t zero;
    uint8_t pkt[TRAVERSE_PACKET_MAX];
    char why[PRIVSEP_WHY_MAX];
};

struct privsep_rules_ok {
    struct privsep_hdr h;
    uint32_t rules;
};

_Static_assert(sizeof(struct privsep_hdr) == 8, "privsep_hdr layout");
_Static_assert(sizeof(struct privsep_bare) == 8, "privsep_bare layout");
_Static_assert(sizeof(struct privsep_watch_syn) == 20, "privsep_watch_syn layout");
_Static_assert(sizeof(struct privsep_inject) == 24 + TRAVERSE_PACKET_MAX, "privsep_inject layout");
_Static_assert(sizeof(struct privsep_status) == 12 + PRIVSEP_WHY_MAX, "privsep_status layout");
_Static_assert(sizeof(struct privsep_syn) == 16 + TRAVERSE_PACKET_MAX + PRIVSEP_WHY_MAX,
               "privsep_syn layout");
_Static_assert(sizeof(struct privsep_rules_ok) == 12, "privsep_rules_ok layout");

/* Any message; a receive buffer one byte larger tells an oversized datagram. */
union privsep_msg {
    struct privsep_hdr h;
    struct privsep_bare bare;
    struct privsep_watch_syn watch;
    struct privsep_inject inject;
    struct privsep_status status;
    struct privsep_syn syn;
    struct privsep_rules_ok rules;
};

/* What the privileged process allows, from the configuration it was forked
   with (never from a message). */
struct privsep_limits {
    struct in_addr node;
    uint16_t port_low, port_high;
};

/* The message's name ("WATCH_SYN"), or "unknown". */
const char *privsep_type_name(uint32_t type);
/* A request as the privileged process receives it: 0 when it may be served,
   else a negative errno (-EBADMSG: size or type; -ERANGE: a field out of
   range) with a one-line why. */
int privsep_request_check(const void *msg, size_t len, const struct privsep_limits *lim, char *why,
                          size_t whylen);
/* An answer as the main process receives it: same returns. */
int privsep_answer_check(const void *msg, size_t len, char *why, size_t whylen);

#endif
