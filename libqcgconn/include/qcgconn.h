/*
 * libqcgconn: open TCP connections between the processes of a grid job, across
 * firewalls and NATs, through the local qcg-helper.
 *
 * A context is one process of one job: (job id, rank, job secret).  Every
 * context listens and publishes its contact, so that later techniques can call
 * it back.  Connections are connected TCP sockets, owned by the caller; each
 * is authenticated by a TLS 1.3 handshake keyed by the job secret, and stays
 * encrypted (a qcg_tls session to read and write through) when the
 * context's encryption policy says so (qcg_options.encrypt).
 *
 * Errors are negative QCG_E* codes; qcg_strerror() names them,
 * qcg_last_error() gives the detail of a context's last failure (e.g. which
 * technique a peer would need) and qcg_last_errno() the errno behind it.
 * The library never prints and never exits.
 * Thread safety: a context and its operations are used by one thread at a time.
 *
 * Blocking: each call says how long it may block.  The bounds are these
 * (ms), whatever the helper and the peers do; other calls never block.
 */
#ifndef QCGCONN_H
#define QCGCONN_H

#include <stddef.h>
#include <stdint.h>

#include "qcgconn_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* qcg_open: connecting to the helper's socket (5 s while its backlog is
   full), then its answer to our HELLO (5 s). */
#define QCG_OPEN_MAX_MS 10000
/* qcg_listen: the grid acknowledges the contact (helper, frontend, broker). */
#define QCG_LISTEN_MAX_MS 15000
/* qcg_close: the helper acknowledges the withdrawal. */
#define QCG_CLOSE_MAX_MS 2000
/* One message to the helper waiting for room in its socket (a LOOKUP, the
   report of an attempt), which a helper that reads never makes us do; one
   that times out loses the helper connection, so no later message waits. */
#define QCG_HELPER_SEND_MAX_MS 2000
/* A helper that went away (restarted) is connected to again, by any call
   that moves the context on, for as long as the context lives; connecting
   to its socket waits this long while its backlog is full.  Connects wait
   for it within their timeout, then fail with QCG_ENOHELPER. */
#define QCG_RECONNECT_MAX_MS 100

enum qcg_error {
    QCG_OK = 0,
    QCG_EAGAIN = -1,     /* not finished yet: poll the descriptor and call again */
    QCG_EINVAL = -2,     /* bad argument */
    QCG_ENOHELPER = -3,  /* the local helper is not running or refused us */
    QCG_EPROTO = -4,     /* a peer or the helper broke the protocol */
    QCG_EDENIED = -5,    /* wrong job secret, or not allowed */
    QCG_ENOTFOUND = -6,  /* no such rank published in this job */
    QCG_EBUSY = -7,      /* this rank is already published by a live process */
    QCG_ETECHNIQUE = -8, /* the peer needs a technique that is not available */
    QCG_ETIMEDOUT = -9,
    QCG_EUPSTREAM = -10, /* the grid services (frontend, broker) are unreachable */
    QCG_ESYS = -11,      /* a system call failed; see qcg_last_error(), qcg_last_errno() */
    QCG_ENOMEM = -12,
    QCG_EPEER = -13,  /* the peer refused the connection or hung up */
    QCG_EINUSE = -14, /* qcg_close: connect operations were still open (it ended them) */
};

enum qcg_technique {
    QCG_TECH_NONE = 0,
    QCG_TECH_DIRECT,
    QCG_TECH_REVERSED,
    QCG_TECH_TRAVERSING,
    QCG_TECH_HOLEPUNCH,
    QCG_TECH_PROXY,
};

typedef struct qcg_ctx qcg_ctx;
typedef struct qcg_connect_op qcg_connect_op;
typedef struct qcg_tls qcg_tls;

/* Which connections are encrypted (qcg_options.encrypt).  Every connection
   runs the same TLS 1.3 handshake authenticated by the job secret; a plain
   one then continues on the raw socket.  The connecting side chooses and
   says so in the handshake; an accepting side whose own policy demands
   encryption refuses plain.  Zero keeps 0.2's behaviour for callers that
   read plain sockets only: connections are plain and a peer asking for
   encryption is refused (QCG_EPROTO on its side). */
enum qcg_encrypt {
    QCG_ENCRYPT_OFF = 0,        /* plain only: this caller takes no qcg_tls */
    QCG_ENCRYPT_INTER_SITE = 1, /* encrypted when the peer is in another cluster */
    QCG_ENCRYPT_ALWAYS = 2,
    QCG_ENCRYPT_NEVER = 3, /* we connect plain; encrypted when the peer asks */
};

/* Public structs may grow at their end in later versions (README.md, "ABI"):
   the calls that take one are macros passing sizeof the struct as this
   header declares it to a _sized entry point, so a caller built against an
   older header keeps working with a newer library.  Zero-initialize them
   (a designated initializer does): a field added later means "as before"
   when it is zero. */

/* What the caller passes to qcg_open; NULL fields take the environment:
   QCG_JOB, QCG_RANK, QCG_JOB_SECRET, QCG_HELPER_SOCKET (default
   /run/qcg/helper.sock). */
struct qcg_options {
    const char *job;
    int rank; /* -1 = from QCG_RANK */
    const char *secret;
    const char *helper_socket;
    /* Added in 0.3.0: an enum qcg_encrypt.  Any value but QCG_ENCRYPT_OFF
       promises that the caller passes a qcg_conn_info to qcg_connect,
       qcg_connect_finish and qcg_accept and reads and writes through its
       tls when set (QCG_EINVAL otherwise). */
    int encrypt;
};

/* qcg_conn_info.encryption: 0 plain, else QCG_CONN_TLS and where the
   record layer runs (kernel TLS, TCP_ULP "tls", per direction). */
#define QCG_CONN_TLS 0x1u
#define QCG_CONN_KTLS_SEND 0x2u
#define QCG_CONN_KTLS_RECV 0x4u

/* What is known about an established connection. */
struct qcg_conn_info {
    int peer_rank;
    enum qcg_technique technique;
    uint64_t setup_us; /* from the connect call to the verified handshake */
    /* Added in 0.3.0. */
    unsigned encryption; /* QCG_CONN_* bits, 0: plain */
    /* The encrypted connection's session (caller owns it, qcg_tls_free
       before closing the socket), NULL for a plain one: data then goes
       through qcg_tls_send and qcg_tls_recv, never the socket. */
    qcg_tls *tls;
};

/* Opens a context: connects to the helper and introduces the job.  Blocks
   at most QCG_OPEN_MAX_MS.  On success *ctx is the caller's; free with
   qcg_close.  opts may be NULL (all from the environment). */
int qcg_open(qcg_ctx **ctx, const struct qcg_options *opts);
int qcg_open_sized(qcg_ctx **ctx, const struct qcg_options *opts, size_t opts_size);
#define qcg_open(ctx, opts) qcg_open_sized((ctx), (opts), sizeof(struct qcg_options))

/* Binds a listener on a port of the node's range and publishes the contact.
   Blocks until the grid acknowledges the publish, at most
   QCG_LISTEN_MAX_MS (QCG_ETIMEDOUT then).  A PUBLISH refused for the
   moment (QCG_EUPSTREAM, or QCG_EBUSY for a rate such as the helper's
   publishes-per-uid) is asked again within that bound; QCG_EBUSY for a rank
   another live process holds is returned at once.  Idempotent: at once
   once published. */
int qcg_listen(qcg_ctx *ctx);

/* A connect's timeout_ms bounds its silence, not its length: it ends once
   nothing moved toward the connection for timeout_ms (an answer from the
   helper, an attempt started, the peer's or the proxy's bytes, the helper
   back after a restart; not "not published yet"), and in any case after
   QCG_CONNECT_CAP_FACTOR times timeout_ms.  A loaded grid slows every
   step; a connection that keeps moving is not cut (issue 29). */
#define QCG_CONNECT_CAP_FACTOR 3

/* Connects to `rank` of the same job, blocking up to timeout_ms without
   progress, QCG_CONNECT_CAP_FACTOR times it at most (plus
   qcg_listen's bound on a context that does not listen yet, plus
   QCG_HELPER_SEND_MAX_MS).  Returns the connected socket (caller owns it) or
   a negative error; info may be NULL.
   Returned sockets (here, qcg_connect_finish, qcg_accept) are ordinary
   blocking TCP sockets with TCP_NODELAY (and keepalive across clusters). */
int qcg_connect(qcg_ctx *ctx, int rank, int timeout_ms, struct qcg_conn_info *info);
int qcg_connect_sized(qcg_ctx *ctx, int rank, int timeout_ms, struct qcg_conn_info *info,
                      size_t info_size);
#define qcg_connect(ctx, rank, timeout_ms, info)                                                   \
    qcg_connect_sized((ctx), (rank), (timeout_ms), (info), sizeof(struct qcg_conn_info))

/* Non-blocking connect: starts it and returns 0 with *op set (caller frees it
   with qcg_connect_free).  qcg_connect_pollfd(op) becomes readable whenever
   progress is possible; then call qcg_connect_finish, which returns the
   connected socket (>= 0), QCG_EAGAIN while in progress, or an error.  The
   descriptor stays the same for the whole operation.  Once timeout_ms has
   passed without progress (or QCG_CONNECT_CAP_FACTOR times it in all),
   qcg_connect_finish returns QCG_ETIMEDOUT, or the cause when known
   (the descriptor is also made readable then, but callers should poll with a
   timeout anyway).  While the peer's rank is not yet published the lookup is
   retried until then: QCG_ENOTFOUND if the last lookup still found it so.
   Start blocks only on a context that does not listen yet (qcg_listen
   first, up to QCG_LISTEN_MAX_MS) and while its LOOKUP waits for room
   (QCG_HELPER_SEND_MAX_MS); finish never waits for a peer, only while a
   message to the helper waits for room (QCG_HELPER_SEND_MAX_MS); free never
   blocks.  Finish or free every operation before qcg_close of its context
   (qcg_close ends the others: see there).  qcg_connect_errno(op) is the
   errno behind finish's error, 0 if none (as qcg_last_errno). */
int qcg_connect_start(qcg_ctx *ctx, int rank, int timeout_ms, qcg_connect_op **op);
/* Like qcg_connect_start, but with `technique` only: no fallback, and
   whatever the broker remembers of failures between the two clusters (for
   qcg-probe and tests).  When the broker says the technique cannot work for
   this pair, finish returns QCG_ETECHNIQUE and qcg_last_error gives its
   reason as the broker wrote it; a failed attempt returns its error as usual
   (QCG_ETIMEDOUT, QCG_EPEER...) with one line in qcg_last_error that starts
   with the technique's name ("direct: connect to ... refused").  Attempts
   are reported to the broker like any other.  QCG_EINVAL for a technique
   outside direct..proxy. */
int qcg_connect_start_only(qcg_ctx *ctx, int rank, enum qcg_technique technique, int timeout_ms,
                           qcg_connect_op **op);
int qcg_connect_pollfd(const qcg_connect_op *op);
int qcg_connect_finish(qcg_connect_op *op, struct qcg_conn_info *info);
int qcg_connect_finish_sized(qcg_connect_op *op, struct qcg_conn_info *info, size_t info_size);
#define qcg_connect_finish(op, info)                                                               \
    qcg_connect_finish_sized((op), (info), sizeof(struct qcg_conn_info))
int qcg_connect_errno(const qcg_connect_op *op);
void qcg_connect_free(qcg_connect_op *op);

/* A descriptor that becomes readable when an incoming connection may be waiting
   (valid after qcg_listen).  qcg_accept never blocks: it moves every incoming
   handshake on as far as the sockets allow (reading hellos, sending answers)
   and returns one verified connection (caller owns it) or QCG_EAGAIN.  A peer
   has 10 s from its connection to complete its hello (longer while TCP
   still retransmits our answer to it), a reversed connection 5 s for its
   answer; then it is dropped (qcg_last_error says so; not a refusal). */
int qcg_accept_pollfd(const qcg_ctx *ctx);
int qcg_accept(qcg_ctx *ctx, struct qcg_conn_info *info);
int qcg_accept_sized(qcg_ctx *ctx, struct qcg_conn_info *info, size_t info_size);
#define qcg_accept(ctx, info) qcg_accept_sized((ctx), (info), sizeof(struct qcg_conn_info))
/* How many incoming connections were refused since qcg_open (a hello with
   the wrong job secret, a replay, a rank the helper did not announce...):
   qcg_accept drops them quietly; a caller that logs them compares this
   count after each call and finds the last one's detail in qcg_last_error.
   A peer that gave its own attempt up is not counted: one that closed or
   reset the connection mid-handshake or said its connect ended, and a
   reversed connection for a connect of ours that ended (the two sides of a
   simultaneous connect, a connect that moved on to another technique);
   nor a connection dropped at its deadline (a slow or gone peer). */
unsigned long qcg_accept_refused(const qcg_ctx *ctx);

/* Where this context listens (valid after qcg_listen): the node's cluster,
   node name, address and the listening port.  0, or QCG_EINVAL before
   qcg_listen.  (Added for tools that print the contact.) */
struct qcg_contact {
    char cluster[64];
    char node[64];
    char address[48];
    uint16_t port;
};
int qcg_local_contact(const qcg_ctx *ctx, struct qcg_contact *contact);
int qcg_local_contact_sized(const qcg_ctx *ctx, struct qcg_contact *contact, size_t contact_size);
#define qcg_local_contact(ctx, contact)                                                            \
    qcg_local_contact_sized((ctx), (contact), sizeof(struct qcg_contact))

/* Withdraws the contact, closes the listener and the helper connection, frees
   ctx.  Connections already returned stay open.  Blocks at most
   QCG_CLOSE_MAX_MS (for the withdrawal), and not at all before qcg_listen.
   Returns 0, or QCG_EINUSE when connect operations of ctx were neither
   finished nor freed: ctx is closed all the same, and those operations are
   ended (their finish returns QCG_EINVAL; free them as usual).  ctx NULL: 0. */
int qcg_close(qcg_ctx *ctx);

/* An encrypted connection's I/O, like send(2) and recv(2) on its socket
   (blocking or not as the socket is): bytes moved, 0 from qcg_tls_recv at
   the peer's orderly end (qcg_tls_shutdown), -1 with errno: EAGAIN (poll
   the socket: readable for both while qcg_tls_pending is 0), EPROTO (a
   record that does not authenticate, a truncated stream: the connection is
   unusable; qcg_tls_error says why) or the socket's error.  One
   qcg_tls_send makes one record per 16 KiB and sends them together; on a
   non-blocking socket what it took may wait in the session: qcg_tls_flush
   until 0 before waiting for the peer's answer.  Never raises SIGPIPE.
   The initiator of a reversed connection gets its session before the
   peer's last handshake message (it may write at once): that message is
   taken by the next call, and ETIMEDOUT when it has not come within 10 s.
   It makes the socket readable; a read that takes it and finds no data
   behind it returns -1 with EINTR on a blocking socket (call again, as
   after a signal), EAGAIN on a non-blocking one. */
long qcg_tls_send(qcg_tls *tls, const void *buf, size_t len);
long qcg_tls_recv(qcg_tls *tls, void *buf, size_t len);
/* Bytes waiting in the session, decrypted or read ahead (poll does not see
   them): read before polling while not 0.  After a read that failed with
   EAGAIN it is 0 until the socket brings more: part of a record waits for
   the rest. */
size_t qcg_tls_pending(const qcg_tls *tls);
/* Sends what the session holds: 0 when nothing is left, -1 with errno
   (EAGAIN: poll for POLLOUT and call again). */
int qcg_tls_flush(qcg_tls *tls);
/* Bytes the session took (qcg_tls_send, qcg_tls_shutdown) and has not
   written to the socket yet: qcg_tls_flush has work while it is not 0.
   Never blocks; NULL: 0. */
size_t qcg_tls_unsent(const qcg_tls *tls);
/* Ends our direction in order (the peer's qcg_tls_recv returns 0): 0 once
   our close_notify is on the socket, or -1 with errno.  EAGAIN on a
   non-blocking socket: call it again, when the socket is writable if
   qcg_tls_unsent is not 0 (the close_notify waits in the session), else
   when it is readable (the handshake's last message is still to come, see
   above: nothing was sent).  Calling it again after 0 returns 0: it never
   reads the peer's close_notify. */
int qcg_tls_shutdown(qcg_tls *tls);
/* The last failure's detail ("" if none). */
const char *qcg_tls_error(const qcg_tls *tls);
/* Frees the session; the socket stays open (the caller closes it).  NULL: nothing. */
void qcg_tls_free(qcg_tls *tls);
/* A connection's I/O whether encrypted or not: through tls when it is not
   NULL (qcg_tls_send/recv), else on the socket fd (send(2) without SIGPIPE,
   recv(2)); the same results as qcg_tls_send/recv. */
long qcg_conn_send(int fd, qcg_tls *tls, const void *buf, size_t len);
long qcg_conn_recv(int fd, qcg_tls *tls, void *buf, size_t len);
/* Why one of them failed with errno err: the session's detail for a TLS
   stream that was wrong (EPROTO), else strerror(err). */
const char *qcg_conn_strerror(const qcg_tls *tls, int err);
/* "plain", "tls-user", "tls-kernel" or "tls-kernel-send" for
   qcg_conn_info.encryption. */
const char *qcg_encryption_name(unsigned encryption);
/* "inter-site", "always", "never" -> enum qcg_encrypt, or QCG_EINVAL. */
int qcg_encrypt_parse(const char *mode);

const char *qcg_strerror(int err);
/* The detail of the last failure of an operation on ctx ("" if none).  With
   ctx NULL: the detail of this thread's last failed qcg_open. */
const char *qcg_last_error(const qcg_ctx *ctx);
/* The errno of the system call behind qcg_last_error's failure, 0 when it
   had none (a refusal, a protocol error, a deadline of ours).  It tells
   this node's shortage (EMFILE, ENFILE: descriptors; EADDRNOTAVAIL: ports)
   from the network's answer (ECONNREFUSED, EHOSTUNREACH...), whatever the
   QCG_E* code: QCG_ESYS, QCG_ENOHELPER (ENOENT: no helper socket), QCG_EPEER. */
int qcg_last_errno(const qcg_ctx *ctx);
const char *qcg_technique_name(enum qcg_technique t);

/* The library's version at run time (QCG_VERSION_HEX, QCG_VERSION_STRING of
   the header it was built with), which may be newer than the header's. */
unsigned qcg_version(void);
const char *qcg_version_string(void);

#ifdef __cplusplus
}
#endif

#endif
