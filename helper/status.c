/* The client side of LOCAL_STATUS, for operators and tests. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "json.h"
#include "localproto.h"
#include "status.h"

#define STATUS_TIMEOUT_MS 5000

/* Reads exactly len bytes within the deadline; 0 or -1 (errno set). */
static int read_full(int fd, void *buf, size_t len)
{
    size_t have = 0;

    while (have < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = poll(&p, 1, STATUS_TIMEOUT_MS);
        if (rc == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        ssize_t n = read(fd, (char *)buf + have, len - have);
        if (n == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -1;
        }
        have += (size_t)n;
    }
    return 0;
}

static void print_status(const struct local_status *s, bool json, FILE *out)
{
    if (json) {
        fprintf(out, "{\"upstream_connected\":%s,\"frontend\":",
                s->upstream_connected ? "true" : "false");
        json_string(out, s->frontend);
        fprintf(out, ",\"epoch\":%llu,\"cluster\":", (unsigned long long)s->upstream_epoch);
        json_string(out, s->cluster);
        fprintf(out, ",\"node\":");
        json_string(out, s->node);
        fprintf(out, ",\"clients\":%u,\"contacts\":%u,\"lookups\":%llu}\n", s->clients,
                s->contacts, (unsigned long long)s->lookups);
        return;
    }
    fprintf(out, "%-20s %s\n", "upstream connected", s->upstream_connected ? "yes" : "no");
    fprintf(out, "%-20s %s\n", "frontend", s->frontend);
    fprintf(out, "%-20s %llu\n", "epoch", (unsigned long long)s->upstream_epoch);
    fprintf(out, "%-20s %s/%s\n", "node", s->cluster, s->node);
    fprintf(out, "%-20s %u\n", "clients", s->clients);
    fprintf(out, "%-20s %u\n", "contacts", s->contacts);
    fprintf(out, "%-20s %llu\n", "lookups", (unsigned long long)s->lookups);
}

int helper_status(const char *socket_path, bool json, FILE *out, FILE *err)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    struct local_header h = {.magic = LOCAL_MAGIC, .type = LOCAL_STATUS, .request_id = 1};
    union {
        struct local_status status;
        struct local_error error;
    } reply;
    int fd = -1;

    if (strlen(socket_path) >= sizeof(sun.sun_path)) {
        fprintf(err, "qcg-helper: socket path too long: %s\n", socket_path);
        return 1;
    }
    memcpy(sun.sun_path, socket_path, strlen(socket_path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
        fprintf(err, "qcg-helper: no helper reachable at %s: %s\n", socket_path, strerror(errno));
        goto fail;
    }
    if (send(fd, &h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h) ||
        read_full(fd, &h, sizeof(h)) < 0) {
        fprintf(err, "qcg-helper: the helper at %s did not answer: %s\n", socket_path,
                strerror(errno));
        goto fail;
    }
    if (local_header_check(&h) != 0 || h.request_id != 1 ||
        (h.type != LOCAL_STATUS_OK && h.type != LOCAL_ERROR) ||
        read_full(fd, &reply, h.length) < 0 || local_payload_check(h.type, &reply) != 0) {
        fprintf(err, "qcg-helper: the helper at %s sent a malformed reply\n", socket_path);
        goto fail;
    }
    if (h.type == LOCAL_ERROR) {
        fprintf(err, "qcg-helper: the helper at %s refused: %s (error %d)\n", socket_path,
                reply.error.message, reply.error.code);
        goto fail;
    }
    close(fd);
    print_status(&reply.status, json, out);
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    return 1;
}
