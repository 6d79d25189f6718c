/* Clocks, socket options and bounded I/O used throughout the library. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "internal.h"

uint64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int set_nonblocking(int fd, bool on)
{
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0)
        return -1;
    flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
    return fcntl(fd, F_SETFL, flags);
}

int conn_set_options(int fd, bool keepalive)
{
    int one = 1;

    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
        return -1;
    if (keepalive) {
        /* Well under NAT and firewall idle timeouts, so idle MPI links live. */
        int idle = 60, intvl = 10, cnt = 6;

        if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) < 0 ||
            setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) < 0 ||
            setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) < 0 ||
            setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) < 0)
            return -1;
    }
    return 0;
}

int random_bytes(void *buf, size_t len)
{
    return RAND_bytes(buf, (int)len) == 1 ? 0 : -1;
}

int wait_fd(int fd, short events, uint64_t deadline_us)
{
    for (int rounds = 0; rounds < 100000; rounds++) {
        struct pollfd p = {.fd = fd, .events = events};
        uint64_t now = now_us();
        int ms, n;

        if (now >= deadline_us)
            return 0;
        ms = (int)((deadline_us - now + 999) / 1000);
        n = poll(&p, 1, ms);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
    return 0;
}

int write_full(int fd, const void *buf, size_t len, uint64_t deadline_us)
{
    size_t done = 0;

    while (done < len) {
        ssize_t n = send(fd, (const char *)buf + done, len - done, MSG_NOSIGNAL);

        if (n >= 0) {
            done += (size_t)n;
            continue;
        }
        if (errno == EINTR)
            continue;
        if (errno == EPIPE || errno == ECONNRESET)
            return QCG_EPEER;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return QCG_ESYS;
        n = wait_fd(fd, POLLOUT, deadline_us);
        if (n == 0)
            return QCG_ETIMEDOUT;
        if (n < 0)
            return QCG_ESYS;
    }
    return 0;
}

int unix_connect(const char *path, int timeout_ms)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    int fd, saved;

    if (strlen(path) >= sizeof(sun.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(sun.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    /* A Unix connect waits for room in a full backlog for SO_SNDTIMEO: a
       blocking connect bounded that way, then non-blocking for the rest. */
    if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
        goto fail;
    while (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
        if (errno != EINTR)
            goto fail;
    }
    tv.tv_sec = 0;
    tv.tv_usec = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
        set_nonblocking(fd, true) < 0)
        goto fail;
    return fd;
fail:
    saved = errno;
    close(fd);
    errno = saved;
    return -1;
}
