/*
 * The broker's reflector: a plain-TCP endpoint (default port 7704) that tells
 * a node the public address:port its connection came from, and the
 * rendezvous of TCP hole punching.  Plain TCP on purpose: what it observes is
 * the NAT mapping of that very TCP connection, and the one-time token
 * authorises the only thing that matters (pairing two punches).
 *
 * Protocol: one request line from the client (<= 255 bytes, '\n'-terminated,
 * within REFLECTOR_READ_TIMEOUT_MS), one answer line from the reflector, then
 * the reflector closes.  Fields are separated by one space.
 *
 *   MAP                                   -> MAPPED <addr> <port>
 *       the address:port this connection came from (qcg-probe compares it with
 *       the proxy's observation: endpoint-(in)dependent mapping).
 *   PUNCH <token> <local-addr> <local-port>
 *                                         -> PEER <peer-addr> <peer-port> <own-addr> <own-port>
 *                                            [<tag>]
 *       The tag authenticates the answer when the token came as a version 2
 *       token (its MAC replaced by a proof; util/punch_auth.h), as helpers
 *       send it: an on-path attacker cannot redirect the punch.
 *       token: a hole-punching token the broker issued (util/token.h format,
 *       the reflector's key; side 0 initiator, 1 target), single use.  The
 *       connection is held until the other side of the same pair has arrived
 *       (at most REFLECTOR_PAIR_WAIT_MS), then each gets the other's observed
 *       mapping and its own, at the same moment, and both connect to each
 *       other from the local port they came from.
 *   DIAL <port>                           -> DIALED <addr> <port> open|reset|icmp|timeout
 *       the reflector opens a TCP connection to the address this connection
 *       came from, in its family (an IPv4 caller over IPv4), at <port>
 *       (1..65535), within REFLECTOR_DIAL_TIMEOUT_MS:
 *       whether unsolicited inbound TCP reaches the node ("timeout" =
 *       dropped, "reset" = a TCP reset, "icmp" = an ICMP error: port, host
 *       or network unreachable, administratively prohibited).  Linux reports
 *       a reset and an ICMP port unreachable alike (ECONNREFUSED); the dial
 *       socket's error queue (core/refusal.h) tells them apart.  Only
 *       towards the caller's own observed address, one dial per connection.
 *       Reflectors before these two words answered "refused" for both
 *       (qcg-probe still reads it).  Any other error (e.g. the broker's own
 *       OUTPUT rules) is a FAIL naming it.
 *
 *   Any error                             -> FAIL <one-line reason>
 *
 * PUNCH is refused with FAIL when the token is malformed, forged, expired,
 * already used or not expected, when the peer does not come in time, and
 * when a side declared port-preserving (reflector_expect's `preserving`) is
 * observed with another port than <local-port>: then both sides get FAIL
 * naming the misdeclared cluster at once (the broker logs it as a
 * misconfiguration), so the attempt costs one round trip, not a timeout.
 *
 * Strictness: printable ASCII only, exactly one space between fields, no
 * bytes after the '\n' (nor while waiting for the peer), port numbers without
 * sign or leading zero, addresses as inet_pton reads them.  After the answer
 * the reflector half-closes and waits (at most REFLECTOR_LINGER_MS) for the
 * client's FIN, so the answer is never lost to a reset.
 *
 * Runs on its own thread (util/engine.h, the proxy relay's engine too); bounded: at most
 * REFLECTOR_CONNS_MAX connections, every connection has a deadline.  Until a connection has
 * presented a valid token (a MAP, a DIAL, a line still coming) it is
 * anyone's: one source address (util/tally.h: an IPv4 address, an IPv6
 * /64) holds at most REFLECTOR_CONNS_PER_ADDRESS such connections (further
 * ones are closed at once), and when all REFLECTOR_CONNS_MAX are taken the
 * oldest one still sending its line is cut for the new one (legitimate
 * clients send theirs at once), so idle or slow clients cannot lock others
 * out.  The expected table is shared by the initiator's cluster: one
 * cluster (one job's lookups there) holds at most REFLECTOR_EXPECTED_PER_CLUSTER
 * entries of it, so its flood of plans leaves the other clusters' punches
 * their room (the reflector is not told the job).  Refusal lines: at most
 * REFLECTOR_LOG_BURST a second.
 *
 * Where it runs: qcg-broker keeps it out of its own process, since it parses
 * unauthenticated input and must not sit beside the registry, the proxy key
 * and the TLS key.  reflector_client.c binds the port on each configured
 * address (the IPv4 one; the IPv6 one, IPv6 only, when given: never the
 * wildcard, so the host's other addresses stay closed), then forks and
 * executes qcg-broker again (REFLECTOR_PROCESS_ARG): a fresh image that
 * holds the listening sockets, a SOCK_SEQPACKET channel to the broker
 * (reflector_msg.h, on privsep/proc.h's channel) and, once told, the punch
 * key; nothing else.  That child (reflector_process.c, process name
 * qcg-reflector, log prefix "reflector") drops what it does not need
 * (util/privdrop.c, as the helper does): no new privileges, no
 * capabilities, and the uid of `reflector-user` (a dedicated user by
 * default, never the broker's own uid unless `reflector-same-user`).  It
 * exits when the channel closes (or the broker dies: PR_SET_PDEATHSIG).  The
 * broker notices a death, logs it, plans no hole punching meanwhile and
 * starts a new child after a backoff (proc_restart); after
 * REFLECTOR_RESTARTS_MAX deaths in a row that each came within
 * REFLECTOR_STABLE_MS of a start it gives up: hole punching is no longer
 * planned and the port is closed (on both addresses).  Tests and tools may still run the engine
 * in their own process (reflector_start*).
 */
#ifndef QCG_BROKER_REFLECTOR_H
#define QCG_BROKER_REFLECTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "token.h"

#define REFLECTOR_DEFAULT_PORT 7704
#define REFLECTOR_READ_TIMEOUT_MS 5000
#define REFLECTOR_PAIR_WAIT_MS 5000
/* A PUNCH with a valid token whose pair is not expected yet (its plan still
   on the way from the broker) is held this long, at most REFLECTOR_EARLY_MAX
   at once, before "no punch expected". */
#define REFLECTOR_EARLY_WAIT_MS 1000
#define REFLECTOR_EARLY_MAX 64
#define REFLECTOR_DIAL_TIMEOUT_MS 2000
#define REFLECTOR_CONNS_MAX 1024
#define REFLECTOR_CONNS_PER_ADDRESS 128
#define REFLECTOR_EXPECTED_MAX 65536
#define REFLECTOR_EXPECTED_PER_CLUSTER (REFLECTOR_EXPECTED_MAX / 8)
#define REFLECTOR_LOG_BURST 10
#define REFLECTOR_LINGER_MS 1000
#define REFLECTOR_LINE_MAX 255
/* Accepted clock skew on token expiry (the broker issues them on this host). */
#define REFLECTOR_TOKEN_SKEW 5

struct reflector;

/* One side of an expected punch, as the broker planned it. */
struct reflector_side {
    char cluster[64];
    char node[64];
    bool preserving; /* declared public or port-preserving: observed port must equal local */
};

/* What the reflector saw of a node: for the broker's picture of the grid
   (declared vs observed kinds).  Called on the reflector thread. */
struct reflector_observation {
    const char *cluster, *node; /* NULL for MAP/DIAL (unknown caller) */
    const char *local_addr;     /* PUNCH: what the node said; else NULL */
    int local_port;             /* PUNCH: what the node said; else 0 */
    const char *addr;           /* observed */
    int port;
};
typedef void (*reflector_observe_fn)(void *arg, const struct reflector_observation *o);

/* listen: "ADDR:PORT" ("0.0.0.0:7704").  key: the key tokens are checked with
   (the broker makes a random one at start).  NULL with a one-line reason. */
struct reflector *reflector_start(const char *listen, const struct proxy_key *key,
                                  reflector_observe_fn observe, void *arg, char *err,
                                  size_t errlen);
/* The listening socket of reflector_start: non-blocking, close-on-exec, its
   backlog reflector_backlog(conns_max); an IPv6 address takes IPv6 only
   (IPV6_V6ONLY: an IPv4 address needs a socket of its own).  The
   descriptor, or -1 with a one-line reason. */
int reflector_listen(const char *listen, unsigned conns_max, char *err, size_t errlen);
/* The listen backlog for conns_max connections at once (0: the default). */
int reflector_backlog(unsigned conns_max);
/* The waits and bounds, for tests (reflector_start uses the REFLECTOR_*
   defaults).  A zero field takes its default. */
struct reflector_tuning {
    unsigned read_timeout_ms, pair_wait_ms, dial_timeout_ms, linger_ms;
    unsigned conns_max, expected_max;
    unsigned conns_per_address, expected_per_cluster; /* 0: the default, or 1/8 of expected_max */
};
struct reflector *reflector_start_tuned(const char *listen, const struct proxy_key *key,
                                        reflector_observe_fn observe, void *arg,
                                        const struct reflector_tuning *tuning, char *err,
                                        size_t errlen);
/* The same on listening sockets made elsewhere (the reflector's process
   gets them from the broker): listen_fd, and listen_fd2 (-1: none), e.g.
   the IPv4 and the IPv6 address on the same port; it takes both, also on
   failure. */
struct reflector *reflector_start_on(int listen_fd, int listen_fd2, const struct proxy_key *key,
                                     reflector_observe_fn observe, void *arg,
                                     const struct reflector_tuning *tuning, char *err,
                                     size_t errlen);
/* The port it listens on (tests listen on port 0). */
int reflector_port(const struct reflector *r);
/* Stops the thread, closes every connection (waiting clients get FAIL). */
void reflector_stop(struct reflector *r);

/* The broker planned a punch for `pair` (the token's pair id): accept its two
   tokens until expiry (unix seconds).  Thread-safe.  0, or -1 when the table
   is full or sides[0]'s cluster holds its share of it. */
int reflector_expect(struct reflector *r, const unsigned char pair[TOKEN_PAIR_LEN],
                     const struct reflector_side sides[2], uint64_t expiry);

/* The request line parser (reflector_line.c), separate for tests and fuzzing. */
enum reflector_verb { REFLECTOR_MAP, REFLECTOR_PUNCH, REFLECTOR_DIAL };
struct reflector_request {
    enum reflector_verb verb;
    char token[TOKEN_TEXT_LEN + 1]; /* PUNCH: checked by token_check later */
    char local_addr[46];            /* PUNCH: passed inet_pton (v4 or v6) */
    int port;                       /* PUNCH: local-port; DIAL: port; 1..65535 */
};
/* line: len bytes without the '\n'.  0, or -1 with a one-line reason. */
int reflector_parse(const char *line, size_t len, struct reflector_request *req, char *why,
                    size_t whylen);

/* Counters for --stats: requests by kind, pairs completed/failed, refused
   (refused_address and cut are counted in refused too; expect_refused are
   plans not taken: full table or cluster share). */
struct reflector_counters {
    uint64_t maps, punches, paired, punch_failed, dials, refused, misdeclared;
    uint64_t refused_address, cut, expect_refused;
};
void reflector_counters(struct reflector *r, struct reflector_counters *c);

/* ---- qcg-broker's side: the reflector in its own process ----
   The same calls as above, on a child process (reflector_client.c). */
#define REFLECTOR_READY_MS 5000 /* a new child says it runs within this */
#define REFLECTOR_STOP_MS 3000  /* a stopped child exits within this, or is killed */
#define REFLECTOR_RESTART_MIN_MS 1000
#define REFLECTOR_RESTART_MAX_MS 30000
#define REFLECTOR_RESTARTS_MAX 5  /* quick deaths in a row before giving up */
#define REFLECTOR_STABLE_MS 60000 /* a child that lived this long resets the count */

struct reflector_client;

struct reflector_process_config {
    const char *listen;  /* "ADDR:PORT", the IPv4 address */
    const char *listen6; /* NULL, or "[ADDR]:PORT": a second socket, IPv6 only */
    const char *user;    /* whom the child becomes: root, or CAP_SETUID and CAP_SETGID */
    bool same_user;      /* the child keeps this process's uid instead (user ignored) */
    bool syslog;         /* the child logs where the broker does, at the broker's level */
    /* Its bounds (the broker's reflector-* options); a zero field takes its
       default.  Only read_timeout_ms, conns_max, conns_per_address,
       expected_max and expected_per_cluster reach the child. */
    struct reflector_tuning tuning;
};

/* Whom the child becomes (cfg->user, cfg->same_user): 1 with *uid and *gid,
   0 when it keeps this process's uid (same_user), -1 with a one-line reason
   (an unknown user, this process's own uid, neither root nor CAP_SETUID and
   CAP_SETGID held). */
int reflector_user_resolve(const struct reflector_process_config *cfg, uint32_t *uid, uint32_t *gid,
                           char *err, size_t errlen);
/* Binds cfg->listen (and cfg->listen6), starts the child and waits (at most REFLECTOR_READY_MS)
   until it serves.  The first child dies with the calling thread (PDEATHSIG),
   later ones with the client's own thread; observe runs on the latter.  NULL
   with a one-line reason (the port taken, an unknown user, a child that did
   not start). */
struct reflector_client *reflector_client_start(const struct reflector_process_config *cfg,
                                                const struct proxy_key *key,
                                                reflector_observe_fn observe, void *arg, char *err,
                                                size_t errlen);
/* reflector_expect in the child.  Thread-safe, never blocks longer than
   REFLECTOR_SEND_MS.  0; -1 when there is no child now or its channel is
   full.  A full table is the child's to log (its PUNCHes then get FAIL "no
   punch expected"). */
#define REFLECTOR_SEND_MS 100
int reflector_client_expect(struct reflector_client *c, const unsigned char pair[TOKEN_PAIR_LEN],
                            const struct reflector_side sides[2], uint64_t expiry);
/* Whether a child serves now (false for NULL): hole punching may be planned. */
bool reflector_client_up(const struct reflector_client *c);
/* The reflector_counters of every child so far (a child's last report, about
   once a second); zeros for NULL. */
void reflector_client_counters(struct reflector_client *c, struct reflector_counters *out);
/* The child's process id, 0 while there is none. */
int reflector_client_pid(const struct reflector_client *c);
/* Ends the child (closing its channel; SIGKILL after REFLECTOR_STOP_MS) and
   the client's thread. */
void reflector_client_stop(struct reflector_client *c);

/* The child: `qcg-broker REFLECTOR_PROCESS_ARG` with the channel and the
   listening socket on PROC_FD_CHAN and PROC_FD_GIVEN (privsep/proc.h), the
   IPv6 one in a message after INIT (reflector_msg.h).  Returns the exit
   status. */
int reflector_process_main(void);

#endif
