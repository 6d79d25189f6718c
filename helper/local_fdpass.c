/* Connected descriptors to processes: an INCOMING message with the
   descriptor (SCM_RIGHTS) on its first byte, written straight to the
   socket once no reply is queued before it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fdpass.h"
#include "local_internal.h"

/* The rest of a message the socket took only in part, queued behind it. */
struct raw_write {
    uv_write_t req;
    struct conn *c;
    unsigned char data[sizeof(struct local_header) + sizeof(struct local_incoming)];
};

static void on_raw_written(uv_write_t *req, int status)
{
    struct raw_write *w = (struct raw_write *)req;
    struct conn *c = w->c;

    if (status < 0)
        conn_close(c);
    else
        update_reading(c);
    explicit_bzero(w, sizeof(*w));
    free(w);
    conn_unref(c);
}

/* Sends INCOMING `in` with a copy of fd on c, as a reply to rid (0 =
   unsolicited): 0 sent, 1 busy, -1 failed (why). */
int pass_fd(struct conn *c, uint32_t rid, const struct local_incoming *in, int fd, char *why,
            size_t whylen)
{
    struct {
        struct local_header hdr;
        struct local_incoming in;
    } msg;
    uv_os_fd_t pipe_fd;

    if (c->closing) {
        snprintf(why, whylen, "pid %d: its connection is closing", (int)c->pid);
        return -1;
    }
    /* The descriptor travels with the first byte of the message, written
       straight to the socket: only once every queued reply is out, so the
       message cannot land inside another one. */
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) > 0)
        return 1;
    if (uv_fileno((uv_handle_t *)&c->pipe, &pipe_fd) < 0) {
        snprintf(why, whylen, "pid %d: its connection has no descriptor", (int)c->pid);
        return -1;
    }
    _Static_assert(sizeof(msg) == sizeof(struct local_header) + sizeof(struct local_incoming),
                   "INCOMING message without padding");
    memset(&msg, 0, sizeof(msg));
    msg.hdr = (struct local_header){
        .magic = LOCAL_MAGIC, .type = LOCAL_INCOMING, .length = sizeof(msg.in), .request_id = rid};
    msg.in = *in;
    ssize_t n = fdpass_send(pipe_fd, &msg, sizeof(msg), fd);
    if (n < 0) {
        explicit_bzero(&msg, sizeof(msg));
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 1;
        snprintf(why, whylen, "pid %d: sending the descriptor: %s", (int)c->pid, strerror(errno));
        return -1;
    }
    if ((size_t)n < sizeof(msg)) {
        struct raw_write *w = calloc(1, sizeof(*w));
        uv_buf_t buf;

        if (w == NULL) {
            /* Half a message on the stream: the connection is lost. */
            explicit_bzero(&msg, sizeof(msg));
            conn_close(c);
            snprintf(why, whylen, "pid %d: out of memory", (int)c->pid);
            return -1;
        }
        w->c = c;
        memcpy(w->data, (unsigned char *)&msg + n, sizeof(msg) - (size_t)n);
        buf = uv_buf_init((char *)w->data, (unsigned)(sizeof(msg) - (size_t)n));
        c->refs++;
        if (uv_write(&w->req, (uv_stream_t *)&c->pipe, &buf, 1, on_raw_written) < 0) {
            c->refs--;
            free(w);
            conn_close(c);
            explicit_bzero(&msg, sizeof(msg));
            snprintf(why, whylen, "pid %d: cannot queue the rest of the message", (int)c->pid);
            return -1;
        }
    }
    explicit_bzero(&msg, sizeof(msg));
    return 0;
}

int local_server_deliver(struct local_server *srv, const char *job, int32_t rank,
                         const struct local_incoming *in, int fd, pid_t *pid, char *why,
                         size_t whylen)
{
    struct conn *c = publisher(srv, job, rank);

    if (c == NULL) {
        snprintf(why, whylen,
                 "no live process on this node publishes job %s rank %d (any "
                 "more)",
                 job, rank);
        return -1;
    }
    *pid = c->pid;
    return pass_fd(c, 0, in, fd, why, whylen);
}

int local_conn_pass(struct conn *c, uint32_t rid, const struct local_incoming *in, int fd,
                    char *why, size_t whylen)
{
    return pass_fd(c, rid, in, fd, why, whylen);
}
