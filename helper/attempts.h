/*
 * The initiator's side of a traversing or hole-punching attempt, which the
 * helper takes part in after relaying the plan to its process:
 *
 *   traversing  before the plan reaches the process (it goes once the
 *               watch is in place), watch for the SYN it
 *               will send to the target (privsep.h, traverse.h); hand that SYN to the
 *               broker (qcg__traverse), which orders the target's helper to
 *               inject it.  The process's own connect() completes.
 *   holepunch   punch through the broker's reflector (punch.h) and hand the
 *               connected socket to the process (INCOMING, role HELLO).
 *
 * Either way, an attempt that fails on our side is answered with an ERROR
 * carrying the LOOKUP's request id, so the process moves on to the next
 * technique at once instead of waiting out its attempt timeout.
 */
#ifndef QCG_HELPER_ATTEMPTS_H
#define QCG_HELPER_ATTEMPTS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "helper.h"
#include "localproto.h"

#define ATTEMPT_SYN_WAIT_MS 10000 /* from the plan to the process's SYN */
#define ATTEMPT_DELIVER_MS 10     /* a busy control connection: retry after */
#define ATTEMPT_DELIVER_TRIES 200

struct attempts;
struct conn;
struct privsep;
struct upstream;

/* ps may be NULL (no privileges: traversing is never planned for us). */
struct attempts *attempts_new(uv_loop_t *loop, const struct helper_config *cfg, struct upstream *up,
                              struct privsep *ps);
/* Loop thread.  For a holepunch or traversing plan for c, not sent yet.
   0: a punch started, the caller sends the plan now; 1: traversing, the
   plan goes to c once the SYN watch is in place (or with an ERROR after it
   when the watch cannot be made); -1 with why when the attempt cannot
   start (the caller then answers with the plan and an ERROR). */
int attempt_begin(struct attempts *as, struct conn *c, uint32_t rid, const struct local_plan *plan,
                  char *why, size_t whylen);
/* Aborts every attempt (no callbacks reach connections any more).  Call
   before privsep_close. */
void attempts_close(struct attempts *as);
void attempts_free(struct attempts *as);

#endif
