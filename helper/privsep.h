/*
 * Privilege separation of qcg-helper (OpenBSD's relayd/bgpd style).
 *
 * When the helper may intercept (CAP_NET_ADMIN and CAP_NET_RAW held,
 * intercept = yes, an IPv4 address), it forks the privileged process before
 * it opens anything that talks to the world: that process keeps those two
 * capabilities and nothing else, closes every descriptor it inherited, runs
 * the packet engine (traverse.h) on a loop of its own and serves the
 * requests of privsep_msg.h over the channel of privsep/proc.h (which
 * starts it and checks each message); it parses nothing else.  The main process then drops every
 * capability for good (privdrop, util/privdrop.h) and reaches the engine only through this
 * module, whose calls have traverse.h's shape.
 *
 * The privileged process waits for START (sent once the main process owns
 * its local socket: a second helper stops before touching any rule), exits
 * when the socketpair closes or its parent dies (PR_SET_PDEATHSIG: SIGTERM),
 * removing its rules and chains first, and logs as "helper-priv".
 *
 * If it dies, it is not restarted (the main process has no capability left
 * to start another): pending and new traversals fail with the reason, once
 * logged, and the lost callback tells the main process to stop declaring
 * that it intercepts.
 */
#ifndef QCG_HELPER_PRIVSEP_H
#define QCG_HELPER_PRIVSEP_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "helper.h"
#include "traverse.h"

/* A request's answer that does not come within its timeout plus this is
   failed by the main process itself. */
#define PRIVSEP_GRACE_MS 1000
/* How long a request sent may wait for its acknowledgement (the engine
   adds a rule in ~3 ms; iptables waits up to 5 s for its lock and is given
   10 s in all).  A process that takes longer is killed (lost). */
#define PRIVSEP_ACK_MS 12000
/* How long START may take (the engine's chains: tens of ms, each iptables
   command bounded by 10 s). */
#define PRIVSEP_READY_MS 30000
/* How long privsep_free waits for the privileged process to remove its
   rules and exit before it is killed. */
#define PRIVSEP_EXIT_MS 3000

struct privsep;

/* Forks the privileged process (which never returns from here) with what
   it needs from cfg; in the main process, a handle not yet started.  NULL
   with why (socketpair, fork).  Call before any thread or libuv loop exists
   in this process: the privileged process closes every descriptor it
   inherits, libuv's global ones (re-made at fork) included. */
struct privsep *privsep_fork(const struct helper_config *cfg, char *err, size_t errlen);
/* Sends START and waits (blocking, at most PRIVSEP_READY_MS) for the engine
   to start; then serves on loop.  -1 with why: the privileged process has
   exited or is exiting (privsep_free reaps it). */
int privsep_start(struct privsep *ps, uv_loop_t *loop, char *why, size_t whylen);
/* The privileged process's pid. */
pid_t privsep_pid(const struct privsep *ps);

/* Called once, on the loop, when the privileged process is lost (why says
   how); not after privsep_close. */
typedef void (*privsep_lost_fn)(void *arg, const char *why);
void privsep_on_lost(struct privsep *ps, privsep_lost_fn fn, void *arg);

/* Called once, on the loop, when the privileged process has taken a
   request (status 0: its rules are in place, the outcome's callback follows
   within timeout_ms + PRIVSEP_GRACE_MS) or when the request failed before
   that (status < 0, why: refused, the process lost, traversing closing; no
   outcome follows). */
typedef void (*privsep_acked_fn)(void *arg, int status, const char *why);

/* traverse_watch_syn and traverse_inject, through the privileged process:
   the same arguments, callbacks and outcomes, but never blocking.  The
   request is queued and 0 returned (-1 with why only when traversing is
   unavailable or PRIVSEP_PENDING_MAX requests are pending); the privileged
   process gets one request at a time, in order.  A watch tells acked_cb
   when its rule is in place (the process may send its SYN then); an inject
   that fails before its acknowledgement gets cb with the error.  The
   process is killed (lost) when a request sent waits PRIVSEP_ACK_MS for its
   acknowledgement; one that waited as long in the queue fails alone.  No
   callback ever comes from inside these calls. */
int privsep_watch_syn(struct privsep *ps, struct rawpkt_addr dst, uint16_t dport,
                      unsigned timeout_ms, privsep_acked_fn acked_cb, traverse_syn_fn cb, void *arg,
                      char *why, size_t whylen);
int privsep_inject(struct privsep *ps, const uint8_t *syn, size_t len, struct rawpkt_addr pub,
                   uint16_t pub_port, uint16_t allowed_port, unsigned timeout_ms,
                   traverse_done_fn cb, void *arg, char *why, size_t whylen);
/* The rules the engine has installed now: a round trip that blocks the
   loop (tests only), at most PRIVSEP_ACK_MS.  0, or -1 with why. */
int privsep_rules(struct privsep *ps, unsigned *rules, char *why, size_t whylen);

/* Fails what is pending (callbacks get -ECANCELED) and closes the socket:
   the privileged process removes its rules and chains and exits.  Loop
   thread. */
void privsep_close(struct privsep *ps);
/* Closes if not done yet, waits for the privileged process (at most
   PRIVSEP_EXIT_MS, then SIGKILL), and frees once the loop has run the
   closes (run the loop after it). */
void privsep_free(struct privsep *ps);

/* The privileged process itself, in the child of proc_start (fork only:
   its channel on PROC_FD_CHAN, nothing else open but 0-2; exported for the
   tests, which start it so).  Never returns. */
_Noreturn void privsep_child_main(const struct helper_config *cfg);

#endif
