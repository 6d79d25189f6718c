/* An endpoint: the channel to one peer rank and its state machine.
 *
 *   IDLE --first send--> CONNECTING --qcg connect done--> VERDICT
 *   VERDICT --ACCEPT--> CONNECTED          VERDICT --REFUSE--> WAITPEER
 *   any but CONNECTED/FAILED --incoming connection we accept--> CONNECTED
 *   CONNECTED --peer closed, nothing queued--> IDLE
 *   any --error or deadline--> FAILED (reported once; sends fail)
 *
 * Simultaneous connect: every connection libqcgconn accepts gets a verdict
 * before any frame.  We refuse an incoming connection while we hold a
 * channel, or while our own attempt runs and our rank is the lower one (the
 * lower rank's connection wins); otherwise we accept it and drop our own
 * attempt.  Frames wait in the send queue until CONNECTED and are only ever
 * written on the accepted channel: none is lost, doubled or reordered.
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

static void flush(struct btl_qcg_endpoint *ep);
static void read_frames(struct btl_qcg_endpoint *ep);

static bool state_pending(enum btl_qcg_ep_state s)
{
    return s == EP_CONNECTING || s == EP_VERDICT || s == EP_WAITPEER;
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
    ep->w_op = (struct btl_qcg_watch){WATCH_OP, ep};
    ep->w_sock = (struct btl_qcg_watch){WATCH_SOCK, ep};
    m->eps[vpid] = ep;
    return ep;
}

static void close_sock(struct btl_qcg_endpoint *ep)
{
    if (ep->fd < 0)
        return;
    btl_qcg_watch(ep->module, EPOLL_CTL_DEL, ep->fd, 0, NULL);
    close(ep->fd);
    ep->fd = -1;
    ep->want_out = false;
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
    if (ep->fd >= 0) {
        /* Done sending; the peer reads to the end before it sees EOF. */
        shutdown(ep->fd, SHUT_WR);
        close_sock(ep);
    }
    while (ep->sq_head != NULL) {
        struct btl_qcg_frag *frag = ep->sq_head;

        ep->sq_head = frag->next;
        btl_qcg_frag_release(ep->module, frag);
    }
    if (state_pending(ep->state))
        ep->module->pending--;
    free(ep->rx);
    free(ep);
}

static void enqueue(struct btl_qcg_endpoint *ep, struct btl_qcg_frag *frag)
{
    frag->next = NULL;
    if (ep->sq_tail != NULL && ep->sq_head != NULL)
        ep->sq_tail->next = frag;
    else
        ep->sq_head = frag;
    ep->sq_tail = frag;
}

static struct btl_qcg_frag *dequeue(struct btl_qcg_endpoint *ep)
{
    struct btl_qcg_frag *frag = ep->sq_head;

    if (frag != NULL) {
        ep->sq_head = frag->next;
        if (ep->sq_head == NULL)
            ep->sq_tail = NULL;
        frag->next = NULL;
    }
    return frag;
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

    if (ep->state == EP_FAILED)
        return;
    drop_op(ep);
    close_sock(ep);
    set_state(ep, EP_FAILED);
    if (!ep->error_reported) {
        ep->error_reported = true;
        /* The explained text goes to show_help; the PML's error callback
           (which aborts the job, once our lock is released) prints the
           reason too: mpirun 4.1 loses some help messages that race with
           an abort. */
        btl_qcg_report_failure(ep, what, detail, sys_errno);
        if (m->error_cb != NULL) {
            snprintf(info, sizeof(info), "btl_qcg: rank %u cannot reach rank %u (host %s): %s: %s",
                     m->vpid, ep->vpid, btl_qcg_peer_host(ep), what, detail);
            btl_qcg_defer_error(m, ep->proc, info);
        }
    }
    for (struct btl_qcg_frag *frag; (frag = dequeue(ep)) != NULL;)
        btl_qcg_defer_completion(m, frag, OPAL_ERR_UNREACH);
}

static void fail(struct btl_qcg_endpoint *ep, const char *what, const char *detail)
{
    fail_sys(ep, what, detail, 0);
}

static void fail_qcg(struct btl_qcg_endpoint *ep, const char *what, int rc)
{
    char detail[512];

    snprintf(detail, sizeof(detail), "%s%s%s", qcg_strerror(rc),
             qcg_last_error(ep->module->ctx)[0] ? ": " : "", qcg_last_error(ep->module->ctx));
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

    rc =
        qcg_connect_start(m->ctx, (int)ep->vpid, mca_btl_qcg_component.connect_timeout_ms, &ep->op);
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
    /* The whole timeout from now: a wait for a slot is not the peer's fault. */
    ep->deadline_us = btl_qcg_now_us() + timeout_us() + OP_GRACE_US;
    set_state(ep, EP_CONNECTING);
    if (mca_btl_qcg_component.verbose >= 2)
        btl_qcg_log(2, "connecting to rank %u (host %s)", ep->vpid, btl_qcg_peer_host(ep));
}

static void become_connected(struct btl_qcg_endpoint *ep, int fd, bool initiator)
{
    ep->fd = fd;
    ep->initiator = initiator;
    ep->want_out = ep->sq_head != NULL;
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

/* Frames the queue holds, written in batches until the socket is full. */
static void flush(struct btl_qcg_endpoint *ep)
{
    for (int round = 0; round < IO_ROUNDS && ep->state == EP_CONNECTED; round++) {
        struct iovec iov[IOV_BATCH];
        struct msghdr msg = {.msg_iov = iov};
        size_t n = 0;
        ssize_t w;

        for (struct btl_qcg_frag *f = ep->sq_head; f != NULL && n < IOV_BATCH - 4; f = f->next)
            n += btl_qcg_frag_iov(f, iov + n, IOV_BATCH - n);
        if (n == 0) {
            want_out(ep, false);
            return;
        }
        msg.msg_iovlen = n;
        w = sendmsg(ep->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                want_out(ep, true);
                return;
            }
            fail_errno(ep, "sending", errno);
            return;
        }
        /* Whole frames written leave the queue; their callbacks run once the
           state lock is released (they may send again, to this peer too). */
        while (w > 0 && ep->sq_head != NULL) {
            struct btl_qcg_frag *f = ep->sq_head;
            size_t left = f->total - f->sent;

            if ((size_t)w < left) {
                f->sent += (size_t)w;
                break;
            }
            w -= (ssize_t)left;
            f->sent = f->total;
            dequeue(ep);
            btl_qcg_defer_completion(ep->module, f, OPAL_SUCCESS);
        }
    }
    if (ep->state == EP_CONNECTED)
        want_out(ep, ep->sq_head != NULL);
}

static int send_locked(struct btl_qcg_endpoint *ep, struct btl_qcg_frag *frag)
{
    switch (ep->state) {
    case EP_FAILED:
        return OPAL_ERR_UNREACH;
    case EP_CONNECTED:
        if (ep->sq_head == NULL) {
            struct iovec iov[4];
            struct msghdr msg = {.msg_iov = iov};
            ssize_t w;

            msg.msg_iovlen = btl_qcg_frag_iov(frag, iov, 4);
            do
                w = sendmsg(ep->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
            while (w < 0 && errno == EINTR);
            if (w == (ssize_t)frag->total) {
                /* Done inline: the PML completes it unless it asked for the
                   callback anyway. */
                if (frag->base.des_flags & MCA_BTL_DES_SEND_ALWAYS_CALLBACK)
                    btl_qcg_defer_completion(ep->module, frag, OPAL_SUCCESS);
                else if (frag->base.des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP)
                    btl_qcg_frag_release(ep->module, frag);
                return 1;
            }
            if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                fail_errno(ep, "sending", errno);
                return OPAL_ERR_UNREACH;
            }
            frag->sent = w > 0 ? (size_t)w : 0;
            enqueue(ep, frag);
            want_out(ep, true);
            return OPAL_SUCCESS;
        }
        enqueue(ep, frag);
        return OPAL_SUCCESS;
    case EP_IDLE:
        enqueue(ep, frag);
        start_connect(ep);
        return OPAL_SUCCESS;
    default:
        enqueue(ep, frag);
        return OPAL_SUCCESS;
    }
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
        close(fd);
        fail_errno(ep, "connect: socket options", errno);
        return;
    }
    ep->info = info;
    ep->fd = fd;
    ep->verdict_got = 0;
    ep->want_out = false;
    if (watch_sock(ep, EPOLL_CTL_ADD) < 0) {
        close(fd);
        ep->fd = -1;
        fail_errno(ep, "cannot watch the connection", errno);
        return;
    }
    ep->deadline_us = btl_qcg_now_us() + timeout_us();
    set_state(ep, EP_VERDICT);
    btl_qcg_log(2, "connected to rank %u by %s in %.1f ms, waiting for its verdict", ep->vpid,
                qcg_technique_name(info.technique), info.setup_us / 1000.0);
}

static void verdict_ready(struct btl_qcg_endpoint *ep)
{
    const unsigned char *v = ep->verdict;
    char detail[160];

    while (ep->verdict_got < BTL_QCG_VERDICT_SIZE) {
        ssize_t n = recv(ep->fd, ep->verdict + ep->verdict_got,
                         BTL_QCG_VERDICT_SIZE - ep->verdict_got, MSG_DONTWAIT);

        if (n > 0) {
            ep->verdict_got += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        fail(ep, "connection setup",
             n == 0 ? "the peer closed the connection before answering" : strerror(errno));
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
        ep->deadline_us = btl_qcg_now_us() + timeout_us();
        set_state(ep, EP_WAITPEER);
        btl_qcg_log(2, "rank %u refused our connection (simultaneous connect): waiting for its own",
                    ep->vpid);
        return;
    }
    become_connected(ep, ep->fd, true);
    if (ep->state == EP_CONNECTED)
        read_frames(ep);
}

/* Hands the complete frames in rx to the PML; keeps the partial one.
   Called with the state lock held; releases it while the PML's callbacks
   run.  rx stays put meanwhile: only the thread running progress (this
   one) reads sockets into rx or moves it. */
static bool deliver(struct btl_qcg_endpoint *ep)
{
    struct btl_qcg_module *m = ep->module;
    char detail[96] = "";

    if (ep->rx_len - ep->rx_off < BTL_QCG_HDR_SIZE)
        return true;
    btl_qcg_unlock(m);
    while (ep->rx_len - ep->rx_off >= BTL_QCG_HDR_SIZE) {
        struct btl_qcg_hdr hdr;
        mca_btl_active_message_callback_t *reg;
        mca_btl_base_segment_t seg;
        mca_btl_base_descriptor_t desc;
        size_t len, frame;

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
        reg = &mca_btl_base_active_message_trigger[hdr.tag];
        if (reg->cbfunc == NULL) {
            snprintf(detail, sizeof(detail), "a frame with tag %u, which nobody registered",
                     hdr.tag);
            break;
        }
        memset(&desc, 0, sizeof(desc));
        seg.seg_addr.pval = ep->rx + ep->rx_off + BTL_QCG_HDR_SIZE;
        seg.seg_len = len;
        desc.des_segments = &seg;
        desc.des_segment_count = 1;
        ep->rx_off += frame;
        reg->cbfunc(&m->super, hdr.tag, &desc, reg->cbdata);
    }
    btl_qcg_lock(m);
    if (detail[0] != '\0')
        fail(ep, "protocol error", detail);
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
    for (int round = 0; round < IO_ROUNDS && ep->state == EP_CONNECTED; round++) {
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
        n = recv(ep->fd, ep->rx + ep->rx_len, want, MSG_DONTWAIT);
        if (n > 0) {
            ep->rx_len += (size_t)n;
            if (!deliver(ep))
                return;
            if ((size_t)n < want)
                return;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n == 0 && ep->sq_head == NULL && ep->rx_off == ep->rx_len) {
            /* The peer is done (MPI_Finalize): a later send reconnects. */
            btl_qcg_log(2, "rank %u closed the connection", ep->vpid);
            close_sock(ep);
            set_state(ep, EP_IDLE);
            return;
        }
        if (n == 0)
            fail(ep, "connection lost",
                 ep->sq_head != NULL ? "the peer closed it with our messages pending"
                                     : "the peer closed it in the middle of a message");
        else
            fail_errno(ep, "connection lost", errno);
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
    int ms = mca_btl_qcg_component.connect_timeout_ms;

    switch (ep->state) {
    case EP_CONNECTING:
        /* libqcgconn times out by itself; ask it, and stop waiting for it
           a little after. */
        op_ready(ep);
        if (ep->state == EP_CONNECTING && now >= ep->deadline_us) {
            snprintf(detail, sizeof(detail), "no result from libqcgconn within %d ms", ms);
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

/* Whether we take an incoming connection from ep's peer (see the top). */
static bool accept_incoming(const struct btl_qcg_endpoint *ep)
{
    switch (ep->state) {
    case EP_CONNECTED:
    case EP_FAILED:
        return false;
    case EP_CONNECTING:
    case EP_VERDICT:
        return ep->vpid < ep->module->vpid;
    default:
        return true;
    }
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
        close(fd);
        return;
    }
    take = accept_incoming(ep);
    v[5] = take ? BTL_QCG_ACCEPT : BTL_QCG_REFUSE;
    /* 8 bytes into a fresh socket's empty buffer: all or nothing. */
    n = send(fd, v, sizeof(v), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n != (ssize_t)sizeof(v)) {
        btl_qcg_log(2, "incoming connection from rank %u lost while answering: %s", ep->vpid,
                    n < 0 ? strerror(errno) : "short write");
        close(fd);
        return;
    }
    if (!take) {
        btl_qcg_log(2, "refused a connection from rank %u (%s)", ep->vpid,
                    ep->state == EP_CONNECTED ? "already connected"
                    : ep->state == EP_FAILED  ? "failed before"
                                              : "simultaneous connect: ours wins");
        close(fd);
        return;
    }
    /* Ours loses, if there was one: the peer refuses it or already did. */
    drop_op(ep);
    close_sock(ep);
    ep->info = *info;
    if (ep->t_start_us == 0)
        ep->t_start_us = btl_qcg_now_us() - info->setup_us;
    become_connected(ep, fd, false);
    if (ep->state == EP_CONNECTED)
        read_frames(ep);
}
