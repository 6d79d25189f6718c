/* Framing on a process's connection: exactly a header, then exactly its
   payload, read only while the connection may take another request; replies
   queued with their request id. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "local_internal.h"
#include "log.h"
#include "qcgconn.h"
#include "shares.h"

struct write_req {
    uv_write_t req;
    struct conn *c;
    int close_after;
    struct local_header hdr;
    union local_payload payload;
};

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* A process that sends requests without reading the replies would make
   libuv queue them without end: while replies wait unsent, its requests wait
   in the kernel (the socket buffers then stop the sender). */
static int backlogged(struct conn *c)
{
    return uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) > 0;
}

/* Reads from c while it may take another request, else lets the requests
   wait in the kernel; called whenever one of the conditions may change. */
void update_reading(struct conn *c)
{
    int want = !c->closing && !c->draining && !c->exclusive && !c->held && !c->penalized &&
               c->inflight < (unsigned)c->srv->cfg->max_requests && !backlogged(c) &&
               !turn_spent(c);

    if (want == c->reading)
        return;
    c->reading = want;
    if (!want) {
        if (c->inflight >= (unsigned)c->srv->cfg->max_requests)
            log_debug("pid %d: %u requests in flight (max-requests): not reading", (int)c->pid,
                      c->inflight);
        uv_read_stop((uv_stream_t *)&c->pipe);
        return;
    }
    int rc = uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
    if (rc < 0) {
        log_warnx("pid %d: cannot read: %s", (int)c->pid, uv_strerror(rc));
        conn_close(c);
    }
}

static void on_written(uv_write_t *req, int status)
{
    struct write_req *w = (struct write_req *)req;
    struct conn *c = w->c;

    if (status < 0 && !c->closing)
        log_debug("pid %d: write failed: %s", (int)c->pid, uv_strerror(status));
    if (status < 0 || w->close_after)
        conn_close(c);
    else
        update_reading(c);
    explicit_bzero(w, sizeof(*w));
    free(w);
    conn_unref(c);
}

void send_msg(struct conn *c, uint16_t type, uint32_t rid, const void *payload, size_t len,
              int close_after)
{
    if (c->closing)
        return;
    struct write_req *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        log_warnx("pid %d: out of memory for a reply; closing", (int)c->pid);
        conn_close(c);
        return;
    }
    w->c = c;
    w->close_after = close_after;
    if (close_after) {
        c->draining = 1;
        update_reading(c);
    }
    w->hdr = (struct local_header){
        .magic = LOCAL_MAGIC, .type = type, .length = (uint32_t)len, .request_id = rid};
    if (len > 0)
        memcpy(&w->payload, payload, len);
    uv_buf_t bufs[2] = {uv_buf_init((char *)&w->hdr, sizeof(w->hdr)),
                        uv_buf_init((char *)&w->payload, (unsigned)len)};
    c->refs++;
    int rc = uv_write(&w->req, (uv_stream_t *)&c->pipe, bufs, len > 0 ? 2 : 1, on_written);
    if (rc < 0) {
        log_warnx("pid %d: cannot queue a reply: %s", (int)c->pid, uv_strerror(rc));
        free(w);
        c->refs--;
        conn_close(c);
    }
}

void error_format(struct local_error *e, int code, const char *fmt, va_list ap)
{
    memset(e, 0, sizeof(*e));
    e->code = code;
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
}

__attribute__((format(printf, 5, 6))) void send_error(struct conn *c, uint32_t rid, int code,
                                                      int close_after, const char *fmt, ...)
{
    struct local_error e;
    va_list ap;

    va_start(ap, fmt);
    error_format(&e, code, fmt, ap);
    va_end(ap);
    send_msg(c, LOCAL_ERROR, rid, &e, sizeof(e), close_after);
}

/* A protocol violation: say why, log it, close. */
__attribute__((format(printf, 3, 4))) void proto_fail(struct conn *c, uint32_t rid, const char *fmt,
                                                      ...)
{
    char msg[LOCAL_MESSAGE_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_warnx("pid %d uid %d: %s; closing", (int)c->pid, (int)c->uid, msg);
    send_error(c, rid, QCG_EPROTO, 1, "%s", msg);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;

    (void)suggested;
    /* Never read past the current message: the next one waits in the kernel
       while the connection may not take it (update_reading). */
    if (c->have < sizeof(c->hdr)) {
        buf->base = (char *)&c->hdr + c->have;
        buf->len = sizeof(c->hdr) - c->have;
    } else {
        size_t off = c->have - sizeof(c->hdr);
        buf->base = (char *)&c->in + off;
        buf->len = c->hdr.length - off;
    }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;

    (void)buf;
    if (nread < 0) {
        if (nread != UV_EOF)
            log_debug("pid %d: read: %s", (int)c->pid, uv_strerror((int)nread));
        else if (c->have > 0)
            log_warnx("pid %d: connection closed in the middle of a message", (int)c->pid);
        conn_close(c);
        return;
    }
    if (nread == 0 || c->closing)
        return;
    c->have += (size_t)nread;
    if (c->have == sizeof(c->hdr)) {
        const struct local_header *h = &c->hdr;
        if (local_header_check(h) != 0) {
            if (h->magic != LOCAL_MAGIC)
                proto_fail(c, h->request_id, "bad magic 0x%08x", h->magic);
            else if (h->type == 0 || h->type >= LOCAL_TYPE_COUNT)
                proto_fail(c, h->request_id, "unknown message type %u", h->type);
            else
                proto_fail(c, h->request_id, "message type %u: length %u, expected %zu", h->type,
                           h->length, local_payload_size[h->type]);
            return;
        }
        if (local_handlers[h->type].handle == NULL) {
            proto_fail(c, h->request_id, "message type %u is not a request", h->type);
            return;
        }
    }
    if (c->have == sizeof(c->hdr) + c->hdr.length) {
        c->have = 0;
        turn_charge(c);
        if (c->hdr.type == LOCAL_REPORT && !report_admitted(c)) {
            /* Advice only: dropped rather than held behind the uid's lookups. */
        } else if (request_waits(c)) {
            log_debug("pid %d uid %d: %s waits: %u requests of the uid upstream, %u of them "
                      "first lookups (max-requests-per-uid, max-lookups-per-uid)",
                      (int)c->pid, (int)c->uid, local_handlers[c->hdr.type].name,
                      c->share->requests, c->share->lookups);
            c->held = 1;
            dlist_append(&c->share->waiting, &c->wait);
        } else {
            dispatch(c);
        }
        update_reading(c);
    }
}
