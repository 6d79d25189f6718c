/* Framing of local messages (localproto.h) on a Unix stream socket: the
   header is checked before the payload is read into a fixed buffer. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "fdpass.h"
#include "internal.h"

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
