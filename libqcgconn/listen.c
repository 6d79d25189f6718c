/* qcg_listen: a TCP listener on a port of the node's range, published
   through the helper. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "address.h"
#include "backoff.h"
#include "internal.h"

/* Fills sa with address:port; its length, or 0 if address is not an IP. */
static socklen_t make_sockaddr(struct sockaddr_storage *sa, const char *address, uint16_t port)
{
    return address_sockaddr(address, port, sa);
}

/* Binds the first free port of the range, starting at a random offset so
   that the processes of a node do not all race for the same port. */
static int bind_in_range(qcg_ctx *ctx)
{
    unsigned span = (unsigned)ctx->port_high - ctx->port_low + 1;
    uint32_t start = 0;
    int fd, one = 1, last_errno = 0;

    if (random_bytes(&start, sizeof(start)) < 0)
        start = (uint32_t)now_us();
    start %= span;
    for (unsigned i = 0; i < span; i++) {
        uint16_t port = (uint16_t)(ctx->port_low + (start + i) % span);
        struct sockaddr_storage sa;
        socklen_t len = make_sockaddr(&sa, ctx->address, port);

        fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            ctx_seterr(ctx, "socket: %s", keep_errno(errno));
            return QCG_ESYS;
        }
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0) {
            ctx_seterr(ctx, "SO_REUSEADDR: %s", keep_errno(errno));
            close(fd);
            return QCG_ESYS;
        }
        if (bind(fd, (struct sockaddr *)&sa, len) == 0 && listen(fd, SOMAXCONN) == 0) {
            ctx->listen_fd = fd;
            ctx->listen_port = port;
            return 0;
        }
        last_errno = errno;
        close(fd);
        if (last_errno != EADDRINUSE)
            break;
    }
    ctx_seterr(ctx, "cannot listen on %s, ports %u-%u: %s", ctx->address, ctx->port_low,
               ctx->port_high, keep_errno(last_errno));
    return QCG_ESYS;
}

/* PUBLISH, asked again while the grid services are unreachable (a frontend
   restarting, or one whose broker link is in backoff) and time remains:
   one outage of a few seconds must not fail the job's start. */
static int publish(qcg_ctx *ctx, const struct local_publish *pub, struct lmsg_reader *reply)
{
    uint64_t deadline = now_us() + HELPER_PUBLISH_TIMEOUT_MS * 1000ull;
    for (unsigned tries = 0;; tries++) {
        unsigned pause_ms = backoff_ms(tries, PUBLISH_RETRY_MIN_MS, PUBLISH_RETRY_MAX_MS);
        uint64_t now = now_us();
        int left_ms = now < deadline ? (int)((deadline - now) / 1000) : 0;
        int rc = ctx_request(ctx, LOCAL_PUBLISH, pub, left_ms, reply);
        now = now_us();
        if (rc != QCG_EUPSTREAM || now + pause_ms * 1000ull >= deadline)
            return rc;
        poll(NULL, 0, (int)pause_ms);
    }
}

QCG_EXPORT int qcg_listen(qcg_ctx *ctx)
{
    struct local_publish pub;
    struct lmsg_reader reply;
    int rc;

    if (ctx == NULL)
        return QCG_EINVAL;
    if (ctx->published)
        return 0;
    ctx_clearerr(ctx);
    if (!helper_ready(ctx)) {
        char gone[QCG_ERRMSG_MAX];

        helper_tick(ctx);
        if (!helper_ready(ctx)) {
            helper_gone_text(ctx, gone, sizeof(gone));
            ctx_seterr(ctx, "%s", gone);
            return QCG_ENOHELPER;
        }
    }
    if (ctx->listen_fd < 0 && (rc = bind_in_range(ctx)) < 0)
        return rc;

    memset(&pub, 0, sizeof(pub));
    pub.port = ctx->listen_port;
    rc = publish(ctx, &pub, &reply);
    if (rc == 0 && reply.hdr.type != LOCAL_OK) {
        ctx_seterr(ctx, "helper answered PUBLISH with message type %u", reply.hdr.type);
        rc = QCG_EPROTO;
    }
    if (rc < 0)
        goto fail;
    ctx->published = true;
    if (accept_listen_start(ctx) < 0) {
        ctx_seterr(ctx, "accept descriptor: %s", keep_errno(errno));
        ctx->published = false;
        rc = QCG_ESYS;
        goto fail;
    }
    return 0;
fail:
    /* Not published: nobody may reach this listener, so do not keep it. */
    if (ctx->listen_fd >= 0) {
        accept_unwatch(ctx, ctx->listen_fd);
        ctx->listener_watched = ctx->accepting = false;
        close(ctx->listen_fd);
        ctx->listen_fd = -1;
    }
    return rc;
}

QCG_EXPORT int qcg_local_contact_sized(const qcg_ctx *ctx, struct qcg_contact *contact,
                                       size_t contact_size)
{
    struct qcg_contact here;

    _Static_assert(sizeof(contact->cluster) >= LOCAL_NAME_MAX &&
                       sizeof(contact->node) >= LOCAL_NAME_MAX &&
                       sizeof(contact->address) >= LOCAL_ADDR_MAX,
                   "struct qcg_contact holds the helper's names");

    if (ctx == NULL || contact == NULL || ctx->listen_fd < 0 || !ctx->published)
        return QCG_EINVAL;
    memset(&here, 0, sizeof(here));
    strcpy(here.cluster, ctx->cluster);
    strcpy(here.node, ctx->node);
    strcpy(here.address, ctx->address);
    here.port = ctx->listen_port;
    struct_out(contact, contact_size, &here, sizeof(here));
    return 0;
}
