/* The relay's sockets; see sockets.h. */
#include "sockets.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Keepalive like the processes' own connections (docs/architecture.md): a
   vanished client frees its pair instead of holding it for ever. */
#define SOCK_KEEPIDLE 60
#define SOCK_KEEPINTVL 10
#define SOCK_KEEPCNT 6

int sock_listen(const char *addr, int port, int backlog, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
    char serv[16];
    int fd = -1, one = 1, zero = 0;

    snprintf(serv, sizeof(serv), "%d", port);
    if (addr == NULL || addr[0] == '\0') {
        /* Any address: IPv6 socket accepting IPv4 too, else IPv4 only. */
        hints.ai_family = AF_INET6;
        if (getaddrinfo("::", serv, &hints, &res) != 0 ||
            (fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0) {
            if (res)
                freeaddrinfo(res);
            res = NULL;
            hints.ai_family = AF_INET;
            addr = "0.0.0.0";
        } else {
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
        }
    }
    if (res == NULL) {
        int gai = getaddrinfo(addr, serv, &hints, &res);
        if (gai != 0) {
            snprintf(err, errlen, "listen %s: %s", addr, gai_strerror(gai));
            return -1;
        }
        fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            snprintf(err, errlen, "socket: %s", strerror(errno));
            freeaddrinfo(res);
            return -1;
        }
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, backlog) < 0) {
        snprintf(err, errlen, "cannot listen on %s port %d: %s", addr ? addr : "any address", port,
                 strerror(errno));
        close(fd);
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    return fd;
}

int sock_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return 0;
    return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port);
}

void sock_tune(int fd)
{
    int one = 1, idle = SOCK_KEEPIDLE, intvl = SOCK_KEEPINTVL, cnt = SOCK_KEEPCNT;
    /* Best effort: a relay forwards what arrives at once (latency), and
       keepalive frees the pair of a vanished peer. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}
