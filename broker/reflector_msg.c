/* The broker <-> reflector process messages: checks, send, receive; see
   reflector_msg.h. */
#include "reflector_msg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"
#include "monotonic.h"

/* Lines of rmsg_warn_limited: a burst seen in full, a flood not. */
#define WARN_INTERVAL_MS 1000
#define WARN_BURST 10

static const size_t rmsg_sizes[] = {
    [RMSG_INIT] = sizeof(struct rmsg_init),         [RMSG_READY] = sizeof(struct rmsg_ready),
    [RMSG_EXPECT] = sizeof(struct rmsg_expect),     [RMSG_OBSERVED] = sizeof(struct rmsg_observed),
    [RMSG_COUNTERS] = sizeof(struct rmsg_counters),
};

static const char *const rmsg_names[] = {
    [RMSG_INIT] = "INIT",         [RMSG_READY] = "READY",       [RMSG_EXPECT] = "EXPECT",
    [RMSG_OBSERVED] = "OBSERVED", [RMSG_COUNTERS] = "COUNTERS",
};

/* A string field: NUL-terminated within its n bytes, printable ASCII, and
   empty or not as asked. */
static int text_ok(const char *s, size_t n, bool empty, const char *what, char *why, size_t whylen)
{
    const char *nul = memchr(s, '\0', n);
    if (nul == NULL) {
        snprintf(why, whylen, "%s is not NUL-terminated within %zu bytes", what, n);
        return -1;
    }
    if ((nul == s) != empty) {
        snprintf(why, whylen, "%s is %s", what, empty ? "not empty" : "empty");
        return -1;
    }
    for (const char *p = s; p < nul; p++) {
        if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e) {
            snprintf(why, whylen, "%s holds byte 0x%02x", what, (unsigned char)*p);
            return -1;
        }
    }
    return 0;
}

static int addr_ok(const char *s, size_t n, const char *what, char *why, size_t whylen)
{
    unsigned char bin[sizeof(struct in6_addr)];
    if (text_ok(s, n, false, what, why, whylen) < 0)
        return -1;
    if (inet_pton(AF_INET, s, bin) != 1 && inet_pton(AF_INET6, s, bin) != 1) {
        snprintf(why, whylen, "%s is not an IP address", what);
        return -1;
    }
    return 0;
}

static int port_ok(int32_t port, const char *what, char *why, size_t whylen)
{
    if (port < 1 || port > 65535) {
        snprintf(why, whylen, "%s %d is not 1..65535", what, (int)port);
        return -1;
    }
    return 0;
}

static int flag_ok(uint32_t v, const char *what, char *why, size_t whylen)
{
    if (v > 1) {
        snprintf(why, whylen, "%s is %u, not 0 or 1", what, (unsigned)v);
        return -1;
    }
    return 0;
}

static int init_ok(const struct rmsg_init *m, char *why, size_t whylen)
{
    if (m->version != RMSG_VERSION) {
        snprintf(why, whylen, "version %u, not %d", (unsigned)m->version, RMSG_VERSION);
        return -1;
    }
    if (m->log_level > LOG_LEVEL_DEBUG) {
        snprintf(why, whylen, "log level %u", (unsigned)m->log_level);
        return -1;
    }
    if (flag_ok(m->syslog, "syslog", why, whylen) < 0 ||
        flag_ok(m->setuser, "setuser", why, whylen) < 0)
        return -1;
    if (m->setuser && (m->uid == (uint32_t)-1 || m->gid == (uint32_t)-1)) {
        snprintf(why, whylen, "uid or gid is -1");
        return -1;
    }
    return 0;
}

static int ready_ok(const struct rmsg_ready *m, char *why, size_t whylen)
{
    if (flag_ok(m->ok, "ok", why, whylen) < 0)
        return -1;
    /* A failure says why; the text is logged, so printable (spaces too). */
    const char *nul = memchr(m->why, '\0', sizeof(m->why));
    if (nul == NULL || (nul == m->why) != (m->ok == 1)) {
        snprintf(why, whylen, "reason %s", nul == NULL ? "not NUL-terminated" : "missing or extra");
        return -1;
    }
    for (const char *p = m->why; p < nul; p++) {
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) {
            snprintf(why, whylen, "reason holds byte 0x%02x", (unsigned char)*p);
            return -1;
        }
    }
    return 0;
}

static int expect_ok(const struct rmsg_expect *m, char *why, size_t whylen)
{
    static const char *const cluster[2] = {"initiator's cluster", "target's cluster"};
    static const char *const node[2] = {"initiator's node", "target's node"};
    if (m->reserved != 0 || m->expiry == 0 || m->expiry > INT64_MAX) {
        snprintf(why, whylen, "reserved %u, expiry %llu", (unsigned)m->reserved,
                 (unsigned long long)m->expiry);
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        const struct rmsg_side *s = &m->sides[i];
        if (text_ok(s->cluster, sizeof(s->cluster), false, cluster[i], why, whylen) < 0 ||
            text_ok(s->node, sizeof(s->node), false, node[i], why, whylen) < 0 ||
            flag_ok(s->preserving, "preserving", why, whylen) < 0)
            return -1;
    }
    return 0;
}

static int observed_ok(const struct rmsg_observed *m, char *why, size_t whylen)
{
    if (flag_ok(m->punch, "punch", why, whylen) < 0 ||
        addr_ok(m->addr, sizeof(m->addr), "address", why, whylen) < 0 ||
        port_ok(m->port, "port", why, whylen) < 0)
        return -1;
    bool none = m->punch == 0;
    if (text_ok(m->cluster, sizeof(m->cluster), none, "cluster", why, whylen) < 0 ||
        text_ok(m->node, sizeof(m->node), none, "node", why, whylen) < 0)
        return -1;
    if (none) {
        if (m->local_addr[0] != '\0' || m->local_port != 0) {
            snprintf(why, whylen, "a local address without a PUNCH");
            return -1;
        }
        return 0;
    }
    if (addr_ok(m->local_addr, sizeof(m->local_addr), "local address", why, whylen) < 0 ||
        port_ok(m->local_port, "local port", why, whylen) < 0)
        return -1;
    return 0;
}

int rmsg_check(const union rmsg *m, size_t len, unsigned accept, char *why, size_t whylen)
{
    if (len < sizeof(m->type)) {
        snprintf(why, whylen, "%zu bytes, shorter than a type", len);
        return -1;
    }
    uint32_t t = m->type;
    if (t < RMSG_INIT || t > RMSG_COUNTERS || !(accept & RMSG_BIT(t))) {
        snprintf(why, whylen, "type %u %s", (unsigned)t,
                 t >= RMSG_INIT && t <= RMSG_COUNTERS ? "not expected now" : "unknown");
        return -1;
    }
    if (len != rmsg_sizes[t]) {
        snprintf(why, whylen, "%s of %zu bytes, not %zu", rmsg_names[t], len, rmsg_sizes[t]);
        return -1;
    }
    char detail[200];
    int rc = 0;
    switch (t) {
    case RMSG_INIT:
        rc = init_ok(&m->init, detail, sizeof(detail));
        break;
    case RMSG_READY:
        rc = ready_ok(&m->ready, detail, sizeof(detail));
        break;
    case RMSG_EXPECT:
        rc = expect_ok(&m->expect, detail, sizeof(detail));
        break;
    case RMSG_OBSERVED:
        rc = observed_ok(&m->observed, detail, sizeof(detail));
        break;
    case RMSG_COUNTERS:
        if (m->counters.reserved != 0) {
            snprintf(detail, sizeof(detail), "reserved is %u, not 0",
                     (unsigned)m->counters.reserved);
            rc = -1;
        }
        break;
    }
    if (rc < 0) {
        snprintf(why, whylen, "%s: %s", rmsg_names[t], detail);
        return -1;
    }
    return (int)t;
}

int rmsg_send(int fd, const void *m, size_t len, unsigned wait_ms)
{
    uint64_t deadline = monotonic_ms() + wait_ms;
    for (;;) {
        ssize_t n = send(fd, m, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n == (ssize_t)len)
            return 0;
        if (n >= 0) { /* a packet goes whole or not at all */
            errno = EMSGSIZE;
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        uint64_t now = monotonic_ms();
        if (now >= deadline)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        if (poll(&p, 1, (int)(deadline - now)) < 0 && errno != EINTR)
            return -1;
    }
}

int rmsg_recv(int fd, union rmsg *m, size_t *len)
{
    for (;;) {
        /* MSG_TRUNC: the packet's real length, so one cut short is seen as such.
           Descriptors a peer may have attached are dropped by the kernel. */
        ssize_t n = recv(fd, m, sizeof(*m), MSG_DONTWAIT | MSG_TRUNC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0) {
            /* An empty packet reads like the end: only a hang-up is one. */
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (poll(&p, 1, 0) < 0 || (p.revents & POLLHUP))
                return 0;
        }
        *len = (size_t)n;
        return 1;
    }
}

int rmsg_recv_first(int fd, enum rmsg_type type, unsigned wait_ms, union rmsg *m, char *why,
                    size_t whylen)
{
    uint64_t deadline = monotonic_ms() + wait_ms;
    size_t len = 0;
    char refused[RMSG_WHY_LEN];

    for (;;) {
        uint64_t now = monotonic_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (now >= deadline) {
            snprintf(why, whylen, "no %s within %u ms", rmsg_names[type], wait_ms);
            return -1;
        }
        if (poll(&p, 1, (int)(deadline - now)) <= 0)
            continue;
        int rc = rmsg_recv(fd, m, &len);
        if (rc < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (rc <= 0) {
            snprintf(why, whylen, "the channel closed before %s", rmsg_names[type]);
            return -1;
        }
        if (rmsg_check(m, len, RMSG_BIT(type), refused, sizeof(refused)) < 0) {
            snprintf(why, whylen, "refused the first message: %s", refused);
            explicit_bzero(m, sizeof(*m));
            return -1;
        }
        return 0;
    }
}

void rmsg_warn_limited(struct ratelimit *rl, const char *line)
{
    unsigned left_out = 0;
    if (!ratelimit_burst_ok(rl, monotonic_ms(), WARN_INTERVAL_MS, WARN_BURST, &left_out))
        return;
    if (left_out > 0)
        log_warnx("%s (and %u more since the last such line)", line, left_out);
    else
        log_warnx("%s", line);
}

void rmsg_refused(struct ratelimit *rl, const char *peer, const char *why)
{
    char line[RMSG_WHY_LEN + 100];
    snprintf(line, sizeof(line), "refused a message from %s: %s", peer, why);
    rmsg_warn_limited(rl, line);
}
