/* Accepting for the event engine; see acceptor.h. */
#include "acceptor.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "sockaddr_text.h"

void acceptor_init(struct acceptor *a, atomic_ullong *shed)
{
    memset(a, 0, sizeof(*a));
    a->shed = shed;
    a->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void acceptor_free(struct acceptor *a)
{
    if (a->spare_fd >= 0)
        close(a->spare_fd);
    a->spare_fd = -1;
}

void acceptor_refused(struct acceptor *a, uint64_t now_ms, const char *addr, const char *why)
{
    if (a->logged_ms != 0 && now_ms < a->logged_ms + 1000) {
        a->suppressed++;
        return;
    }
    if (a->suppressed)
        log_warnx("refused %s: %s (and %lu more refused since the last line)", addr, why,
                  a->suppressed);
    else
        log_warnx("refused %s: %s", addr, why);
    a->logged_ms = now_ms;
    a->suppressed = 0;
}

/* Out of descriptors: the spare one takes the connection and closes it. */
static void shed_one(struct acceptor *a, int listen_fd, uint64_t now_ms)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char addr[INET6_ADDRSTRLEN + 8];

    close(a->spare_fd);
    int fd = accept4(listen_fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
    if (fd >= 0) {
        sockaddr_text(&ss, len, addr, sizeof(addr));
        acceptor_refused(a, now_ms, addr, "out of file descriptors");
        if (a->shed != NULL)
            atomic_fetch_add_explicit(a->shed, 1, memory_order_relaxed);
        close(fd);
    }
    a->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void acceptor_run(struct acceptor *a, int listen_fd, int max, uint64_t now_ms, accepted_fn fn,
                  void *arg)
{
    for (int i = 0; i < max; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd = accept4(listen_fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            fn(arg, fd, &ss, len);
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            break;
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
            continue;
        if ((errno == EMFILE || errno == ENFILE) && a->spare_fd >= 0) {
            shed_one(a, listen_fd, now_ms);
            continue;
        }
        /* Without a spare (or another error) the loop comes back at once:
           say so once a second, not on every turn. */
        acceptor_refused(a, now_ms, "a connection", strerror(errno));
        break;
    }
}
