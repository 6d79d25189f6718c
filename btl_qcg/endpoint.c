/* An endpoint: the channel to one peer rank and its state machine.
 *
 *   IDLE --first send--> CONNECTING --qcg connect done--> VERDICT
 *   VERDICT --ACCEPT--> CONNECTED          VERDICT --REFUSE--> WAITPEER
 *   any but CONNECTED/FAILED --incoming connection we accept--> CONNECTED
 *   CONNECTED --peer's CLOSE, then EOF--> IDLE
 *   CONNECTED --broken (reset, EOF without CLOSE, write error)--> CONNECTING
 *       (or IDLE when nothing is owed either way; a later send reconnects)
 *   a reconnect attempt --fails--> BACKOFF --a moment later--> CONNECTING
 *   any --error or deadline--> FAILED (reported once; sends fail); while
 *       reconnecting only once btl_qcg_reconnect_timeout has passed
 *
 * Simultaneous connect: every connection libqcgconn accepts gets a verdict
 * before any frame.  We refuse an incoming connection while we hold a
 * channel, or while our own attempt runs and our rank is the lower one (the
 * lower rank's connection wins); otherwise we accept it and drop our own
 * attempt.  An incoming connection while we are CONNECTED is either the
 * peer's reconnect (its end of our channel broke) or its own attempt of a
 * simultaneous connect, which it dropped when it took ours: we accept it as
 * a spare, which replaces our channel at the peer's first byte (its RESUME)
 * and goes quietly at its EOF.  Replacing at once broke good channels (667
 * breaks in six 80-rank storms).  Frames wait in the send queue
 * until CONNECTED and the peer's RESUME (which says how many it has) and are
 * only ever written on the accepted channel; unacknowledged ones are written
 * again on the next channel (resend.c), and the receiver checks every frame's
 * sequence number: none is lost, doubled or reordered.
 */
#include "btl_qcg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "opal/mca/btl/base/base.h"

/* Room for several eager frames per read; large frames are read in place. */
#define RX_MIN (256u * 1024)
/* A frame at least this large is read exactly (no copy when compacting). */
#define RX_EXACT (16u * 1024)
#define IOV_BATCH 64
/* Writes and reads per event, so that one busy peer cannot starve others. */
#define IO_ROUNDS 16
/* Ranks beyond this are not a job we could be part of. */
#define VPID_LIMIT (1u << 24)
/* Extra time after libqcgconn's own deadline before we give up on it. */
#define OP_GRACE_US 5000000u
/* Between reconnect attempts. */
#define RETRY_US 250000u

static void flush(struct btl_qcg_endpoint *ep);
static void read_frames(struct btl_qcg_endpoint *ep);
static void spare_ready(struct btl_qcg_endpoint *ep);

static bool state_pending(enum btl_qcg_ep_state s)
{
    return s == EP_CONNECTING || s == EP_VERDICT || s == EP_WAITPEER || s == EP_BACKOFF;
}

static void set_state(struct btl_qcg_endpoint *ep, enum btl_qcg_ep_state s)
{
    struct btl_qcg_module *m = ep->module;

    if (state_pending(ep->state) && !state_pending(s))
        m->pending--;
    else if (!state_pending(ep->state) && state_pending(s)) {
        m->pending++;
        m->next_check_us = 0;
    }
    ep->state = s;
}

static uint64_t timeout_us(void)
{
    int ms = mca_btl_qcg_component.connect_timeout_ms;

    return (uint64_t)(ms > 0 ? ms : 1) * 1000u;
}

static uint64_t reconnect_us(void)
{
    int ms = mca_btl_qcg_component.reconnect_timeout_ms;

    return (uint64_t)(ms > 0 ? ms : 1) * 1000u;
}

/* Until when failed attempts are made again, 0 not: a reconnect within
   btl_qcg_reconnect_timeout of the break, a first connection that met a
   failure the next attempt may not meet (fail_again) within
   btl_qcg_connect_timeout of its first send. */
static uint64_t retry_limit(const struct btl_qcg_endpoint *ep)
{
    if (ep->broken_since_us != 0)
        return ep->broken_since_us + reconnect_us();
    return ep->first_until_us;
}

/* One attempt's bound of silence, whole for every attempt, the last one of
   the retries too: btl_qcg_connect_timeout, for a reconnect at most
   btl_qcg_reconnect_timeout.  Retries used to get what was left of their
   bound, which under load ended them before anything could answer ("no
   plan for rank 23 within 419 ms").  Attempts start within retry_limit;
   the last one ends within its own bound, so a reconnect ends at the
   latest reconnect_timeout + attempt_us() x QCG_CONNECT_CAP_FACTOR +
   OP_GRACE_US after the break (btl_qcg/README.md, "Broken connections"). */
static uint64_t attempt_us(const struct btl_qcg_endpoint *ep)
{
    uint64_t t = timeout_us();

    if (ep->broken_since_us != 0 && reconnect_us() < t)
        t = reconnect_us();
    return t;
}

/* The end of a wait of one attempt's bound (times factor) from now. */
static uint64_t attempt_deadline(const struct btl_qcg_endpoint *ep, unsigned factor)
{
    return btl_qcg_now_us() + attempt_us(ep) * factor;
}

struct btl_qcg_endpoint *btl_qcg_endpoint_get(struct btl_qcg_module *m, uint32_t vpid)
{
    struct btl_qcg_endpoint *ep;

    if (vpid >= VPID_LIMIT)
        return NULL;
    if (vpid >= m->neps) {
        size_t n = m->neps ? m->neps : 16;
        struct btl_qcg_endpoint **eps;

        while (n <= vpid)
            n *= 2;
        eps = realloc(m->eps, n * sizeof(*eps));
        if (eps == NULL)
            return NULL;
        memset(eps + m->neps, 0, (n - m->neps) * sizeof(*eps));
        m->eps = eps;
        m->neps = n;
    }
    if (m->eps[vpid] != NULL)
        return m->eps[vpid];
    ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return NULL;
    ep->module = m;
    ep->vpid = vpid;
    ep->state = EP_IDLE;
    ep->fd = -1;
    ep->spare_fd = -1;
    ep->w_op = (struct btl_qcg_watch){WATCH_OP, ep};
    ep->w_sock = (struct btl_qcg_watch){WATCH_SOCK, ep};
    ep->w_spare = (struct btl_qcg_watch){WATCH_SPARE, ep};
    btl_qcg_queue_init(ep);
    m->eps[vpid] = ep;
    return ep;
}

static void close_sock(struct btl_qcg_endpoint *ep)
{
    if (ep->fd < 0)
        return;
    btl_qcg_watch(ep->module, EPOLL_CTL_DEL, ep->fd, 0, NULL);
    btl_qcg_io_free(ep);
    close(ep->fd);
    ep->fd = -1;
    ep->want_out = false;
    ep->in_flight = false;
    ep->stall_since_us = 0;
    ep->quiet_since_us = 0;
}

static void drop_spare(struct btl_qcg_endpoint *ep)
{
    if (ep->spare_fd < 0)
        return;
    btl_qcg_watch(ep->module, EPOLL_CTL_DEL, ep->spare_fd, 0, NULL);
    qcg_tls_free(ep->spare_tls);
    close(ep->spare_fd);
    ep->spare_fd = -1;
    ep->spare_tls = NULL;
}

static void drop_op(struct btl_qcg_endpoint *ep)
{
    if (ep->op == NULL)
        return;
    btl_qcg_watch(ep->module, EPOLL_CTL_DEL, qcg_connect_pollfd(ep->op), 0, NULL);
    qcg_connect_free(ep->op);
    ep->op = NULL;
    ep->module->connects--;
}

void btl_qcg_endpoint_free(struct btl_qcg_endpoint *ep)
{
    if (ep == NULL)
        return;
    drop_op(ep);
    drop_spare(ep);
    if (ep->fd >= 0) {
        /* Done sending: a CLOSE (our EOF is no break), when it fits between
           frames; the peer reads to the end before it sees EOF. */
        if (ep->state == EP_CONNECTED && ep->resumed && ep->unsent == NULL && !ep->ctl_pending) {
            struct btl_qcg_hdr close_hdr = {.type = BTL_QCG_CLOSE,
                                            .ack = htonl((uint32_t)ep->rx_seq)};
            struct iovec iov = {&close_hdr, sizeof(close_hdr)};

            (void)btl_qcg_io_writev(ep, &iov, 1);
        }
        btl_qcg_io_end(ep);
        shutdown(ep->fd, SHUT_WR);
        close_sock(ep);
    }
    btl_qcg_queue_clear(ep, BTL_QCG_DISCARD);
    if (state_pending(ep->state))
        ep->module->pending--;
    free(ep->rx);
    free(ep);
}

static void start_connect(struct btl_qcg_endpoint *ep);

/* A failed attempt: another one a moment later, while retry_limit allows. */
static bool retry_later(struct btl_qcg_endpoint *ep, const char *what, const char *detail)
{
    uint64_t now = btl_qcg_now_us(), limit = retry_limit(ep);

    if (limit == 0 || ep->state == EP_FAILED || now >= limit)
        return false;
    snprintf(ep->retry_why, sizeof(ep->retry_why), "%s: %s", what, detail);
    drop_op(ep);
    close_sock(ep);
    ep->deadline_us = now + RETRY_US < limit ? now + RETRY_US : limit;
    set_state(ep, EP_BACKOFF);
    btl_qcg_log(2, "%s to rank %u: %s: %s; again in %u ms",
                ep->broken_since_us != 0 ? "reconnecting" : "connecting", ep->vpid, what, detail,
                RETRY_US / 1000);
    return true;
}

/* The failure of a peer: reported once, with the peer, its host and the
   detail (libqcgconn's names the techniques tried); then the PML's error
   callback (which aborts the job) and the queued sends fail (both made once
   the state lock is released). */
static void fail_sys(struct btl_qcg_endpoint *ep, const char *what, const char *detail,
                     int sys_errno)
{
    struct btl_qcg_module *m = ep->module;
    char info[512];

    if (ep->state == EP_FAILED || retry_later(ep, what, detail))
        return;
    drop_op(ep);
    drop_spare(ep);
    close_sock(ep);
    set_state(ep, EP_FAILED);
    if (!ep->error_reported) {
        ep->error_reported = true;
        if (ep->broken_since_us != 0) {
            /* Not a first connection: the peer process is gone. */
            snprintf(info, sizeof(info),
                     "our connection broke and no new one was made within %d ms; last attempt: "
                     "%s: %s",
                     mca_btl_qcg_component.reconnect_timeout_ms, what, detail);
            btl_qcg_report_gone(ep, info);
            if (m->error_cb != NULL) {
                snprintf(info, sizeof(info),
                         "btl_qcg: rank %u lost rank %u (host %s): the connection broke and no "
                         "new one was made within %d ms (the peer process is gone?)",
                         m->vpid, ep->vpid, btl_qcg_peer_host(ep),
                         mca_btl_qcg_component.reconnect_timeout_ms);
                btl_qcg_defer_error(m, ep->proc, info);
            }
        } else {
            /* The explained text goes to show_help; the PML's error callback
               (which aborts the job, once our lock is released) prints the
               reason too: mpirun 4.1 loses some help messages that race with
               an abort. */
            btl_qcg_report_failure(ep, what, detail, sys_errno);
            if (m->error_cb != NULL) {
                snprintf(info, sizeof(info),
                         "btl_qcg: rank %u cannot reach rank %u (host %s): %s: %s", m->vpid,
                         ep->vpid, btl_qcg_peer_host(ep), what, detail);
                btl_qcg_defer_error(m, ep->proc, info);
            }
        }
    }
    btl_qcg_queue_clear(ep, OPAL_ERR_UNREACH);
}

static void fail(struct btl_qcg_endpoint *ep, const char *what, const char *detail)
{
    fail_sys(ep, what, detail, 0);
}

/* A failure of the setup that the next attempt may not meet: the peer hung
   up or reset the connection during the handshake or before its verdict (a
   peer too busy to answer in time, a middlebox).  A first connection is
   tried again, within btl_qcg_connect_timeout of its first send; it used to
   fail the job at once. */
static void fail_again(struct btl_qcg_endpoint *ep, const char *what, const char *detail)
{
    if (ep->broken_since_us == 0 && ep->first_until_us == 0 && ep->state != EP_FAILED)
        ep->first_until_us = ep->t_start_us + timeout_us();
    fail(ep, what, detail);
}

static void fail_qcg(struct btl_qcg_endpoint *ep, const char *what, int rc)
{
    char detail[512];

    snprintf(detail, sizeof(detail), "%s%s%s", qcg_strerror(rc),
             qcg_last_error(ep->module->ctx)[0] ? ": " : "", qcg_last_error(ep->module->ctx));
    if (rc == QCG_EPEER)
        fail_again(ep, what, detail);
    else
        fail_sys(ep, what, detail, qcg_last_errno(ep->module->ctx));
}

static void fail_errno(struct btl_qcg_endpoint *ep, const char *what, int err)
{
    fail_sys(ep, what, strerror(err), err);
}

static int watch_sock(struct btl_qcg_endpoint *ep, int op)
{
    uint32_t events = EPOLLIN | (ep->want_out ? EPOLLOUT : 0);

    return btl_qcg_watch(ep->module, op, ep->fd, events, &ep->w_sock);
}

static void want_out(struct btl_qcg_endpoint *ep, bool on)
{
    if (ep->want_out == on || ep->fd < 0)
        return;
    ep->want_out = on;
    watch_sock(ep, EPOLL_CTL_MOD);
}

static int set_nonblocking(int fd)
{
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return -1;
    return 0;
}

/* Appends ep's peer to the connects waiting for a slot. */
static int queue_connect(struct btl_qcg_endpoint *ep)
{
    struct btl_qcg_module *m = ep->module;

    if (m->cq_head > 0 && m->cq_head == m->cq_len)
        m->cq_head = m->cq_len = 0;
    if (m->cq_len == m->cq_cap) {
        size_t cap = m->cq_cap ? 2 * m->cq_cap : 64;
        uint32_t *cq = realloc(m->cq, cap * sizeof(*cq));

        if (cq == NULL)
            return -1;
        m->cq = cq;
        m->cq_cap = cap;
    }
    m->cq[m->cq_len++] = ep->vpid;
    set_state(ep, EP_QUEUED);
    return 0;
}

static void connect_now(struct btl_qcg_endpoint *ep);

/* The first send to a peer: a connect, or a place in the queue when
   max_connects run already (resources per process stay bounded however many
   peers a rank talks to at once). */
static void start_connect(struct btl_qcg_endpoint *ep)
{
    struct btl_qcg_module *m = ep->module;

    /* A first connection tried again keeps its first send's time. */
    if (ep->first_until_us == 0)
        ep->t_start_us = btl_qcg_now_us();
    /* At least one: a bound of 0 would queue every peer for ever. */
    if (m->connects >= mca_btl_qcg_component.max_connects && m->connects > 0) {
        if (queue_connect(ep) < 0)
            fail(ep, "cannot queue a connection", "out of memory");
        else if (mca_btl_qcg_component.verbose >= 2)
            btl_qcg_log(2, "rank %u waits for a connect slot (%d running)", ep->vpid, m->connects);
        return;
    }
    connect_now(ep);
}

void btl_qcg_start_queued(struct btl_qcg_module *m)
{
    while (m->cq_head < m->cq_len &&
           (m->connects < mca_btl_qcg_component.max_connects || m->connects == 0)) {
        uint32_t vpid = m->cq[m->cq_head++];
        struct btl_qcg_endpoint *ep = vpid < m->neps ? m->eps[vpid] : NULL;

        /* Gone, or connected by the peer meanwhile. */
        if (ep != NULL && ep->state == EP_QUEUED)
            connect_now(ep);
    }
}

static void connect_now(struct btl_qcg_endpoint *ep)
{
    struct btl_qcg_module *m = ep->module;
    int rc;

    int ms = (int)(attempt_us(ep) / 1000u);

    rc = qcg_connect_start(m->ctx, (int)ep->vpid, ms, &ep->op);
    if (rc < 0) {
        ep->op = NULL;
        fail_qcg(ep, "cannot start a connection", rc);
        return;
    }
    m->connects++;
    if (btl_qcg_watch(m, EPOLL_CTL_ADD, qcg_connect_pollfd(ep->op), EPOLLIN, &ep->w_op) < 0) {
        fail_errno(ep, "cannot watch a connection", errno);
        return;
    }
    /* The whole timeout from now: a wait for a slot is not the peer's fault.
       libqcgconn's bound is one of silence, its cap QCG_CONNECT_CAP_FACTOR
       times it: a connect that keeps moving under load is not cut here. */
    ep->deadline_us = attempt_deadline(ep, QCG_CONNECT_CAP_FACTOR) + OP_GRACE_US;
    set_state(ep, EP_CONNECTING);
    if (mca_btl_qcg_component.verbose >= 2)
        btl_qcg_log(2, "connecting to rank %u (host %s)", ep->vpid, btl_qcg_peer_host(ep));
}

static void owe_ctl(struct btl_qcg_endpoint *ep, enum btl_qcg_frame_type type)
{
    memset(&ep->ctl, 0, sizeof(ep->ctl));
    ep->ctl.type = (uint8_t)type;
    ep->ctl_sent = 0;
    ep->ctl_pending = true;
}

/* The channel broke (a reset, an EOF without CLOSE, a write error): a new
   one is made when something is owed either way (frames not acknowledged or
   not written, an ack the peer asked for); otherwise the endpoint rests: a
   later send reconnects, and a peer holding frames for us connects itself. */
static void channel_broken(struct btl_qcg_endpoint *ep, const char *reason)
{
    uint64_t now = btl_qcg_now_us();
    char why[256];

    /* A copy: the reason may be the session's own text (qcg_tls_error),
       which close_sock frees. */
    snprintf(why, sizeof(why), "%s", reason);
    close_sock(ep);
    btl_qcg_rewind(ep);
    ep->breaks++;
    if (btl_qcg_queue_first(ep) == NULL && !ep->ack_owed) {
        btl_qcg_log(2, "connection to rank %u broken (%s); nothing owed: idle", ep->vpid, why);
        set_state(ep, EP_IDLE);
        return;
    }
    if (ep->broken_since_us == 0)
        ep->broken_since_us = now;
    ep->t_start_us = now;
    if (ep->spare_fd >= 0) {
        /* The peer connected again already: its connection is the new
           channel once it writes there (a connect of ours would cross it). */
        btl_qcg_log(1, "connection to rank %u broken (%s): the peer's new one takes over", ep->vpid,
                    why);
        ep->deadline_us = attempt_deadline(ep, 1);
        set_state(ep, EP_WAITPEER);
        return;
    }
    btl_qcg_log(1, "connection to rank %u broken (%s): reconnecting", ep->vpid, why);
    set_state(ep, EP_IDLE);
    start_connect(ep);
}

void btl_qcg_endpoint_heartbeat(struct btl_qcg_endpoint *ep)
{
    if (ep->state != EP_CONNECTED || ep->ctl_pending)
        return;
    owe_ctl(ep, BTL_QCG_ACK);
    ep->ctl.flags = BTL_QCG_ACK_ME;
    flush(ep);
}

void btl_qcg_endpoint_abort(struct btl_qcg_endpoint *ep, const char *why)
{
    struct linger abort_now = {.l_onoff = 1, .l_linger = 0};

    (void)setsockopt(ep->fd, SOL_SOCKET, SO_LINGER, &abort_now, sizeof(abort_now));
    channel_broken(ep, why);
}

/* Test hook (btl_qcg_test_break_every): abort the channel, as a reset does:
   what the peer had not read yet is lost too. */
static void test_break(struct btl_qcg_endpoint *ep)
{
    ep->since_break = 0;
    btl_qcg_endpoint_abort(ep, "btl_qcg_test_break_every");
}

static void become_connected(struct btl_qcg_endpoint *ep, int fd, bool initiator)
{
    ep->fd = fd;
    ep->first_until_us = 0;
    ep->initiator = initiator;
    /* First our RESUME; frames once the peer's arrived. */
    btl_qcg_rewind(ep);
    owe_ctl(ep, BTL_QCG_RESUME);
    ep->peer_closed = false;
    ep->want_out = true;
    ep->rx_off = ep->rx_len = 0;
    if (ep->rx == NULL) {
        ep->rx = malloc(RX_MIN);
        if (ep->rx == NULL) {
            fail(ep, "connected", "out of memory for the receive buffer");
            return;
        }
        ep->rx_cap = RX_MIN;
    }
    if (initiator) {
        /* Already watched for the verdict. */
        if (watch_sock(ep, EPOLL_CTL_MOD) < 0) {
            fail_errno(ep, "cannot watch the connection", errno);
            return;
        }
    } else if (watch_sock(ep, EPOLL_CTL_ADD) < 0) {
        fail_errno(ep, "cannot watch the connection", errno);
        return;
    }
    set_state(ep, EP_CONNECTED);
    btl_qcg_report_connected(ep);
    flush(ep);
}

/* Bytes written of frame f (that many of left): returns the rest of left. */
static size_t advance(struct btl_qcg_endpoint *ep, struct btl_qcg_frag *f, size_t left,
                      uint64_t ack)
{
    size_t rest = f->total - f->sent;

    if (f->sent == 0)
        ep->ack_sent = ack;
    if (left < rest) {
        f->sent += left;
        return 0;
    }
    f->sent = f->total;
    ep->unsent = btl_qcg_frag_next(f);
    if (f->rq.seq > ep->written_seq) {
        /* Only new frames count for the test hook: replays always progress. */
        ep->written_seq = f->rq.seq;
        ep->since_break++;
    }
    return left - rest;
}

/* The control frame, then the frames of the queue from unsent on (once the
   peer's RESUME came), written in batches until the socket is full.  Written
   frames stay queued until acknowledged (resend.c).  An ack owed rides on
   the next frame's header, or goes alone. */
static void flush(struct btl_qcg_endpoint *ep)
{
    int every = mca_btl_qcg_component.test_break_every;

    /* An encrypted batch staged before goes first. */
    if (btl_qcg_io_staged(ep)) {
        ep->in_flight = true;
        if (btl_qcg_io_drain(ep) < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                want_out(ep, true);
            else
                channel_broken(ep, qcg_conn_strerror(ep->tls, errno));
            return;
        }
    }
    for (int round = 0; round < IO_ROUNDS && ep->state == EP_CONNECTED; round++) {
        struct iovec iov[IOV_BATCH];
        struct btl_qcg_frag *f = ep->resumed ? ep->unsent : NULL;
        uint64_t ack = ep->rx_seq;
        size_t n = 0, left;
        ssize_t w;

        if (ep->ack_owed && ep->ack_sent != ack && !ep->ctl_pending &&
            !(f != NULL && (f->sent == 0 || btl_qcg_frag_next(f) != NULL)))
            owe_ctl(ep, BTL_QCG_ACK);
        /* A frame begun goes first, then the control frame, then the rest. */
        if (f != NULL && f->sent > 0) {
            n += btl_qcg_frag_iov(f, iov, IOV_BATCH);
            f = btl_qcg_frag_next(f);
        }
        if (ep->ctl_pending) {
            if (ep->ctl_sent == 0)
                ep->ctl.ack = htonl((uint32_t)ack);
            iov[n++] = (struct iovec){(unsigned char *)&ep->ctl + ep->ctl_sent,
                                      BTL_QCG_HDR_SIZE - ep->ctl_sent};
        }
        for (; f != NULL && n < IOV_BATCH - 4; f = btl_qcg_frag_next(f)) {
            if (f->sent == 0)
                f->hdr.ack = htonl((uint32_t)ack);
            n += btl_qcg_frag_iov(f, iov + n, IOV_BATCH - n);
        }
        if (n == 0) {
            want_out(ep, btl_qcg_io_staged(ep));
            return;
        }
        w = btl_qcg_io_writev(ep, iov, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                want_out(ep, true);
                return;
            }
            channel_broken(ep, qcg_conn_strerror(ep->tls, errno));
            return;
        }
        /* In the order of the iovecs. */
        left = (size_t)w;
        ep->in_flight = true; /* for the stall check (stall.c) */
        f = ep->resumed ? ep->unsent : NULL;
        if (f != NULL && f->sent > 0)
            left = advance(ep, f, left, ack);
        if (left > 0 && ep->ctl_pending) {
            size_t take = BTL_QCG_HDR_SIZE - ep->ctl_sent;

            if (take > left)
                take = left;
            if (ep->ctl_sent == 0)
                ep->ack_sent = ack;
            ep->ctl_sent += take;
            left -= take;
            if (ep->ctl_sent == BTL_QCG_HDR_SIZE)
                ep->ctl_pending = false;
        }
        while (left > 0 && ep->resumed && ep->unsent != NULL)
            left = advance(ep, ep->unsent, left, ack);
        if (ep->ack_sent == ep->rx_seq)
            ep->ack_owed = false;
        if (every > 0 && ep->since_break >= (uint64_t)every) {
            test_break(ep);
            return;
        }
    }
    if (ep->state == EP_CONNECTED)
        want_out(ep,
                 ep->ctl_pending || (ep->resumed && ep->unsent != NULL) || btl_qcg_io_staged(ep));
}

static int send_locked(struct btl_qcg_endpoint *ep, struct btl_qcg_frag *frag)
{
    struct btl_qcg_frag *q;
    bool done;

    if (ep->state == EP_FAILED)
        return OPAL_ERR_UNREACH;
    /* After a channel that rests (nothing was owed when it broke, or the
       peer closed it), the peer's absence is bounded like any reconnect. */
    if (ep->state == EP_IDLE && (ep->sq.sent > 0 || ep->rx_seq > 0))
        ep->broken_since_us = btl_qcg_now_us();
    q = btl_qcg_resend_take(ep, frag, &done);
    btl_qcg_queue_push(ep, q);
    if (ep->state == EP_CONNECTED) {
        if (ep->unsent == q)
            flush(ep);
    } else if (ep->state == EP_IDLE)
        start_connect(ep);
    if (!done)
        return OPAL_SUCCESS; /* completes when acknowledged */
    /* Our copy is queued: done inline; the PML completes it unless it asked
       for the callback anyway. */
    if (frag->base.des_flags & MCA_BTL_DES_SEND_ALWAYS_CALLBACK)
        btl_qcg_defer_completion(ep->module, frag, OPAL_SUCCESS);
    else if (frag->base.des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP)
        btl_qcg_frag_release(ep->module, frag);
    return 1;
}

int btl_qcg_endpoint_send(struct btl_qcg_endpoint *ep, struct btl_qcg_frag *frag)
{
    int rc;

    if (ep == NULL)
        return OPAL_ERR_UNREACH;
    btl_qcg_lock(ep->module);
    rc = send_locked(ep, frag);
    btl_qcg_unlock(ep->module);
    return rc;
}

static void op_ready(struct btl_qcg_endpoint *ep)
{
    struct qcg_conn_info info;
    int fd;

    if (ep->op == NULL || ep->state != EP_CONNECTING)
        return;
    fd = qcg_connect_finish(ep->op, &info);
    if (fd == QCG_EAGAIN)
        return;
    if (fd < 0) {
        fail_qcg(ep, "connect failed", fd);
        return;
    }
    drop_op(ep);
    if (set_nonblocking(fd) < 0) {
        qcg_tls_free(info.tls);
        close(fd);
        fail_errno(ep, "connect: socket options", errno);
        return;
    }
    ep->info = info;
    ep->fd = fd;
    ep->tls = info.tls;
    ep->verdict_got = 0;
    ep->want_out = false;
    if (watch_sock(ep, EPOLL_CTL_ADD) < 0) {
        btl_qcg_io_free(ep);
        close(fd);
        ep->fd = -1;
        fail_errno(ep, "cannot watch the connection", errno);
        return;
    }
    ep->deadline_us = attempt_deadline(ep, 1);
    set_state(ep, EP_VERDICT);
    btl_qcg_log(2, "connected to rank %u by %s (%s) in %.1f ms, waiting for its verdict", ep->vpid,
                qcg_technique_name(info.technique), qcg_encryption_name(info.encryption),
                info.setup_us / 1000.0);
}

static void verdict_ready(struct btl_qcg_endpoint *ep)
{
    const unsigned char *v = ep->verdict;
    char detail[160];

    while (ep->verdict_got < BTL_QCG_VERDICT_SIZE) {
        ssize_t n = btl_qcg_io_recv(ep, ep->verdict + ep->verdict_got,
                                    BTL_QCG_VERDICT_SIZE - ep->verdict_got);

        if (n > 0) {
            ep->verdict_got += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        /* A copy: the session's own text goes with the socket. */
        snprintf(detail, sizeof(detail), "%s",
                 n == 0 ? "the peer closed the connection before answering"
                        : qcg_conn_strerror(ep->tls, errno));
        fail_again(ep, "connection setup", detail);
        return;
    }
    if (memcmp(v, "QBTL", 4) != 0 || v[4] != BTL_QCG_VERSION ||
        (v[5] != BTL_QCG_ACCEPT && v[5] != BTL_QCG_REFUSE)) {
        snprintf(detail, sizeof(detail),
                 "the peer's answer is not a btl_qcg verdict of version %d (another version?)",
                 BTL_QCG_VERSION);
        fail(ep, "connection setup", detail);
        return;
    }
    if (v[5] == BTL_QCG_REFUSE) {
        /* The peer's own connection (lower rank) wins; it is on its way. */
        close_sock(ep);
        ep->deadline_us = attempt_deadline(ep, 1);
        set_state(ep, EP_WAITPEER);
        btl_qcg_log(2, "rank %u refused our connection (simultaneous connect): waiting for its own",
                    ep->vpid);
        return;
    }
    become_connected(ep, ep->fd, true);
    if (ep->state == EP_CONNECTED)
        read_frames(ep);
}

/* What the control fields of the frames of one deliver() said. */
struct rx_news {
    bool any, ack_me, resume, closed;
    uint32_t ack;
};

/* Acts on them (state lock held): acknowledged frames complete, a RESUME
   lets the frames not acknowledged go again, an ack owed goes. */
static void act_on(struct btl_qcg_endpoint *ep, const struct rx_news *news)
{
    if (!news->any)
        return;
    if (btl_qcg_ack_received(ep, news->ack) < 0) {
        fail(ep, "protocol error", "the peer acknowledges frames we never sent");
        return;
    }
    if (news->closed)
        ep->peer_closed = true;
    if (news->ack_me)
        ep->ack_owed = true;
    if (news->resume && !ep->resumed) {
        unsigned long again = 0;

        for (struct btl_qcg_frag *f = btl_qcg_queue_first(ep);
             f != NULL && f->rq.seq <= ep->written_seq; f = btl_qcg_frag_next(f))
            again++;
        ep->resumed = true;
        ep->resent += again;
        if (ep->broken_since_us != 0) {
            btl_qcg_log(1,
                        "connection to rank %u re-established by %s in %.1f ms: %lu frames "
                        "sent again (%lu breaks, %lu frames sent again in all)",
                        ep->vpid, qcg_technique_name(ep->info.technique),
                        (btl_qcg_now_us() - ep->broken_since_us) / 1000.0, again, ep->breaks,
                        ep->resent);
            ep->broken_since_us = 0;
        }
    }
    if (ep->state == EP_CONNECTED)
        flush(ep);
}

/* Hands the complete frames in rx to the PML; keeps the partial one.
   Called with the state lock held; releases it while the PML's callbacks
   run.  rx stays put meanwhile: only the thread running progress (this
   one) reads sockets into rx or moves it.  A data frame must carry the next
   sequence number; one already delivered (sent again) is skipped. */
static bool deliver(struct btl_qcg_endpoint *ep)
{
    struct btl_qcg_module *m = ep->module;
    struct rx_news news = {0};
    uint64_t rx_seq = ep->rx_seq;
    char detail[96] = "";

    if (ep->rx_len - ep->rx_off < BTL_QCG_HDR_SIZE)
        return true;
    btl_qcg_unlock(m);
    while (ep->rx_len - ep->rx_off >= BTL_QCG_HDR_SIZE) {
        struct btl_qcg_hdr hdr;
        mca_btl_base_segment_t seg;
        size_t len, frame;
        uint32_t seq;

        memcpy(&hdr, ep->rx + ep->rx_off, sizeof(hdr));
        len = ntohl(hdr.length);
        if (len > BTL_QCG_FRAME_MAX) {
            snprintf(detail, sizeof(detail), "a frame of %zu bytes (limit %u)", len,
                     BTL_QCG_FRAME_MAX);
            break;
        }
        frame = (BTL_QCG_HDR_SIZE + len + 7) & ~(size_t)7;
        if (ep->rx_len - ep->rx_off < frame)
            break;
        news.any = true;
        news.ack = ntohl(hdr.ack);
        news.ack_me |= (hdr.flags & BTL_QCG_ACK_ME) != 0;
        if (hdr.type != BTL_QCG_DATA) {
            if (hdr.type > BTL_QCG_CLOSE || len != 0) {
                snprintf(detail, sizeof(detail), "a control frame of type %u, %zu bytes", hdr.type,
                         len);
                break;
            }
            news.resume |= hdr.type == BTL_QCG_RESUME;
            news.closed |= hdr.type == BTL_QCG_CLOSE;
            ep->rx_off += frame;
            continue;
        }
        seq = ntohl(hdr.seq);
        if (seq != (uint32_t)(rx_seq + 1)) {
            if ((int32_t)(seq - (uint32_t)rx_seq) > 0) {
                snprintf(detail, sizeof(detail), "frame %u where %u was due", seq,
                         (uint32_t)(rx_seq + 1));
                break;
            }
            ep->rx_off += frame; /* had it */
            continue;
        }
        if (mca_btl_base_active_message_trigger[hdr.tag].cbfunc == NULL) {
            snprintf(detail, sizeof(detail), "a frame with tag %u, which nobody registered",
                     hdr.tag);
            break;
        }
        ep->rx_off += frame;
        rx_seq++;
        seg.seg_addr.pval = ep->rx + ep->rx_off - frame + BTL_QCG_HDR_SIZE;
        seg.seg_len = len;
        btl_qcg_deliver(&m->super, (struct mca_btl_base_endpoint_t *)ep, hdr.tag, &seg);
    }
    btl_qcg_lock(m);
    ep->rx_seq = rx_seq;
    if (detail[0] != '\0') {
        fail(ep, "protocol error", detail);
        return false;
    }
    if (ep->state == EP_CONNECTED)
        act_on(ep, &news);
    return ep->state == EP_CONNECTED;
}

/* Makes room after rx_len for the frame at rx_off (and then some). */
static bool make_room(struct btl_qcg_endpoint *ep)
{
    size_t have = ep->rx_len - ep->rx_off, need = RX_EXACT;

    if (have >= BTL_QCG_HDR_SIZE) {
        struct btl_qcg_hdr hdr;

        memcpy(&hdr, ep->rx + ep->rx_off, sizeof(hdr));
        need = (BTL_QCG_HDR_SIZE + ntohl(hdr.length) + 7) & ~(size_t)7;
    }
    if (ep->rx_cap - ep->rx_off >= need && ep->rx_cap > ep->rx_len)
        return true;
    if (ep->rx_off > 0) {
        memmove(ep->rx, ep->rx + ep->rx_off, have);
        ep->rx_off = 0;
        ep->rx_len = have;
    }
    if (ep->rx_cap < need) {
        unsigned char *rx = realloc(ep->rx, need);

        if (rx == NULL) {
            fail(ep, "receiving", "out of memory for a large frame");
            return false;
        }
        ep->rx = rx;
        ep->rx_cap = need;
    }
    return true;
}

static void read_frames(struct btl_qcg_endpoint *ep)
{
    /* Decrypted bytes left in the session wake no poll: read them too. */
    for (int round = 0; (round < IO_ROUNDS || btl_qcg_io_pending(ep)) && ep->state == EP_CONNECTED;
         round++) {
        size_t want, have;
        ssize_t n;

        if (ep->rx_off == ep->rx_len)
            ep->rx_off = ep->rx_len = 0;
        if (!make_room(ep))
            return;
        want = ep->rx_cap - ep->rx_len;
        have = ep->rx_len - ep->rx_off;
        if (have >= BTL_QCG_HDR_SIZE) {
            /* A large frame is read up to its end only: it then completes at
               rx_len and needs no moving afterwards. */
            struct btl_qcg_hdr hdr;
            size_t frame;

            memcpy(&hdr, ep->rx + ep->rx_off, sizeof(hdr));
            frame = (BTL_QCG_HDR_SIZE + ntohl(hdr.length) + 7) & ~(size_t)7;
            if (frame >= RX_EXACT && frame > have && frame - have < want)
                want = frame - have;
        }
        n = btl_qcg_io_recv(ep, ep->rx + ep->rx_len, want);
        if (n > 0) {
            ep->rx_len += (size_t)n;
            ep->reads++;
            if (!deliver(ep))
                return;
            /* A session returns a record at a time: only EAGAIN says the
               socket is empty. */
            if ((size_t)n < want && ep->tls == NULL)
                return;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n == 0 && ep->peer_closed) {
            /* The peer is done (MPI_Finalize): a later send reconnects. */
            btl_qcg_log(2, "rank %u closed the connection", ep->vpid);
            close_sock(ep);
            btl_qcg_rewind(ep);
            set_state(ep, EP_IDLE);
            return;
        }
        /* A record that does not authenticate, or a stream cut inside one:
           nothing of it was delivered; the channel goes like a reset one. */
        channel_broken(ep, n == 0 ? "the peer's end closed without a close frame"
                                  : qcg_conn_strerror(ep->tls, errno));
        return;
    }
}

void btl_qcg_endpoint_event(struct btl_qcg_endpoint *ep, enum btl_qcg_watch_kind kind,
                            uint32_t events)
{
    if (kind == WATCH_OP) {
        op_ready(ep);
        return;
    }
    if (kind == WATCH_SPARE) {
        spare_ready(ep);
        return;
    }
    if (ep->fd < 0)
        return;
    if (ep->state == EP_VERDICT) {
        verdict_ready(ep);
        return;
    }
    if (ep->state != EP_CONNECTED)
        return;
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
        read_frames(ep);
    if ((events & EPOLLOUT) && ep->state == EP_CONNECTED)
        flush(ep);
}

void btl_qcg_endpoint_check_deadline(struct btl_qcg_endpoint *ep, uint64_t now)
{
    char detail[160];
    int ms = (int)(attempt_us(ep) / 1000u);

    switch (ep->state) {
    case EP_CONNECTING:
        /* libqcgconn times out by itself; ask it, and stop waiting for it
           a little after. */
        op_ready(ep);
        if (ep->state == EP_CONNECTING && now >= ep->deadline_us) {
            snprintf(detail, sizeof(detail), "no result from libqcgconn within %d ms",
                     ms * QCG_CONNECT_CAP_FACTOR + (int)(OP_GRACE_US / 1000u));
            fail(ep, "connect timed out", detail);
        }
        break;
    case EP_VERDICT:
        if (now >= ep->deadline_us) {
            snprintf(detail, sizeof(detail), "connected, but no answer from the peer within %d ms",
                     ms);
            fail(ep, "connection setup timed out", detail);
        }
        break;
    case EP_BACKOFF:
        if (now < ep->deadline_us)
            break;
        if (now >= retry_limit(ep))
            fail(ep,
                 ep->broken_since_us != 0 ? "reconnect" : "connect, tried again until the bound",
                 ep->retry_why);
        else {
            set_state(ep, EP_IDLE);
            start_connect(ep);
        }
        break;
    case EP_WAITPEER:
        if (now >= ep->deadline_us) {
            snprintf(detail, sizeof(detail),
                     "the peer refused our connection (its own should win) but did not connect "
                     "within %d ms",
                     ms);
            fail(ep, "connection setup timed out", detail);
        }
        break;
    default:
        break;
    }
}

/* Whether we take an incoming connection from ep's peer (see the top): while
   CONNECTED too, as the peer connects only when its end of ours broke. */
static bool accept_incoming(const struct btl_qcg_endpoint *ep)
{
    switch (ep->state) {
    case EP_FAILED:
        return false;
    case EP_CONNECTING:
    case EP_VERDICT:
        return ep->vpid < ep->module->vpid;
    default:
        return true;
    }
}

/* An accepted connection becomes the channel: ours loses, if there was one
   (the peer refuses it or already did).  first: a byte already read from
   it (the spare's), or NULL. */
static void take_channel(struct btl_qcg_endpoint *ep, int fd, const struct qcg_conn_info *info,
                         const unsigned char *first)
{
    drop_op(ep);
    close_sock(ep);
    ep->info = *info;
    ep->tls = info->tls;
    if (ep->t_start_us == 0)
        ep->t_start_us = btl_qcg_now_us() - info->setup_us;
    become_connected(ep, fd, false);
    if (ep->state != EP_CONNECTED)
        return;
    if (first != NULL)
        ep->rx[ep->rx_len++] = *first;
    read_frames(ep);
}

void btl_qcg_incoming(struct btl_qcg_module *m, int fd, const struct qcg_conn_info *info)
{
    unsigned char v[BTL_QCG_VERDICT_SIZE] = {'Q', 'B', 'T', 'L', BTL_QCG_VERSION, 0, 0, 0};
    struct btl_qcg_endpoint *ep = NULL;
    bool take;
    ssize_t n;

    if (info->peer_rank >= 0 && (uint32_t)info->peer_rank != m->vpid)
        ep = btl_qcg_endpoint_get(m, (uint32_t)info->peer_rank);
    if (ep == NULL || set_nonblocking(fd) < 0) {
        btl_qcg_log(2, "incoming connection from rank %d closed: no such peer", info->peer_rank);
        qcg_tls_free(info->tls);
        close(fd);
        return;
    }
    if (m->test_dropped < mca_btl_qcg_component.test_drop_incoming) {
        /* Test hook: a reset before the verdict, as a peer gone mid-setup. */
        struct linger abort_now = {.l_onoff = 1, .l_linger = 0};

        m->test_dropped++;
        btl_qcg_log(1, "reset a connection from rank %u (btl_qcg_test_drop_incoming)", ep->vpid);
        (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_now, sizeof(abort_now));
        qcg_tls_free(info->tls);
        close(fd);
        return;
    }
    take = accept_incoming(ep);
    v[5] = take ? BTL_QCG_ACCEPT : BTL_QCG_REFUSE;
    /* 8 bytes (one record) into a fresh socket's empty buffer: all or
       nothing. */
    n = qcg_conn_send(fd, info->tls, v, sizeof(v));
    if (n != (ssize_t)sizeof(v)) {
        btl_qcg_log(2, "incoming connection from rank %u lost while answering: %s", ep->vpid,
                    n < 0 ? qcg_conn_strerror(info->tls, errno) : "short write");
        qcg_tls_free(info->tls);
        close(fd);
        return;
    }
    if (!take) {
        btl_qcg_log(2, "refused a connection from rank %u (%s)", ep->vpid,
                    ep->state == EP_FAILED ? "failed before" : "simultaneous connect: ours wins");
        qcg_tls_free(info->tls);
        close(fd);
        return;
    }
    if (ep->state == EP_CONNECTED) {
        /* Either the peer's end of our channel broke, or this is its own
           attempt of a simultaneous connect that it gave up when it took
           ours, and closed.  Only the peer's RESUME on it tells: till then
           ours stays. */
        drop_spare(ep);
        if (btl_qcg_watch(m, EPOLL_CTL_ADD, fd, EPOLLIN, &ep->w_spare) < 0) {
            qcg_tls_free(info->tls);
            close(fd);
            return;
        }
        ep->spare_fd = fd;
        ep->spare_tls = info->tls;
        ep->spare_info = *info;
        btl_qcg_log(2,
                    "rank %u connected again while our channel is up: its connection "
                    "replaces ours once the peer writes there",
                    ep->vpid);
        return;
    }
    take_channel(ep, fd, info, NULL);
}

/* The peer's first byte on the spare connection: it is the channel now. */
static void promote_spare(struct btl_qcg_endpoint *ep, unsigned char first)
{
    int fd = ep->spare_fd;
    struct qcg_conn_info info = ep->spare_info;

    btl_qcg_watch(ep->module, EPOLL_CTL_DEL, fd, 0, NULL);
    ep->spare_fd = -1;
    ep->spare_tls = NULL;
    if (ep->state == EP_CONNECTED) {
        btl_qcg_log(1, "connection to rank %u replaced by the peer's new one", ep->vpid);
        ep->breaks++;
        if (ep->broken_since_us == 0)
            ep->broken_since_us = btl_qcg_now_us();
        ep->t_start_us = btl_qcg_now_us() - info.setup_us;
    }
    /* The byte read to tell a channel from a closed spare: its frame's first. */
    take_channel(ep, fd, &info, &first);
}

static void spare_ready(struct btl_qcg_endpoint *ep)
{
    unsigned char first;
    long n;

    if (ep->spare_fd < 0)
        return;
    n = qcg_conn_recv(ep->spare_fd, ep->spare_tls, &first, 1);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n == 1 && ep->state != EP_FAILED) {
        promote_spare(ep, first);
        return;
    }
    btl_qcg_log(2, "rank %u's other connection ended before it wrote (%s): ours stays", ep->vpid,
                n == 0 ? "the peer gave its simultaneous connect up"
                       : qcg_conn_strerror(ep->spare_tls, errno));
    drop_spare(ep);
    if (ep->state == EP_WAITPEER && ep->fd < 0 && ep->broken_since_us != 0) {
        /* Our channel broke while we waited for that one: connect ourselves. */
        set_state(ep, EP_IDLE);
        start_connect(ep);
    }
}
