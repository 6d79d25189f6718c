/*
 * qcg-probe's test endpoints ("responders"): a probe-listen order makes this
 * node publish rank `rank` of job `job` (secret = the order's token) for
 * `seconds`, exactly as a local process of that job would, so that every
 * technique's machinery (connect-back, proxy-connect, punch and inject
 * orders, which all need a live published process) works unchanged.
 *
 * Each endpoint is a thread that uses libqcgconn against this helper's own
 * Unix socket: qcg_open, qcg_listen, then accepts until its time is up,
 * echoing what each connection sends (at most RESPONDER_ECHO_MAX bytes, for
 * at most RESPONDER_ECHO_MS), then qcg_close (the contact is withdrawn).
 * Its policy is encrypt=never: it takes what the prober asks for (TLS across
 * sites by default, qcg-probe --encrypt), and echoes through the session
 * then, non-blocking like plain connections; a record that does not
 * authenticate ends that connection.  The handshake itself is qcg_accept's
 * (non-blocking, 10 s at most).
 * A connection that starts with QCG_PROBE_DONE_LINE ends it early, once that
 * line is echoed: the prober is done.
 * The thread never touches the loop: it is one more client of the socket.
 */
#ifndef QCG_HELPER_RESPONDER_H
#define QCG_HELPER_RESPONDER_H

#include <stddef.h>
#include <uv.h>

#include "cmdqueue.h"
#include "helper.h"

#define RESPONDERS_MAX 4               /* endpoints at once; more orders are refused */
#define RESPONDER_CONNS_MAX 8          /* connections echoed at once by one endpoint */
#define RESPONDER_ECHO_MAX (64 * 1024) /* bytes echoed per connection */
#define RESPONDER_ECHO_MS 5000         /* life of one echoed connection */
#define RESPONDER_TICK_MS 200          /* how soon an endpoint notices a stop */
#define RESPONDERS_STOP_MS 5000        /* how long the helper's stop waits for them */

struct responders;

/* cfg (its socket path) must outlive them.  NULL with a reason in err. */
struct responders *responders_new(uv_loop_t *loop, const struct helper_config *cfg, char *err,
                                  size_t errlen);
/* Loop thread: starts an endpoint for a probe-listen order (checked by
   upstream.c).  Refused with a warning for a job not named probe-..., a
   (job, rank) already served, or beyond RESPONDERS_MAX; seconds are clamped
   to 1..QCG_PROBE_TTL_MAX. */
void responders_start(struct responders *rs, const struct command *cmd);
/* Loop thread: asks every endpoint to end (each withdraws its contact through
   the still-open socket) and calls done(arg) on the loop once all have
   ended, or after RESPONDERS_STOP_MS at the latest.  No endpoint starts
   after it. */
void responders_stop(struct responders *rs, void (*done)(void *arg), void *arg);
/* After uv_run returned: joins what is left (the socket is closed by then, so
   they end at once) and frees. */
void responders_free(struct responders *rs);

#endif
