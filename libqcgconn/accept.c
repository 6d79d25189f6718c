/* qcg_accept: connections arriving on our listener, or handed over by the
   helper (LOCAL_INCOMING), each verified by the acceptor side of the
   handshake before the caller sees it. */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "handshake.h"
#include "internal.h"

QCG_EXPORT int qcg_accept_pollfd(const qcg_ctx *ctx)
{
    if (ctx == NULL || ctx->accept_epfd < 0)
        return QCG_EINVAL;
    return ctx->accept_epfd;
}

static int nonce_seen(void *arg, const uint8_t nonce[HS_NONCE_SIZE])
{
    qcg_ctx *ctx = arg;

    for (unsigned i = 0; i < RECENT_NONCES; i++) {
        if (memcmp(ctx->recent_nonces[i], nonce, HS_NONCE_SIZE) == 0)
            return 1;
    }
    memcpy(ctx->recent_nonces[ctx->nonce_next], nonce, HS_NONCE_SIZE);
    ctx->nonce_next = (ctx->nonce_next + 1) % RECENT_NONCES;
    return 0;
}

/* Takes the oldest queued incoming descriptor; 0 if the queue is empty. */
static int pop_incoming(qcg_ctx *ctx, struct incoming *out)
{
    uint64_t count;

    if (ctx->n_incoming == 0)
        return 0;
    *out = ctx->incoming[0];
    ctx->n_incoming--;
    memmove(&ctx->incoming[0], &ctx->incoming[1], (size_t)ctx->n_incoming * sizeof(*out));
    if (ctx->n_incoming == 0 && ctx->incoming_evfd >= 0 &&
        read(ctx->incoming_evfd, &count, sizeof(count)) < 0) {
        /* EAGAIN: already drained. */
    }
    return 1;
}

/* Reads what the helper sent unasked; queues INCOMING descriptors. */
static int drain_helper(qcg_ctx *ctx)
{
    for (int i = 0; i < INCOMING_QUEUE_MAX && ctx->helper_fd >= 0; i++) {
        int rc = lmsg_read(ctx->helper_fd, &ctx->ctl);

        if (rc == 0)
            return 0;
        if (rc < 0) {
            ctx_seterr(ctx, "%s", rc == QCG_ENOHELPER ? "the helper closed the connection"
                                                      : "the helper sent an invalid message");
            ctx_helper_lost(ctx);
            return QCG_ENOHELPER;
        }
        if (ctx->ctl.hdr.type != LOCAL_INCOMING || ctx->ctl.hdr.request_id != 0) {
            ctx_seterr(ctx, "the helper sent an unexpected message (type %u)",
                       ctx->ctl.hdr.type);
            ctx_helper_lost(ctx);
            return QCG_EPROTO;
        }
        rc = ctx_queue_incoming(ctx, &ctx->ctl);
        lmsg_reader_reset(&ctx->ctl);
        if (rc < 0) {
            ctx_helper_lost(ctx);
            return rc;
        }
    }
    return 0;
}

/* Runs the acceptor handshake on fd (ours to close on failure). */
static int verify(qcg_ctx *ctx, int fd, int expect_rank, enum qcg_technique tech,
                  uint64_t start, struct qcg_conn_info *info)
{
    struct hs_self self = {.job = ctx->job, .rank = ctx->rank, .secret = ctx->secret,
                           .cluster = ctx->cluster, .nonce_seen = nonce_seen, .nonce_arg = ctx};
    struct hs_hello peer;
    char err[QCG_ERRMSG_MAX];
    int rc;

    if (set_nonblocking(fd, true) < 0) {
        ctx_seterr(ctx, "accept: %s", strerror(errno));
        goto refuse;
    }
    rc = hs_respond(fd, &self, start + ACCEPT_HANDSHAKE_TIMEOUT_MS * 1000u, &peer, err,
                    sizeof(err));
    if (rc < 0) {
        ctx_seterr(ctx, "incoming connection refused: %s", err);
        goto refuse;
    }
    if (expect_rank >= 0 && peer.from_rank != expect_rank) {
        ctx_seterr(ctx, "incoming connection refused: the helper announced rank %d, "
                        "the hello says rank %d", expect_rank, peer.from_rank);
        goto refuse;
    }
    /* The caller gets an ordinary blocking socket. */
    if (set_nonblocking(fd, false) < 0 ||
        conn_set_options(fd, strcmp(peer.cluster, ctx->cluster) != 0) < 0) {
        ctx_seterr(ctx, "accept: socket options: %s", strerror(errno));
        goto refuse;
    }
    if (info != NULL) {
        info->peer_rank = peer.from_rank;
        info->technique = tech;
        info->setup_us = now_us() - start;
    }
    return fd;
refuse:
    close(fd);
    /* A bad peer is not the caller's failure: try again later. */
    return QCG_EAGAIN;
}

QCG_EXPORT int qcg_accept(qcg_ctx *ctx, struct qcg_conn_info *info)
{
    struct incoming in;
    int fd, rc;

    if (ctx == NULL || ctx->accept_epfd < 0)
        return QCG_EINVAL;

    if (ctx->helper_fd >= 0 && (rc = drain_helper(ctx)) < 0 && ctx->n_incoming == 0)
        return rc;
    if (pop_incoming(ctx, &in)) {
        enum qcg_technique tech = in.technique <= QCG_TECH_PROXY ? (enum qcg_technique)in.technique
                                                                 : QCG_TECH_NONE;

        return verify(ctx, in.fd, in.peer_rank, tech, now_us(), info);
    }
    if (ctx->listen_fd < 0)
        return QCG_EAGAIN;
    for (;;) {
        fd = accept4(ctx->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0)
            break;
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return QCG_EAGAIN;
        ctx_seterr(ctx, "accept: %s", strerror(errno));
        return QCG_ESYS;
    }
    return verify(ctx, fd, -1, QCG_TECH_DIRECT, now_us(), info);
}
