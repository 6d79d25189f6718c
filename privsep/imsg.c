/* Messages between the parts of a daemon: checks, send, receive; see proc.h. */
#include "proc.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "monotonic.h"

#define LOG_WINDOW_MS 1000
/* Descriptors one datagram may bring that are read (and closed) at once. */
#define FDS_MAX 4

void imsg_chan_init(struct imsg_chan *c, int fd, const struct imsg_type *types, uint32_t accept,
                    const void *ctx, const char *peer)
{
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->types = types;
    c->accept = accept;
    c->ctx = ctx;
    c->peer = peer;
}

static const struct imsg_type *type_of(const struct imsg_type *types, uint32_t type)
{
    return type > 0 && type < IMSG_TYPES && types[type].name != NULL ? &types[type] : NULL;
}

const char *imsg_name(const struct imsg_type *types, uint32_t type)
{
    const struct imsg_type *t = type_of(types, type);

    return t != NULL ? t->name : "unknown";
}

int imsg_check(const struct imsg_chan *c, const void *msg, size_t len, bool with_fd, char *why,
               size_t whylen)
{
    struct imsg_hdr h;
    char detail[200];

    if (len < sizeof(h)) {
        snprintf(why, whylen, "%zu bytes, shorter than a header", len);
        return -1;
    }
    memcpy(&h, msg, sizeof(h));
    const struct imsg_type *t = type_of(c->types, h.type);
    if (t == NULL) {
        snprintf(why, whylen, "unknown type %u", (unsigned)h.type);
        return -1;
    }
    if (!(c->accept & IMSG_BIT(h.type))) {
        snprintf(why, whylen, "%s not expected here now", t->name);
        return -1;
    }
    if (len != t->size || h.len != t->size) {
        snprintf(why, whylen, "%s of %zu bytes (saying %u), not %u", t->name, len, (unsigned)h.len,
                 (unsigned)t->size);
        return -1;
    }
    if (h.reserved != 0) {
        snprintf(why, whylen, "%s with reserved %u", t->name, (unsigned)h.reserved);
        return -1;
    }
    if (with_fd != ((t->flags & IMSG_WITH_FD) != 0)) {
        snprintf(why, whylen, "%s %s a descriptor", t->name, with_fd ? "with" : "without");
        return -1;
    }
    if (t->check != NULL && t->check(msg, c->ctx, detail, sizeof(detail)) < 0) {
        snprintf(why, whylen, "%s: %s", t->name, detail);
        return -1;
    }
    return (int)h.type;
}

int imsg_send(const struct imsg_chan *c, void *msg, size_t len, int fd, unsigned wait_ms)
{
    struct imsg_hdr *h = msg;
    const struct imsg_type *t = len >= sizeof(*h) ? type_of(c->types, h->type) : NULL;
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = msg, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    uint64_t deadline = monotonic_ms() + wait_ms;

    if (t == NULL || t->size != len || (fd >= 0) != ((t->flags & IMSG_WITH_FD) != 0)) {
        errno = EINVAL;
        return -1;
    }
    h->len = (uint32_t)len;
    h->reserved = 0;
    if (fd >= 0) {
        memset(&ctl, 0, sizeof(ctl));
        mh.msg_control = ctl.buf;
        mh.msg_controllen = sizeof(ctl.buf);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    }
    for (;;) {
        ssize_t n = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n == (ssize_t)len)
            return 0;
        if (n >= 0) { /* a datagram goes whole or not at all */
            errno = EMSGSIZE;
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS)
            return -1;
        uint64_t now = monotonic_ms();
        if (now >= deadline) {
            errno = EAGAIN;
            return -1;
        }
        struct pollfd p = {.fd = c->fd, .events = POLLOUT};
        if (poll(&p, 1, (int)(deadline - now)) < 0 && errno != EINTR)
            return -1;
    }
}

void imsg_warn_limited(struct ratelimit *rl, const char *line)
{
    unsigned left_out = 0;

    if (!ratelimit_burst_ok(rl, monotonic_ms(), LOG_WINDOW_MS, IMSG_LOG_BURST, &left_out))
        return;
    if (left_out > 0)
        log_warnx("%s (and %u more since the last such line)", line, left_out);
    else
        log_warnx("%s", line);
}

static int refuse(struct imsg_chan *c, size_t len, const char *reason, char *why, size_t whylen)
{
    char line[400];

    snprintf(why, whylen, "%s", reason);
    snprintf(line, sizeof(line), "refused a message of %zu bytes from %s: %s", len, c->peer,
             reason);
    imsg_warn_limited(&c->refused, line);
    return IMSG_REFUSED;
}

/* The descriptors that came: the first into *fd, the others closed.  false
   when the control data was cut (what came is closed). */
static bool take_fds(struct msghdr *mh, int *fd)
{
    bool cut = (mh->msg_flags & MSG_CTRUNC) != 0;

    *fd = -1;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm != NULL; cm = CMSG_NXTHDR(mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int one;
            memcpy(&one, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            if (*fd < 0 && !cut && i == 0)
                *fd = one;
            else {
                close(one);
                cut = true; /* more than one: refused below */
            }
        }
    }
    if (cut && *fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    return !cut;
}

int imsg_recv(struct imsg_chan *c, void *buf, size_t bufsize, int *fd, char *why, size_t whylen)
{
    union {
        char buf[CMSG_SPACE(FDS_MAX * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    char reason[300];
    int got = -1;

    *fd = -1;
    for (;;) {
        struct iovec iov = {.iov_base = buf, .iov_len = bufsize};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = ctl.buf,
                            .msg_controllen = sizeof(ctl)};
        /* MSG_TRUNC: the datagram's real length, so one cut short shows. */
        ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return IMSG_NONE;
        if (n < 0)
            return IMSG_CLOSED;
        bool fds_ok = take_fds(&mh, &got);
        if (n == 0) {
            /* An empty datagram reads like the end: only a hang-up is one. */
            struct pollfd p = {.fd = c->fd, .events = POLLIN};
            if (poll(&p, 1, 0) < 0 || (p.revents & POLLHUP)) {
                if (got >= 0)
                    close(got);
                return IMSG_CLOSED;
            }
        }
        if (!fds_ok) {
            snprintf(reason, sizeof(reason), "more than one descriptor, or control data cut");
            return refuse(c, (size_t)n, reason, why, whylen);
        }
        int type = imsg_check(c, buf, (size_t)n, got >= 0, reason, sizeof(reason));
        if (type < 0) {
            if (got >= 0)
                close(got);
            return refuse(c, (size_t)n, reason, why, whylen);
        }
        *fd = got;
        return type;
    }
}

int imsg_recv_wait(struct imsg_chan *c, void *buf, size_t bufsize, int *fd, unsigned wait_ms,
                   char *why, size_t whylen)
{
    uint64_t deadline = monotonic_ms() + wait_ms;
    char refused[300];

    for (;;) {
        int rc = imsg_recv(c, buf, bufsize, fd, refused, sizeof(refused));
        if (rc > 0)
            return rc;
        if (rc == IMSG_CLOSED) {
            snprintf(why, whylen, "%s closed the channel", c->peer);
            return -1;
        }
        if (rc == IMSG_REFUSED) {
            snprintf(why, whylen, "refused a message from %s: %s", c->peer, refused);
            return -1;
        }
        uint64_t now = monotonic_ms();
        if (now >= deadline) {
            snprintf(why, whylen, "nothing from %s within %u ms", c->peer, wait_ms);
            return -1;
        }
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (poll(&p, 1, (int)(deadline - now)) < 0 && errno != EINTR) {
            snprintf(why, whylen, "poll: %s", strerror(errno));
            return -1;
        }
    }
}
