/* A launch connection as frames over libuv (link.h). */
#include "link.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* One TCP connection carrying a link; the link gets a new one after a
   break, the old one is closed on its own. */
struct conn {
    uv_tcp_t tcp;
    struct link *link; /* NULL once dropped */
    uint8_t *buf;      /* one frame being read: header + up to WIRE_FRAME_MAX */
    size_t have;
    int shutting;
};

struct link {
    uv_loop_t *loop;
    struct conn *conn; /* NULL while broken */
    uv_timer_t close_timer;
    uv_timer_t watch; /* while paused: has the peer gone? */
    uv_timer_t beat;  /* our ACK, and the stall check */
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

struct conn_write {
    uv_write_t req;
    struct conn *conn;
    uint8_t bytes[];
};

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b);
static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b);

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
}

static void on_conn_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    struct link *l = c->link;

    free(c->buf);
    free(c);
    if (l != NULL)
        release(l);
}

/* Closes a connection the link no longer uses (a break, or a new one took
   over): its pending writes are cancelled, the link goes on without it. */
static void conn_drop(struct conn *c)
{
    c->link = NULL;
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static struct conn *conn_new(struct link *l, int fd)
{
    struct conn *c = calloc(1, sizeof(*c));
    int rc;

    if (c == NULL || (c->buf = malloc(WIRE_HEADER + WIRE_FRAME_MAX)) == NULL) {
        free(c);
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    c->link = l;
    uv_tcp_init(l->loop, &c->tcp);
    c->tcp.data = c;
    if ((rc = uv_tcp_open(&c->tcp, fd)) < 0)
        close(fd); /* not the handle's yet */
    /* Keepalive: a peer whose host is gone (within one cluster, where
       libqcgconn leaves it off) is noticed even while the link is paused. */
    if (rc == 0)
        uv_tcp_keepalive(&c->tcp, 1, 60);
    if (rc == 0 && !l->paused)
        rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (rc < 0) {
        c->link = NULL;
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
        errno = -rc;
        return NULL;
    }
    return c;
}

static void shut(struct link *l, const char *why)
{
    if (l->closing)
        return;
    l->closing = 1;
    uv_timer_stop(&l->beat);
    if (l->conn != NULL)
        uv_close((uv_handle_t *)&l->conn->tcp, on_conn_closed);
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

static void on_written(uv_write_t *req, int status)
{
    struct conn_write *w = (struct conn_write *)req;
    struct conn *c = w->conn;

    free(w);
    if (status < 0 && status != UV_ECANCELED && c->link != NULL && c->link->conn == c &&
        !c->shutting) {
        char why[128];
        snprintf(why, sizeof(why), "connection lost: %s", uv_strerror(status));
        broken(c->link, why);
    }
}

/* Writes bytes (a copy) on the link's connection. */
static void conn_write(struct link *l, const uint8_t *bytes, size_t len)
{
    struct conn_write *w = malloc(sizeof(*w) + len);
    uv_buf_t b;
    int rc;

    if (w == NULL) {
        shut(l, "out of memory");
        return;
    }
    w->conn = l->conn;
    memcpy(w->bytes, bytes, len);
    b = uv_buf_init((char *)w->bytes, (unsigned)len);
    rc = uv_write(&w->req, (uv_stream_t *)&l->conn->tcp, &b, 1, on_written);
    if (rc < 0) {
        char why[128];
        free(w);
        snprintf(why, sizeof(why), "connection lost: %s", uv_strerror(rc));
        broken(l, why);
    }
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

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct conn *c = h->data;
    struct wire_header hdr;
    size_t want = WIRE_HEADER;

    (void)hint;
    /* Read no further than the end of the frame in hand: one frame at a
       time, so that a pause stops at a frame boundary. */
    if (c->have >= WIRE_HEADER && wire_header_get(c->buf, &hdr) == 0)
        want = WIRE_HEADER + hdr.len;
    *b = uv_buf_init((char *)c->buf + c->have, (unsigned)(want - c->have));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct conn *c = s->data;
    struct link *l = c->link;
    struct wire_header hdr;

    (void)b;
    if (l == NULL || l->closing) {
        uv_read_stop(s);
        return;
    }
    if (n == UV_EOF) {
        broken(l, "the other side closed the connection");
        return;
    }
    if (n < 0) {
        char why[128];
        snprintf(why, sizeof(why), "connection lost: %s", uv_strerror((int)n));
        broken(l, why);
        return;
    }
    l->last_rx_ms = monotonic_ms();
    c->have += (size_t)n;
    if (c->have < WIRE_HEADER)
        return;
    if (wire_header_get(c->buf, &hdr) < 0) {
        char why[128];
        snprintf(why, sizeof(why), "not a launch frame (type %u, length %u)", c->buf[0],
                 wire_u32_get(c->buf + 4));
        shut(l, why);
        return;
    }
    if (c->have < WIRE_HEADER + hdr.len)
        return;
    c->have = 0;
    deliver(l, c, &hdr, c->buf + WIRE_HEADER);
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

struct link *link_new(uv_loop_t *loop, int fd, const struct link_ops *ops, void *data)
{
    struct link *l = calloc(1, sizeof(*l));

    if (l == NULL) {
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    l->loop = loop;
    l->ops = ops;
    l->data = data;
    resendq_init(&l->sent, release_frame, NULL);
    l->conn = conn_new(l, fd);
    if (l->conn == NULL) {
        int e = errno;
        free(l);
        errno = e;
        return NULL;
    }
    uv_timer_init(loop, &l->close_timer);
    uv_timer_init(loop, &l->watch);
    uv_timer_init(loop, &l->beat);
    l->timers_open = 3;
    l->close_timer.data = l->watch.data = l->beat.data = l;
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
    uv_os_fd_t fd;

    if (l->closing || l->conn == NULL || uv_fileno((uv_handle_t *)&l->conn->tcp, &fd) < 0 ||
        getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
        return;
    if (ti.tcpi_state == TCP_CLOSE_WAIT || ti.tcpi_state == TCP_CLOSE)
        broken(l, "the other side closed the connection (seen while paused)");
}

void link_pause(struct link *l)
{
    if (!l->closing && !l->paused) {
        l->paused = 1;
        if (l->conn != NULL)
            uv_read_stop((uv_stream_t *)&l->conn->tcp);
        uv_timer_start(&l->watch, on_watch, LINK_WATCH_MS, LINK_WATCH_MS);
    }
}

void link_resume(struct link *l)
{
    if (!l->closing && l->paused) {
        l->paused = 0;
        uv_timer_stop(&l->watch);
        l->last_rx_ms = monotonic_ms();
        if (l->conn != NULL)
            uv_read_start((uv_stream_t *)&l->conn->tcp, on_alloc, on_read);
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

int link_attach(struct link *l, int fd)
{
    uint8_t b[WIRE_TOKEN_LEN + 8];

    if (l->closing || !l->resumable) {
        close(fd);
        return -1;
    }
    if (l->conn != NULL)
        conn_drop(l->conn);
    l->conn = conn_new(l, fd);
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
    if (l->paused) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        uv_timer_start(&l->watch, on_watch, LINK_WATCH_MS, LINK_WATCH_MS);
    }
    wire_u64_put(b, l->rx);
    control_send(l, WIRE_RESUMED, b, sizeof(b));
    acked(l, peer_rx);
    resend_all(l);
    return 0;
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    struct conn *c = req->data;

    (void)status;
    free(req);
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_close_timeout(uv_timer_t *t)
{
    struct link *l = t->data;

    /* The shutdown request is cancelled (its callback frees it). */
    if (l->conn != NULL && !uv_is_closing((uv_handle_t *)&l->conn->tcp))
        uv_close((uv_handle_t *)&l->conn->tcp, on_conn_closed);
}

void link_close(struct link *l)
{
    struct conn *c = l->conn;
    uv_shutdown_t *req;

    if (l->closing)
        return;
    l->closing = 1;
    uv_timer_stop(&l->beat);
    uv_timer_stop(&l->watch);
    if (c == NULL) {
        release(l);
        return;
    }
    c->shutting = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
    req = malloc(sizeof(*req));
    if (req != NULL) {
        req->data = c;
        if (uv_shutdown(req, (uv_stream_t *)&c->tcp, on_shutdown) == 0) {
            uv_timer_start(&l->close_timer, on_close_timeout, LINK_CLOSE_MS, 0);
            return;
        }
        free(req);
    }
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}
