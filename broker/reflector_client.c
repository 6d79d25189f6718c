/* qcg-broker's side of the reflector's process: it starts the child, passes
   planned pairs to it and observations back, notices its death and starts a
   new one after a backoff; see reflector.h. */
#include "reflector.h"
#include "reflector_msg.h"

#include <errno.h>
#include <fcntl.h>
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
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backoff.h"
#include "daemon.h"
#include "log.h"
#include "monotonic.h"
#include "privdrop.h"

#define DRAIN_MAX 64
#define REAP_POLL_MS 10
#define KILLED_WAIT_MS 1000
#define PEER "the reflector process"

extern char **environ;

struct reflector_client {
    int listen_fd; /* held for good: a new child serves the same port */
    int port;
    struct rmsg_init init; /* what each child hears first (it holds the punch key) */
    reflector_observe_fn observe;
    void *arg;

    pthread_mutex_t lock; /* guards chan (senders, its replacement) and unsent */
    int chan;             /* -1: no child serves */
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
    uint64_t started_ms;    /* when the child came up */
    uint64_t restart_at_ms; /* 0: none planned */
    unsigned deaths;        /* in a row, each within REFLECTOR_STABLE_MS of its start */
    struct ratelimit refused;
};

/* ---- a child ---- */

/* In the child between fork and execve: only async-signal-safe calls, since
   another thread of the broker may have held any lock at the fork. */
static void exec_child(int chan, int listen_fd, pid_t parent, const sigset_t *mask)
{
    char arg0[] = "qcg-reflector", arg1[] = REFLECTOR_PROCESS_ARG;
    char *argv[] = {arg0, arg1, NULL};

    /* Dies with the forking thread's process, even if it is killed; one
       already gone is seen after. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != parent)
        _exit(127);
    /* Both above the fixed numbers first: dup2 must not overwrite one with the other. */
    int a = fcntl(chan, F_DUPFD, REFLECTOR_FD_LISTEN + 1);
    int b = fcntl(listen_fd, F_DUPFD, REFLECTOR_FD_LISTEN + 1);
    if (a < 0 || b < 0 || dup2(a, REFLECTOR_FD_CHANNEL) < 0 || dup2(b, REFLECTOR_FD_LISTEN) < 0)
        _exit(127);
    /* Nothing else of the broker's goes along: TLS connections, files, epoll sets. */
    close_range(REFLECTOR_FD_LISTEN + 1, ~0U, 0);
    sigprocmask(SIG_SETMASK, mask, NULL);
    /* A fresh image: none of the broker's memory (keys, registry) comes along. */
    execve("/proc/self/exe", argv, environ);
    _exit(127);
}

/* How the child ended, waiting at most ms for it, then killing it. */
static void reap(pid_t pid, unsigned ms, char *how, size_t howlen)
{
    int status = 0;
    pid_t r;
    bool killed = false;
    uint64_t deadline = monotonic_ms() + ms;

    while ((r = waitpid(pid, &status, WNOHANG)) == 0) {
        if (monotonic_ms() >= deadline) {
            if (killed) {
                snprintf(how, howlen, "did not end even after SIGKILL");
                return;
            }
            kill(pid, SIGKILL);
            killed = true;
            deadline = monotonic_ms() + KILLED_WAIT_MS;
        }
        usleep(REAP_POLL_MS * 1000);
    }
    if (r < 0)
        snprintf(how, howlen, "could not be waited for: %s", strerror(errno));
    else if (killed)
        snprintf(how, howlen, "did not exit within %u ms and was killed", ms);
    else if (WIFSIGNALED(status))
        snprintf(how, howlen, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(how, howlen, "exited with status %d", WEXITSTATUS(status));
}

/* READY within REFLECTOR_READY_MS.  0, or -1 with why. */
static int wait_ready(int fd, pid_t pid, char *err, size_t errlen)
{
    union rmsg m;
    char why[RMSG_WHY_LEN + 100];

    if (rmsg_recv_first(fd, RMSG_READY, REFLECTOR_READY_MS, &m, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "process %d: %s", (int)pid, why);
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
    int sv[2];
    sigset_t all, old;
    char how[160];

    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        return -1;
    }
    /* No signal handler of the broker's may run in the child before execve. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        exec_child(sv[1], c->listen_fd, parent, &old);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(sv[1]);
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(sv[0]);
        return -1;
    }
    if (rmsg_send(sv[0], &c->init, sizeof(c->init), REFLECTOR_SEND_MS) < 0) {
        snprintf(err, errlen, "process %d: sending INIT: %s", (int)pid, strerror(errno));
    } else if (wait_ready(sv[0], pid, err, errlen) == 0) {
        pthread_mutex_lock(&c->lock);
        c->chan = sv[0];
        pthread_mutex_unlock(&c->lock);
        atomic_store(&c->pid, (int)pid);
        atomic_store(&c->up, true);
        c->started_ms = monotonic_ms();
        return 0;
    }
    close(sv[0]);
    reap(pid, REFLECTOR_STOP_MS, how, sizeof(how));
    size_t n = strlen(err);
    snprintf(err + n, errlen - n, " (it %s)", how);
    return -1;
}

/* ---- the client's thread: observations, deaths, restarts ---- */

/* After a death or a failed start (`what` says which): a new start later, or
   none ever after REFLECTOR_RESTARTS_MAX of them in a row. */
static void schedule_restart(struct reflector_client *c, const char *what)
{
    if (c->deaths > REFLECTOR_RESTARTS_MAX) {
        log_error("%s; that is %u times in a row within %d s of a start: hole punching is no "
                  "longer planned and port %d is closed (restart qcg-broker)",
                  what, c->deaths, REFLECTOR_STABLE_MS / 1000, c->port);
        close(c->listen_fd);
        c->listen_fd = -1;
        c->restart_at_ms = 0;
        return;
    }
    unsigned delay = backoff_ms(c->deaths - 1, REFLECTOR_RESTART_MIN_MS, REFLECTOR_RESTART_MAX_MS);
    log_error("%s: hole punching is not planned until a new one serves (in %u ms, restart %u of "
              "at most %d)",
              what, delay, c->deaths, REFLECTOR_RESTARTS_MAX);
    c->restart_at_ms = monotonic_ms() + delay;
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

/* why: NULL when the channel closed, else how reading it failed. */
static void child_lost(struct reflector_client *c, const char *why)
{
    int pid = atomic_load(&c->pid);
    char how[160], what[400];

    pthread_mutex_lock(&c->lock);
    close(c->chan);
    c->chan = -1;
    atomic_store(&c->up, false);
    counters_add(&c->gone, &c->now);
    memset(&c->now, 0, sizeof(c->now));
    pthread_mutex_unlock(&c->lock);
    reap(pid, REFLECTOR_STOP_MS, how, sizeof(how));
    atomic_store(&c->pid, 0);
    if (monotonic_ms() - c->started_ms >= REFLECTOR_STABLE_MS)
        c->deaths = 0;
    c->deaths++;
    if (why != NULL)
        snprintf(what, sizeof(what), "reflector process %d %s, its channel having failed: %s", pid,
                 how, why);
    else
        snprintf(what, sizeof(what), "reflector process %d %s", pid, how);
    schedule_restart(c, what);
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
    c->deaths++;
    snprintf(what, sizeof(what), "a new reflector process did not start: %s", err);
    schedule_restart(c, what);
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
        size_t len = 0;
        char why[RMSG_WHY_LEN];
        int rc = rmsg_recv(c->chan, &m, &len);
        if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (rc <= 0) {
            child_lost(c, rc == 0 ? NULL : strerror(errno));
            return;
        }
        rc = rmsg_check(&m, len, RMSG_BIT(RMSG_OBSERVED) | RMSG_BIT(RMSG_COUNTERS), why,
                        sizeof(why));
        if (rc < 0) {
            rmsg_refused(&c->refused, PEER, why);
            continue;
        }
        if (rc == RMSG_OBSERVED) {
            deliver(c, &m.observed);
            continue;
        }
        pthread_mutex_lock(&c->lock);
        c->now = m.counters.counters;
        pthread_mutex_unlock(&c->lock);
    }
}

/* Closing the channel is the child's cue to stop. */
static void end_child(struct reflector_client *c)
{
    char how[160];

    pthread_mutex_lock(&c->lock);
    int fd = c->chan;
    c->chan = -1;
    atomic_store(&c->up, false);
    counters_add(&c->gone, &c->now);
    memset(&c->now, 0, sizeof(c->now));
    pthread_mutex_unlock(&c->lock);
    if (fd >= 0)
        close(fd);
    int pid = atomic_load(&c->pid);
    if (pid > 0) {
        reap(pid, REFLECTOR_STOP_MS, how, sizeof(how));
        atomic_store(&c->pid, 0);
        log_info("reflector process %d %s", pid, how);
    }
}

/* Ends the child before it returns: a child this thread started dies with
   it (PR_SET_PDEATHSIG). */
static void *run(void *arg)
{
    struct reflector_client *c = arg;

    for (;;) {
        /* chan is only replaced on this thread: reading it here needs no lock. */
        struct pollfd p[2] = {{.fd = c->wake_fd, .events = POLLIN},
                              {.fd = c->chan, .events = POLLIN}};
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
    if (c->listen_fd >= 0)
        close(c->listen_fd);
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
    c->chan = c->wake_fd = -1;
    pthread_mutex_init(&c->lock, NULL);
    c->observe = observe;
    c->arg = arg;
    c->init.type = RMSG_INIT;
    c->init.version = RMSG_VERSION;
    c->init.key = *key;
    c->init.log_level = (uint32_t)log_get_level();
    c->init.syslog = cfg->syslog ? 1 : 0;
    int become = reflector_user_resolve(cfg, &c->init.uid, &c->init.gid, err, errlen);
    c->init.setuser = become == 1;
    if (become < 0 || (c->listen_fd = reflector_listen(cfg->listen, err, errlen)) < 0) {
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
    log_info("reflector process %d serves %s (port %d)", atomic_load(&c->pid), cfg->listen,
             c->port);
    return c;
}

int reflector_client_expect(struct reflector_client *c, const unsigned char pair[TOKEN_PAIR_LEN],
                            const struct reflector_side sides[2], uint64_t expiry)
{
    struct rmsg_expect m;
    int rc;

    memset(&m, 0, sizeof(m));
    m.type = RMSG_EXPECT;
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
    if (c->chan < 0) {
        errno = ENOTCONN;
        rc = -1;
    } else {
        rc = rmsg_send(c->chan, &m, sizeof(m), REFLECTOR_SEND_MS);
    }
    if (rc < 0) {
        char line[160];
        snprintf(line, sizeof(line), "pair %02x%02x%02x%02x not passed to " PEER ": %s", pair[0],
                 pair[1], pair[2], pair[3], strerror(errno));
        rmsg_warn_limited(&c->unsent, line);
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
