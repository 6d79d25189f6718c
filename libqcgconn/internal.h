/* libqcgconn's internal structures, shared by its files and never installed. */
#ifndef QCG_INTERNAL_H
#define QCG_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bounded_io.h"
#include "handshake.h"
#include "lmsg.h"
#include "localproto.h"
#include "qcgconn.h"
#include "shortage.h"
#include "source_group.h"
#include "tls_psk.h"

/* Built with -fvisibility=hidden: only definitions marked so are exported. */
#define QCG_EXPORT __attribute__((visibility("default")))

#define QCG_ERRMSG_MAX 512
#define QCG_DEFAULT_HELPER_SOCKET "/run/qcg/helper.sock"

/* Bounded waits on the helper (ms): qcgconn.h's QCG_*_MAX_MS are made of
   these (checked in ctx.c). */
#define HELPER_HELLO_TIMEOUT_MS 5000
#define HELPER_PUBLISH_TIMEOUT_MS 15000
#define HELPER_WITHDRAW_TIMEOUT_MS 2000
/* A PUBLISH the grid services could not take is asked again after these
   (doubling), within HELPER_PUBLISH_TIMEOUT_MS in all. */
#define PUBLISH_RETRY_MIN_MS 200
#define PUBLISH_RETRY_MAX_MS 2000
/* How long one message to the helper may wait for room in the socket. */
#define HELPER_SEND_TIMEOUT_MS 2000
/* How long a connecting peer has to send its hello.  2 s was too short for
   a rank of a busy node: 80 ranks on two cores (the lab) sent some hellos
   later, and the dropped connection failed the job (issue 15).  A slow
   hello holds one of PENDING_MAX slots meanwhile. */
#define ACCEPT_HANDSHAKE_TIMEOUT_MS 10000
/* A verified peer we answered keeps its slot past that, checked again
   every ANSWER_RECHECK_MS, up to this from its connection (accept.c). */
#define ACCEPT_ANSWER_MAX_MS 60000
#define ANSWER_RECHECK_MS 500
/* How long a verified reversed hello waits for the connect its token names
   (whose plan may arrive after it); the peer waits for our answer meanwhile. */
#define CLAIM_TIMEOUT_MS 2000
/* How long the target's side of a reversed connection has to call us back
   before the connect asks for the next technique.  That side waits for our
   answer up to ACCEPT_ANSWER_MAX_MS: we answer, or close when our connect
   moved on. */
#define REVERSED_TIMEOUT_MS 5000
/* How long the other attempts may take before the next technique is asked
   for: a direct or traversing connect (SYN retransmissions at 1 and 3 s),
   a hole punch (our helper's punch: 5 s without progress, 10 s at most;
   its answer is the only progress we see). */
#define DIRECT_TIMEOUT_MS 5000
/* Direct over IPv6 with IPv4 behind it: silence before the IPv4 address
   is tried (happy eyeballs, in turn rather than in parallel). */
#define DIRECT_V6_TIMEOUT_MS 2000
#define TRAVERSING_TIMEOUT_MS 5000
#define HOLEPUNCH_TIMEOUT_MS 12000
/* The proxy's preamble: "QCGP" and the token, NUL-padded. */
#define PROXY_MAGIC "QCGP"
#define PROXY_TOKEN_FIELD 128
#define PROXY_PREAMBLE_SIZE (4 + PROXY_TOKEN_FIELD)
#define PROXY_PAIRED 0x01
/* A helper that went away (restarted): reconnection attempts 50 ms apart
   at first, doubling up to 2 s, for as long as the context lives.  The
   Unix connect itself may wait this long for room in a full backlog. */
#define RECONNECT_BACKOFF_MIN_MS 50
#define RECONNECT_BACKOFF_MAX_MS 2000
#define RECONNECT_CONNECT_MS 100
/* How long a re-PUBLISH refused for a reason that passes (BUSY: the old
   contact is still known upstream for a moment; the grid services not
   reached yet) is asked again, at the same backoff. */
#define REPUBLISH_RETRY_MS 15000
/* Lookup retries while a rank is not yet published. */
#define LOOKUP_BACKOFF_MIN_MS 20
#define LOOKUP_BACKOFF_MAX_MS 500

/* Handshakes in progress on the accept side: room for 32 at first, grown up
   to PENDING_MAX as peers come at once (a rank whose every peer connects at
   the same moment, through the proxy or reversed). */
#define PENDING_FIRST 32
#define PENDING_MAX 1024
/* Strangers (accept.c: connections on our listener that have not sent their
   ClientHello) are anyone's to open, so they never hold everything: at most
   PENDING_PER_SOURCE from one source (an IPv4 address, an IPv6 /64), and
   the listener's connections leave PENDING_RESERVED slots to the ones the
   helper hands over (reversed, proxied).  A stranger over either share is
   cut, the oldest first, to make room; while more than PENDING_PER_SOURCE
   strangers wait, one that sent no byte in STRANGER_FIRST_BYTE_MS goes
   too.  A peer sends its hello as soon as its connect completes, so it is
   a stranger for about one round trip. */
#define PENDING_RESERVED 128
#define PENDING_PER_SOURCE 64
#define STRANGER_FIRST_BYTE_MS 2000
/* accept() failed for want of descriptors: the listener stays readable, so
   it rests this long instead of waking the caller on every poll. */
#define ACCEPT_REST_MS 100

/* A connection (accepted, or handed over by the helper) on its way through
   the handshake.  Hellos and answers are read as they come instead of
   waited for, so that one slow peer never stalls a process that also
   connects out; whoever pumps (qcg_accept, or a connect waiting for a
   reversed connection) moves every pending connection on. */
enum pending_state {
    P_FREE = 0,
    P_HELLO_IN,  /* we accept: the TLS handshake as the server */
    P_CLAIM,     /* its identity carries a token no connect has claimed yet (paused) */
    P_HELLO_OUT, /* the helper connected for us (reversed): the handshake as the client */
    P_READY,     /* verified: for qcg_accept */
};

struct pending {
    int fd; /* -1: free slot */
    enum pending_state state;
    int32_t expect_rank; /* announced by LOCAL_INCOMING, or -1 */
    uint32_t technique;
    uint64_t start_us;          /* for setup_us */
    uint64_t deadline_us;       /* of the current state */
    int32_t peer_rank;          /* P_READY */
    bool keepalive;             /* P_READY: the peer is in another cluster */
    bool claimed;               /* a token's connection: for the waiter once verified */
    struct tls_hs *tls;         /* the handshake in progress */
    struct hs_hello hs;         /* the peer's identity (accepting) */
    struct qcg_tls *session;    /* P_READY: encrypted, else NULL */
    unsigned encryption;        /* P_READY: QCG_CONN_* */
    bool listener;              /* accepted on our listener (not handed over) */
    struct source_group source; /* listener: the peer's address group */
};

/* A connect waiting for the reversed connection whose hello carries its
   token; part of the connect operation, listed in its context. */
struct waiter {
    struct waiter *next;
    qcg_connect_op *op;
    int32_t rank; /* the peer that must call */
    char token[HS_TOKEN_MAX];
    int fd;                  /* the verified connection once claimed, else -1 */
    struct qcg_tls *session; /* ... its session when encrypted */
    unsigned encryption;
};

/* What the helper sent for one connect operation (under the request id of
   its current LOOKUP): the plan, an error, or a handed-over socket. */
struct op_msg {
    uint16_t type;
    int fd; /* INCOMING's descriptor (owned), else -1 */
    union {
        struct local_plan plan;
        struct local_error error;
        struct local_incoming incoming;
    } u;
};
/* A LOOKUP is answered by a plan or an error, and an attempt the helper
   takes part in by one more message: more is the helper's error. */
#define OP_INBOX 4

/* The helper connection (reconnect.c). */
enum helper_state {
    H_UP,      /* said HELLO, listener (if any) published: requests flow */
    H_DOWN,    /* no connection: the next attempt at helper_at_us */
    H_HELLO,   /* connected again, HELLO (helper_id) unanswered until helper_at_us */
    H_PUBLISH, /* re-PUBLISH (helper_id) unanswered until helper_at_us, or
                  (helper_id 0) asked again then */
};

struct qcg_ctx {
    char job[LOCAL_JOB_MAX];
    int32_t rank;
    char secret[LOCAL_SECRET_MAX];
    char helper_path[108];

    /* From HELLO_OK. */
    char cluster[LOCAL_NAME_MAX];
    char node[LOCAL_NAME_MAX];
    char address[LOCAL_ADDR_MAX];
    char other_address[QCG_NODE_ADDRS - 1][LOCAL_ADDR_MAX]; /* "" when unused */
    uint16_t port_low, port_high;

    /* The one connection to the helper: HELLO, PUBLISH, WITHDRAW, and every
       connect operation's LOOKUPs and REPORTs.  Replies are matched by
       request id (the helper may answer out of order); whoever finds
       helper_fd readable reads and dispatches (ctx_read_helper). */
    int helper_fd; /* -1 while the helper is gone */
    enum helper_state hstate;
    uint32_t helper_id;      /* our HELLO's or re-PUBLISH's request id, or 0 */
    uint64_t helper_at_us;   /* hstate's next step (see enum helper_state) */
    uint64_t helper_gone_us; /* when it went away (H_UP: 0) */
    uint64_t republish_until_us;
    unsigned helper_failures; /* reconnections to the helper failed in a row */
    unsigned long reconnects; /* helper connections made again (tests) */
    uint32_t next_request_id;
    struct lmsg_reader ctl; /* the message being read from helper_fd */
    qcg_connect_op *ops;    /* connect operations, for their replies */
    uint32_t sync_id;       /* ctx_request's request waiting for its reply, or 0 */
    bool sync_done;
    struct lmsg_reader *sync_reply;

    int listen_fd;
    uint16_t listen_port;
    uint16_t listen_addresses; /* local_publish.addresses: the node's addresses it takes */
    bool published;            /* by the application: published again on each helper connection */

    int io_epfd;     /* listener, helper_fd, pending[].fd in progress, accept_timer */
    int accept_epfd; /* qcg_accept_pollfd: io_epfd and ready_efd */
    int ready_efd;   /* eventfd: readable while a connection is P_READY */
    bool ready_signalled;
    bool accepting; /* the listener is published: accept from it */
    bool listener_watched;
    uint64_t accept_rest_until_us; /* out of descriptors: the listener rests until then */
    int accept_timer;              /* timerfd: the earliest pending deadline */
    int helper_error;              /* the helper's protocol error or a re-PUBLISH given up, for the
                                      next qcg_accept */
    unsigned long refused;         /* incoming connections refused (qcg_accept_refused) */
    struct pending *pending;       /* pending_cap slots, fd -1 when free */
    int pending_cap;
    struct waiter *waiters; /* connects waiting for a reversed connection */

    /* The handshake between processes (tls_psk.h): no replay table, a
       replayed ClientHello cannot finish (fresh server random and ECDHE). */
    int encrypt; /* enum qcg_encrypt */
    uint8_t psk[TLS_PSK_SIZE];
    SSL_CTX *ssl_ctx;

    char last_error[QCG_ERRMSG_MAX];
    int last_errno; /* behind last_error, or 0 (qcg_last_errno) */
};

/* error.c */
/* The errno behind a failure: keep_errno(err) names err in the message of
   the failure being recorded and keeps it for the call that records it
   (ctx_seterr, open_seterr, connect.c's fail), which takes it: a failure
   recorded without one has errno 0.  Use it only in the arguments of such a
   call (the kept value is this thread's until taken).  keep_cause passes on
   a recorded failure's errno without naming it. */
const char *keep_errno(int err);
void keep_cause(int err);
int take_cause(void);
void ctx_seterr(qcg_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ctx_clearerr(qcg_ctx *ctx);
/* The detail of the last qcg_open failure in this thread. */
void open_seterr(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *open_lasterr(void);

/* util.c (clocks, bounded I/O and local messages: core's bounded_io.h,
   lmsg.h) */
/* TCP_NODELAY always, keepalive (20/5/4) when remote_cluster differs. */
int conn_set_options(int fd, bool keepalive);
int random_bytes(void *buf, size_t len);

/* ctx.c: one request on the helper connection, waiting for its reply (and
   dispatching whatever else arrives meanwhile).  Returns 0 with the reply in
   *reply, the code of a LOCAL_ERROR (local_error_code; message in
   last_error, the helper's code in *reply), or an error. */
int ctx_request(qcg_ctx *ctx, uint16_t type, const void *payload, int timeout_ms,
                struct lmsg_reader *reply);
/* A LOCAL_ERROR's code as the library returns it: LOCAL_ERETRY is
   QCG_EBUSY (the caller asks again first where that helps), a code that is
   no QCG_E* code QCG_EPROTO. */
int local_error_code(int32_t code);
/* A fresh request id (never 0). */
uint32_t ctx_next_id(qcg_ctx *ctx);
/* Sends one message on the helper connection; a failed send loses the
   connection (the stream may hold half a message).  0 or QCG_ENOHELPER. */
int ctx_send(qcg_ctx *ctx, uint16_t type, uint32_t request_id, const void *payload);
/* Reads what the helper sent (never blocks, bounded per call) and hands each
   message to its owner: INCOMING (id 0) to the accept side, a reply to
   ctx_request or to the connect operation whose LOOKUP has its id; replies
   nobody waits for any more are dropped.  0, or the error that lost the
   connection. */
int ctx_read_helper(qcg_ctx *ctx);
/* Takes a LOCAL_INCOMING's descriptor into the pending handshakes. */
int ctx_take_incoming(qcg_ctx *ctx, struct lmsg_reader *r);

/* reconnect.c: the helper connection across the helper's restarts. */
/* The helper connection is lost (why: a QCG_E* code): closed, unwatched,
   every connect woken; a reconnection is due after the backoff. */
void ctx_helper_lost(qcg_ctx *ctx, int why);
/* Moves the reconnection on (never blocks longer than RECONNECT_CONNECT_MS):
   connects again when due, says HELLO, re-publishes, then reads what the
   helper sent.  Called by whoever pumps (qcg_accept, connect operations). */
void helper_tick(qcg_ctx *ctx);
/* The helper takes requests (HELLO said, the listener published again). */
bool helper_ready(const qcg_ctx *ctx);
/* A reply to our HELLO or re-PUBLISH (request id helper_id): 0, or an
   error that loses the connection. */
int helper_reply(qcg_ctx *ctx, struct lmsg_reader *r);
/* "the helper at PATH has been gone for N s" into buf. */
void helper_gone_text(const qcg_ctx *ctx, char *buf, size_t len);
/* ctx.c: what the handshakes need of ctx. */
void ctx_tls_self(const qcg_ctx *ctx, struct tls_self *self);
/* An encrypting context needs a qcg_conn_info with room for the session:
   0, or QCG_EINVAL with last_error set. */
int ctx_check_info(qcg_ctx *ctx, const struct qcg_conn_info *info, size_t info_size);
/* ctx.c: our HELLO's payload (the caller wipes it: it holds the secret). */
void ctx_hello(const qcg_ctx *ctx, struct local_hello *hello);
/* ... and HELLO_OK's check: 0, or QCG_EPROTO with the reason in why[len]. */
int ctx_check_hello_ok(const qcg_ctx *ctx, const struct local_hello_ok *ok, char *why, size_t len);

/* accept.c */
/* Creates the accept descriptors and the timer; -1 with errno. */
int accept_init(qcg_ctx *ctx);
void accept_cleanup(qcg_ctx *ctx);
/* Adds fd (taken: closed on failure) to the pending handshakes: we wait for
   the peer's hello. */
void accept_add_pending(qcg_ctx *ctx, int fd, int32_t expect_rank, uint32_t technique);
/* Adds fd (taken) connected by the helper for a reversed connection: we send
   peer_rank a hello carrying token and wait for its answer. */
void accept_add_hello(qcg_ctx *ctx, int fd, int32_t peer_rank, uint32_t technique,
                      const char *token);
/* Watches fd (EPOLLIN) on the I/O descriptor; the listener through
   accept_listen_start. */
int accept_watch(qcg_ctx *ctx, int fd);
void accept_unwatch(qcg_ctx *ctx, int fd);
int accept_listen_start(qcg_ctx *ctx);
/* Moves every pending connection on (never blocks): new connections, the
   helper's INCOMING, hellos, answers, timeouts, claims.  Returns 0 or the
   error of accept(2). */
int accept_pump(qcg_ctx *ctx);
/* Lists w (w->fd = -1) in ctx; claims a matching hello that arrived first. */
void accept_wait_token(qcg_ctx *ctx, struct waiter *w);
/* Unlists w if listed. */
void accept_unwait(qcg_ctx *ctx, struct waiter *w);

/* abi.c: public structs as each version had them.  A struct of an older
   version ends at its last field then (its tail padding never counts). */
#define END_OF(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
#define OPTIONS_SIZE_0_1 END_OF(struct qcg_options, helper_socket)
#define CONN_INFO_SIZE_0_1 END_OF(struct qcg_conn_info, setup_us)
#define CONTACT_SIZE_0_1 END_OF(struct qcg_contact, port)
/* Copies the caller's struct src of src_size bytes into ours, dst of
   dst_size, zeroing what it lacks.  -1 when it is smaller than any version's
   (oldest), or sets fields beyond ours (a newer caller asking for what this
   library cannot do). */
int struct_in(void *dst, size_t dst_size, const void *src, size_t src_size, size_t oldest);
/* Fills the caller's struct dst of dst_size bytes (NULL: nothing) from
   ours, src of src_size: fields it lacks are left out, fields we lack are
   zero. */
void struct_out(void *dst, size_t dst_size, const void *src, size_t src_size);
/* Fills the caller's qcg_conn_info (NULL: nothing) for a connection set up
   since start_us. */
void conn_info_out(struct qcg_conn_info *info, size_t info_size, int32_t peer_rank,
                   uint32_t technique, uint64_t start_us, unsigned encryption,
                   struct qcg_tls *session);

/* connect.c: wakes an operation whose waiter was claimed. */
void connect_wake(qcg_connect_op *op);
/* Something moved toward op's connection (a reversed peer's hello with its
   token): its deadlines of silence start again. */
void connect_progress(qcg_connect_op *op);
/* Gives r's message (its descriptor taken) to the operation whose current
   LOOKUP has its request id, and wakes it.  0 given, -1 nobody's. */
int connect_deliver(qcg_ctx *ctx, struct lmsg_reader *r);
/* The helper connection (fd, closed now) is lost: wakes every operation;
   those that need the helper wait for it to come back. */
void connect_helper_lost(qcg_ctx *ctx, int fd);
/* The helper takes requests again: wakes the operations waiting for it. */
void connect_helper_back(qcg_ctx *ctx);
/* qcg_close: ends the operations still listed in ctx (their finish fails
   with QCG_EINVAL, their free needs nothing of ctx).  How many there were. */
int connect_end_all(qcg_ctx *ctx);

#endif
