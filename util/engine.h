/*
 * The event engine of the servers that read anyone's bytes: the proxy's
 * relay, the broker's reflector and the daemons' metrics endpoint
 * (metrics_server.h, which runs its TLS over a watched descriptor).  One
 * libuv loop, run on the caller's thread, that owns what they need the same
 * way:
 *
 *  - accepting on one or two listeners, e.g. an IPv4 and an IPv6 address
 *    (acceptor.h: a bounded batch per turn, a spare descriptor for EMFILE,
 *    refusal lines at most once a second); both count alike;
 *  - admission: a connection that has not proven itself yet ("untrusted":
 *    no valid token) counts under its source group (tally.h: the IPv4
 *    address, IPv6 by prefix), and one group holds at most per_address of
 *    them; when conns_max connections are open, the oldest one still
 *    sending its first message is cut to make room for the new one, so that
 *    idle or dripping clients cannot lock others out (an owner without
 *    ops.cut refuses the new one instead);
 *  - deadlines: each connection has one timer, armed at accept for its
 *    first message and then by its owner for whatever it waits for;
 *  - a tick once a second (for an owner with ops.tick: without, an idle
 *    loop does not wake), a wake-up from any thread or a signal handler,
 *    and a hook after each turn's I/O (work left over from a busy turn).
 *
 * Descriptors are watched with libuv's poll handles, level-triggered: the
 * owner says what it waits for (engine_watch_want) and reads and writes the
 * descriptor itself (a line, a hello); bulk data (splice(2)) goes through
 * the edge-triggered set instead (engine_edge).  An error on a socket
 * reaches on_io with a negative status and stops its watch (SO_ERROR says
 * which).  Everything is freed from libuv's close callbacks, so a handle
 * closed during a turn stays valid until the turn ends.
 */
#ifndef QCG_COMMON_ENGINE_H
#define QCG_COMMON_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "dlist.h"
#include "stall.h"
#include "tally.h"

struct engine;
struct engine_conn;

/* A descriptor watched for readiness (UV_READABLE, UV_WRITABLE). */
struct engine_watch {
    uv_poll_t poll;
    int fd;     /* not closed by the engine's watch functions */
    int events; /* asked for now */
    /* status < 0: an error on the socket; the watch is stopped. */
    void (*on_io)(struct engine_watch *w, int status, int events);
    /* After engine_watch_close: the memory may go (standalone watches). */
    void (*on_closed)(struct engine_watch *w);
    struct engine_conn *conn; /* the connection it belongs to, or NULL */
    void *owner;
};

/* A descriptor watched edge-triggered (EPOLLET: an event when its state
   changes, none while nothing does), for bulk data: the relay's pair ends,
   whose buffers fill and drain all the time.  A level-triggered watch would
   have to be changed at each of those turns (libuv's poll handles take the
   descriptor out of epoll and put it back), so these sit in one epoll set of
   the engine's own, which the loop watches.  Closing the descriptor removes
   it; events already taken in the same turn may still come, so the owner
   keeps the memory until after_io. */
struct engine_edge {
    /* EPOLLIN, EPOLLOUT, EPOLLRDHUP, EPOLLHUP, EPOLLERR */
    void (*on_events)(struct engine_edge *x, uint32_t events);
};

/* One accepted connection; the owner embeds it in its own structure. */
struct engine_conn {
    struct engine_watch w; /* its socket; w.owner is the owner's */
    uv_timer_t timer;
    struct engine *e;
    /* Fires once when the deadline passes (engine_conn_deadline); time
       the engine's process did not run is not counted (core/stall.h). */
    void (*on_deadline)(struct engine_conn *c);
    struct stall_deadline deadline;
    uint64_t opened_ms;
    char source[TALLY_KEY_MAX]; /* what its address counts under */
    bool untrusted;             /* counted under source */
    bool first;                 /* still sending its first message */
    bool closing;
    int handles; /* open libuv handles: freed (ops.freed) at zero */
    struct dlink all, first_link;
};

enum engine_refusal {
    ENGINE_REFUSED_ADDRESS, /* per_address untrusted connections from its group */
    ENGINE_REFUSED_FULL,    /* conns_max open, none of them to cut (or no ops.cut) */
};

struct engine_ops {
    /* Optional: a check of the owner's before the engine's (false: the
       owner logged and counted it; the engine closes fd). */
    bool (*admit)(void *arg, const struct sockaddr_storage *ss, socklen_t len);
    /* Refused by the engine (fd closed by it): the owner logs and counts. */
    void (*refused)(void *arg, enum engine_refusal why, const struct sockaddr_storage *ss,
                    socklen_t len, const char *source);
    /* All slots taken: the owner closes oldest (with its own words).
       NULL: nobody is cut, the newcomer is refused (ENGINE_REFUSED_FULL). */
    void (*cut)(void *arg, struct engine_conn *oldest);
    /* Admitted: the owner takes fd (engine_conn_open, or closes it). */
    void (*accepted)(void *arg, int fd, const struct sockaddr_storage *ss, socklen_t len,
                     const char *source);
    /* Every handle of c is closed: free it.  NULL: free(c), for an owner
       whose structure starts with its engine_conn. */
    void (*freed)(void *arg, struct engine_conn *c);
    void (*tick)(void *arg);     /* optional, about once a second */
    void (*woken)(void *arg);    /* optional, after engine_wake */
    void (*after_io)(void *arg); /* optional, after each turn's I/O */
};

struct engine_config {
    int listen_fd;            /* listening, non-blocking: the engine's from now on */
    int listen_fd2;           /* -1, or a second one (another address), the same */
    unsigned accepts_per_run; /* per readiness of the listener */
    unsigned conns_max;       /* open connections */
    unsigned per_address;     /* untrusted connections per source group */
    unsigned ipv6_prefix;     /* of a source group; 0 = source_group.h's */
    unsigned first_ms;        /* deadline of the first message */
    atomic_ullong *shed;      /* counts connections refused for want of a descriptor */
    const struct engine_ops *ops;
    void *arg;
};

/* NULL with a reason in err; the listeners are closed then too. */
struct engine *engine_new(const struct engine_config *cfg, char *err, size_t errlen);
/* Runs until engine_stop (0), or -1 when the loop itself fails. */
int engine_run(struct engine *e);
/* Async-signal-safe, from any thread. */
void engine_stop(struct engine *e);
/* ops.woken runs on the loop's thread; async-signal-safe, any thread. */
void engine_wake(struct engine *e);
/* Closes the listeners and everything of the engine's own.  Connections and
   watches must be closed first (engine_conn_close, engine_watch_close); this
   runs their close callbacks. */
void engine_free(struct engine *e);

/* The loop's clock (monotonic, milliseconds), updated after each poll. */
uint64_t engine_now(const struct engine *e);
/* While on, the loop does not block: work is left for after_io. */
void engine_busy(struct engine *e, bool on);
/* "refused ADDR: WHY" at most once a second, with the count left out. */
void engine_refused_log(struct engine *e, const char *addr, const char *why);
/* Open connections, and the oldest (NULL when none) for closing them all. */
size_t engine_conns(const struct engine *e);
struct engine_conn *engine_oldest(const struct engine *e);

/* Starts a connection the owner was given in ops.accepted: counted under
   source as untrusted, first_ms to send its first message, watched for
   reading.  c->w.on_io, c->w.owner and c->on_deadline are the owner's to
   set before.  -1 (nothing started: the owner closes fd and frees c). */
int engine_conn_open(struct engine *e, struct engine_conn *c, int fd, const char *source);
/* Its first message is in: no longer the one cut for a newcomer. */
void engine_conn_first_done(struct engine_conn *c);
/* It showed a valid token: no longer counted under its source. */
void engine_conn_trusted(struct engine_conn *c);
/* on_deadline in ms from now; 0 = none. */
void engine_conn_deadline(struct engine_conn *c, uint64_t ms);
/* Its socket, no longer the connection's (closed by the new owner). */
int engine_conn_take_fd(struct engine_conn *c);
/* Stops it and closes its socket (unless taken); ops.freed follows once
   its handles are closed.  Idempotent. */
void engine_conn_close(struct engine_conn *c);

/* Watches fd for input, output, its peer's FIN and errors, edge-triggered
   (x->on_events set before).  -1 with errno. */
int engine_edge_add(struct engine *e, int fd, struct engine_edge *x);

/* A watch of fd for its owner (a connection's extra socket: conn, else
   on_closed frees it).  -1 on failure (nothing to close). */
int engine_watch_init(struct engine *e, struct engine_watch *w, int fd, struct engine_conn *conn);
/* What to wait for now (0 = nothing): changed only when it differs. */
int engine_watch_want(struct engine_watch *w, int events);
void engine_watch_close(struct engine_watch *w);

#endif
