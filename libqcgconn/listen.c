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

/* A node with several addresses: one socket for all of them, the wildcard
   of IPv6 taking IPv4 too (IPV6_V6ONLY off), or of IPv4 when it has no
   IPv6 address; sa and the mask of the node's addresses it takes.  A node
   with one address, or a host without IPv6: that address alone. */
static socklen_t listen_sockaddr(const qcg_ctx *ctx, uint16_t port, struct sockaddr_storage *sa,
                                 uint16_t *mask, bool *dual)
{
    int n = 1;
    bool v6 = address_family(ctx->address) == AF_INET6;
    while (n < QCG_NODE_ADDRS && ctx->other_address[n - 1][0] != '\0') {
        v6 = v6 || address_family(ctx->other_address[n - 1]) == AF_INET6;
        n++;
    }
    *dual = false;
    *mask = 1;
    if (n > 1) {
        *mask = (uint16_t)((1u << n) - 1);
        *dual = v6;
        return make_sockaddr(sa, v6 ? "::" : "0.0.0.0", port);
    }
    return make_sockaddr(sa, ctx->address, port);
}

/* Binds the first free port of the range, starting at a random offset so
   that the processes of a node do not all race for the same port. */
static int bind_in_range(qcg_ctx *ctx)
{
    unsigned span = (unsigned)ctx->port_high - ctx->port_low + 1;
    uint32_t start = 0;
    int fd, one = 1, zero = 0, last_errno = 0;
    bool only_first = false;

    if (random_bytes(&start, sizeof(start)) < 0)
        start = (uint32_t)now_us();
    start %= span;
    for (unsigned i = 0; i < span; i++) {
        uint16_t port = (uint16_t)(ctx->port_low + (start + i) % span);
        struct sockaddr_storage sa;
        uint16_t mask;
        bool dual;
        socklen_t len = listen_sockaddr(ctx, port, &sa, &mask, &dual);

        if (only_first) {
            len = make_sockaddr(&sa, ctx->address, port);
            mask = 1;
            dual = false;
        }
        fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0 && dual && errno == EAFNOSUPPORT) {
            /* IPv6 is off on this host: the first address, IPv4, alone. */
            only_first = true;
            i--;
            continue;
        }
        if (fd < 0) {
            ctx_seterr(ctx, "socket: %s", keep_errno(errno));
            return QCG_ESYS;
        }
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            (dual && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) < 0)) {
            ctx_seterr(ctx, "listener options: %s", keep_errno(errno));
            close(fd);
            return QCG_ESYS;
        }
        if (bind(fd, (struct sockaddr *)&sa, len) == 0 && listen(fd, SOMAXCONN) == 0) {
            ctx->listen_fd = fd;
            ctx->listen_port = port;
            ctx->listen_addresses = mask;
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

/* Whether a refused PUBLISH is worth asking again: the grid services
   unreachable (a frontend restarting, or one whose broker link is in
   backoff), or the helper's refusal for the moment (LOCAL_ERETRY: the
   uid's publishes-per-uid while another user is active on the node, the
   rank being withdrawn).  Not a rank that another live process holds
   (QCG_EBUSY from the helper, its meaning in qcgconn.h): final at once. */
static bool publish_again(int rc, const struct lmsg_reader *reply)
{
    return rc == QCG_EUPSTREAM ||
           (reply->hdr.type == LOCAL_ERROR && reply->payload.error.code == LOCAL_ERETRY);
}

/* PUBLISH, asked again with a backoff while publish_again and time
   remain: one outage of a few seconds, or a node shared with another
   user's job, must not fail the job's start. */
static int publish(qcg_ctx *ctx, const struct local_publish *pub, struct lmsg_reader *reply)
{
    uint64_t start = now_us(), deadline = start + HELPER_PUBLISH_TIMEOUT_MS * 1000ull;
    for (unsigned tries = 0;; tries++) {
        unsigned pause_ms = backoff_ms(tries, PUBLISH_RETRY_MIN_MS, PUBLISH_RETRY_MAX_MS);
        uint64_t now = now_us();
        int left_ms = now < deadline ? (int)((deadline - now) / 1000) : 0;
        int rc = ctx_request(ctx, LOCAL_PUBLISH, pub, left_ms, reply);
        now = now_us();
        if (!publish_again(rc, reply))
            return rc;
        if (now + pause_ms * 1000ull >= deadline) {
            char last[QCG_ERRMSG_MAX];
            snprintf(last, sizeof(last), "%s", ctx->last_error);
            ctx_seterr(ctx, "PUBLISH refused %u times in %llu ms, the last: %s", tries + 1,
                       (unsigned long long)((now - start) / 1000), last);
            return rc;
        }
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
    pub.addresses = ctx->listen_addresses;
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
