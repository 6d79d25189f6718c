/* The TCP steps every check of qcg-probe is made of: an address, a bounded
   connect that tells a refusal from silence, a listener. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "address.h"
#include "probe.h"
#include "refusal.h"

int probe_sockaddr(const char *addr, int port, struct sockaddr_in *sin)
{
    memset(sin, 0, sizeof(*sin));
    sin->sin_family = AF_INET;
    sin->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, addr, &sin->sin_addr) == 1 ? 0 : -1;
}

/* What a connect error says: a RST, an ICMP error (both ECONNREFUSED for a
   port unreachable: the error queue tells), or a problem of this node.  why
   gets the refusal in words. */
static enum probe_outcome outcome_of(int fd, int err, const char *addr, int port, char *why,
                                     size_t whylen)
{
    struct refusal rf;
    char e[HOSTPORT_MAX];
    hostport_format(addr, port, e, sizeof(e));
    switch (refusal_read(fd, err, &rf)) {
    case REFUSAL_RESET:
        snprintf(why, whylen, "connect %s: refused by a TCP reset", e);
        return PROBE_RESET;
    case REFUSAL_ICMP:
        snprintf(why, whylen, "connect %s: ICMP %s%s%s", e, refusal_icmp_text(&rf),
                 rf.from[0] ? " from " : "", rf.from);
        return PROBE_ICMP;
    case REFUSAL_NONE:
        break;
    }
    snprintf(why, whylen, "connect %s: %s", e, strerror(err));
    if (err == EHOSTUNREACH || err == ENETUNREACH || err == EHOSTDOWN)
        return PROBE_ICMP;
    return PROBE_LOCAL_ERROR;
}

/* "addr:port", "[v6]:port" for the why texts. */
static const char *ep(const char *addr, int port, char *buf, size_t len)
{
    hostport_format(addr, port, buf, len);
    return buf;
}

int probe_connect(const char *local_addr, int local_port, const char *addr, int port,
                  int timeout_ms, double *ms, enum probe_outcome *outcome, char *why, size_t whylen)
{
    struct sockaddr_storage to, from;
    enum probe_outcome dummy;
    int one = 1, err = 0;
    socklen_t elen = sizeof(err), tolen, fromlen = 0;
    char e[HOSTPORT_MAX];

    if (outcome == NULL)
        outcome = &dummy;
    *outcome = PROBE_LOCAL_ERROR;
    tolen = address_sockaddr(addr, (uint16_t)port, &to);
    if (tolen == 0) {
        snprintf(why, whylen, "%s is not an IP address", addr);
        return -1;
    }
    int fd = socket(to.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(why, whylen, "socket: %s", strerror(errno));
        return -1;
    }
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    (void)refusal_watch(fd);
    /* From the node's own address, also with any port: a node with several
       networks must not leave from another one.  An address of the other
       family than the destination's: its port alone, the route picks the
       address. */
    bool any = local_addr == NULL || strcmp(local_addr, "0.0.0.0") == 0 ||
               address_family(local_addr) != to.ss_family;
    if (!any)
        fromlen = address_sockaddr(local_addr, (uint16_t)local_port, &from);
    else if (local_port > 0)
        fromlen = address_sockaddr(to.ss_family == AF_INET6 ? "::" : "0.0.0.0",
                                   (uint16_t)local_port, &from);
    if ((!any || local_port > 0) &&
        (fromlen == 0 || bind(fd, (struct sockaddr *)&from, fromlen) < 0)) {
        snprintf(why, whylen, "bind %s: %s",
                 ep(any ? (to.ss_family == AF_INET6 ? "::" : "0.0.0.0") : local_addr, local_port, e,
                    sizeof(e)),
                 fromlen == 0 ? "not an address" : strerror(errno));
        close(fd);
        return -1;
    }
    double start = probe_now_ms();
    if (connect(fd, (struct sockaddr *)&to, tolen) < 0 && errno != EINPROGRESS) {
        /* At once: nothing left this node (no route), but for a RST from a
           local stack. */
        err = errno;
        *outcome =
            err == ECONNREFUSED ? outcome_of(fd, err, addr, port, why, whylen) : PROBE_LOCAL_ERROR;
        if (*outcome == PROBE_LOCAL_ERROR)
            snprintf(why, whylen, "connect %s: %s", ep(addr, port, e, sizeof(e)), strerror(err));
        close(fd);
        return -1;
    }
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int rc;
    do
        rc = poll(&p, 1, timeout_ms);
    while (rc < 0 && errno == EINTR);
    if (rc == 0) {
        *outcome = PROBE_NO_ANSWER;
        snprintf(why, whylen, "connect %s: no answer in %d ms", ep(addr, port, e, sizeof(e)),
                 timeout_ms);
        close(fd);
        return -1;
    }
    if (rc < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0 || err != 0) {
        err = err ? err : errno;
        *outcome = outcome_of(fd, err, addr, port, why, whylen);
        close(fd);
        return -1;
    }
    if (ms != NULL)
        *ms = probe_now_ms() - start;
    *outcome = PROBE_CONNECTED;
    return fd;
}

int probe_listen(const char *addr, int port, int *bound_port, char *why, size_t whylen)
{
    struct sockaddr_storage sa;
    socklen_t len = address_sockaddr(addr, (uint16_t)port, &sa), slen = sizeof(sa);
    int one = 1;
    char e[HOSTPORT_MAX];

    if (len == 0) {
        snprintf(why, whylen, "cannot listen on %s: not an IP address", addr);
        return -1;
    }
    int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(why, whylen, "socket: %s", strerror(errno));
        return -1;
    }
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, len) < 0 || listen(fd, 4) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &slen) < 0) {
        snprintf(why, whylen, "cannot listen on %s: %s", ep(addr, port, e, sizeof(e)),
                 strerror(errno));
        close(fd);
        return -1;
    }
    if (bound_port != NULL)
        *bound_port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                     : ((struct sockaddr_in *)&sa)->sin_port);
    return fd;
}
