/* The owner of the local end that connected to us (peeruid.h). */
#include "peeruid.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int tcp_peer_uid(int fd, uid_t *uid)
{
    struct sockaddr_in me, peer;
    socklen_t ml = sizeof(me), pl = sizeof(peer);
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 req;
    } q;
    struct sockaddr_nl nl = {.nl_family = AF_NETLINK};
    union {
        struct nlmsghdr nlh;
        char bytes[8192];
    } a;
    struct timeval tv = {.tv_sec = 1};
    int s, rc = -1, err = ENOENT;
    ssize_t n;

    if (getsockname(fd, (struct sockaddr *)&me, &ml) < 0 ||
        getpeername(fd, (struct sockaddr *)&peer, &pl) < 0)
        return -1;
    if (me.sin_family != AF_INET || peer.sin_family != AF_INET) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    memset(&q, 0, sizeof(q));
    q.nlh.nlmsg_len = sizeof(q);
    q.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    q.nlh.nlmsg_flags = NLM_F_REQUEST;
    q.req.sdiag_family = AF_INET;
    q.req.sdiag_protocol = IPPROTO_TCP;
    q.req.idiag_states = ~0u;
    /* The peer's socket: its source is our peer, its destination us. */
    q.req.id.idiag_sport = peer.sin_port;
    q.req.id.idiag_dport = me.sin_port;
    q.req.id.idiag_src[0] = peer.sin_addr.s_addr;
    q.req.id.idiag_dst[0] = me.sin_addr.s_addr;
    q.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    q.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;

    s = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (s < 0)
        return -1;
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (sendto(s, &q, sizeof(q), 0, (struct sockaddr *)&nl, sizeof(nl)) < 0) {
        err = errno;
        goto out;
    }
    /* EINTR: with a receive timeout the kernel does not restart the call
       (Debian 13's libuv interrupts a thread whose io_uring it closes). */
    while ((n = recv(s, &a, sizeof(a), 0)) < 0 && errno == EINTR)
        ;
    if (n < 0) {
        err = errno;
        goto out;
    }
    for (struct nlmsghdr *h = &a.nlh; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
        if (h->nlmsg_type == NLMSG_ERROR) {
            const struct nlmsgerr *e = NLMSG_DATA(h);
            err = h->nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) && e->error < 0 ? -e->error : ENOENT;
            break;
        }
        if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
            h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
            const struct inet_diag_msg *m = NLMSG_DATA(h);
            *uid = m->idiag_uid;
            rc = 0;
            break;
        }
    }
out:
    close(s);
    if (rc < 0)
        errno = err;
    return rc;
}
