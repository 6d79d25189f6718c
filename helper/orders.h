/*
 * Orders from the broker for this node, carried down the long-poll:
 *
 *   connect-back   connect to the initiator's listener (address:port), then
 *                  hand the socket to the local process (job, rank), which
 *                  sends its hello carrying the token (reversed technique);
 *   proxy-connect  connect to the proxy, present the token ("QCGP" + token
 *                  NUL-padded to 128 bytes), wait for the paired byte 0x01,
 *                  then hand the socket to the process, which waits for the
 *                  initiator's hello (proxy technique);
 *   punch          punch a hole through the broker's reflector (punch.h) and
 *                  hand the connected socket to the process, which waits for
 *                  the initiator's hello (holepunch technique);
 *   inject         inject the initiator's SYN into our stack and complete the
 *                  simultaneous open (privsep.h, traverse.h), only towards the port the
 *                  process published (traversing technique);
 *   probe-listen   start a test endpoint for qcg-probe (responder.h): it
 *                  publishes (job, rank) itself, so no process is expected.
 *
 * Orders arrive on the upstream thread (orders_push, thread-safe) and run on
 * the event loop: non-blocking sockets and timers, every step bounded.  An
 * order goes only to a local process whose PUBLISH of (job, rank) the broker
 * accepted (so its secret matched): one for a rank whose PUBLISH is still on
 * its way waits for the answer (ORDER_HOLD_MS at most), one for a rank no
 * live process publishes is refused with a log line; so is one the process
 * is gone for when the socket is ready.
 */
#ifndef QCG_HELPER_ORDERS_H
#define QCG_HELPER_ORDERS_H

#include <stddef.h>
#include <uv.h>

#include "cmdqueue.h"
#include "local.h"

#define CONNECT_BACK_TIMEOUT_MS 5000 /* the TCP connect of either order */
#define PROXY_PAIR_TIMEOUT_MS 30000  /* waiting at the proxy for the initiator */
#define ORDERS_QUEUED_MAX 256        /* waiting for the loop */
#define ORDERS_ACTIVE_MAX 256        /* sockets in progress */
#define ORDER_INJECT_TIMEOUT_MS 5000 /* from the injected SYN to the third ACK */
/* Orders for a rank whose PUBLISH is not answered yet wait for the answer:
   this many at once, at most this long each. */
#define ORDERS_HELD_MAX 64
#define ORDER_HOLD_MS 3000
/* What one job may hold of the sockets in progress and of the held orders
   (a proxy-connect waits up to 30 s at the proxy): one job's storm leaves
   room for the others. */
#define ORDERS_JOB_ACTIVE_MAX (ORDERS_ACTIVE_MAX * 3 / 4)
#define ORDERS_JOB_HELD_MAX (ORDERS_HELD_MAX * 3 / 4)
/* Orders beyond the sockets in progress (or the job's share of them) wait
   for a slot, oldest first, this many and this long at most: a storm's
   orders come faster than the proxy pairs them, and a refused order left
   its initiator waiting 30 s at the proxy for nothing. */
#define ORDERS_WAITING_MAX 1024
#define ORDERS_JOB_WAITING_MAX (ORDERS_WAITING_MAX * 3 / 4)
#define ORDER_WAIT_MS 10000

struct orders;
struct privsep;

/* srv and cfg must outlive the orders; ps may be NULL (no privileges: inject
   orders are refused).  NULL with a reason in err. */
struct orders *orders_new(uv_loop_t *loop, struct local_server *srv,
                          const struct helper_config *cfg, struct privsep *ps, char *err,
                          size_t errlen);
struct responders;
/* Before the orders flow: where probe-listen orders go (none: dropped with a
   warning). */
void orders_set_responders(struct orders *o, struct responders *rs);
/* Any thread: hands an order (already checked by upstream.c) to the loop.
   Dropped with a warning when the queue is full or closed. */
void orders_push(struct orders *o, const struct command *cmd);
/* Loop thread: takes no more orders and aborts those in progress (call
   before privsep_close). */
void orders_close(struct orders *o);
/* Once the loop has run the closes (after uv_run returned). */
void orders_free(struct orders *o);

#endif
