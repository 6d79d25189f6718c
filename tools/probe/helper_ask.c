/* One request to the local helper on a connection of its own (no HELLO: SITE,
   PROBE, OBSERVED and STATUS are allowed before one). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "probe.h"

/* Reads exactly len bytes before the deadline.  0, or -1 (errno set). */
static int read_all(int fd, void *buf, size_t len, double deadline_ms)
{
    size_t got = 0;
    while (got < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = probe_left_ms(deadline_ms);
        if (left == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        int rc = poll(&p, 1, left);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0) {
            if (rc == 0)
                errno = ETIMEDOUT;
            return -1;
        }
        ssize_t n = recv(fd, (char *)buf + got, len - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = ECONNRESET;
            return -1;
        }
        got += (size_t)n;
    }
    return 0;
}

int helper_ask(const char *socket_path, uint16_t type, const void *payload, void *reply,
               size_t reply_size, int timeout_ms, int *code, char *why, size_t whylen)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    struct local_header h = {.magic = LOCAL_MAGIC, .type = type, .request_id = 1};
    union local_payload in;
    double deadline = probe_now_ms() + timeout_ms;
    int fd, result = -1;

    *code = 0;
    h.length = (uint32_t)local_payload_size[type];
    if (strlen(socket_path) >= sizeof(sun.sun_path)) {
        snprintf(why, whylen, "helper socket path too long: %s", socket_path);
        return -1;
    }
    memcpy(sun.sun_path, socket_path, strlen(socket_path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
        snprintf(why, whylen, "no helper at %s: %s", socket_path, strerror(errno));
        goto out;
    }
    if (send(fd, &h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h) ||
        (h.length > 0 && send(fd, payload, h.length, MSG_NOSIGNAL) != (ssize_t)h.length)) {
        snprintf(why, whylen, "the helper at %s: %s", socket_path, strerror(errno));
        goto out;
    }
    if (read_all(fd, &h, sizeof(h), deadline) < 0) {
        snprintf(why, whylen, "the helper at %s did not answer: %s", socket_path,
                 strerror(errno));
        goto out;
    }
    if (local_header_check(&h) != 0 || h.request_id != 1 || h.length > sizeof(in) ||
        read_all(fd, &in, h.length, deadline) < 0 || local_payload_check(h.type, &in) != 0) {
        snprintf(why, whylen,
                 "the helper at %s sent a malformed reply (an older helper? this probe speaks "
                 "local protocol %d)",
                 socket_path, LOCAL_VERSION);
        goto out;
    }
    if (h.type == LOCAL_ERROR) {
        *code = in.error.code;
        snprintf(why, whylen, "%s", in.error.message);
        result = LOCAL_ERROR;
        goto out;
    }
    if (h.length > reply_size) {
        snprintf(why, whylen, "the helper answered with an unexpected message (type %u)",
                 (unsigned)h.type);
        goto out;
    }
    memcpy(reply, &in, h.length);
    result = h.type;
out:
    if (fd >= 0)
        close(fd);
    return result;
}
