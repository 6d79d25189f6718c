/* qcg-broker's side of the reflector's process: it starts the child, passes
   planned pairs to it and observations back, notices its death and starts a
   new one after a backoff; see reflector.h. */
#include "reflector.h"
#include "reflector_msg.h"

#include <errno.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "daemon.h"
#include "log.h"
#include "monotonic.h"
#include "privdrop.h"

#define DRAIN_MAX 64
#define PEER "the reflector process"

struct reflector_client {
    int listen_fd;  /* held for good: a new child serves the same port */
    int listen6_fd; /* -1, or the IPv6 address's (the same port), the same */
    int port;
    struct rmsg_init init; /* what each child hears first (it holds the punch key) */
    reflector_observe_fn observe;
    void *arg;

    pthread_mutex_t lock;  /* guards chan.fd (senders, its replacement) and unsent */
    struct imsg_chan chan; /* fd -1: no child serves */
    struct proc child;     /* the client's thread's (the first: the starter's) */
    struct ratelimit unsent;
    atomic_int pid; /* 0: none */
    atomic_bool up;
    /* Guarded by lock: the counters of the children gone, and the current
       child's last COUNTERS. */
    struct reflector_counters gone, now;

    /* The client's thread only: */
    int wake_fd; /* eventfd: stop */
    pthread_t thread;
    bool thread_started;
    uint64_t restart_at_ms; /* 0: none planned */
    struct proc_restart restarts;
};

/* ---- a child ---- */

/* READY within REFLECTOR_READY_MS.  0, or -1 with why. */
static int wait_ready(struct reflector_client *c, struct imsg_chan *first, char *err, size_t errlen)
{
    union rmsg m;
    char why[RMSG_WHY_LEN + 100];
    int fd;

    if (imsg_recv_wait(first, &m, sizeof(m), &fd, REFLECTOR_READY_MS, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "process %d: %s", (int)c->child.pid, why);
        return -1;
    }
    if (!m.ready.ok) {
        snprintf(err, errlen, "%s", m.ready.why);
        return -1;
    }
    return 0;
}

/* A new child, serving once this returns 0; -1 with why. */
static int spawn(struct reflector_client *c, char *err, size_t errlen)
{
    const struct proc_spec spec = {.name = "qcg-reflector",
                                   .exec_arg = REFLECTOR_PROCESS_ARG,
                                   .give_fd = c->listen_fd,
                                   .deathsig = SIGKILL};
    struct imsg_chan first; /* INIT and READY; then chan, for every sender */
    char how[160];

    if (proc_start(&c->child, &spec, err, errlen) < 0)
        return -1;
    imsg_chan_init(&first, c->child.fd, rmsg_types, IMSG_BIT(RMSG_READY), NULL, PEER);
    struct rmsg_listen6 l6 = {.h.type = RMSG_LISTEN6};
    if (imsg_send(&first, &c->init, sizeof(c->init), -1, REFLECTOR_SEND_MS) < 0) {
        snprintf(err, errlen, "process %d: sending INIT: %s", (int)c->child.pid, strerror(errno));
    } else if (c->init.listen6 &&
               imsg_send(&first, &l6, sizeof(l6), c->listen6_fd, REFLECTOR_SEND_MS) < 0) {
        snprintf(err, errlen, "process %d: sending LISTEN6: %s", (int)c->child.pid,
                 strerror(errno));
    } else if (wait_ready(c, &first, err, errlen) == 0) {
        pthread_mutex_lock(&c->lock);
        c->chan.fd = c->child.fd;
        pthread_mutex_unlock(&c->lock);
        atomic_store(&c->pid, (int)c->child.pid);
        atomic_store(&c->up, true);
        proc_restart_started(&c->restarts, monotonic_ms());
        return 0;
    }
    proc_stop(&c->child, REFLECTOR_STOP_MS, how, sizeof(how));
    size_t n = strlen(err);
    snprintf(err + n, errlen - n, " (it %s)", how);
    return -1;
}

/* ---- the client's thread: observations, deaths, restarts ---- */

/* The port closed on every address: no child will serve it again. */
static void listeners_close(struct reflector_client *c)
{
    if (c->listen_fd >= 0)
        close(c->listen_fd);
    if (c->listen6_fd >= 0)
        close(c->listen6_fd);
    c->listen_fd = c->listen6_fd = -1;
}

/* After a death or a failed start (ran: it had served; `what` says which):
   a new start later, or none ever after REFLECTOR_RESTARTS_MAX quick ones
   in a row. */
static void schedule_restart(struct reflector_client *c, const char *what, bool ran)
{
    long delay = proc_restart_next(&c->restarts, monotonic_ms(), ran);

    if (delay < 0) {
        log_error("%s; that is %u times in a row within %d s of a start: hole punching is no "
                  "longer planned and port %d is closed (restart qcg-broker)",
                  what, c->restarts.deaths, REFLECTOR_STABLE_MS / 1000, c->port);
        listeners_close(c);
        c->restart_at_ms = 0;
        return;
    }
    log_error("%s: hole punching is not planned until a new one serves (in %ld ms, restart %u of "
              "at most %d)",
              what, delay, c->restarts.deaths, REFLECTOR_RESTARTS_MAX);
    c->restart_at_ms = monotonic_ms() + (uint64_t)delay;
}

static void counters_add(struct reflector_counters *to, const struct reflector_counters *c)
{
    to->maps += c->maps;
    to->punches += c->punches;
    to->paired += c->paired;
    to->punch_failed += c->punch_failed;
    to->dials += c->dials;
    to->refused += c->refused;
    to->misdeclared += c->misdeclared;
    to->refused_address += c->refused_address;
    to->cut += c->cut;
    to->expect_refused += c->expect_refused;
}

/* No child serves from now on: the counters of this one kept, its channel
   closed (the child's cue to stop), how it ended in how. */
static void child_gone(struct reflector_client *c, unsigned wait_ms, char *how, size_t howlen)
{
    pthread_mutex_lock(&c->lock);
    c->chan.fd = -1;
    atomic_store(&c->up, false);
    counters_add(&c->gone, &c->now);
    memset(&c->now, 0, sizeof(c->now));
    pthread_mutex_unlock(&c->lock);
    proc_stop(&c->child, wait_ms, how, howlen);
    atomic_store(&c->pid, 0);
}

/* why: NULL when the channel closed, else how reading it failed. */
static void child_lost(struct reflector_client *c, const char *why)
{
    int pid = atomic_load(&c->pid);
    char how[160], what[400];

    child_gone(c, REFLECTOR_STOP_MS, how, sizeof(how));
    if (why != NULL)
        snprintf(what, sizeof(what), "reflector process %d %s, its channel having failed: %s", pid,
                 how, why);
    else
        snprintf(what, sizeof(what), "reflector process %d %s", pid, how);
    schedule_restart(c, what, true);
}

static void restart(struct reflector_client *c)
{
    char err[RMSG_WHY_LEN + 200], what[RMSG_WHY_LEN + 300];

    c->restart_at_ms = 0;
    if (spawn(c, err, sizeof(err)) == 0) {
        log_info("reflector process %d serves port %d: hole punching is planned again",
                 atomic_load(&c->pid), c->port);
        return;
    }
    snprintf(what, sizeof(what), "a new reflector process did not start: %s", err);
    schedule_restart(c, what, false);
}

static void deliver(struct reflector_client *c, const struct rmsg_observed *m)
{
    bool punch = m->punch == 1;
    struct reflector_observation o = {
        .cluster = punch ? m->cluster : NULL,
        .node = punch ? m->node : NULL,
        .local_addr = punch ? m->local_addr : NULL,
        .local_port = m->local_port,
        .addr = m->addr,
        .port = m->port,
    };
    if (c->observe != NULL)
        c->observe(c->arg, &o);
}

/* Up to DRAIN_MAX messages from the child. */
static void drain(struct reflector_client *c)
{
    for (int i = 0; i < DRAIN_MAX; i++) {
        union rmsg m;
        char why[RMSG_WHY_LEN];
        int fd;
        errno = 0; /* a hang-up sets none */
        int rc = imsg_recv(&c->chan, &m, sizeof(m), &fd, why, sizeof(why));
        if (rc == IMSG_NONE)
            return;
        if (rc == IMSG_CLOSED) {
            child_lost(c, errno == 0 ? NULL : strerror(errno));
            return;
        }
        if (rc == RMSG_OBSERVED) {
            deliver(c, &m.observed);
        } else if (rc == RMSG_COUNTERS) {
            pthread_mutex_lock(&c->lock);
            c->now = m.counters.counters;
            pthread_mutex_unlock(&c->lock);
        }
    }
}

/* Closing the channel is the child's cue to stop. */
static void end_child(struct reflector_client *c)
{
    char how[160];
    int pid = atomic_load(&c->pid);

    if (c->child.pid <= 0 || c->child.reaped)
        return;
    child_gone(c, REFLECTOR_STOP_MS, how, sizeof(how));
    log_info("reflector process %d %s", pid, how);
}

/* Ends the child before it returns: a child this thread started dies with
   it (PR_SET_PDEATHSIG). */
static void *run(void *arg)
{
    struct reflector_client *c = arg;

    for (;;) {
        /* chan is only replaced on this thread: reading it here needs no lock. */
        struct pollfd p[2] = {{.fd = c->wake_fd, .events = POLLIN},
                              {.fd = c->chan.fd, .events = POLLIN}};
        int timeout = -1;
        if (c->restart_at_ms != 0) {
            uint64_t now = monotonic_ms();
            timeout = c->restart_at_ms > now ? (int)(c->restart_at_ms - now) : 0;
        }
        if (poll(p, 2, timeout) < 0 && errno != EINTR) {
            log_warn("poll");
            usleep(100 * 1000);
            continue;
        }
        if (p[0].revents != 0) {
            end_child(c);
            return NULL;
        }
        if (p[1].fd >= 0 && p[1].revents != 0)
            drain(c);
        if (c->restart_at_ms != 0 && monotonic_ms() >= c->restart_at_ms)
            restart(c);
    }
}

/* ---- the calls ---- */

static void client_free(struct reflector_client *c)
{
    listeners_close(c);
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    pthread_mutex_destroy(&c->lock);
    explicit_bzero(&c->init.key, sizeof(c->init.key));
    free(c);
}

/* Whom the child becomes: a user of its own, never the broker's uid unless
   asked (it could read the broker's TLS key and proxy key).  Becoming
   another user takes root or CAP_SETUID and CAP_SETGID (the child gets them
   as ambient capabilities and drops them with the rest). */
int reflector_user_resolve(const struct reflector_process_config *cfg, uint32_t *uid, uint32_t *gid,
                           char *err, size_t errlen)
{
    struct passwd pw, *found = NULL;
    char buf[4096];
    const char *user = cfg->user;
    const int64_t setid = (1ll << CAP_SETUID) | (1ll << CAP_SETGID);

    if (cfg->same_user)
        return 0;
    if (user == NULL || user[0] == '\0') {
        snprintf(err, errlen,
                 "reflector-user is empty (reflector-same-user = yes keeps the "
                 "broker's uid)");
        return -1;
    }
    int rc = getpwnam_r(user, &pw, buf, sizeof(buf), &found);
    if (found == NULL) {
        snprintf(err, errlen,
                 "reflector-user %s: %s (create it, e.g. adduser --system %s, or set "
                 "reflector-same-user = yes)",
                 user, rc != 0 ? strerror(rc) : "no such user", user);
        return -1;
    }
    if (pw.pw_uid == geteuid()) {
        snprintf(err, errlen,
                 "reflector-user %s is the broker's own uid %u: the reflector could read its "
                 "keys (name another user, or set reflector-same-user = yes)",
                 user, (unsigned)pw.pw_uid);
        return -1;
    }
    int64_t eff = privdrop_effective(0);
    if (geteuid() != 0 && (eff < 0 || (eff & setid) != setid)) {
        snprintf(err, errlen,
                 "reflector-user %s: qcg-broker runs as uid %u without CAP_SETUID and "
                 "CAP_SETGID, so cannot become it (run as root, give it both capabilities, or "
                 "set reflector-same-user = yes)",
                 user, (unsigned)geteuid());
        return -1;
    }
    *uid = (uint32_t)pw.pw_uid;
    *gid = (uint32_t)pw.pw_gid;
    return 1;
}

struct reflector_client *reflector_client_start(const struct reflector_process_config *cfg,
                                                const struct proxy_key *key,
                                                reflector_observe_fn observe, void *arg, char *err,
                                                size_t errlen)
{
    struct reflector_client *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(err, errlen, "reflector: out of memory");
        return NULL;
    }
    c->wake_fd = c->listen_fd = c->listen6_fd = -1;
    imsg_chan_init(&c->chan, -1, rmsg_types, RMSG_TO_BROKER, NULL, PEER);
    c->child.fd = -1;
    c->restarts = (struct proc_restart){.min_ms = REFLECTOR_RESTART_MIN_MS,
                                        .max_ms = REFLECTOR_RESTART_MAX_MS,
                                        .max_deaths = REFLECTOR_RESTARTS_MAX,
                                        .stable_ms = REFLECTOR_STABLE_MS};
    pthread_mutex_init(&c->lock, NULL);
    c->observe = observe;
    c->arg = arg;
    c->init.h.type = RMSG_INIT;
    c->init.version = RMSG_VERSION;
    c->init.key = *key;
    c->init.log_level = (uint32_t)log_get_level();
    c->init.syslog = cfg->syslog ? 1 : 0;
    c->init.read_timeout_ms = cfg->tuning.read_timeout_ms;
    c->init.conns_max = cfg->tuning.conns_max;
    c->init.conns_per_address = cfg->tuning.conns_per_address;
    c->init.expected_max = cfg->tuning.expected_max;
    c->init.expected_per_cluster = cfg->tuning.expected_per_cluster;
    c->init.listen6 = cfg->listen6 != NULL;
    int become = reflector_user_resolve(cfg, &c->init.uid, &c->init.gid, err, errlen);
    c->init.setuser = become == 1;
    if (become < 0 ||
        (c->listen_fd = reflector_listen(cfg->listen, cfg->tuning.conns_max, err, errlen)) < 0 ||
        (cfg->listen6 != NULL && (c->listen6_fd = reflector_listen(
                                      cfg->listen6, cfg->tuning.conns_max, err, errlen)) < 0)) {
        client_free(c);
        return NULL;
    }
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);
    getsockname(c->listen_fd, (struct sockaddr *)&ss, &sslen);
    c->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    char why[RMSG_WHY_LEN + 200];
    c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->wake_fd < 0 || spawn(c, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "reflector: %s", c->wake_fd < 0 ? strerror(errno) : why);
        client_free(c);
        return NULL;
    }
    /* Signals are the main thread's to take (its blocking calls must see EINTR). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&c->thread, NULL, run, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(err, errlen, "reflector: cannot start its thread: %s", strerror(rc));
        reflector_client_stop(c);
        return NULL;
    }
    c->thread_started = true;
    log_info("reflector process %d serves %s%s%s (port %d, listen backlog %d)",
             atomic_load(&c->pid), cfg->listen, cfg->listen6 ? " and " : "",
             cfg->listen6 ? cfg->listen6 : "", c->port, reflector_backlog(cfg->tuning.conns_max));
    return c;
}

int reflector_client_expect(struct reflector_client *c, const unsigned char pair[TOKEN_PAIR_LEN],
                            const struct reflector_side sides[2], uint64_t expiry)
{
    struct rmsg_expect m;
    int rc;

    memset(&m, 0, sizeof(m));
    m.h.type = RMSG_EXPECT;
    m.expiry = expiry;
    memcpy(m.pair, pair, TOKEN_PAIR_LEN);
    for (int i = 0; i < 2; i++) {
        memcpy(m.sides[i].cluster, sides[i].cluster, sizeof(m.sides[i].cluster));
        memcpy(m.sides[i].node, sides[i].node, sizeof(m.sides[i].node));
        m.sides[i].cluster[sizeof(m.sides[i].cluster) - 1] = '\0';
        m.sides[i].node[sizeof(m.sides[i].node) - 1] = '\0';
        m.sides[i].preserving = sides[i].preserving ? 1 : 0;
    }
    pthread_mutex_lock(&c->lock);
    if (c->chan.fd < 0) {
        errno = ENOTCONN;
        rc = -1;
    } else {
        rc = imsg_send(&c->chan, &m, sizeof(m), -1, REFLECTOR_SEND_MS);
    }
    if (rc < 0) {
        char line[160];
        snprintf(line, sizeof(line), "pair %02x%02x%02x%02x not passed to " PEER ": %s", pair[0],
                 pair[1], pair[2], pair[3], strerror(errno));
        imsg_warn_limited(&c->unsent, line);
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

bool reflector_client_up(const struct reflector_client *c)
{
    return c != NULL && atomic_load(&c->up);
}

void reflector_client_counters(struct reflector_client *c, struct reflector_counters *out)
{
    memset(out, 0, sizeof(*out));
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->lock);
    counters_add(out, &c->gone);
    counters_add(out, &c->now);
    pthread_mutex_unlock(&c->lock);
}

int reflector_client_pid(const struct reflector_client *c)
{
    return c != NULL ? atomic_load(&c->pid) : 0;
}

void reflector_client_stop(struct reflector_client *c)
{
    uint64_t one = 1;

    if (c == NULL)
        return;
    if (c->thread_started) {
        if (write(c->wake_fd, &one, sizeof(one)) < 0)
            log_warn("waking the reflector's client thread");
        pthread_join(c->thread, NULL);
    } else {
        end_child(c);
    }
    client_free(c);
}
