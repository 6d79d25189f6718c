/* A launch connection as frames over libuv (link.h). */
#include "link.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How long a closing link may take to send what is queued: a peer that
   stopped reading must not keep the loop (and the agent) alive. */
#define LINK_CLOSE_MS 5000
/* How often a paused link looks whether its peer is gone. */
#define LINK_WATCH_MS 1000

struct link {
    uv_tcp_t tcp;
    uv_timer_t close_timer;
    uv_timer_t watch; /* while paused: has the peer gone? */
    int timers_open;
    const struct link_ops *ops;
    void *data;
    uint8_t *buf; /* one frame being read: header + up to WIRE_FRAME_MAX */
    size_t have;
    int closing;
    int paused;
    int congested;
};

struct link_write {
    uv_write_t req;
    struct link *link;
    uint8_t bytes[];
};

static void on_timer_closed(uv_handle_t *h)
{
    struct link *l = h->data;

    if (--l->timers_open > 0)
        return;
    free(l->buf);
    free(l);
}

static void on_close(uv_handle_t *h)
{
    struct link *l = h->data;

    uv_close((uv_handle_t *)&l->close_timer, on_timer_closed);
    uv_close((uv_handle_t *)&l->watch, on_timer_closed);
}

static void shut(struct link *l, const char *why)
{
    if (l->closing)
        return;
    l->closing = 1;
    uv_close((uv_handle_t *)&l->tcp, on_close);
    if (why != NULL && l->ops->closed != NULL)
        l->ops->closed(l, why);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct link *l = h->data;
    struct wire_header hdr;
    size_t want = WIRE_HEADER;

    (void)hint;
    /* Read no further than the end of the frame in hand: one frame at a
       time, so that a pause stops at a frame boundary. */
    if (l->have >= WIRE_HEADER && wire_header_get(l->buf, &hdr) == 0)
        want = WIRE_HEADER + hdr.len;
    *b = uv_buf_init((char *)l->buf + l->have, (unsigned)(want - l->have));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct link *l = s->data;
    struct wire_header hdr;

    (void)b;
    if (n == UV_EOF) {
        shut(l, "the other side closed the connection");
        return;
    }
    if (n < 0) {
        char why[128];
        snprintf(why, sizeof(why), "connection lost: %s", uv_strerror((int)n));
        shut(l, why);
        return;
    }
    l->have += (size_t)n;
    if (l->have < WIRE_HEADER)
        return;
    if (wire_header_get(l->buf, &hdr) < 0) {
        char why[128];
        snprintf(why, sizeof(why), "not a launch frame (type %u, length %u)", l->buf[0],
                 wire_u32_get(l->buf + 4));
        shut(l, why);
        return;
    }
    if (l->have < WIRE_HEADER + hdr.len)
        return;
    l->have = 0;
    l->ops->frame(l, &hdr, l->buf + WIRE_HEADER);
}

struct link *link_new(uv_loop_t *loop, int fd, const struct link_ops *ops, void *data)
{
    struct link *l = calloc(1, sizeof(*l));
    int rc;

    if (l == NULL || (l->buf = malloc(WIRE_HEADER + WIRE_FRAME_MAX)) == NULL) {
        free(l);
        errno = ENOMEM;
        return NULL;
    }
    l->ops = ops;
    l->data = data;
    uv_tcp_init(loop, &l->tcp);
    uv_timer_init(loop, &l->close_timer);
    uv_timer_init(loop, &l->watch);
    l->timers_open = 2;
    l->tcp.data = l->close_timer.data = l->watch.data = l;
    if ((rc = uv_tcp_open(&l->tcp, fd)) < 0)
        close(fd); /* not the handle's yet */
    /* Keepalive: a peer whose host is gone (within one cluster, where
       libqcgconn leaves it off) must end the launch too. */
    if (rc == 0)
        uv_tcp_keepalive(&l->tcp, 1, 60);
    if (rc < 0 || (rc = uv_read_start((uv_stream_t *)&l->tcp, on_alloc, on_read)) < 0) {
        l->closing = 1;
        uv_close((uv_handle_t *)&l->tcp, on_close);
        errno = -rc;
        return NULL;
    }
    return l;
}

void *link_data(const struct link *l)
{
    return l->data;
}

static void on_written(uv_write_t *req, int status)
{
    struct link_write *w = (struct link_write *)req;
    struct link *l = w->link;

    free(w);
    if (l->closing)
        return;
    if (status < 0) {
        char why[128];
        snprintf(why, sizeof(why), "connection lost: %s", uv_strerror(status));
        shut(l, why);
        return;
    }
    if (l->congested && !link_congested(l)) {
        l->congested = 0;
        if (l->ops->drained != NULL)
            l->ops->drained(l);
    }
}

int link_send(struct link *l, enum wire_type type, uint16_t chan, const void *data, size_t len)
{
    struct link_write *w;
    uv_buf_t b;
    int rc;

    if (l->closing || len > WIRE_FRAME_MAX)
        return -1;
    w = malloc(sizeof(*w) + WIRE_HEADER + len);
    if (w == NULL) {
        shut(l, "out of memory");
        return -1;
    }
    w->link = l;
    wire_header_put(w->bytes, type, chan, (uint32_t)len);
    if (len > 0)
        memcpy(w->bytes + WIRE_HEADER, data, len);
    b = uv_buf_init((char *)w->bytes, (unsigned)(WIRE_HEADER + len));
    rc = uv_write(&w->req, (uv_stream_t *)&l->tcp, &b, 1, on_written);
    if (rc < 0) {
        char why[128];
        free(w);
        snprintf(why, sizeof(why), "connection lost: %s", uv_strerror(rc));
        shut(l, why);
        return -1;
    }
    if (link_congested(l))
        l->congested = 1;
    return 0;
}

int link_congested(const struct link *l)
{
    return uv_stream_get_write_queue_size((const uv_stream_t *)&l->tcp) > LINK_HIGH_WATER;
}

/* A paused link reads nothing, so it would not see the peer's FIN or a
   connection that keepalive or a reset ended: the socket's TCP state says. */
static void on_watch(uv_timer_t *t)
{
    struct link *l = t->data;
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    uv_os_fd_t fd;

    if (l->closing || uv_fileno((uv_handle_t *)&l->tcp, &fd) < 0 ||
        getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
        return;
    if (ti.tcpi_state == TCP_CLOSE_WAIT || ti.tcpi_state == TCP_CLOSE)
        shut(l, "the other side closed the connection (seen while paused)");
}

void link_pause(struct link *l)
{
    if (!l->closing && !l->paused) {
        l->paused = 1;
        uv_read_stop((uv_stream_t *)&l->tcp);
        uv_timer_start(&l->watch, on_watch, LINK_WATCH_MS, LINK_WATCH_MS);
    }
}

void link_resume(struct link *l)
{
    if (!l->closing && l->paused) {
        l->paused = 0;
        uv_timer_stop(&l->watch);
        uv_read_start((uv_stream_t *)&l->tcp, on_alloc, on_read);
    }
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    struct link *l = req->data;

    (void)status;
    free(req);
    if (!uv_is_closing((uv_handle_t *)&l->tcp))
        uv_close((uv_handle_t *)&l->tcp, on_close);
}

static void on_close_timeout(uv_timer_t *t)
{
    struct link *l = t->data;

    /* The shutdown request is cancelled (its callback frees it). */
    if (!uv_is_closing((uv_handle_t *)&l->tcp))
        uv_close((uv_handle_t *)&l->tcp, on_close);
}

void link_close(struct link *l)
{
    uv_shutdown_t *req;

    if (l->closing)
        return;
    l->closing = 1;
    uv_read_stop((uv_stream_t *)&l->tcp);
    req = malloc(sizeof(*req));
    if (req != NULL) {
        req->data = l;
        if (uv_shutdown(req, (uv_stream_t *)&l->tcp, on_shutdown) == 0) {
            uv_timer_start(&l->close_timer, on_close_timeout, LINK_CLOSE_MS, 0);
            return;
        }
        free(req);
    }
    uv_close((uv_handle_t *)&l->tcp, on_close);
}
