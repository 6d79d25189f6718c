/* The Unix socket server's state, shared by its files (local*.c) and never
   used outside them.  local.h is the server's interface. */
#ifndef QCG_HELPER_LOCAL_INTERNAL_H
#define QCG_HELPER_LOCAL_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "dlist.h"
#include "local.h"
#include "ratelimit.h"

struct local_server {
    uv_loop_t *loop;
    uv_pipe_t listener;
    int closing;
    const struct helper_config *cfg;
    struct contacts *cs;
    struct upstream *up;
    dev_t dev; /* the socket file we made, so we remove only ours */
    ino_t ino;
    struct dlist conns; /* of struct conn, closing ones no longer */
    unsigned nclients;
    /* Of those, connections refused for their uid's share that wait out
       the delay (local_penalty.c): not counted against max-clients, or a
       uid dialling beyond its share would take others' room. */
    unsigned refusals_held;
    struct shares *shares; /* per uid: connections, requests */
    uint64_t next_id;
    uint64_t lookups;
    uint64_t refused; /* connections and requests refused, requests dropped (bounds, rates) */
    struct ratelimit refused_log;
    struct ratelimit conn_refused_log; /* connections: apart, so a flood of them hides no other */
    struct attempts *attempts;         /* traversing and hole punching, initiator side */
    /* The uids (struct share) whose first lookups wait for a batch, in
       turn, and the batches on the thread pool (local_requests.c). */
    struct dlist batch_turns;
    int batches;
    uint64_t batches_made; /* numbers them, for each uid's share of one */
    /* The loop's passes, and whether a uid's turn was spent in this one
       (local_turns.c). */
    uv_check_t turn_check;
    uint64_t turn;
    int turn_spent;
    /* Refusals by a per-uid rate waiting their delay, oldest first, and
       the timer that sends them (local_penalty.c). */
    struct dlist penalized;
    uv_timer_t penalty_timer;
    /* For SITE: whether this helper intercepts, and why (local_server_set_intercept). */
    int can_intercept;
    int nfqueue;
    char intercept[LOCAL_MESSAGE_MAX];
    struct punching *punching; /* PUNCHING's state (local_punching.c), NULL before one */
};

struct conn {
    uv_pipe_t pipe;
    struct local_server *srv;
    struct dlink link; /* in srv->conns until it closes */
    uint64_t id;       /* the owner of its contact in the contacts table */
    pid_t pid;
    uid_t uid;
    struct share *share; /* its uid's */
    int refs;            /* the handle, each write, each request in flight */
    int closing;
    int draining; /* closing once its last reply is out: read nothing */
    int hello;
    int reading;
    unsigned inflight; /* its requests on the thread pool, REPORTs included */
    int exclusive;     /* one that stops reading is in flight (or waits) */
    /* A whole message read, waiting in share->waiting for the uid's
       requests to drop under max-requests-per-uid. */
    int held;
    struct dlink wait;
    /* A refusal by a per-uid rate (or bound: penalty_close, the
       connection's own refusal, closed after it), sent once its delay is
       over; the connection is not read meanwhile (local_penalty.c). */
    int penalized;
    int penalty_close;
    uint64_t penalty_due_ms;
    struct dlink penalty_link;
    uint32_t penalty_rid;
    struct local_error penalty_error;
    int published; /* me is published upstream */
    /* A PUBLISH of me is on its way upstream.  The broker may have it, and
       send an order for me, before its answer is back here: orders.c holds
       such an order until the answer. */
    int publishing;
    /* REPORTs still on their way upstream.  The broker takes a report only
       from a published rank: the withdrawal (asked, or at the process's end)
       waits for them, or a process that reports and quits at once would
       lose its last outcome. */
    unsigned reports;
    int withdraw_waits;
    uint32_t withdraw_rid;
    struct contact me; /* job, secret, rank from HELLO; port once published */

    /* The message being read: exactly a header, then exactly its payload. */
    size_t have;
    struct local_header hdr;
    union local_payload in;
};

struct request {
    uv_work_t work;
    struct local_server *srv;
    struct conn *c;        /* NULL for the withdraw of a closed connection */
    struct conn *reporter; /* REPORT: whose withdrawal waits for it */
    struct share *share;   /* whose requests count it (none: a closed one's withdraw) */
    uint64_t owner;
    uint16_t type;
    uint32_t rid;
    struct contact contact;
    int32_t to_rank;
    uint32_t tried_mask;
    uint32_t only;           /* LOOKUP: one technique (qcg-probe) */
    int skip_upstream;       /* stopping with the frontend away: local cleanup only */
    int batched;             /* a first LOOKUP: goes up in a batch, counted in share->lookups */
    struct dlink batch_link; /* in its share's batch_wait while it waits */
    int rc;
    char msg[LOCAL_MESSAGE_MAX];
    struct local_plan plan;
    struct local_report report;
    struct local_site *site; /* SITE: allocated with the request (it is large) */
    uint32_t upstream_ms;    /* SITE: how long the call took */
    struct local_probe probe;
    struct local_probe_ok probe_ok;
    struct local_observed observed;
};

/* What a process may send (local_dispatch.c); everything else (the helper's
   own message types included) is a protocol violation. */
struct local_handler {
    int (*handle)(struct conn *c, uint32_t rid);
    int need_hello;
    int upstream; /* may take a thread: counts against max-requests-per-uid */
    const char *name;
};
extern const struct local_handler local_handlers[LOCAL_TYPE_COUNT];

/* local.c: a connection's life. */
void conn_unref(struct conn *c);
void conn_close(struct conn *c);
/* The live connection whose PUBLISH of (job, rank) the broker accepted (one
   still on its way does not count: its secret may be wrong). */
struct conn *publisher(struct local_server *srv, const char *job, int32_t rank);

/* local_framing.c: one message read at a time, replies queued. */
void update_reading(struct conn *c);
void send_msg(struct conn *c, uint16_t type, uint32_t rid, const void *payload, size_t len,
              int close_after);
/* A LOCAL_ERROR's payload: code and message. */
void error_format(struct local_error *e, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
__attribute__((format(printf, 5, 6))) void send_error(struct conn *c, uint32_t rid, int code,
                                                      int close_after, const char *fmt, ...);
/* A protocol violation: say why, log it, close. */
__attribute__((format(printf, 3, 4))) void proto_fail(struct conn *c, uint32_t rid, const char *fmt,
                                                      ...);

/* local_dispatch.c: a whole message, checked, to its handler. */
void dispatch(struct conn *c);
/* A whole REPORT in c: 0 when a per-uid rate drops it (counted), else 1. */
int report_admitted(struct conn *c);
/* A refusal or drop: counted (refused), logged through rl at most every
   10 s with the count of lines left out: whoever causes them, as often as
   they like, never floods the log. */
void refusal_log(struct conn *c, struct ratelimit *rl, const char *what, const char *option);
void withdraw_after_reports(struct conn *c);

/* local_requests.c: upstream requests on the thread pool. */
void do_request(uv_work_t *work);
void request_done(uv_work_t *work, int status);
void request_begun(struct conn *c, struct request *r);
/* A request of c's in flight (not read meanwhile unless it is a LOOKUP or
   a REPORT), and over: counted, c held, then let go. */
void conn_request_begun(struct conn *c, uint16_t type);
void conn_request_done(struct conn *c, uint16_t type);
int queue_request(struct local_server *srv, struct conn *c, uint16_t type, uint32_t rid,
                  const struct contact *ct, int32_t to_rank, uint64_t owner);
void release_contact(struct conn *c);
/* Whether c's whole message must wait for the uid's requests (or first
   lookups) to drop under their bound. */
int request_waits(struct conn *c);

/* local_turns.c: each uid its turn on the loop while another is connected.
   start/stop: the handle that ends a pass; charge: c sent a whole message;
   spent: c's uid has had its turn in this pass (c is not read). */
void turns_start(struct local_server *srv);
void turns_stop(struct local_server *srv);
void turn_charge(struct conn *c);
int turn_spent(const struct conn *c);

/* local_penalty.c: a uid past one of its rates is refused (LOCAL_ERETRY)
   after a delay, its connection unread meanwhile, so that its refusals
   cost it time rather than the helper's CPU.  start/stop: the timer;
   refuse_later: the refusal of c's request rid; refuse_conn_later: of c
   itself (code, then closed; at once past PENALTY_HELD_PER_UID of its uid
   waiting); penalty_drop: c closes. */
void penalty_start(struct local_server *srv);
void penalty_stop(struct local_server *srv);
__attribute__((format(printf, 3, 4))) void refuse_later(struct conn *c, uint32_t rid,
                                                        const char *fmt, ...);
__attribute__((format(printf, 3, 4))) void refuse_conn_later(struct conn *c, int code,
                                                             const char *fmt, ...);
void penalty_drop(struct conn *c);

/* local_punching.c: PUNCHING (qcg-probe).  site_seen: a SITE answer
   names the reflector's addresses; on_punching: the handler (the hop
   counts it lacks measured first); stop: measurements cancelled, every
   waiting request let go (its connection closing); free: the state. */
void punching_site_seen(struct local_server *srv, const struct local_site *st);
int on_punching(struct conn *c, uint32_t rid);
void punching_stop(struct local_server *srv);
void punching_free(struct local_server *srv);

/* local_fdpass.c */
int pass_fd(struct conn *c, uint32_t rid, const struct local_incoming *in, int fd, char *why,
            size_t whylen);

/* local_socket.c: the socket file.  prepare: its directory made, a stale
   file removed (a live helper's is not ours to take); claim: its mode set
   and its identity kept; release: removed if it is still the one we made. */
int local_socket_prepare(const char *path, char *err, size_t errlen);
/* The error of a failed bind of the socket at path (uv_err, why: libuv's
   code and text): with what to do when its directory is not the helper's. */
void local_socket_bind_error(const char *path, int uv_err, const char *why, char *err,
                             size_t errlen);
int local_socket_claim(const char *path, mode_t mode, dev_t *dev, ino_t *ino, char *err,
                       size_t errlen);
void local_socket_release(const char *path, dev_t dev, ino_t ino);

#endif
