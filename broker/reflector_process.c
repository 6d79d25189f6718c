/* The reflector's process: qcg-broker executed again by reflector_client.c,
   serving the reflector on the socket it was given; see reflector.h. */
#include "reflector.h"
#include "reflector_msg.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "address.h"
#include "log.h"
#include "monotonic.h"
#include "privdrop.h"
#include "sockaddr_text.h"

#define DRAIN_MAX 64
#define COUNTERS_EVERY_MS 1000
#define PEER "the broker"

struct channel {
    struct imsg_chan c;
    struct ratelimit dropped; /* the reflector thread's */
};

/* The observe callback, on the reflector's thread: never waits for the
   broker; an observation that does not fit in the channel is dropped. */
static void send_observed(void *arg, const struct reflector_observation *o)
{
    struct channel *ch = arg;
    struct rmsg_observed m;

    memset(&m, 0, sizeof(m));
    m.h.type = RMSG_OBSERVED;
    if (o->cluster != NULL) {
        m.punch = 1;
        snprintf(m.cluster, sizeof(m.cluster), "%s", o->cluster);
        snprintf(m.node, sizeof(m.node), "%s", o->node ? o->node : "");
        snprintf(m.local_addr, sizeof(m.local_addr), "%s", o->local_addr ? o->local_addr : "");
        m.local_port = o->local_port;
    }
    snprintf(m.addr, sizeof(m.addr), "%s", o->addr);
    m.port = o->port;
    if (imsg_send(&ch->c, &m, sizeof(m), -1, 0) < 0) {
        char line[200];
        snprintf(line, sizeof(line), "observation of %s:%d not passed to " PEER ": %s", o->addr,
                 o->port, strerror(errno));
        imsg_warn_limited(&ch->dropped, line);
    }
}

/* READY, ok or not; a failure is logged here too (the broker may be gone). */
static void ready(struct imsg_chan *c, const char *why)
{
    struct rmsg_ready m;
    memset(&m, 0, sizeof(m));
    m.h.type = RMSG_READY;
    m.ok = why == NULL;
    if (why != NULL) {
        snprintf(m.why, sizeof(m.why), "%s", why);
        log_error("%s", why);
    }
    if (imsg_send(c, &m, sizeof(m), -1, REFLECTOR_READY_MS) < 0)
        log_warn("telling " PEER " we %s", why == NULL ? "serve" : "failed");
}

/* The first message: INIT, within REFLECTOR_READY_MS, and LISTEN6 when it
   says so (*fd6 its socket, else -1). */
static int read_init(struct imsg_chan *c, struct rmsg_init *init, int *fd6)
{
    union rmsg m;
    char why[RMSG_WHY_LEN + 100];
    int fd;

    *fd6 = -1;
    c->accept = IMSG_BIT(RMSG_INIT);
    if (imsg_recv_wait(c, &m, sizeof(m), &fd, REFLECTOR_READY_MS, why, sizeof(why)) < 0) {
        log_error("%s", why);
        return -1;
    }
    *init = m.init;
    explicit_bzero(&m, sizeof(m));
    c->accept = IMSG_BIT(RMSG_LISTEN6);
    if (init->listen6 &&
        imsg_recv_wait(c, &m, sizeof(m), fd6, REFLECTOR_READY_MS, why, sizeof(why)) < 0) {
        log_error("%s", why);
        explicit_bzero(init, sizeof(*init));
        return -1;
    }
    c->accept = RMSG_TO_CHILD;
    return 0;
}

/* "203.0.113.10:7704 and [2001:db8::10]:7704": where it listens. */
static void listeners_text(int fd, int fd6, char *out, size_t outlen)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char a[HOSTPORT_MAX], b[HOSTPORT_MAX] = "";

    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
        sockaddr_text(&ss, len, a, sizeof(a));
    else
        snprintf(a, sizeof(a), "(unknown)");
    len = sizeof(ss);
    if (fd6 >= 0 && getsockname(fd6, (struct sockaddr *)&ss, &len) == 0)
        sockaddr_text(&ss, len, b, sizeof(b));
    snprintf(out, outlen, "%s%s%s", a, b[0] ? " and " : "", b);
}

static void expect(struct reflector *r, const struct rmsg_expect *m)
{
    struct reflector_side sides[2];
    memset(sides, 0, sizeof(sides));
    for (int i = 0; i < 2; i++) {
        /* Checked: NUL-terminated within the same size. */
        memcpy(sides[i].cluster, m->sides[i].cluster, sizeof(sides[i].cluster));
        memcpy(sides[i].node, m->sides[i].node, sizeof(sides[i].node));
        sides[i].preserving = m->sides[i].preserving == 1;
    }
    reflector_expect(r, m->pair, sides, m->expiry);
}

/* The counters to the broker when they changed since the last ones it
   took; a full channel drops them (the next ones carry the totals). */
static void send_counters(struct channel *ch, struct reflector *r, struct reflector_counters *last)
{
    struct rmsg_counters m;
    memset(&m, 0, sizeof(m));
    m.h.type = RMSG_COUNTERS;
    reflector_counters(r, &m.counters);
    if (memcmp(&m.counters, last, sizeof(*last)) == 0)
        return;
    if (imsg_send(&ch->c, &m, sizeof(m), -1, 0) == 0)
        *last = m.counters;
}

/* EXPECTs until the broker closes the channel, counters to it meanwhile.  0
   then, -1 on an error. */
static int serve(struct channel *ch, struct reflector *r)
{
    struct reflector_counters sent;
    uint64_t next_counters = 0;

    memset(&sent, 0, sizeof(sent));
    for (;;) {
        struct pollfd p = {.fd = ch->c.fd, .events = POLLIN};
        if (poll(&p, 1, COUNTERS_EVERY_MS) < 0 && errno != EINTR) {
            log_warn("poll");
            return -1;
        }
        if (monotonic_ms() >= next_counters) {
            send_counters(ch, r, &sent);
            next_counters = monotonic_ms() + COUNTERS_EVERY_MS;
        }
        for (int i = 0; i < DRAIN_MAX; i++) {
            union rmsg m;
            char why[RMSG_WHY_LEN];
            int fd;
            errno = 0; /* a hang-up sets none */
            int rc = imsg_recv(&ch->c, &m, sizeof(m), &fd, why, sizeof(why));
            if (rc == IMSG_NONE)
                break;
            if (rc == IMSG_CLOSED && errno != 0) {
                log_warn("reading the channel");
                return -1;
            }
            if (rc == IMSG_CLOSED)
                return 0;
            if (rc == RMSG_EXPECT)
                expect(r, &m.expect);
        }
    }
}

int reflector_process_main(void)
{
    struct channel ch;
    struct rmsg_init init;
    char why[RMSG_WHY_LEN], err[RMSG_WHY_LEN - 32];

    memset(&ch, 0, sizeof(ch));
    imsg_chan_init(&ch.c, PROC_FD_CHAN, rmsg_types, 0, NULL, PEER);
    prctl(PR_SET_NAME, "qcg-reflector", 0, 0, 0);
    log_init("reflector", LOG_LEVEL_INFO, false);
    if (!proc_child_has_chan()) {
        log_error("descriptor %d is no channel: %s is for qcg-broker to start its reflector",
                  PROC_FD_CHAN, REFLECTOR_PROCESS_ARG);
        return 2;
    }
    /* The broker ends us by closing the channel (or by dying: SIGKILL then).
       A signal to its whole process group (^C, a TERM to the group) must not
       end us first and look like a death to it. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    int fd6;
    if (read_init(&ch.c, &init, &fd6) < 0)
        return 1;
    log_init("reflector", (enum log_level)init.log_level, init.syslog == 1);
    struct privdrop_user as = {.uid = (uid_t)init.uid, .gid = (gid_t)init.gid};
    if (privdrop(0, init.setuser == 1 ? &as : NULL, err, sizeof(err)) < 0) {
        snprintf(why, sizeof(why), "reflector process: %s", err);
        explicit_bzero(&init, sizeof(init));
        ready(&ch.c, why);
        return 1;
    }
    char where[2 * HOSTPORT_MAX + 8];
    listeners_text(PROC_FD_GIVEN, fd6, where, sizeof(where));
    const struct reflector_tuning tuning = {.read_timeout_ms = init.read_timeout_ms,
                                            .conns_max = init.conns_max,
                                            .conns_per_address = init.conns_per_address,
                                            .expected_max = init.expected_max,
                                            .expected_per_cluster = init.expected_per_cluster};
    struct reflector *r = reflector_start_on(PROC_FD_GIVEN, fd6, &init.key, send_observed, &ch,
                                             &tuning, err, sizeof(err));
    explicit_bzero(&init.key, sizeof(init.key));
    if (r == NULL) {
        snprintf(why, sizeof(why), "reflector process: %s", err);
        ready(&ch.c, why);
        return 1;
    }
    log_info("serving %s for qcg-broker (pid %d) as uid %d without capabilities", where,
             (int)getppid(), (int)getuid());
    ready(&ch.c, NULL);
    int rc = serve(&ch, r);
    reflector_stop(r);
    log_info("%s: stopped", rc == 0 ? PEER " closed the channel" : "the channel failed");
    return rc == 0 ? 0 : 1;
}
