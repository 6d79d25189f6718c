/* The broker <-> reflector process messages: their table and field
   checks; see reflector_msg.h. */
#include "reflector_msg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

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

static int init_ok(const void *msg, const void *ctx, char *why, size_t whylen)
{
    const struct rmsg_init *m = msg;

    (void)ctx;
    if (m->version != RMSG_VERSION) {
        snprintf(why, whylen, "version %u, not %d", (unsigned)m->version, RMSG_VERSION);
        return -1;
    }
    if (m->log_level > LOG_LEVEL_DEBUG) {
        snprintf(why, whylen, "log level %u", (unsigned)m->log_level);
        return -1;
    }
    if (flag_ok(m->syslog, "syslog", why, whylen) < 0 ||
        flag_ok(m->setuser, "setuser", why, whylen) < 0 ||
        flag_ok(m->listen6, "listen6", why, whylen) < 0)
        return -1;
    const uint32_t bounds[] = {m->read_timeout_ms, m->conns_max, m->conns_per_address,
                               m->expected_max, m->expected_per_cluster};
    for (size_t i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++) {
        if (bounds[i] > RMSG_BOUND_MAX) {
            snprintf(why, whylen, "bound %zu: %u is above %u", i, (unsigned)bounds[i],
                     RMSG_BOUND_MAX);
            return -1;
        }
    }
    if (m->setuser && (m->uid == (uint32_t)-1 || m->gid == (uint32_t)-1)) {
        snprintf(why, whylen, "uid or gid is -1");
        return -1;
    }
    return 0;
}

static int ready_ok(const void *msg, const void *ctx, char *why, size_t whylen)
{
    const struct rmsg_ready *m = msg;

    (void)ctx;
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

static int expect_ok(const void *msg, const void *ctx, char *why, size_t whylen)
{
    const struct rmsg_expect *m = msg;

    (void)ctx;
    static const char *const cluster[2] = {"initiator's cluster", "target's cluster"};
    static const char *const node[2] = {"initiator's node", "target's node"};
    if (m->expiry == 0 || m->expiry > INT64_MAX) {
        snprintf(why, whylen, "expiry %llu", (unsigned long long)m->expiry);
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

static int observed_ok(const void *msg, const void *ctx, char *why, size_t whylen)
{
    const struct rmsg_observed *m = msg;

    (void)ctx;
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

const struct imsg_type rmsg_types[IMSG_TYPES] = {
    [RMSG_INIT] = {"INIT", sizeof(struct rmsg_init), 0, init_ok},
    [RMSG_READY] = {"READY", sizeof(struct rmsg_ready), 0, ready_ok},
    [RMSG_EXPECT] = {"EXPECT", sizeof(struct rmsg_expect), 0, expect_ok},
    [RMSG_OBSERVED] = {"OBSERVED", sizeof(struct rmsg_observed), 0, observed_ok},
    [RMSG_COUNTERS] = {"COUNTERS", sizeof(struct rmsg_counters), 0, NULL},
    [RMSG_LISTEN6] = {"LISTEN6", sizeof(struct rmsg_listen6), IMSG_WITH_FD, NULL},
};
