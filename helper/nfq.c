/* NFQUEUE on a libuv loop; see nfq.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#include "log.h"
#include "nfq.h"

/* Only SYNs and SYN/ACKs are queued to us: small packets, few of them. */
#define COPY_RANGE 0xffff
#define QUEUE_MAXLEN 256
#define RECV_BUDGET 64
/* How long to wait for the kernel's answer to our bind. */
#define BIND_ACK_MS 1000

struct nfq_queue {
    uv_loop_t *loop;
    struct mnl_socket *nl;
    unsigned portid;
    uint32_t seq;
    uint16_t num;
    nfq_packet_fn cb;
    void *arg;
    uv_poll_t poll;
    char buf[COPY_RANGE + 8192]; /* one message: a whole packet and its attributes */
};

static struct nlmsghdr *config_msg(char *buf, uint16_t num)
{
    struct nlmsghdr *nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, num);

    nlh->nlmsg_flags |= NLM_F_ACK;
    return nlh;
}

/* Sends one config message and waits (bounded) for the kernel's ack. */
static int configure(struct nfq_queue *q, struct nlmsghdr *nlh)
{
    struct timeval tv = {.tv_sec = BIND_ACK_MS / 1000, .tv_usec = (BIND_ACK_MS % 1000) * 1000};
    uint32_t seq = ++q->seq;

    nlh->nlmsg_seq = seq;
    if (mnl_socket_sendto(q->nl, nlh, nlh->nlmsg_len) < 0)
        return -1;
    setsockopt(mnl_socket_get_fd(q->nl), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ssize_t n;
    /* EINTR: a timed recv is not restarted (Debian 13's libuv interrupts a
       thread whose io_uring it closes). */
    while ((n = mnl_socket_recvfrom(q->nl, q->buf, sizeof(q->buf))) < 0 && errno == EINTR)
        ;
    if (n < 0)
        return -1;
    return mnl_cb_run(q->buf, (size_t)n, seq, q->portid, NULL, NULL) < 0 ? -1 : 0;
}

static int on_message(const struct nlmsghdr *nlh, void *data)
{
    struct nfq_queue *q = data;
    struct nlattr *attr[NFQA_MAX + 1] = {0};

    if (nfq_nlmsg_parse(nlh, attr) < 0 || attr[NFQA_PACKET_HDR] == NULL) {
        log_warnx("queue %u: a message without a packet header", q->num);
        return MNL_CB_OK;
    }
    struct nfqnl_msg_packet_hdr *ph = mnl_attr_get_payload(attr[NFQA_PACKET_HDR]);
    uint32_t id = ntohl(ph->packet_id);

    if (attr[NFQA_PAYLOAD] == NULL) {
        log_warnx("queue %u: packet %u without payload: accepted", q->num, id);
        nfq_queue_verdict(q, id, 1, NULL, 0);
        return MNL_CB_OK;
    }
    q->cb(q->arg, id, ph->hook, mnl_attr_get_payload(attr[NFQA_PAYLOAD]),
          mnl_attr_get_payload_len(attr[NFQA_PAYLOAD]));
    return MNL_CB_OK;
}

static void on_readable(uv_poll_t *h, int status, int events)
{
    struct nfq_queue *q = h->data;
    int fd = mnl_socket_get_fd(q->nl);

    (void)events;
    if (status < 0) {
        log_warnx("queue %u: poll: %s", q->num, uv_strerror(status));
        return;
    }
    for (int i = 0; i < RECV_BUDGET; i++) {
        ssize_t n = recv(fd, q->buf, sizeof(q->buf), MSG_DONTWAIT);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                log_warn("queue %u: recv", q->num);
            return;
        }
        if (mnl_cb_run(q->buf, (size_t)n, 0, q->portid, on_message, q) < 0)
            log_warn("queue %u: bad netlink message", q->num);
    }
}

struct nfq_queue *nfq_queue_open(uv_loop_t *loop, uint16_t num, nfq_packet_fn cb, void *arg,
                                 char *err, size_t errlen)
{
    struct nfq_queue *q = calloc(1, sizeof(*q));
    struct nlmsghdr *nlh;
    int one = 1;

    if (q == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    q->loop = loop;
    q->num = num;
    q->cb = cb;
    q->arg = arg;
    q->nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
    if (q->nl == NULL || mnl_socket_bind(q->nl, 0, MNL_SOCKET_AUTOPID) < 0) {
        snprintf(err, errlen, "netlink socket: %s", strerror(errno));
        goto fail;
    }
    q->portid = mnl_socket_get_portid(q->nl);
    q->seq = (uint32_t)time(NULL);
    nlh = config_msg(q->buf, num);
    /* The family is ignored since Linux 3.8: the queue takes the IPv6
       packets of ip6tables' rules too. */
    nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, NFQNL_CFG_CMD_BIND);
    if (configure(q, nlh) < 0) {
        /* The kernel says EPERM for both. */
        snprintf(err, errlen, NFQ_BIND_FAILED " %u: %s%s", num, strerror(errno),
                 errno == EPERM ? " (another process owns it, or no CAP_NET_ADMIN)" : "");
        goto fail;
    }
    nlh = config_msg(q->buf, num);
    nfq_nlmsg_cfg_put_params(nlh, NFQNL_COPY_PACKET, COPY_RANGE);
    nfq_nlmsg_cfg_put_qmaxlen(nlh, QUEUE_MAXLEN);
    /* Fail open: should we fall behind, the kernel accepts rather than drops. */
    mnl_attr_put_u32(nlh, NFQA_CFG_FLAGS, htonl(NFQA_CFG_F_FAIL_OPEN));
    mnl_attr_put_u32(nlh, NFQA_CFG_MASK, htonl(NFQA_CFG_F_FAIL_OPEN));
    if (configure(q, nlh) < 0) {
        snprintf(err, errlen, "cannot configure NFQUEUE %u: %s", num, strerror(errno));
        goto fail;
    }
    setsockopt(mnl_socket_get_fd(q->nl), SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof(one));
    if (uv_poll_init(loop, &q->poll, mnl_socket_get_fd(q->nl)) < 0) {
        snprintf(err, errlen, "cannot poll NFQUEUE %u", num);
        goto fail;
    }
    q->poll.data = q;
    uv_poll_start(&q->poll, UV_READABLE, on_readable);
    return q;
fail:
    if (q->nl != NULL)
        mnl_socket_close(q->nl);
    free(q);
    return NULL;
}

int nfq_queue_verdict(struct nfq_queue *q, uint32_t id, int accept, const uint8_t *pkt, size_t len)
{
    char buf[8192];
    struct nlmsghdr *nlh;

    if (pkt != NULL && len > sizeof(buf) - 256) {
        log_warnx("queue %u: packet %u: rewritten packet of %zu bytes too large: accepted as is",
                  q->num, id, len);
        pkt = NULL;
    }
    nlh = nfq_nlmsg_put(buf, NFQNL_MSG_VERDICT, q->num);
    nfq_nlmsg_verdict_put(nlh, (int)id, accept ? NF_ACCEPT : NF_DROP);
    if (pkt != NULL)
        nfq_nlmsg_verdict_put_pkt(nlh, pkt, (uint32_t)len);
    if (mnl_socket_sendto(q->nl, nlh, nlh->nlmsg_len) < 0) {
        log_warn("queue %u: verdict for packet %u", q->num, id);
        return -1;
    }
    return 0;
}

static void on_closed(uv_handle_t *h)
{
    struct nfq_queue *q = h->data;

    /* Closing the socket unbinds the queue. */
    mnl_socket_close(q->nl);
    free(q);
}

void nfq_queue_close(struct nfq_queue *q)
{
    if (q == NULL)
        return;
    uv_poll_stop(&q->poll);
    uv_close((uv_handle_t *)&q->poll, on_closed);
}
