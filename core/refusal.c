/* See refusal.h. */
#include "refusal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

int refusal_watch(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int one = 1;

    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return -1;
    if (ss.ss_family == AF_INET6) {
        /* A dual-stack socket may reach an IPv4 peer: watch both. */
        (void)setsockopt(fd, IPPROTO_IP, IP_RECVERR, &one, sizeof(one));
        return setsockopt(fd, IPPROTO_IPV6, IPV6_RECVERR, &one, sizeof(one));
    }
    return setsockopt(fd, IPPROTO_IP, IP_RECVERR, &one, sizeof(one));
}

/* The queued ICMP error's sender, when the kernel says. */
static void offender(const struct sock_extended_err *e, struct refusal *r)
{
    const struct sockaddr *sa = SO_EE_OFFENDER(e);
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, r->from, sizeof(r->from));
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, r->from,
                  sizeof(r->from));
}

enum refusal_kind refusal_read(int fd, int err, struct refusal *r)
{
    char control[512], data[64];
    struct iovec iov = {.iov_base = data, .iov_len = sizeof(data)};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};

    memset(r, 0, sizeof(*r));
    /* Several errors may be queued (retransmitted SYNs): the last decides,
       bounded so that a flood of ICMP errors cannot hold us. */
    for (int i = 0; i < 8; i++) {
        m.msg_control = control;
        m.msg_controllen = sizeof(control);
        if (recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
            break;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c)) {
            bool v4 = c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_RECVERR;
            bool v6 = c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_RECVERR;
            if (!v4 && !v6)
                continue;
            const struct sock_extended_err *e = (const void *)CMSG_DATA(c);
            if (e->ee_origin != SO_EE_ORIGIN_ICMP && e->ee_origin != SO_EE_ORIGIN_ICMP6)
                continue;
            r->kind = REFUSAL_ICMP;
            r->icmp6 = e->ee_origin == SO_EE_ORIGIN_ICMP6;
            r->icmp_type = e->ee_type;
            r->icmp_code = e->ee_code;
            r->from[0] = '\0';
            offender(e, r);
        }
    }
    if (r->kind == REFUSAL_NONE && err == ECONNREFUSED)
        r->kind = REFUSAL_RESET;
    return r->kind;
}

const char *refusal_icmp_text(const struct refusal *r)
{
    /* Destination unreachable: type 3 (ICMP), 1 (ICMPv6). */
    static const char *const v4[] = {"network unreachable",      "host unreachable",
                                     "protocol unreachable",     "port unreachable",
                                     "fragmentation needed",     "source route failed",
                                     "network unknown",          "host unknown",
                                     "source host isolated",     "network prohibited",
                                     "host prohibited",          "network unreachable for TOS",
                                     "host unreachable for TOS", "administratively prohibited"};
    static const char *const v6[] = {"no route",
                                     "administratively prohibited",
                                     "beyond scope of source address",
                                     "address unreachable",
                                     "port unreachable",
                                     "source address failed policy",
                                     "reject route"};
    if (r->kind != REFUSAL_ICMP)
        return "";
    if (!r->icmp6 && r->icmp_type == 3 && r->icmp_code >= 0 &&
        (size_t)r->icmp_code < sizeof(v4) / sizeof(v4[0]))
        return v4[r->icmp_code];
    if (r->icmp6 && r->icmp_type == 1 && r->icmp_code >= 0 &&
        (size_t)r->icmp_code < sizeof(v6) / sizeof(v6[0]))
        return v6[r->icmp_code];
    if ((!r->icmp6 && r->icmp_type == 11) || (r->icmp6 && r->icmp_type == 3))
        return "time exceeded";
    return "error";
}

const char *refusal_word(enum refusal_kind kind)
{
    return kind == REFUSAL_RESET ? "reset" : kind == REFUSAL_ICMP ? "icmp" : NULL;
}
