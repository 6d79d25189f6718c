/*
 * The message list between qcg-helper's two processes (privsep.h): the main
 * process, which holds no capability and talks to the world, and the
 * privileged process, which keeps CAP_NET_ADMIN and CAP_NET_RAW, runs the
 * packet engine (traverse.h) and talks to nobody else.
 *
 * One message per datagram of the channel of privsep/proc.h (a
 * SOCK_SEQPACKET socketpair), fixed layout, host byte order except addresses
 * and ports as noted, every size and field checked against privsep_types
 * before anything is read.  Every message starts with struct imsg_hdr; a
 * request's id comes back in its answers.  None carries a descriptor.
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
 * destination of a family this node has an address of, and a port; INJECT a
 * SYN of 40 to TRAVERSE_PACKET_MAX bytes of the family of its source, towards
 * this node's address of that family and a port in this node's range (the
 * only ports a process may publish), from a unicast address that is not this
 * node's.  Unicast: IPv4 neither 0, 127/8, multicast nor broadcast; IPv6
 * neither ::, ::1, multicast, link-local nor IPv4-mapped; an IPv4 address's
 * 12 bytes after its 4 zero.  Timeouts of 1 ms to
 * PRIVSEP_TIMEOUT_MAX_MS; at most PRIVSEP_PENDING_MAX plans at once.  Anything
 * else (a wrong size, an unknown type, a field out of range, an answer type,
 * a descriptor) is refused with an ACK carrying the request's id (0 when the
 * datagram is too short to hold one) and a rate-limited log line.
 */
#ifndef QCG_HELPER_PRIVSEP_MSG_H
#define QCG_HELPER_PRIVSEP_MSG_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "proc.h"
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
    PRIVSEP_READY = 11,
    PRIVSEP_ACK = 12,
    PRIVSEP_SYN = 13,
    PRIVSEP_DONE = 14,
    PRIVSEP_RULES_OK = 15,
};
/* What each end takes. */
#define PRIVSEP_TO_PRIVILEGED                                                                      \
    (IMSG_BIT(PRIVSEP_START) | IMSG_BIT(PRIVSEP_WATCH_SYN) | IMSG_BIT(PRIVSEP_INJECT) |            \
     IMSG_BIT(PRIVSEP_RULES))
#define PRIVSEP_TO_MAIN                                                                            \
    (IMSG_BIT(PRIVSEP_READY) | IMSG_BIT(PRIVSEP_ACK) | IMSG_BIT(PRIVSEP_SYN) |                     \
     IMSG_BIT(PRIVSEP_DONE) | IMSG_BIT(PRIVSEP_RULES_OK))

/* START and RULES: the header alone. */
struct privsep_bare {
    struct imsg_hdr h;
};

/* Addresses: family AF_INET or AF_INET6, the address in network order in
   the first 4 or 16 bytes. */
#define PRIVSEP_ADDR_LEN 16

struct privsep_watch_syn {
    struct imsg_hdr h;
    uint8_t dst[PRIVSEP_ADDR_LEN];
    uint16_t dport; /* host order, like every port here */
    uint8_t family; /* dst's */
    uint8_t zero;
    uint32_t timeout_ms;
};

struct privsep_inject {
    struct imsg_hdr h;
    uint8_t pub[PRIVSEP_ADDR_LEN]; /* the initiator's public address */
    uint16_t pub_port;
    uint16_t allowed_port; /* the port a process of the job published here */
    uint32_t timeout_ms;
    uint16_t len;   /* bytes of syn used */
    uint8_t family; /* pub's, and the SYN's */
    uint8_t zero;
    uint8_t syn[TRAVERSE_PACKET_MAX];
};

/* READY, ACK and DONE: 0, or a negative errno and a one-line reason. */
struct privsep_status {
    struct imsg_hdr h;
    int32_t status;
    char why[PRIVSEP_WHY_MAX]; /* NUL-terminated */
};

struct privsep_syn {
    struct imsg_hdr h;
    int32_t status; /* 0: pkt holds the SYN */
    uint16_t len;
    uint16_t zero;
    uint8_t pkt[TRAVERSE_PACKET_MAX];
    char why[PRIVSEP_WHY_MAX];
};

struct privsep_rules_ok {
    struct imsg_hdr h;
    uint32_t rules;
};

_Static_assert(sizeof(struct privsep_bare) == 16, "privsep_bare layout");
_Static_assert(sizeof(struct privsep_watch_syn) == 40, "privsep_watch_syn layout");
_Static_assert(sizeof(struct privsep_inject) == 44 + TRAVERSE_PACKET_MAX, "privsep_inject layout");
_Static_assert(sizeof(struct privsep_status) == 20 + PRIVSEP_WHY_MAX, "privsep_status layout");
_Static_assert(sizeof(struct privsep_syn) == 24 + TRAVERSE_PACKET_MAX + PRIVSEP_WHY_MAX,
               "privsep_syn layout");
_Static_assert(sizeof(struct privsep_rules_ok) == 20, "privsep_rules_ok layout");

/* Any message. */
union privsep_msg {
    struct imsg_hdr h;
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
    struct rawpkt_addr node, node6; /* family 0: the node has none of that family */
    uint16_t port_low, port_high;
};

/* An address of a message as the engine takes it (the message's checks
   passed). */
struct rawpkt_addr privsep_addr(uint8_t family, const uint8_t bytes[PRIVSEP_ADDR_LEN]);

/* The types, sizes and field checks; the privileged process's channel has
   its struct privsep_limits as context. */
extern const struct imsg_type privsep_types[IMSG_TYPES];

#endif
