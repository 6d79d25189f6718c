/*
 * helper-capfd: what the packet engine's sockets can do once they are held
 * by a process without capabilities (issue 31, "shrink what runs
 * privileged"; docs/design.md, "Facts we rely on").  In a network namespace
 * of its own, root only (else 77 = skipped).  A root process opens a raw
 * socket and an NFQUEUE handle (queue 7797; a rule queues UDP to
 * 127.0.0.1:9999), then forks a child that drops every capability and
 * becomes nobody:
 *
 *   the child   sends and receives on the raw socket: works
 *               reads the queued packet from the NFQUEUE socket: works
 *               gives its verdict: refused, EPERM (nfnetlink checks
 *               CAP_NET_ADMIN of the sender of each message)
 *   the parent  gives the verdict on the same socket: the packet is delivered
 */
#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <linux/netlink.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "privdrop.h"

#define QUEUE 7797
#define QUEUED_PORT 9999
#define RAW_PORT 9997
#define WAIT_MS 3000

/* What the child found, for the parent. */
struct found {
    int raw_sent, raw_received, queued_id, verdict_error;
};

static int packet_id = -1;

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *m, struct nfq_data *d, void *arg)
{
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(d);

    (void)qh, (void)m, (void)arg;
    packet_id = ph != NULL ? (int)ntohl(ph->packet_id) : -2;
    return 0;
}

static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};

    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    return a;
}

static void send_udp(int port)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in to = loopback(port);

    if (sendto(s, "hello", 5, 0, (struct sockaddr *)&to, sizeof(to)) != 5)
        perror("sendto");
    close(s);
}

/* A UDP packet built by hand, 127.0.0.1:5555 -> 127.0.0.1:9998. */
static int raw_send(int raw)
{
    unsigned char pkt[29];
    struct iphdr *ip = (struct iphdr *)pkt;
    struct udphdr *u = (struct udphdr *)(pkt + sizeof(*ip));
    struct sockaddr_in to = loopback(0);

    memset(pkt, 0, sizeof(pkt));
    ip->ihl = 5;
    ip->version = 4;
    ip->ttl = 64;
    ip->protocol = IPPROTO_UDP;
    ip->tot_len = htons(sizeof(pkt));
    ip->saddr = ip->daddr = to.sin_addr.s_addr;
    u->source = htons(5555);
    u->dest = htons(9998);
    u->len = htons(sizeof(pkt) - sizeof(*ip));
    return sendto(raw, pkt, sizeof(pkt), 0, (struct sockaddr *)&to, sizeof(to)) ==
           (ssize_t)sizeof(pkt);
}

/* A copy of a UDP packet to RAW_PORT, on the raw socket. */
static int raw_receive(int raw)
{
    unsigned char buf[256];
    struct pollfd p = {.fd = raw, .events = POLLIN};

    send_udp(RAW_PORT);
    for (int i = 0; i < 16 && poll(&p, 1, WAIT_MS) == 1; i++) {
        ssize_t n = recv(raw, buf, sizeof(buf), 0);
        if (n >= 28 && ntohs(((struct udphdr *)(buf + 20))->dest) == RAW_PORT)
            return 1;
    }
    return 0;
}

/* The verdict's answer from the kernel: its error (0: none came). */
static int verdict_error(struct nfq_handle *h)
{
    char buf[4096];
    struct pollfd p = {.fd = nfq_fd(h), .events = POLLIN};
    ssize_t n;

    if (poll(&p, 1, 500) != 1 || (n = recv(nfq_fd(h), buf, sizeof(buf), 0)) <= 0)
        return 0;
    struct nlmsghdr *nh = (struct nlmsghdr *)buf;
    if (nh->nlmsg_type != NLMSG_ERROR)
        return 0;
    return ((struct nlmsgerr *)NLMSG_DATA(nh))->error;
}

static void child(int raw, struct nfq_handle *h, struct nfq_q_handle *qh, int out)
{
    struct privdrop_user nobody = {.uid = 65534, .gid = 65534};
    struct found f = {.queued_id = -1};
    char err[200], buf[4096];
    struct pollfd p = {.fd = nfq_fd(h), .events = POLLIN};
    ssize_t n;

    if (privdrop(0, &nobody, err, sizeof(err)) < 0 || privdrop_effective(0) != 0) {
        fprintf(stderr, "privdrop: %s\n", err);
        _exit(2);
    }
    f.raw_sent = raw_send(raw);
    f.raw_received = raw_receive(raw);
    send_udp(QUEUED_PORT);
    if (poll(&p, 1, WAIT_MS) == 1 && (n = recv(nfq_fd(h), buf, sizeof(buf), 0)) > 0) {
        nfq_handle_packet(h, buf, (int)n);
        f.queued_id = packet_id;
    }
    if (f.queued_id >= 0) {
        nfq_set_verdict(qh, (uint32_t)f.queued_id, NF_ACCEPT, 0, NULL);
        f.verdict_error = verdict_error(h);
    }
    if (write(out, &f, sizeof(f)) != sizeof(f))
        _exit(3);
    _exit(0);
}

int main(void)
{
    if (geteuid() != 0) {
        printf("SKIPPED: needs root (raw sockets, NFQUEUE)\n");
        return 77;
    }
    if (unshare(CLONE_NEWNET) < 0 || system("ip link set lo up") != 0 ||
        system("iptables -w 5 -A OUTPUT -p udp -d 127.0.0.1 --dport 9999 -j NFQUEUE "
               "--queue-num 7797") != 0) {
        printf("SKIPPED: no network namespace with iptables here\n");
        return 77;
    }
    int raw = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_UDP), one = 1, pipefd[2];
    struct nfq_handle *h = nfq_open();
    struct nfq_q_handle *qh = h != NULL ? nfq_create_queue(h, QUEUE, on_packet, NULL) : NULL;
    int rx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in at = loopback(QUEUED_PORT);
    REQUIRE(raw >= 0 && setsockopt(raw, IPPROTO_IP, IP_HDRINCL, &one, sizeof(one)) == 0);
    REQUIRE(qh != NULL && nfq_set_mode(qh, NFQNL_COPY_PACKET, 0xffff) == 0);
    REQUIRE(rx >= 0 && bind(rx, (struct sockaddr *)&at, sizeof(at)) == 0 && pipe(pipefd) == 0);

    pid_t pid = fork();
    if (pid == 0)
        child(raw, h, qh, pipefd[1]);
    struct found f = {.queued_id = -1};
    int status = 0;
    CHECK(read(pipefd[0], &f, sizeof(f)) == (ssize_t)sizeof(f));
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECKF(f.raw_sent, "the raw socket sends without capabilities");
    CHECKF(f.raw_received, "the raw socket receives without capabilities");
    CHECKF(f.queued_id >= 0, "the queued packet is read without capabilities");
    CHECKF(f.verdict_error == -EPERM, "the verdict without CAP_NET_ADMIN: error %d, not -EPERM",
           f.verdict_error);

    /* The verdict from the process that holds CAP_NET_ADMIN, on the same socket. */
    char buf[16];
    struct pollfd p = {.fd = rx, .events = POLLIN};
    CHECK(f.queued_id >= 0 && nfq_set_verdict(qh, (uint32_t)f.queued_id, NF_ACCEPT, 0, NULL) > 0);
    CHECKF(poll(&p, 1, WAIT_MS) == 1 && recv(rx, buf, sizeof(buf), 0) == 5,
           "the packet is delivered after the privileged verdict");
    printf("raw send %d, raw receive %d, queued packet %d read, unprivileged verdict %d (%s)\n",
           f.raw_sent, f.raw_received, f.queued_id, f.verdict_error, strerror(-f.verdict_error));
    nfq_destroy_queue(qh);
    nfq_close(h);
    return check_result("helper-capfd");
}
