/* The reflector's tests: a client connection, and reading its one answer line. */
#ifndef TESTS_BROKER_LINE_ANSWER_H
#define TESTS_BROKER_LINE_ANSWER_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <unistd.h>

/* Reads to EOF (or the socket's receive timeout) into out, without the '\n'.
   A recv with a timeout returns EINTR when a uv loop this thread ran is
   closed (libuv >= 1.45 batches epoll_ctl through io_uring, whose teardown
   interrupts the ring's users): read on. */
static inline void line_answer(int fd, char *out, size_t outlen)
{
    size_t got = 0;
    for (int i = 0; i < 64 && got + 1 < outlen; i++) {
        ssize_t n = recv(fd, out + got, outlen - 1 - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    out[got] = '\0';
    char *nl = strchr(out, '\n');
    if (nl)
        *nl = '\0';
}

/* A client of 127.0.0.1:port, from address `from` (NULL: any), with a 3 s
   receive timeout; *local (when not NULL) gets its port.  -1 when it cannot
   connect. */
static inline int line_client(int port, const char *from, int *local)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct sockaddr_in src = {.sin_family = AF_INET};
    struct timeval tv = {3, 0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if ((from != NULL && (inet_pton(AF_INET, from, &src.sin_addr) != 1 ||
                          bind(fd, (struct sockaddr *)&src, sizeof(src)) < 0)) ||
        connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    socklen_t len = sizeof(src);
    getsockname(fd, (struct sockaddr *)&src, &len);
    if (local)
        *local = ntohs(src.sin_port);
    return fd;
}

#endif
