/* A launch connection as frames over libuv (link.h). */
#include "link.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "monotonic.h"
#include "resendq.h"

/* How long a closing link may take to send what is queued: a peer that
   stopped reading must not keep the loop (and the agent) alive. */
#define LINK_CLOSE_MS 5000
/* How often a paused link looks whether its peer is gone. */
#define LINK_WATCH_MS 1000
/* Bytes received without an ACK sent above which one goes at once (the
   sender pauses at LINK_HIGH_WATER unacknowledged). */
#define LINK_ACK_BYTES (LINK_HIGH_WATER / 4)

/* One TCP connection carrying a link, plain or through its qcg_tls
   session; the link gets a new one after a break, the old one is closed on
   its own.  A uv_poll_t on the socket, not a uv_tcp_t: an encrypted
   connection's bytes must go through qcg_tls, so both kinds read and write
   through conn_send/conn_recv below, one code path. */
struct conn {
    uv_poll_t poll;
    int fd;
    qcg_tls *tls;      /* NULL: plain */
    struct link *link; /* NULL once dropped */
    uint8_t *buf;      /* one frame being read: header + up to WIRE_FRAME_MAX */
    size_t have;
    uint8_t *out; /* bytes queued for the socket: out[off..len) */
    size_t off, len, cap;
    int shutting; /* link_close: send what is queued, then end */
    int draining; /* our FIN is sent: read and drop until the peer's (closing with
                     unread bytes resets the connection, losing what we sent last) */
};

struct link {
    uv_loop_t *loop;
    struct conn *conn; /* NULL while broken */
    uv_timer_t close_timer;
    uv_timer_t watch; /* while paused: has the peer gone? */
    uv_timer_t beat;  /* our ACK, and the stall check */
    uv_timer_t kick;  /* read what the session holds, which poll does not see */
    int timers_open;
    const struct link_ops *ops;
    void *data;
    int closing;
    int released;
    int paused;
    int congested;
    int resumable; /* both ends know the token */
    int resuming;  /* RESUME sent, RESUMED not yet in */
    uint8_t token[WIRE_TOKEN_LEN];
    struct resendq sent; /* our numbered frames not yet acknowledged */
    uint64_t rx;         /* numbered frames received */
    size_t rx_unacked;   /* bytes of them since our last ACK */
    uint64_t last_rx_ms;
};

struct sent_frame {
    struct resendq_item it;
    size_t len;
    uint8_t bytes[];
};

static void on_poll(uv_poll_t *p, int status, int events);
static void on_kick(uv_timer_t *t);

static void on_timer_closed(uv_handle_t *h)
{
    struct link *l = h->data;

    if (--l->timers_open > 0)
        return;
    resendq_clear(&l->sent);
    free(l);
}

/* The link's last connection is closed: its timers go, then the struct. */
static void release(struct link *l)
{
    if (l->released)
        return;
    l->released = 1;
    uv_close((uv_handle_t *)&l->close_timer, on_timer_closed);
    uv_close((uv_handle_t *)&l->watch, on_timer_closed);
    uv_close((uv_handle_t *)&l->beat, on_timer_closed);
    uv_close((uv_handle_t *)&l->kick, on_timer_closed);
}

static void on_conn_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    struct link *l = c->link;

    /* The session first (libqcgconn: before the socket is closed). */
    qcg_tls_free(c->tls);
    close(c->fd);
    free(c->out);
    free(c->buf);
    free(c);
    if (l != NULL)
        release(l);
}

static void conn_close(struct conn *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->poll))
        uv_close((uv_handle_t *)&c->poll, on_conn_closed);
}

/* Closes a connection the link no longer uses (a break, or a new one took
   over): what it had queued is dropped, the link goes on without it. */
static void conn_drop(struct conn *c)
{
    c->link = NULL;
    conn_close(c);
}

/* --- bytes through the socket or its session ------------------------------ */

static long conn_send(struct conn *c, const uint8_t *p, size_t n)
{
    return qcg_conn_send(c->fd, c->tls, p, n);
}

static long conn_recv(struct conn *c, uint8_t *p, size_t n)
{
    return qcg_conn_recv(c->fd, c->tls, p, n);
}

/* Why the last conn_send/conn_recv failed (errno set by it). */
static void conn_why(const struct conn *c, char *why, size_t len)
{
    snprintf(why, len, "connection lost: %s", qcg_conn_strerror(c->tls, errno));
}

/* Sends what is queued: 0 when all is out, 1 when the socket is full, -1
   with errno. */
static int conn_flush(struct conn *c)
{
    while (c->off < c->len) {
        long n = conn_send(c, c->out + c->off, c->len - c->off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
        c->off += (size_t)n;
    }
    c->off = c->len = 0;
    if (qcg_tls_unsent(c->tls) > 0 && qcg_tls_flush(c->tls) < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
    return 0;
}

/* Queues a copy of bytes: 0, or -1 out of memory. */
static int conn_queue(struct conn *c, const uint8_t *bytes, size_t len)
{
    if (c->off > 0 && c->len + len > c->cap) {
        memmove(c->out, c->out + c->off, c->len - c->off);
        c->len -= c->off;
        c->off = 0;
    }
    if (c->len + len > c->cap) {
        size_t cap = c->cap > 0 ? c->cap : 4096;
        uint8_t *b;
        while (cap < c->len + len)
            cap *= 2;
        if ((b = realloc(c->out, cap)) == NULL)
            return -1;
        c->out = b;
        c->cap = cap;
    }
    memcpy(c->out + c->len, bytes, len);
    c->len += len;
    return 0;
}

/* Polls for what the connection waits for: reading unless paused or
   closing, writing while something is queued (always while closing, which
   ends in the write handler). */
static void conn_update(struct conn *c)
{
    struct link *l = c->link;
    int ev = 0;

    if (uv_is_closing((uv_handle_t *)&c->poll))
        return;
    if (c->draining)
        ev = UV_READABLE;
    else {
        if (l != NULL && !l->closing && !l->paused)
            ev |= UV_READABLE;
        if (c->shutting || c->off < c->len || qcg_tls_unsent(c->tls) > 0)
            ev |= UV_WRITABLE;
    }
    if (ev == 0)
        uv_poll_stop(&c->poll);
    else if (uv_poll_start(&c->poll, ev, on_poll) < 0)
        conn_close(c);
}

static struct conn *conn_new(struct link *l, int fd, qcg_tls *tls)
{
    struct conn *c = calloc(1, sizeof(*c));
    int on = 1, idle = 60, fl = fcntl(fd, F_GETFL);

    if (c == NULL || (c->buf = malloc(WIRE_HEADER + WIRE_FRAME_MAX)) == NULL) {
        free(c);
        qcg_tls_free(tls);
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    /* Keepalive: a peer whose host is gone (within one cluster, where
       libqcgconn leaves it off) is noticed even while the link is paused. */
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
        uv_poll_init(l->loop, &c->poll, fd) < 0) {
        int e = errno;
        free(c->buf);
        free(c);
        qcg_tls_free(tls);
        close(fd);
        errno = e != 0 ? e : EINVAL;
        return NULL;
    }
    c->fd = fd;
    c->tls = tls;
    c->link = l;
    c->poll.data = c;
    conn_update(c);
    return c;
}

static void shut(struct link *l, const char *why)
{
    if (l->closing)
        return;
    l->closing = 1;
    uv_timer_stop(&l->beat);
    if (l->conn != NULL)
        conn_close(l->conn);
    else
        release(l);
    if (why != NULL && l->ops->closed != NULL)
        l->ops->closed(l, why);
}

/* The connection is gone: a resumable link waits for a new one, any other
   ends. */
static void broken(struct link *l, const char *why)
{
    if (l->closing || l->conn == NULL)
        return;
    if (!l->resumable || l->ops->broken == NULL) {
        shut(l, why);
        return;
    }
    conn_drop(l->conn);
    l->conn = NULL;
    l->resuming = 0;
    uv_timer_stop(&l->watch);
    l->ops->broken(l, why);
}

/* Queues bytes (a copy) on the link's connection; the poll handler sends
   them, so that a failure is seen there, not within the caller's call. */
static void conn_write(struct link *l, const uint8_t *bytes, size_t len)
{
    if (conn_queue(l->conn, bytes, len) < 0) {
        shut(l, "out of memory");
        return;
    }
    conn_update(l->conn);
}

/* An unnumbered frame (ACK, RESUME, RESUMED): only on a live connection. */
static void control_send(struct link *l, enum wire_type type, const uint8_t *data, size_t len)
{
    uint8_t b[WIRE_HEADER + WIRE_TOKEN_LEN + 8];

    if (l->closing || l->conn == NULL || len > sizeof(b) - WIRE_HEADER)
        return;
    wire_header_put(b, type, 0, (uint32_t)len);
    memcpy(b + WIRE_HEADER, data, len);
    conn_write(l, b, WIRE_HEADER + len);
}

static void ack_send(struct link *l)
{
    uint8_t b[8];

    wire_u64_put(b, l->rx);
    l->rx_unacked = 0;
    control_send(l, WIRE_ACK, b, sizeof(b));
}

static void drained_check(struct link *l)
{
    if (l->congested && !link_congested(l)) {
        l->congested = 0;
        if (l->ops->drained != NULL)
            l->ops->drained(l);
    }
}

/* Everything not yet acknowledged, again, in order: its count. */
static unsigned long resend_all(struct link *l)
{
    unsigned long n = 0;

    for (struct resendq_item *it = resendq_first(&l->sent); it != NULL && l->conn != NULL;
         it = it->next, n++) {
        struct sent_frame *f = (struct sent_frame *)it;
        conn_write(l, f->bytes, f->len);
    }
    return n;
}

static void release_frame(struct resendq_item *it, void *arg)
{
    (void)arg;
    free(it);
}

/* The peer has `count` of our frames (ACK, RESUME, RESUMED): -1 if it
   cannot have. */
static int acked(struct link *l, uint64_t count)
{
    if (resendq_ack(&l->sent, count) < 0)
        return -1;
    drained_check(l);
    return 0;
}

static void protocol_error(struct link *l, const struct wire_header *h)
{
    char why[128];

    snprintf(why, sizeof(why), "unexpected %s frame (%u bytes) on the launch connection",
             wire_type_name(h->type), h->len);
    shut(l, why);
}

static void deliver(struct link *l, struct conn *c, const struct wire_header *h,
                    const uint8_t *payload)
{
    unsigned long n;

    switch (h->type) {
    case WIRE_ACK:
        /* Waiting for RESUMED, an ACK is the agent's new connection's own
           heartbeat (it counts nothing of ours yet): not for this session. */
        if (h->len != 8 || (!l->resuming && acked(l, wire_u64_get(payload)) < 0))
            protocol_error(l, h);
        return;
    case WIRE_RESUMED:
        if (!l->resuming || h->len != 8 || acked(l, wire_u64_get(payload)) < 0) {
            protocol_error(l, h);
            return;
        }
        l->resuming = 0;
        n = resend_all(l);
        if (l->ops->resumed != NULL)
            l->ops->resumed(l, n);
        return;
    case WIRE_RESUME:
        /* For the owner (the agent's session), which adopts or refuses. */
        l->ops->frame(l, h, payload);
        return;
    default:
        break;
    }
    /* Waiting for RESUMED, only a refusal may come instead. */
    if (l->resuming && h->type != WIRE_REFUSED) {
        protocol_error(l, h);
        return;
    }
    l->rx++;
    l->rx_unacked += WIRE_HEADER + h->len;
    l->ops->frame(l, h, payload);
    if (!l->closing && l->conn == c && l->rx_unacked >= LINK_ACK_BYTES)
        ack_send(l);
}

/* Reads frames while the socket or the session has bytes, one frame at a
   time so that a pause stops at a frame boundary, and a bounded number per
   call so that one busy link does not starve the loop. */
static void conn_read(struct conn *c)
{
    struct wire_header hdr;

    for (int i = 0; i < 64; i++) {
        struct link *l = c->link;
        size_t want = WIRE_HEADER;
        long n;

        /* A frame may have ended the link, paused it, or handed the
           connection to another link (link_adopt): read on for that one. */
        if (l == NULL || l->closing || l->paused || l->conn != c ||
            uv_is_closing((uv_handle_t *)&c->poll))
            return;
        if (c->have >= WIRE_HEADER && wire_header_get(c->buf, &hdr) == 0)
            want = WIRE_HEADER + hdr.len;
        n = conn_recv(c, c->buf + c->have, want - c->have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n == 0) {
            broken(l, "the other side closed the connection");
            return;
        }
        if (n < 0) {
            char why[160];
            conn_why(c, why, sizeof(why));
            broken(l, why);
            return;
        }
        l->last_rx_ms = monotonic_ms();
        c->have += (size_t)n;
        if (c->have < WIRE_HEADER)
            continue;
        if (wire_header_get(c->buf, &hdr) < 0) {
            char why[128];
            snprintf(why, sizeof(why), "not a launch frame (type %u, length %u)", c->buf[0],
                     wire_u32_get(c->buf + 4));
            shut(l, why);
            return;
        }
        if (c->have < WIRE_HEADER + hdr.len)
            continue;
        c->have = 0;
        deliver(l, c, &hdr, c->buf + WIRE_HEADER);
    }
    /* Stopped by the bound: come back soon even when poll sees nothing new
       (the session may hold it all). */
    if (c->link != NULL && c->link->conn == c)
        uv_timer_start(&c->link->kick, on_kick, 0, 0);
}

/* A closing connection: what is queued, our close_notify, then our FIN.
   qcg_tls_shutdown is called until it says the close_notify is out; it
   waits for the writable socket while the session holds bytes, else for
   the peer's Finished (a reversed connection closed within its first
   round trip), which makes the socket readable. */
static void conn_finish(struct conn *c)
{
    int rc = conn_flush(c);

    if (rc == 0 && c->tls != NULL && qcg_tls_shutdown(c->tls) < 0)
        rc = errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
    if (rc == 1) {
        int ev = c->off < c->len || qcg_tls_unsent(c->tls) > 0 ? UV_WRITABLE : UV_READABLE;

        if (uv_poll_start(&c->poll, ev, on_poll) < 0)
            conn_close(c);
        return;
    }
    if (rc == 0 && shutdown(c->fd, SHUT_WR) == 0) {
        /* The peer's heartbeats may still come: close only at its FIN (or
           the link's close timer), or the EXIT just sent may be lost. */
        c->draining = 1;
        conn_update(c);
        return;
    }
    conn_close(c);
}

/* Reads and drops what comes after our FIN; closes at the peer's. */
static void conn_drain(struct conn *c)
{
    uint8_t sink[4096];

    for (int i = 0; i < 64; i++) {
        ssize_t n = recv(c->fd, sink, sizeof(sink), 0);
        if (n > 0 || (n < 0 && errno == EINTR))
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        conn_close(c); /* the peer's FIN, or an error */
        return;
    }
    /* Still coming: the next poll goes on (the close timer bounds it). */
}

static void on_poll(uv_poll_t *p, int status, int events)
{
    struct conn *c = p->data;
    struct link *l = c->link;
    char why[160];

    if (uv_is_closing((uv_handle_t *)p))
        return;
    if (c->draining) {
        conn_drain(c);
        return;
    }
    if (c->shutting) {
        conn_finish(c);
        return;
    }
    if (l == NULL || l->closing || l->conn != c)
        return;
    if (status < 0) {
        snprintf(why, sizeof(why), "connection lost: %s", uv_strerror(status));
        broken(l, why);
        return;
    }
    if ((events & UV_WRITABLE) && conn_flush(c) < 0) {
        conn_why(c, why, sizeof(why));
        broken(l, why);
        return;
    }
    if (events & UV_READABLE)
        conn_read(c);
    conn_update(c);
}

/* The kick: frames the session holds (read ahead, or left by a pause or
   conn_read's bound) that poll cannot see. */
static void on_kick(uv_timer_t *t)
{
    struct link *l = t->data;
    struct conn *c = l->conn;

    if (l->closing || c == NULL)
        return;
    conn_read(c);
    conn_update(c);
}

/* Every LINK_BEAT_MS: our ACK (the peer's heartbeat), and has the peer's
   stopped?  A paused link reads nothing, so it does not judge. */
static void on_beat(uv_timer_t *t)
{
    struct link *l = t->data;
    uint64_t now = monotonic_ms();

    if (l->closing || l->conn == NULL)
        return;
    if (!l->paused && now - l->last_rx_ms > LINK_STALL_MS) {
        char why[128];
        snprintf(why, sizeof(why), "nothing from the other side for %d s",
                 (int)((now - l->last_rx_ms) / 1000));
        broken(l, why);
        return;
    }
    if (!l->resuming)
        ack_send(l);
}

struct link *link_new(uv_loop_t *loop, int fd, qcg_tls *tls, const struct link_ops *ops, void *data)
{
    struct link *l = calloc(1, sizeof(*l));

    if (l == NULL) {
        qcg_tls_free(tls);
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    l->loop = loop;
    l->ops = ops;
    l->data = data;
    resendq_init(&l->sent, release_frame, NULL);
    l->conn = conn_new(l, fd, tls);
    if (l->conn == NULL) {
        int e = errno;
        free(l);
        errno = e;
        return NULL;
    }
    uv_timer_init(loop, &l->close_timer);
    uv_timer_init(loop, &l->watch);
    uv_timer_init(loop, &l->beat);
    uv_timer_init(loop, &l->kick);
    l->timers_open = 4;
    l->close_timer.data = l->watch.data = l->beat.data = l->kick.data = l;
    l->last_rx_ms = monotonic_ms();
    uv_timer_start(&l->beat, on_beat, LINK_BEAT_MS, LINK_BEAT_MS);
    return l;
}

void *link_data(const struct link *l)
{
    return l->data;
}

int link_send(struct link *l, enum wire_type type, uint16_t chan, const void *data, size_t len)
{
    struct sent_frame *f;

    if (l->closing || len > WIRE_FRAME_MAX || !wire_sequenced(type))
        return -1;
    if (l->sent.bytes > LINK_RESEND_MAX) {
        shut(l, "more than the resend buffer waits for the other side");
        return -1;
    }
    f = malloc(sizeof(*f) + WIRE_HEADER + len);
    if (f == NULL) {
        shut(l, "out of memory");
        return -1;
    }
    f->len = WIRE_HEADER + len;
    wire_header_put(f->bytes, type, chan, (uint32_t)len);
    if (len > 0)
        memcpy(f->bytes + WIRE_HEADER, data, len);
    resendq_push(&l->sent, &f->it, sizeof(*f) + f->len);
    if (l->conn != NULL && !l->resuming)
        conn_write(l, f->bytes, f->len);
    if (link_congested(l))
        l->congested = 1;
    return 0;
}

int link_congested(const struct link *l)
{
    return l->sent.bytes > LINK_HIGH_WATER;
}

int link_connected(const struct link *l)
{
    return !l->closing && l->conn != NULL && !l->resuming;
}

/* A paused link reads nothing, so it would not see the peer's FIN or a
   connection that keepalive or a reset ended: the socket's TCP state says. */
static void on_watch(uv_timer_t *t)
{
    struct link *l = t->data;
    struct tcp_info ti;
    socklen_t len = sizeof(ti);

    if (l->closing || l->conn == NULL ||
        getsockopt(l->conn->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
        return;
    if (ti.tcpi_state == TCP_CLOSE_WAIT || ti.tcpi_state == TCP_CLOSE)
        broken(l, "the other side closed the connection (seen while paused)");
}

void link_pause(struct link *l)
{
    if (!l->closing && !l->paused) {
        l->paused = 1;
        if (l->conn != NULL)
            conn_update(l->conn);
        uv_timer_start(&l->watch, on_watch, LINK_WATCH_MS, LINK_WATCH_MS);
    }
}

void link_resume(struct link *l)
{
    if (!l->closing && l->paused) {
        l->paused = 0;
        uv_timer_stop(&l->watch);
        l->last_rx_ms = monotonic_ms();
        if (l->conn != NULL) {
            conn_update(l->conn);
            /* What the session read ahead before the pause. */
            uv_timer_start(&l->kick, on_kick, 0, 0);
        }
    }
}

void link_set_session(struct link *l, const uint8_t token[WIRE_TOKEN_LEN])
{
    memcpy(l->token, token, WIRE_TOKEN_LEN);
    l->resumable = 1;
}

int link_has_token(const struct link *l, const uint8_t token[WIRE_TOKEN_LEN])
{
    return l->resumable && !l->closing && CRYPTO_memcmp(l->token, token, WIRE_TOKEN_LEN) == 0;
}

int link_attach(struct link *l, int fd, qcg_tls *tls)
{
    uint8_t b[WIRE_TOKEN_LEN + 8];

    if (l->closing || !l->resumable) {
        qcg_tls_free(tls);
        close(fd);
        return -1;
    }
    if (l->conn != NULL)
        conn_drop(l->conn);
    l->conn = conn_new(l, fd, tls);
    if (l->conn == NULL)
        return -1;
    l->resuming = 1;
    l->last_rx_ms = monotonic_ms();
    memcpy(b, l->token, WIRE_TOKEN_LEN);
    wire_u64_put(b + WIRE_TOKEN_LEN, l->rx);
    control_send(l, WIRE_RESUME, b, sizeof(b));
    return 0;
}

int link_adopt(struct link *l, struct link *from, uint64_t peer_rx)
{
    struct conn *c = from->conn;
    uint8_t b[8];

    if (l->closing || !l->resumable || c == NULL || from->closing)
        return -1;
    if (peer_rx < l->sent.acked || peer_rx > l->sent.sent)
        return -1;
    from->conn = NULL;
    if (l->conn != NULL)
        conn_drop(l->conn); /* the old path, which may not know yet that it is dead */
    c->link = l;
    l->conn = c;
    l->resuming = 0;
    l->last_rx_ms = monotonic_ms();
    conn_update(c);
    if (l->paused)
        uv_timer_start(&l->watch, on_watch, LINK_WATCH_MS, LINK_WATCH_MS);
    wire_u64_put(b, l->rx);
    control_send(l, WIRE_RESUMED, b, sizeof(b));
    acked(l, peer_rx);
    resend_all(l);
    return 0;
}

static void on_close_timeout(uv_timer_t *t)
{
    struct link *l = t->data;

    if (l->conn != NULL)
        conn_close(l->conn);
}

void link_close(struct link *l)
{
    struct conn *c = l->conn;

    if (l->closing)
        return;
    l->closing = 1;
    uv_timer_stop(&l->beat);
    uv_timer_stop(&l->watch);
    uv_timer_stop(&l->kick);
    if (c == NULL) {
        release(l);
        return;
    }
    /* The poll handler sends what is queued, then ends our direction. */
    c->shutting = 1;
    conn_update(c);
    uv_timer_start(&l->close_timer, on_close_timeout, LINK_CLOSE_MS, 0);
}
