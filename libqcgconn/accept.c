/* qcg_accept: connections arriving on our listener, or handed over by the
   helper (LOCAL_INCOMING), each verified by the acceptor side of the
   handshake before the caller sees it.
   Hellos are read as they arrive (struct pending) rather than waited for: a
   process that both accepts and connects in one thread must never block on a
   peer that is itself waiting for us.  A peer has ACCEPT_HANDSHAKE_TIMEOUT_MS
   to send its hello; a timerfd wakes the accept descriptor to drop it. */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "handshake.h"
#include "internal.h"

int accept_watch(qcg_ctx *ctx, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};

    if (epoll_ctl(ctx->accept_epfd, EPOLL_CTL_ADD, fd, &ev) < 0 && errno != EEXIST)
        return -1;
    return 0;
}

int accept_init(qcg_ctx *ctx)
{
    ctx->accept_epfd = epoll_create1(EPOLL_CLOEXEC);
    if (ctx->accept_epfd < 0)
        return -1;
    ctx->accept_timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ctx->accept_timer < 0 || accept_watch(ctx, ctx->accept_timer) < 0)
        return -1;
    return 0;
}

static void pending_drop(qcg_ctx *ctx, struct pending *p)
{
    epoll_ctl(ctx->accept_epfd, EPOLL_CTL_DEL, p->fd, NULL);
    close(p->fd);
    memset(p, 0, sizeof(*p));
    p->fd = -1;
}

void accept_cleanup(qcg_ctx *ctx)
{
    for (int i = 0; i < PENDING_MAX; i++) {
        if (ctx->pending[i].fd >= 0)
            pending_drop(ctx, &ctx->pending[i]);
    }
    if (ctx->accept_timer >= 0)
        close(ctx->accept_timer);
    if (ctx->accept_epfd >= 0)
        close(ctx->accept_epfd);
    ctx->accept_timer = ctx->accept_epfd = -1;
}

/* Arms the timer at the earliest pending deadline (disarms if none). */
static void rearm(qcg_ctx *ctx)
{
    struct itimerspec its;
    uint64_t first = 0;

    for (int i = 0; i < PENDING_MAX; i++) {
        const struct pending *p = &ctx->pending[i];
        uint64_t at = p->start_us + ACCEPT_HANDSHAKE_TIMEOUT_MS * 1000u;

        if (p->fd >= 0 && (first == 0 || at < first))
            first = at;
    }
    memset(&its, 0, sizeof(its));
    if (first != 0) {
        its.it_value.tv_sec = (time_t)(first / 1000000u);
        its.it_value.tv_nsec = (long)(first % 1000000u) * 1000 + 1;
    }
    timerfd_settime(ctx->accept_timer, TFD_TIMER_ABSTIME, &its, NULL);
}

/* 1 if a slot is free. */
static int pending_room(const qcg_ctx *ctx)
{
    for (int i = 0; i < PENDING_MAX; i++) {
        if (ctx->pending[i].fd < 0)
            return 1;
    }
    return 0;
}

void accept_add_pending(qcg_ctx *ctx, int fd, int32_t expect_rank, uint32_t technique)
{
    for (int i = 0; i < PENDING_MAX; i++) {
        struct pending *p = &ctx->pending[i];

        if (p->fd >= 0)
            continue;
        if (set_nonblocking(fd, true) < 0 || accept_watch(ctx, fd) < 0) {
            ctx_seterr(ctx, "incoming connection dropped: %s", strerror(errno));
            close(fd);
            return;
        }
        memset(p, 0, sizeof(*p));
        p->fd = fd;
        p->expect_rank = expect_rank;
        p->technique = technique;
        p->start_us = now_us();
        rearm(ctx);
        return;
    }
    ctx_seterr(ctx, "incoming connection dropped: %d handshakes already pending", PENDING_MAX);
    close(fd);
}

QCG_EXPORT int qcg_accept_pollfd(const qcg_ctx *ctx)
{
    if (ctx == NULL || ctx->listen_fd < 0)
        return QCG_EINVAL;
    return ctx->accept_epfd;
}

static int nonce_seen(qcg_ctx *ctx, const uint8_t nonce[HS_NONCE_SIZE])
{
    for (unsigned i = 0; i < RECENT_NONCES; i++) {
        if (memcmp(ctx->recent_nonces[i], nonce, HS_NONCE_SIZE) == 0)
            return 1;
    }
    memcpy(ctx->recent_nonces[ctx->nonce_next], nonce, HS_NONCE_SIZE);
    ctx->nonce_next = (ctx->nonce_next + 1) % RECENT_NONCES;
    return 0;
}

/* Reads what the helper sent unasked: LOCAL_INCOMING descriptors.  0, or
   the error that cost us the helper connection. */
static int drain_helper(qcg_ctx *ctx)
{
    for (int i = 0; i < PENDING_MAX && ctx->helper_fd >= 0; i++) {
        int rc = lmsg_read(ctx->helper_fd, &ctx->ctl);

        if (rc == 0)
            return 0;
        if (rc < 0) {
            ctx_seterr(ctx, "%s", rc == QCG_ENOHELPER ? "the helper closed the connection"
                                                      : "the helper sent an invalid message");
            ctx_helper_lost(ctx);
            return rc == QCG_EPROTO ? rc : QCG_ENOHELPER;
        }
        if (ctx->ctl.hdr.type != LOCAL_INCOMING || ctx->ctl.hdr.request_id != 0) {
            ctx_seterr(ctx, "the helper sent an unexpected message (type %u)",
                       ctx->ctl.hdr.type);
            ctx_helper_lost(ctx);
            return QCG_EPROTO;
        }
        rc = ctx_take_incoming(ctx, &ctx->ctl);
        lmsg_reader_reset(&ctx->ctl);
        if (rc < 0) {
            ctx_helper_lost(ctx);
            return rc;
        }
    }
    return 0;
}

/* Accepts what the listener holds, as far as there is room. */
static int accept_new(qcg_ctx *ctx)
{
    for (int i = 0; i < PENDING_MAX && pending_room(ctx); i++) {
        int fd = accept4(ctx->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd >= 0) {
            accept_add_pending(ctx, fd, -1, QCG_TECH_DIRECT);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        ctx_seterr(ctx, "accept: %s", strerror(errno));
        return QCG_ESYS;
    }
    return 0;
}

/* The whole hello of p is in: check it and answer.  Returns the connection
   (p's slot freed, fd now the caller's) or -1 (p dropped, last_error set). */
static int complete(qcg_ctx *ctx, struct pending *p, struct qcg_conn_info *info)
{
    struct hs_self self = {.job = ctx->job, .rank = ctx->rank, .secret = ctx->secret,
                           .cluster = ctx->cluster};
    uint8_t answer[HS_ACCEPT_SIZE];
    struct hs_hello peer;
    enum hs_status st;
    ssize_t n;
    int fd = p->fd;

    st = hs_hello_check(p->hello, &self, &peer);
    if (st == HS_OK && nonce_seen(ctx, peer.nonce))
        st = HS_REPLAY;
    hs_accept_build(answer, st, &peer, ctx->secret);
    /* 40 bytes into a fresh socket's empty buffer: all or nothing. */
    n = send(fd, answer, sizeof(answer), MSG_NOSIGNAL);
    if (st != HS_OK) {
        ctx_seterr(ctx, "incoming connection refused: hello from rank %d: %s", peer.from_rank,
                   hs_status_name(st));
        goto drop;
    }
    if (n != (ssize_t)sizeof(answer)) {
        ctx_seterr(ctx, "incoming connection from rank %d lost while answering: %s",
                   peer.from_rank, n < 0 ? strerror(errno) : "short write");
        goto drop;
    }
    if (p->expect_rank >= 0 && peer.from_rank != p->expect_rank) {
        ctx_seterr(ctx, "incoming connection refused: the helper announced rank %d, "
                        "the hello says rank %d", p->expect_rank, peer.from_rank);
        goto drop;
    }
    epoll_ctl(ctx->accept_epfd, EPOLL_CTL_DEL, fd, NULL);
    /* The caller gets an ordinary blocking socket. */
    if (set_nonblocking(fd, false) < 0 ||
        conn_set_options(fd, strcmp(peer.cluster, ctx->cluster) != 0) < 0) {
        ctx_seterr(ctx, "incoming connection: socket options: %s", strerror(errno));
        goto drop;
    }
    if (info != NULL) {
        info->peer_rank = peer.from_rank;
        info->technique = p->technique <= QCG_TECH_PROXY ? (enum qcg_technique)p->technique
                                                         : QCG_TECH_NONE;
        info->setup_us = now_us() - p->start_us;
    }
    memset(p, 0, sizeof(*p));
    p->fd = -1;
    return fd;
drop:
    pending_drop(ctx, p);
    return -1;
}

/* Reads what has arrived of p's hello.  The connection when it is complete
   and verified; QCG_EAGAIN while incomplete; -1 when p was dropped. */
static int progress(qcg_ctx *ctx, struct pending *p, uint64_t now, struct qcg_conn_info *info)
{
    while (p->got < sizeof(p->hello)) {
        ssize_t n = recv(p->fd, p->hello + p->got, sizeof(p->hello) - p->got, 0);

        if (n > 0) {
            p->got += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (now < p->start_us + ACCEPT_HANDSHAKE_TIMEOUT_MS * 1000u)
                return QCG_EAGAIN;
            ctx_seterr(ctx, "incoming connection dropped: no hello within %d ms",
                       ACCEPT_HANDSHAKE_TIMEOUT_MS);
        } else {
            ctx_seterr(ctx, "incoming connection dropped: %s before its hello",
                       n == 0 ? "closed" : strerror(errno));
        }
        pending_drop(ctx, p);
        return -1;
    }
    return complete(ctx, p, info);
}

QCG_EXPORT int qcg_accept(qcg_ctx *ctx, struct qcg_conn_info *info)
{
    uint64_t expirations, now;
    int helper_rc = 0, rc = 0;

    if (ctx == NULL || ctx->listen_fd < 0)
        return QCG_EINVAL;
    if (read(ctx->accept_timer, &expirations, sizeof(expirations)) < 0) {
        /* EAGAIN: not fired. */
    }
    if (ctx->helper_fd >= 0)
        helper_rc = drain_helper(ctx);
    rc = accept_new(ctx);

    /* Stop at the first verified connection: the others keep their unread
       data, so the descriptor stays readable for the next call. */
    now = now_us();
    for (int i = 0; i < PENDING_MAX; i++) {
        struct pending *p = &ctx->pending[i];
        int fd;

        if (p->fd < 0)
            continue;
        fd = progress(ctx, p, now, info);
        if (fd >= 0) {
            rearm(ctx);
            return fd;
        }
    }
    rearm(ctx);
    if (helper_rc < 0)
        return helper_rc;
    /* A refused peer is not the caller's failure: QCG_EAGAIN. */
    return rc < 0 ? rc : QCG_EAGAIN;
}
