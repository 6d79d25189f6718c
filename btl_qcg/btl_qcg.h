/*
 * btl_qcg: an Open MPI BTL (send/recv only; 4.1 and 5.0, ompi_compat.h)
 * whose TCP connections are made through libqcgconn, lazily, on the first
 * send to a peer.
 *
 * One module per process.  btl_send and the progress callback never block
 * (non-blocking sockets, libqcgconn's pollable connect and accept).  Under
 * MPI_THREAD_MULTIPLE any thread may call them at once: a state lock guards
 * the endpoints, the epoll set and libqcgconn; one thread at a time runs
 * progress (the others return at once); PML callbacks run without the
 * state lock, so they may send, to the same peer too (see README.md,
 * "Threads").  Frames on the wire: a 16-byte header {length, tag, type,
 * flags, seq, ack}, the payload, padding to a multiple of 8 (frames stay
 * aligned in the receive buffer).  Data frames are numbered and kept until
 * the peer acknowledges them, so that a broken channel is re-established
 * and the peer gets what it missed (README.md, "Broken connections").
 */
#ifndef BTL_QCG_H
#define BTL_QCG_H

/* First: Open MPI's headers, whichever release (ompi_compat.h). */
#include "ompi_compat.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "qcgconn.h"
#include "ratelimit.h"
#include "resendq.h"

/* The component: what Open MPI finds by name in mca_btl_qcg.so. */
struct btl_qcg_component {
    mca_btl_base_component_3_0_0_t super;
    int verbose;              /* btl_qcg_verbose: 0 quiet, 1 per peer, 2 debug */
    int connect_timeout_ms;   /* btl_qcg_connect_timeout */
    char *conn_log;           /* btl_qcg_conn_log: file getting a line per connection */
    char *encrypt;            /* btl_qcg_encrypt: inter-site, always or never */
    int local_peers;          /* btl_qcg_local_peers: -1 auto, 0 never, 1 always */
    int cluster_peers;        /* btl_qcg_cluster_peers: -1 auto, 0 never, 1 always */
    int max_connects;         /* btl_qcg_max_connects: connect operations at once */
    int reconnect_timeout_ms; /* btl_qcg_reconnect_timeout: a broken channel's peer is gone */
    int stall_timeout_ms;     /* btl_qcg_stall_timeout: unacknowledged so long, broken; 0 off */
    int resend_buffer;        /* btl_qcg_resend_buffer: bytes of copies kept per peer */
    int copy_max;             /* btl_qcg_copy_max: larger frames complete when acked */
    int test_break_every;     /* btl_qcg_test_break_every: test hook, 0 off */
    int test_drop_incoming;   /* btl_qcg_test_drop_incoming: test hook, 0 off */
};
/* The modex key of our cluster's name (for btl_qcg_cluster_peers). */
#define BTL_QCG_MODEX_CLUSTER "btl.qcg.cluster"
extern struct btl_qcg_component mca_btl_qcg_component;

/* Wire header of every frame (integers in network byte order).  seq and ack
   are the low 32 bits of counters of data frames: seq numbers a data frame
   (1, 2, ...), ack says how many the sender of the header received. */
struct btl_qcg_hdr {
    uint32_t length; /* payload bytes, padding excluded */
    uint8_t tag;
    uint8_t type;  /* enum btl_qcg_frame_type */
    uint8_t flags; /* BTL_QCG_ACK_ME */
    uint8_t reserved;
    uint32_t seq; /* data frames only */
    uint32_t ack;
};
#define BTL_QCG_HDR_SIZE 16
enum btl_qcg_frame_type {
    BTL_QCG_DATA = 0,   /* for the PML (tag) */
    BTL_QCG_ACK = 1,    /* only the ack */
    BTL_QCG_RESUME = 2, /* first frame on every channel: ack = what we have */
    BTL_QCG_CLOSE = 3,  /* we finalize: an EOF after it is no break */
};
/* The sender waits for this frame's ack (it holds the PML's completion, or
   its copies grew): the receiver acks at once. */
#define BTL_QCG_ACK_ME 1
/* A frame larger than this is a protocol error, whatever the parameters. */
#define BTL_QCG_FRAME_MAX (64u * 1024 * 1024)

/* The verdict an acceptor writes first on every connection it accepts from
   libqcgconn: the BTL-level answer that makes a simultaneous connect end with
   exactly one channel (the one initiated by the lower rank). */
#define BTL_QCG_VERDICT_SIZE 8
#define BTL_QCG_VERSION 2
enum { BTL_QCG_ACCEPT = 1, BTL_QCG_REFUSE = 2 };

/* A send descriptor.  segments[0] is our buffer (data[]), segments[1] an
   optional pointer into the user's contiguous data. */
struct btl_qcg_frag {
    mca_btl_base_descriptor_t base;
    mca_btl_base_segment_t segments[2];
    struct btl_qcg_endpoint *endpoint;
    struct btl_qcg_frag *next; /* in the completion list or the cache */
    struct btl_qcg_hdr hdr;
    size_t total;           /* header + payload + padding */
    size_t sent;            /* bytes of total already written */
    size_t capacity;        /* bytes of data[] */
    int pool;               /* which cache it returns to, -1 none */
    int status;             /* of its completion, while on the completion list */
    struct resendq_item rq; /* in its endpoint's send queue: seq, next */
    size_t copied;          /* a copy we made of a PML frame: bytes it holds, else 0 */
    _Alignas(8) unsigned char data[];
};

enum btl_qcg_ep_state {
    EP_IDLE,       /* no channel and no attempt (also after the peer closed) */
    EP_QUEUED,     /* frames wait for a connect slot (btl_qcg_max_connects) */
    EP_CONNECTING, /* our qcg connect operation runs */
    EP_VERDICT,    /* connected; waiting for the acceptor's verdict */
    EP_WAITPEER,   /* our connection was refused: the peer's is on its way */
    EP_BACKOFF,    /* a reconnect attempt failed: the next one at deadline_us */
    EP_CONNECTED,
    EP_FAILED, /* the error was reported; sends fail */
};

enum btl_qcg_watch_kind { WATCH_ACCEPT, WATCH_OP, WATCH_SOCK, WATCH_SPARE };

/* What an epoll event points at. */
struct btl_qcg_watch {
    enum btl_qcg_watch_kind kind;
    struct btl_qcg_endpoint *endpoint;
};

struct btl_qcg_module;

struct btl_qcg_endpoint {
    struct btl_qcg_module *module;
    struct opal_proc_t *proc; /* NULL until add_procs names the peer */
    uint32_t vpid;
    enum btl_qcg_ep_state state;
    bool initiator;                  /* the channel is ours (we connected) */
    int fd;                          /* socket in EP_VERDICT and EP_CONNECTED, else -1 */
    qcg_tls *tls;                    /* fd's session when encrypted (io.c), else NULL */
    unsigned char *tls_out;          /* encrypted: a batch staged for the session */
    size_t tls_out_len, tls_out_off; /* ... its bytes, of them sent (the session
                                        may hold more: qcg_tls_unsent) */
    bool want_out;                   /* fd is watched for EPOLLOUT */
    qcg_connect_op *op;              /* in EP_CONNECTING */
    /* A connection the peer made while our channel was up (the loser of a
       simultaneous connect, or the peer's end of our channel broke): it
       replaces the channel once the peer writes on it, and goes quietly at
       its EOF (endpoint.c).  -1 when none. */
    int spare_fd;
    qcg_tls *spare_tls;
    struct qcg_conn_info spare_info;
    struct btl_qcg_watch w_op, w_sock, w_spare;
    uint64_t t_start_us;  /* first send that needed a channel */
    uint64_t deadline_us; /* of EP_CONNECTING, EP_VERDICT, EP_WAITPEER */
    struct qcg_conn_info info;
    /* send queue, in order: frames written but not acknowledged (the resend
       buffer), then from unsent on frames not (completely) written.  sq.sent
       counts the data frames queued, sq.acked those the peer acknowledged,
       sq.bytes the copies among them (btl_qcg_resend_buffer). */
    struct resendq sq;
    struct btl_qcg_frag *unsent;
    int sq_status;         /* how the frames leaving sq complete (resend.c) */
    uint64_t written_seq;  /* the last written completely on some channel */
    size_t copied_unasked; /* bytes of copies queued since the last frame with ACK_ME */
    /* a control frame (ACK, RESUME, CLOSE) owed, written between frames */
    struct btl_qcg_hdr ctl;
    size_t ctl_sent;
    bool ctl_pending;
    bool resumed;             /* the peer's RESUME arrived on this channel: data may go */
    uint64_t rx_seq;          /* data frames received and delivered */
    uint64_t ack_sent;        /* the ack in the last header we wrote */
    bool ack_owed;            /* a frame asked for an ack */
    bool peer_closed;         /* its CLOSE arrived: its EOF is the end */
    uint64_t broken_since_us; /* reconnecting since, 0 not */
    uint64_t first_until_us;  /* a first connection tried again until, 0 not */
    char retry_why[256];      /* the last failure an attempt was made again after */
    bool in_flight;           /* written since the stall check last saw all acknowledged */
    uint64_t stall_since_us;  /* the stall check saw TCP retransmitting since, 0 not */
    unsigned long reads;      /* reads that got bytes (the stall check's "heard from") */
    unsigned long reads_seen; /* ... as the stall check last saw them */
    uint64_t quiet_since_us;  /* frames unacknowledged and nothing heard since, 0 not */
    uint64_t since_break;     /* data frames written since the last test break */
    unsigned long breaks, resent;
    /* receive: verdict, then frames */
    unsigned char verdict[BTL_QCG_VERDICT_SIZE];
    size_t verdict_got;
    unsigned char *rx;
    size_t rx_cap, rx_off, rx_len; /* consumed up to rx_off, filled up to rx_len */
    bool error_reported;
};

#define BTL_QCG_POOLS 2

/* An error callback owed to the PML (made once the state lock is released). */
struct btl_qcg_error {
    struct btl_qcg_error *next;
    struct opal_proc_t *proc;
    char text[];
};

/* Locks, in the order they are taken: progress, state, pool; no PML callback
   is made while the state or pool lock is held (a PML lock taken in the
   callback may be held by a thread waiting for ours in btl_send). */
struct btl_qcg_module {
    mca_btl_base_module_t super;
    opal_mutex_t progress_lock; /* held by the thread running progress (trylock) */
    bool progressing;           /* the same without threads: a nested call returns */
    opal_mutex_t lock;          /* the state lock: all below but the pools, and libqcgconn */
    opal_mutex_t pool_lock;     /* pool, pool_count */
    qcg_ctx *ctx;
    uint32_t jobid, vpid;
    int epfd;
    struct btl_qcg_watch w_accept;
    struct btl_qcg_endpoint **eps; /* by vpid */
    size_t neps;
    int pending; /* endpoints in CONNECTING/VERDICT/WAITPEER */
    uint64_t next_check_us;
    uint64_t next_stall_check_us;
    int shm_btl;                   /* -1 unknown, 0/1: a shared-memory BTL runs */
    int net_btl;                   /* -1 unknown, 0/1: another network BTL (tcp, a fabric) runs */
    unsigned long refused;         /* qcg_accept_refused when last looked at */
    int test_dropped;              /* incoming connections btl_qcg_test_drop_incoming reset */
    struct ratelimit refused_log;  /* ... their line: one per 10 s */
    uint64_t next_shortage_log_us; /* "cannot accept: out of descriptors" not before */
    char cluster[64];              /* ours, as the helper names it */
    /* Connect operations running (each holds descriptors and a LOOKUP at the
       helper), and the peers waiting for a slot, in order (by vpid). */
    int connects;
    uint32_t *cq;
    size_t cq_head, cq_len, cq_cap;
    mca_btl_base_module_error_cb_fn_t error_cb;
    /* PML callbacks owed, made by whoever releases the state lock next */
    struct btl_qcg_frag *done_head, *done_tail;
    struct btl_qcg_error *errors;
    struct btl_qcg_frag *pool[BTL_QCG_POOLS];
    int pool_count[BTL_QCG_POOLS];
    size_t pool_size[BTL_QCG_POOLS];
};

/* module.c */
struct btl_qcg_module *btl_qcg_module_new(qcg_ctx *ctx, uint32_t jobid, uint32_t vpid);
/* Defaults and parameters (mca_btl_base_param_register writes into it);
   btl_qcg_module_new copies it. */
extern mca_btl_base_module_t btl_qcg_module_template;

/* frag.c */
struct btl_qcg_frag *btl_qcg_frag_alloc(struct btl_qcg_module *m, size_t size);
void btl_qcg_frag_release(struct btl_qcg_module *m, struct btl_qcg_frag *frag);
void btl_qcg_frag_pools_free(struct btl_qcg_module *m);
size_t btl_qcg_frag_iov(const struct btl_qcg_frag *frag, struct iovec *iov, size_t max);
/* A descriptor of exactly size bytes, outside the caches (a resend copy). */
struct btl_qcg_frag *btl_qcg_frag_alloc_exact(size_t size);

/* resend.c: the send queue with its resend buffer (core/resendq: sequence
   numbers, acks) */
static inline struct btl_qcg_frag *btl_qcg_frag_of(struct resendq_item *it)
{
    return it != NULL ? (struct btl_qcg_frag *)((char *)it - offsetof(struct btl_qcg_frag, rq))
                      : NULL;
}
/* The oldest frame not acknowledged, and the one queued after f (NULL: none). */
static inline struct btl_qcg_frag *btl_qcg_queue_first(const struct btl_qcg_endpoint *ep)
{
    return btl_qcg_frag_of(resendq_first(&ep->sq));
}
static inline struct btl_qcg_frag *btl_qcg_frag_next(const struct btl_qcg_frag *f)
{
    return btl_qcg_frag_of(f->rq.next);
}
/* An empty queue (a new endpoint). */
void btl_qcg_queue_init(struct btl_qcg_endpoint *ep);
/* The frame to queue for the PML's frag: a copy (the PML's frag is done at
   once: *done set) or, when large or the copies reach btl_qcg_resend_buffer,
   frag itself, whose completion waits for the ack (back-pressure). */
struct btl_qcg_frag *btl_qcg_resend_take(struct btl_qcg_endpoint *ep, struct btl_qcg_frag *frag,
                                         bool *done);
/* Numbers the data frame and appends it to the queue. */
void btl_qcg_queue_push(struct btl_qcg_endpoint *ep, struct btl_qcg_frag *frag);
/* Every frame leaves the queue: each completes with status (an error: the
   peer is given up), or with BTL_QCG_DISCARD is released without a callback
   (the endpoint is freed). */
#define BTL_QCG_DISCARD 1
void btl_qcg_queue_clear(struct btl_qcg_endpoint *ep, int status);
/* The peer's cumulative ack (low 32 bits): acknowledged frames leave the
   queue and complete.  -1: it acknowledges frames never sent. */
int btl_qcg_ack_received(struct btl_qcg_endpoint *ep, uint32_t ack);
/* A new channel: every unacknowledged frame is written again from its start
   once the peer said what it has (RESUME). */
void btl_qcg_rewind(struct btl_qcg_endpoint *ep);

/* endpoint.c */
struct btl_qcg_endpoint *btl_qcg_endpoint_get(struct btl_qcg_module *m, uint32_t vpid);
void btl_qcg_endpoint_free(struct btl_qcg_endpoint *ep);
int btl_qcg_endpoint_send(struct btl_qcg_endpoint *ep, struct btl_qcg_frag *frag);
void btl_qcg_endpoint_event(struct btl_qcg_endpoint *ep, enum btl_qcg_watch_kind kind,
                            uint32_t events);
void btl_qcg_endpoint_check_deadline(struct btl_qcg_endpoint *ep, uint64_t now);
void btl_qcg_incoming(struct btl_qcg_module *m, int fd, const struct qcg_conn_info *info);
/* Aborts the channel (a reset: what the peer had not read is lost, the resend
   makes up for it) and re-establishes it like any broken one. */
void btl_qcg_endpoint_abort(struct btl_qcg_endpoint *ep, const char *why);
/* An ACK asking for the peer's (unless a control frame is owed already). */
void btl_qcg_endpoint_heartbeat(struct btl_qcg_endpoint *ep);

/* stall.c: channels whose path went silent (a NAT or firewall on the way
   forgot them) are aborted after btl_qcg_stall_timeout; called by progress. */
void btl_qcg_check_stalls(struct btl_qcg_module *m, uint64_t now);

/* io.c: the channel's bytes, through the socket or, encrypted, through
   libqcgconn's session.  Like sendmsg/recv (non-blocking): bytes, -1 with
   errno (EAGAIN; EPROTO: a record that does not authenticate, a truncated
   stream).  An encrypted batch is staged (one copy) and sent as records;
   its bytes count as written, as those in the socket's buffer do. */
ssize_t btl_qcg_io_writev(struct btl_qcg_endpoint *ep, const struct iovec *iov, size_t n);
ssize_t btl_qcg_io_recv(struct btl_qcg_endpoint *ep, void *buf, size_t len);
/* Sends what is staged: 0 when nothing is left, -1 with errno. */
int btl_qcg_io_drain(struct btl_qcg_endpoint *ep);
bool btl_qcg_io_staged(const struct btl_qcg_endpoint *ep);
/* Decrypted bytes waiting in the session (poll does not see them). */
bool btl_qcg_io_pending(const struct btl_qcg_endpoint *ep);
/* Our orderly end of an encrypted channel (close_notify), best effort. */
void btl_qcg_io_end(struct btl_qcg_endpoint *ep);
/* Frees the session and the staging (the socket is the caller's). */
void btl_qcg_io_free(struct btl_qcg_endpoint *ep);
/* Starts queued connects while there are free slots. */
void btl_qcg_start_queued(struct btl_qcg_module *m);

/* callback.c: PML callbacks deferred until the state lock is released */
void btl_qcg_lock(struct btl_qcg_module *m);
void btl_qcg_unlock(struct btl_qcg_module *m);
void btl_qcg_defer_completion(struct btl_qcg_module *m, struct btl_qcg_frag *frag, int status);
void btl_qcg_defer_error(struct btl_qcg_module *m, struct opal_proc_t *proc, const char *text);

/* progress.c */
int btl_qcg_progress(void);
extern struct btl_qcg_module *btl_qcg_active;
int btl_qcg_watch(struct btl_qcg_module *m, int op, int fd, uint32_t events,
                  struct btl_qcg_watch *w);

/* report.c: verbose lines, errors, the connection log */
uint64_t btl_qcg_now_us(void);
void btl_qcg_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void btl_qcg_report_connected(struct btl_qcg_endpoint *ep);
void btl_qcg_report_failure(struct btl_qcg_endpoint *ep, const char *what, const char *detail,
                            int sys_errno);
/* A broken channel not re-established within btl_qcg_reconnect_timeout. */
void btl_qcg_report_gone(struct btl_qcg_endpoint *ep, const char *detail);
const char *btl_qcg_peer_host(const struct btl_qcg_endpoint *ep);

#endif
