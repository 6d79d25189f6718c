/* SCM_RIGHTS descriptor passing; see fdpass.h. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fdpass.h"

/* Room for a few descriptors, so that a peer sending more than one is seen
   (and its extra descriptors closed) instead of silently truncated. */
#define FDPASS_MAX_FDS 8

ssize_t fdpass_send(int sock, const void *buf, size_t len, int fd)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    ssize_t n;

    if (fd >= 0) {
        struct cmsghdr *c;

        /* A descriptor needs at least one byte of data to travel with. */
        if (len == 0) {
            errno = EINVAL;
            return -1;
        }
        memset(&ctl, 0, sizeof(ctl));
        msg.msg_control = ctl.buf;
        msg.msg_controllen = sizeof(ctl.buf);
        c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    do {
        n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
}

/* Closes every descriptor in an SCM_RIGHTS message, from index `from` on. */
static void close_fds(struct cmsghdr *c, size_t from)
{
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

    for (size_t i = from; i < count; i++) {
        int extra;

        memcpy(&extra, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        close(extra);
    }
}

ssize_t fdpass_recv(int sock, void *buf, size_t len, int *fd)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(FDPASS_MAX_FDS * sizeof(int))];
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    struct cmsghdr *c;
    ssize_t n;
    int got = -1;

    *fd = -1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof(ctl.buf);
    do {
        n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -1;

    for (c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        if (c->cmsg_len < CMSG_LEN(sizeof(int)))
            continue;
        if (got < 0) {
            memcpy(&got, CMSG_DATA(c), sizeof(int));
            close_fds(c, 1);
        } else {
            close_fds(c, 0);
        }
    }
    if (msg.msg_flags & MSG_CTRUNC) {
        if (got >= 0)
            close(got);
        errno = EPROTO;
        return -1;
    }
    *fd = got;
    return n;
}
