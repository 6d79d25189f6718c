/* A launch connection as frames (wire.h) over libuv, plain or encrypted
   (qcg_tls), with back-pressure:
   the sources that feed it (the daemon's output, runtime connections) stop
   being read while too much waits to be acknowledged, and resume once it
   drains; a sink that cannot keep up stops the link's own reading the same
   way.

   A link outlives its TCP connection once both ends know the session's
   token (link_set_session): every frame sent is kept (core/resendq.h) until
   the peer acknowledges it, a break (EOF, error, or nothing heard for
   LINK_STALL_MS although each side sends an ACK every LINK_BEAT_MS) is
   reported through ops->broken, and the owner attaches a new connection
   (link_attach on the launcher's side, link_adopt on the agent's), after
   which each side resends what the other had not received: nothing twice,
   nothing out of order. */
#ifndef QCG_LAUNCH_LINK_H
#define QCG_LAUNCH_LINK_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "qcgconn.h"
#include "wire.h"

/* Bytes sent and not yet acknowledged above which sources pause. */
#define LINK_HIGH_WATER (1024 * 1024)
/* The most a link keeps for resending: a sender that ignores the pause
   (there is none, each source reads at most a frame more) ends the link. */
#define LINK_RESEND_MAX (8 * LINK_HIGH_WATER)
/* Each side sends an ACK this often: the other's heartbeat. */
#define LINK_BEAT_MS 1000
/* Nothing received for this long (while reading): the path is broken. */
#define LINK_STALL_MS 10000

struct link;

struct link_ops {
    /* A complete frame; the payload is valid only during the call. */
    void (*frame)(struct link *l, const struct wire_header *h, const uint8_t *payload);
    /* The link ended (EOF, error, a frame that is not ours, a break before
       the session could be resumed): why.  The link is closed. */
    void (*closed)(struct link *l, const char *why);
    /* Below the high water again: resume the sources. */
    void (*drained)(struct link *l);
    /* The connection broke, the session can be resumed: frames sent now are
       kept; the owner attaches a new connection or gives up (link_close). */
    void (*broken)(struct link *l, const char *why);
    /* A new connection carries the session again (may be NULL). */
    void (*resumed)(struct link *l, unsigned long resent);
};

/* Takes over fd (a connected TCP socket) and tls (its qcg_tls session when
   encrypted, else NULL: every byte then goes through it), also when it
   fails: NULL with errno, tls freed, fd closed. */
struct link *link_new(uv_loop_t *loop, int fd, qcg_tls *tls, const struct link_ops *ops,
                      void *data);
void *link_data(const struct link *l);
/* Queues one frame (kept until acknowledged): 0, or -1 if the link is closed. */
int link_send(struct link *l, enum wire_type type, uint16_t chan, const void *data, size_t len);
/* True while more than LINK_HIGH_WATER waits to be acknowledged. */
int link_congested(const struct link *l);
/* True while a connection carries the link (not broken). */
int link_connected(const struct link *l);
/* Stop / resume reading frames (a sink is full). */
void link_pause(struct link *l);
void link_resume(struct link *l);
/* The session's token: from now on a break is ops->broken, not ops->closed. */
void link_set_session(struct link *l, const uint8_t token[WIRE_TOKEN_LEN]);
/* True if the link's session has this token (constant time). */
int link_has_token(const struct link *l, const uint8_t token[WIRE_TOKEN_LEN]);
/* Launcher: carries on over fd (with its own tls, or NULL), a new
   connection to the agent: sends RESUME and holds back other frames until
   RESUMED (then ops->resumed).  0, or -1 with tls freed and fd closed. */
int link_attach(struct link *l, int fd, qcg_tls *tls);
/* Agent: `from` (a new connection whose first frame was RESUME saying the
   launcher had received peer_rx frames) now carries l; from is left without
   a connection, to be closed by its owner.  0, or -1 when peer_rx is not a
   count l could have sent. */
int link_adopt(struct link *l, struct link *from, uint64_t peer_rx);
/* Sends what is queued, then closes; ops->closed is not called after it.
   The struct is freed once libuv has closed the handles. */
void link_close(struct link *l);

#endif
