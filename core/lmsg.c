/* Framing of local messages (lmsg.h): the header is checked before the
   payload is read into a fixed buffer. */
#include "lmsg.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bounded_io.h"
#include "fdpass.h"
#include "qcgconn.h"

#define HDR_SIZE sizeof(struct local_header)

void lmsg_reader_init(struct lmsg_reader *r)
{
    memset(r, 0, sizeof(*r));
    r->fd = -1;
}

void lmsg_reader_reset(struct lmsg_reader *r)
{
    if (r->fd >= 0)
        close(r->fd);
    lmsg_reader_init(r);
}

/* Takes a received descriptor: only the first byte of an INCOMING message may
   carry one; anything else is a protocol error. */
static int take_fd(struct lmsg_reader *r, int fd, size_t at)
{
    if (fd < 0)
        return 0;
    if (at != 0 || r->fd >= 0) {
        close(fd);
        return QCG_EPROTO;
    }
    r->fd = fd;
    return 0;
}

int lmsg_read(int sock, struct lmsg_reader *r)
{
    for (;;) {
        size_t want;
        ssize_t n;
        int fd = -1;
        char *dst;

        if (r->have < HDR_SIZE) {
            want = HDR_SIZE - r->have;
            dst = (char *)&r->hdr + r->have;
        } else {
            size_t total = HDR_SIZE + r->hdr.length;

            if (r->have == total)
                break;
            want = total - r->have;
            dst = (char *)&r->payload + (r->have - HDR_SIZE);
        }
        n = fdpass_recv(sock, dst, want, &fd);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return errno == EPROTO ? QCG_EPROTO : QCG_ESYS;
        }
        if (n == 0)
            return QCG_ENOHELPER;
        if (take_fd(r, fd, r->have) < 0)
            return QCG_EPROTO;
        r->have += (size_t)n;
        if (r->have == HDR_SIZE) {
            int rc = local_header_check(&r->hdr);

            if (rc < 0)
                return rc;
        }
    }
    if (local_payload_check(r->hdr.type, &r->payload) < 0)
        return QCG_EPROTO;
    if (r->fd >= 0 && r->hdr.type != LOCAL_INCOMING)
        return QCG_EPROTO;
    return 1;
}

int lmsg_send(int sock, uint16_t type, uint32_t request_id, const void *payload,
              uint64_t deadline_us)
{
    struct {
        struct local_header hdr;
        union local_payload payload;
    } msg;
    size_t len = local_payload_size[type];

    memset(&msg, 0, sizeof(msg));
    msg.hdr.magic = LOCAL_MAGIC;
    msg.hdr.type = type;
    msg.hdr.length = (uint32_t)len;
    msg.hdr.request_id = request_id;
    if (len > 0)
        memcpy(&msg.payload, payload, len);
    return write_full(sock, &msg, HDR_SIZE + len, deadline_us);
}

int lmsg_recv(int sock, struct lmsg_reader *r, uint64_t deadline_us)
{
    lmsg_reader_reset(r);
    for (;;) {
        int rc = lmsg_read(sock, r);

        if (rc != 0)
            return rc < 0 ? rc : 0;
        rc = wait_fd(sock, POLLIN, deadline_us);
        if (rc <= 0)
            return rc == 0 ? QCG_ETIMEDOUT : QCG_ESYS;
    }
}

int lmsg_ask_hello(const char *path, const struct local_hello *hello, uint16_t type,
                   const void *payload, int timeout_ms, struct lmsg_reader *reply, char *why,
                   size_t whylen)
{
    uint64_t deadline = now_us() + (uint64_t)timeout_ms * 1000u;
    uint32_t rid = hello != NULL ? 2 : 1;
    int fd, rc = 0;

    lmsg_reader_init(reply);
    fd = unix_connect(path, timeout_ms);
    if (fd < 0) {
        snprintf(why, whylen, "no helper reachable at %s: %s", path, strerror(errno));
        return QCG_ENOHELPER;
    }
    if (hello != NULL) {
        rc = lmsg_send(fd, LOCAL_HELLO, 1, hello, deadline);
        if (rc == 0)
            rc = lmsg_recv(fd, reply, deadline);
        if (rc == 0 && reply->hdr.request_id != 1)
            rc = QCG_EPROTO;
        /* A refused HELLO is the answer. */
        if (rc == 0 && reply->hdr.type != LOCAL_HELLO_OK) {
            close(fd);
            return 0;
        }
        lmsg_reader_reset(reply);
    }
    if (rc == 0)
        rc = lmsg_send(fd, type, rid, payload, deadline);
    if (rc == 0)
        rc = lmsg_recv(fd, reply, deadline);
    if (rc == 0 && reply->hdr.request_id != rid)
        rc = QCG_EPROTO;
    if (rc == QCG_EPROTO)
        snprintf(why, whylen,
                 "the helper at %s sent a malformed reply (an older helper? this client "
                 "speaks local protocol %d)",
                 path, LOCAL_VERSION);
    else if (rc < 0)
        snprintf(why, whylen, "the helper at %s did not answer: %s", path,
                 rc == QCG_ESYS        ? strerror(errno)
                 : rc == QCG_ETIMEDOUT ? "timed out"
                                       : "it closed the connection");
    close(fd);
    return rc;
}

int lmsg_ask(const char *path, uint16_t type, const void *payload, int timeout_ms,
             struct lmsg_reader *reply, char *why, size_t whylen)
{
    return lmsg_ask_hello(path, NULL, type, payload, timeout_ms, reply, why, whylen);
}
