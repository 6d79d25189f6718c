/*
 * TCP hole punching, the node side.  Both helpers of a pair run the same
 * steps on their event loop:
 *
 *   1. bind a free port of the node's range (SO_REUSEADDR + SO_REUSEPORT),
 *   2. connect from it to the broker's reflector and send
 *      "PUNCH <token> <local-addr> <local-port>" (broker/reflector.h), the
 *      token's MAC replaced by a proof (util/punch_auth.h),
 *   3. read "PEER <peer-addr> <peer-port> <own-addr> <own-port> <tag>" (both
 *      sides get it at the same moment), refuse it unless the tag proves it
 *      came from the reflector, and close that connection,
 *   4. connect from the same local port to the peer's public mapping: the two
 *      SYNs cross, each leaves a conntrack entry in its own router that the
 *      other's SYN then matches (TCP simultaneous open); a connect refused
 *      (RST) is retried on a bounded schedule (PUNCH_RETRIES, doubling from
 *      PUNCH_RETRY_MS) while time remains.  A listening socket shares the
 *      port meanwhile (SO_REUSEPORT): a peer SYN that arrives between two
 *      tries, or on a path without any stateful box (loopback, two public
 *      hosts), is accepted instead of reset; only the peer's observed
 *      address:port is accepted, anything else is closed and logged.
 *
 *
 * Against firewalls that answer an unsolicited SYN with a reset or an ICMP
 * error (instead of dropping it), crossing SYNs tear each other's attempt
 * down.  So when the hop count to the reflector is known (punch_hops.h: 2 or
 * more routers), the two sides take roles by their public endpoints: the
 * lower one, the opener, sends its SYN with TTL = that hop count (it makes
 * its own router's state and expires on the internet, before the peer's
 * firewall) and keeps the socket in SYN_SENT, deaf below PUNCH_MIN_TTL so
 * that the router's time-exceeded cannot end it; the connector sends a
 * plain SYN (TTL PUNCH_CONNECTOR_TTL) PUNCH_CONNECTOR_DELAY_MS later, which
 * passes the opener's state and meets that socket: a simultaneous open.
 * Refusals are retried as above; an unanswered SYN is left to the kernel's
 * retransmission (normal TTL).
 *
 * Over IPv6 (no NAT: the reflector sees the nodes' own addresses) the same,
 * the hop count as the hop limit.  Without one of two or more the sides
 * stagger instead: the higher side's plain SYN follows the lower side's
 * by twice its round trip to the reflector (at least
 * PUNCH_CONNECTOR_DELAY_MS, at most PUNCH_STAGGER_MAX_MS), by when the
 * first SYN has been dropped by the higher side's firewall: the second one
 * passes the lower side's firewall on its state and meets its connecting
 * socket.
 *
 * The port is one nobody holds (a plain bind without reuse options succeeds
 * on it; at most PUNCH_BIND_TRIES candidates, small ranges walked from a
 * random start), so two punches of one node never share a port.  A port whose
 * earlier connection to the reflector is still in TIME_WAIT cannot connect
 * there again (EADDRNOTAVAIL): the next one is taken.  A punch never leaves
 * such a TIME_WAIT itself: when it ends before the reflector's FIN, it resets
 * that connection instead of closing it first.
 *
 * The caller gets one connected non-blocking descriptor or one reason, within
 * timeout_ms.  No privileges needed.
 */
#ifndef QCG_HELPER_PUNCH_H
#define QCG_HELPER_PUNCH_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto.h"

#define PUNCH_RETRIES 4
#define PUNCH_RETRY_MS 100
#define PUNCH_BIND_TRIES 16
/* The TTL-limited variant (punch_hops.h): how long the connector waits
   before its first SYN, and how long a punch whose peer is known waits for
   its hop count. */
#define PUNCH_CONNECTOR_DELAY_MS 10
#define PUNCH_HOPS_WAIT_MS 1000
#define PUNCH_LOW_CHECK_MS 2 /* the opener's socket after its SYN expired */
/* The time-exceeded of the opener's first SYN would end its connect (once
   the connect() call has returned, the kernel takes an ICMP error in
   SYN_SENT as the end), so the opener's socket takes no packet below
   PUNCH_MIN_TTL (punch_hops.h, which checks that the router where the SYN
   expires sends its errors below it), and the connector sends its
   handshake with TTL PUNCH_CONNECTOR_TTL, which arrives above it across up
   to 127 routers. */
#define PUNCH_CONNECTOR_TTL 255
#define PUNCH_STAGGER_MAX_MS 500 /* the most a staggered punch's second SYN waits */

struct punch;

struct punch_params {
    char reflector_addr[48]; /* the broker's reflector (IPv4 or IPv6 literal) */
    uint16_t reflector_port;
    char token[128];   /* this side's token */
    char local[48];    /* this node's address (what we bind), of the reflector's family */
    uint16_t port_low; /* the node's port range: the punch binds one of these */
    uint16_t port_high;
    unsigned timeout_ms; /* the whole exchange */
    int first_ttl;       /* the first SYN's TTL: 0 measured, -1 plain (normal TTL) */
};

/* status 0: fd is connected to the peer (non-blocking; the callee owns it
   now), peer/own are the public mappings used; else fd -1 and why says which
   step failed ("reflector: FAIL ...", "connect to 203.0.113.82:23001: timed
   out after 3 tries").  Called once, on the loop. */
struct punch_result {
    int status;
    int fd;
    char peer_addr[48];
    uint16_t peer_port;
    char own_addr[48];
    uint16_t own_port;
    char peer_text[QCG_ADDR_MAX + 8], own_text[QCG_ADDR_MAX + 8]; /* "a.b.c.d:p", "[v6]:p" */
    uint16_t local_port;
    unsigned setup_ms;
    char why[256];
};
typedef void (*punch_fn)(void *arg, const struct punch_result *r);

/* The reflector's answer (one line without its '\n', cut up in place):
   "PEER <peer-addr> <peer-port> <own-addr> <own-port>", both addresses of
   `family` (the reflector's: a punch stays in one family), fills res's
   addresses and ports and *peer (address and port), and returns 0; a FAIL
   line or anything else returns -1 with the reason in why.  Separate from
   the punch for tests and fuzzing. */
int punch_answer_parse(char *line, int family, struct punch_result *res,
                       struct sockaddr_storage *peer, char *why, size_t whylen);

/* Both helpers of a pair give their punch this long without progress, from
   the plan or order and again from the reflector's pairing (the peer's
   helper came), PUNCH_CAP_FACTOR times it in all at most; libqcgconn's
   holepunch attempt outlasts that (HOLEPUNCH_TIMEOUT_MS). */
#define PUNCH_TIMEOUT_MS 5000
#define PUNCH_CAP_FACTOR 2

/* The parameters of a node's punch: through the reflector at
   reflector_addr:reflector_port with `token`, from the node's first address
   of the reflector's family (the broker gives an IPv6 reflector for a punch
   over IPv6) among addrs[0..naddrs-1] and a port of its range
   ports[0]-ports[1], within PUNCH_TIMEOUT_MS, the first SYN's TTL (IPv6:
   hop limit) first_ttl (the helper's punch-ttl).  0, or -1 when the node
   has no address of that family (p->local is then empty and punch_start
   says so). */
int punch_params_for_node(struct punch_params *p, const char *reflector_addr, int reflector_port,
                          const char *token, const char addrs[][QCG_ADDR_MAX], int naddrs,
                          const int ports[2], int first_ttl);

/* Starts a punch.  NULL with why (bad parameters, no free port). */
struct punch *punch_start(uv_loop_t *loop, const struct punch_params *p, punch_fn cb, void *arg,
                          char *why, size_t whylen);
/* Aborts a punch in progress (its callback is not called); closes its
   sockets and frees it on the next loop turn.  Loop thread.  Harmless after
   the callback (also from inside it). */
void punch_cancel(struct punch *p);

#endif
