/* One launch on the agent's side (session.h). */
#include "session.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "link.h"
#include "log.h"
#include "monotonic.h"
#include "ortecmd.h"
#include "peeruid.h"
#include "proctree.h"
#include "ratelimit.h"
#include "tunnel.h"
#include "wire.h"

/* Output read from the daemon in one go. */
#define OUT_CHUNK WIRE_DATA_MAX
/* How long the daemon's last output may take after it exits. */
#define DRAIN_MS 1000
/* A broken session whose daemon has exited waits this long, not resume_ms,
   for its launcher: a launcher killed with its job (its connection ends the
   same way as when a proxy dies) must not keep the agent. */
#define EXITED_WAIT_MS 5000

enum phase { WAITING, RUNNING, KILLING, FINISHED };

struct session {
    struct session_env env;
    unsigned id;
    int peer;
    enum phase phase;
    struct link *link; /* NULL once gone */
    struct tunnels *tunnels;
    uv_tcp_t listener;
    uv_process_t proc;
    uv_pipe_t out, err;
    uv_timer_t timer;
    uv_timer_t wait; /* broken: how long the launcher has to resume */
    int handles;     /* open libuv handles; the session is gone at 0 */
    int listener_open, proc_open, out_open, err_open, timer_open, wait_open;
    int launched, exited, drained;
    int awaiting; /* broken, waiting for the launcher's RESUME */
    pid_t pid;
    const char *daemon; /* orted or prted, for the log */
    int64_t exit_code;
    int term_signal;
    struct ratelimit refused_log;
    char out_buf[OUT_CHUNK], err_buf[OUT_CHUNK];
};

static void finish(struct session *s);
static void start_kill(struct session *s, const char *why);
static void on_wait_timeout(uv_timer_t *t);

static void on_handle_closed(uv_handle_t *h)
{
    struct session *s = h->data;

    if (--s->handles == 0)
        s->env.gone(s->env.arg, s);
}

static void close_handle(uv_handle_t *h, int *open)
{
    if (*open) {
        *open = 0;
        uv_close(h, on_handle_closed);
    }
}

static void refuse(struct session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse(struct session *s, const char *fmt, ...)
{
    char why[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    log_warnx("launch %u from rank %d refused: %s", s->id, s->peer, why);
    if (s->link != NULL)
        link_send(s->link, WIRE_REFUSED, 0, why, strlen(why));
    finish(s);
}

/* --- the daemon's output ----------------------------------------------------- */

static void out_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct session *s = h->data;

    (void)hint;
    *b = h == (uv_handle_t *)&s->out ? uv_buf_init(s->out_buf, sizeof(s->out_buf))
                                     : uv_buf_init(s->err_buf, sizeof(s->err_buf));
}

static void maybe_finish(struct session *s)
{
    /* Its exit status is for the launcher, which may still come back. */
    if (s->awaiting)
        return;
    if (s->exited && (s->drained || (!s->out_open && !s->err_open)))
        finish(s);
}

static void out_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    struct session *s = st->data;
    int is_out = st == (uv_stream_t *)&s->out;

    if (n < 0) {
        close_handle((uv_handle_t *)st, is_out ? &s->out_open : &s->err_open);
        maybe_finish(s);
        return;
    }
    if (n > 0 && s->link != NULL &&
        link_send(s->link, is_out ? WIRE_OUT : WIRE_ERR, 0, b->base, (size_t)n) == 0 &&
        link_congested(s->link)) {
        if (s->out_open)
            uv_read_stop((uv_stream_t *)&s->out);
        if (s->err_open)
            uv_read_stop((uv_stream_t *)&s->err);
        tunnels_pause(s->tunnels);
    }
}

static void sources_resume(struct session *s)
{
    if (s->out_open)
        uv_read_start((uv_stream_t *)&s->out, out_alloc, out_read);
    if (s->err_open)
        uv_read_start((uv_stream_t *)&s->err, out_alloc, out_read);
    if (s->tunnels != NULL)
        tunnels_resume(s->tunnels);
}

/* --- the daemon's runtime connections -------------------------------------- */

static void on_runtime_conn(uv_stream_t *server, int status)
{
    struct session *s = server->data;
    int chan = s->tunnels != NULL ? tunnel_free_chan(s->tunnels) : -1;
    uv_os_fd_t fd;
    uv_tcp_t *tcp;
    uid_t uid = (uid_t)-1;
    unsigned left_out;

    if (status < 0)
        return;
    if (chan < 0 || (tcp = tunnel_prepare(s->tunnels, (uint16_t)chan)) == NULL) {
        /* Take it off the backlog and drop it. */
        uv_tcp_t *drop = malloc(sizeof(*drop));
        if (drop != NULL) {
            uv_tcp_init(s->env.loop, drop);
            if (uv_accept(server, (uv_stream_t *)drop) == 0)
                log_warnx("launch %u: more than %d runtime connections: one dropped", s->id,
                          WIRE_CHANNELS_MAX);
            uv_close((uv_handle_t *)drop, (uv_close_cb)free);
        }
        return;
    }
    if (uv_accept(server, (uv_stream_t *)tcp) < 0 || uv_fileno((uv_handle_t *)tcp, &fd) < 0) {
        tunnel_close(s->tunnels, (uint16_t)chan, 0);
        return;
    }
    /* Anyone on the node can reach a loopback port; only our user's
       processes (the daemon) may talk to mpirun through it. */
    if (tcp_peer_uid(fd, &uid) < 0 || uid != getuid()) {
        if (ratelimit_ok(&s->refused_log, monotonic_ms(), 1000, &left_out))
            log_warnx("launch %u: runtime connection from uid %d refused: not this agent's user"
                      " (%u more not logged)",
                      s->id, (int)uid, left_out);
        tunnel_close(s->tunnels, (uint16_t)chan, 0);
        return;
    }
    log_debug("launch %u: runtime connection on channel %d", s->id, chan);
    link_send(s->link, WIRE_TOPEN, (uint16_t)chan, NULL, 0);
    tunnel_start(s->tunnels, (uint16_t)chan);
}

/* --- starting the daemon --------------------------------------------------- */

static void on_drain_timeout(uv_timer_t *t)
{
    struct session *s = t->data;

    s->drained = 1;
    maybe_finish(s);
}

static void on_exit_cb(uv_process_t *p, int64_t code, int sig)
{
    struct session *s = p->data;

    s->exited = 1;
    s->exit_code = code;
    s->term_signal = sig;
    if (s->awaiting && uv_timer_get_due_in(&s->wait) > EXITED_WAIT_MS)
        uv_timer_start(&s->wait, on_wait_timeout, EXITED_WAIT_MS, 0);
    log_info("launch %u: %s pid %d ended (%s %d)", s->id, s->daemon, (int)s->pid,
             sig ? "signal" : "exit", sig ? sig : (int)code);
    /* Ranks that outlive their daemon (it crashed) go with it. */
    if (session_signal(s->pid, SIGTERM) > 0)
        log_info("launch %u: processes left by %s pid %d: terminated", s->id, s->daemon,
                 (int)s->pid);
    if (s->phase == FINISHED) {
        close_handle((uv_handle_t *)&s->proc, &s->proc_open);
        return;
    }
    if (s->phase != KILLING) {
        uv_timer_stop(&s->timer);
        uv_timer_start(&s->timer, on_drain_timeout, DRAIN_MS, 0);
        /* Its last words (why it ended) even when the link is congested:
           at most a pipe's worth more. */
        if (s->out_open)
            uv_read_start((uv_stream_t *)&s->out, out_alloc, out_read);
        if (s->err_open)
            uv_read_start((uv_stream_t *)&s->err, out_alloc, out_read);
    }
    maybe_finish(s);
}

static int rewrite_uri(struct session *s, const struct ompi_runtime *rt, char **argv, int argc,
                       const char *name, uint16_t port)
{
    int i = mca_value_index(rt, argc, argv, name);
    char uri[512];

    if (i < 0)
        return 0;
    if (uri_point_to_loopback(rt, argv[i], port, uri, sizeof(uri)) < 0) {
        refuse(s, "%s '%.200s' is not a runtime contact", name, argv[i]);
        return -1;
    }
    free(argv[i]);
    argv[i] = strdup(uri);
    if (argv[i] == NULL) {
        refuse(s, "out of memory");
        return -1;
    }
    return 1;
}

static void launch(struct session *s, const uint8_t *payload, uint32_t len)
{
    struct wire_launch req;
    struct sockaddr_in lo;
    struct sockaddr_storage bound;
    int namelen = sizeof(bound), rc;
    char why[256];
    char *argv[WIRE_ARGS_MAX + 4] = {0};
    uv_process_options_t po;
    uv_stdio_container_t stdio[3];
    uint16_t port;
    int argc = 0;

    if (wire_launch_decode(payload, len, &req, why, sizeof(why)) < 0) {
        refuse(s, "%s", why);
        return;
    }
    if (strcmp(req.job, s->env.job) != 0) {
        refuse(s, "this agent serves job %s, not %.64s", s->env.job, req.job);
        return;
    }
    const struct ompi_runtime *rt = runtime_of(req.argv[0]);
    if (rt == NULL) {
        refuse(s, "only orted or prted can be launched, not '%.100s'", req.argv[0]);
        return;
    }
    if (mca_value_index(rt, req.argc, (char *const *)req.argv, rt->hnp_uri) < 0) {
        refuse(s, "not a runtime daemon's command line: no %s", rt->hnp_uri);
        return;
    }
    /* The daemon reaches mpirun through us: a loopback port of this launch. */
    uv_tcp_init(s->env.loop, &s->listener);
    s->listener.data = s;
    s->listener_open = 1;
    s->handles++;
    uv_ip4_addr("127.0.0.1", 0, &lo);
    if ((rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&lo, 0)) < 0 ||
        (rc = uv_listen((uv_stream_t *)&s->listener, 8, on_runtime_conn)) < 0 ||
        (rc = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &namelen)) < 0) {
        refuse(s, "cannot listen on the loopback: %s", uv_strerror(rc));
        return;
    }
    port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
    argv[0] = strdup(rt == &ompi_prrte ? s->env.prted : s->env.orted);
    argc = 1;
    for (int i = 1; i < req.argc; i++) {
        /* A daemon that forks away would leave its session: the agent
           could neither see it end nor end it.  mpirun asks for that
           unless told to leave the session attached. */
        if (strcmp(req.argv[i], "--daemonize") == 0 || strcmp(req.argv[i], "-daemonize") == 0)
            continue;
        if (rt->stay_attached != NULL && strcmp(req.argv[i], rt->stay_attached) == 0)
            continue;
        argv[argc++] = strdup(req.argv[i]);
    }
    if (rt->stay_attached != NULL)
        argv[argc++] = strdup(rt->stay_attached);
    for (int i = 0; i < argc; i++)
        if (argv[i] == NULL) {
            refuse(s, "out of memory");
            goto out;
        }
    if (rewrite_uri(s, rt, argv, argc, rt->hnp_uri, port) < 0 ||
        rewrite_uri(s, rt, argv, argc, rt->parent_uri, port) < 0)
        goto out;
    /* ORTE: the daemon's own runtime port on the loopback only, whatever
       mpirun was told (nothing of the runtime is reachable from the LAN);
       PRRTE: the daemon may use its contact of mpirun, 127.0.0.1 (ortecmd.h). */
    int seti = mca_value_index(rt, argc, argv, rt->set_name);
    if (seti >= 0) {
        free(argv[seti]);
        argv[seti] = strdup(rt->set_value);
    } else if (argc + 3 <= WIRE_ARGS_MAX) {
        argv[argc++] = strdup(rt->opt[0]);
        argv[argc++] = strdup(rt->set_name);
        argv[argc++] = strdup(rt->set_value);
    }
    for (int i = 0; i < argc; i++)
        if (argv[i] == NULL) {
            refuse(s, "out of memory");
            goto out;
        }

    if (log_get_level() >= LOG_LEVEL_DEBUG)
        for (int i = 0; i < argc; i++)
            log_debug("launch %u: argv[%d] = %s", s->id, i, argv[i]);
    uv_pipe_init(s->env.loop, &s->out, 0);
    uv_pipe_init(s->env.loop, &s->err, 0);
    s->out.data = s->err.data = s;
    s->out_open = s->err_open = 1;
    s->handles += 2;
    memset(stdio, 0, sizeof(stdio));
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *)&s->out;
    stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[2].data.stream = (uv_stream_t *)&s->err;
    memset(&po, 0, sizeof(po));
    po.file = argv[0];
    po.args = argv;
    po.env = s->env.environ;
    po.exit_cb = on_exit_cb;
    /* Its own session: ending the launch reaches every process it starts. */
    po.flags = UV_PROCESS_DETACHED;
    po.stdio_count = 3;
    po.stdio = stdio;
    s->proc.data = s;
    rc = uv_spawn(s->env.loop, &s->proc, &po);
    if (rc < 0) {
        /* libuv wants the handle closed even when the spawn failed. */
        s->proc_open = 1;
        s->handles++;
        refuse(s, "cannot run %s: %s", argv[0], uv_strerror(rc));
        goto out;
    }
    s->proc_open = 1;
    s->handles++;
    s->pid = s->proc.pid;
    s->daemon = rt->daemon;
    s->launched = 1;
    s->phase = RUNNING;
    /* The token that resumes this session over another connection: the
       launcher holds the job secret already, this names one launch. */
    uint8_t token[WIRE_TOKEN_LEN];
    if (getrandom(token, sizeof(token), 0) == (ssize_t)sizeof(token)) {
        link_set_session(s->link, token);
        link_send(s->link, WIRE_SESSION, 0, token, sizeof(token));
    }
    uv_timer_stop(&s->timer);
    uv_read_start((uv_stream_t *)&s->out, out_alloc, out_read);
    uv_read_start((uv_stream_t *)&s->err, out_alloc, out_read);
    log_info("launch %u from rank %d: %s pid %d, runtime through 127.0.0.1:%u", s->id, s->peer,
             s->daemon, (int)s->pid, port);
out:
    for (int i = 0; i < argc; i++)
        free(argv[i]);
}

/* --- the launch connection ------------------------------------------------- */

static const int forwarded_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGKILL, SIGUSR1, SIGUSR2};

/* A new connection's first frame names a broken session: the session takes
   the connection over, this one ends. */
static void resume(struct session *s, const uint8_t *payload, uint32_t len)
{
    struct session *to;

    if (len != WIRE_TOKEN_LEN + 8) {
        refuse(s, "a RESUME of %u bytes", len);
        return;
    }
    to = s->env.find(s->env.arg, payload);
    if (to == NULL) {
        refuse(s, "no launch to resume with that token (it ended, or this agent restarted)");
        return;
    }
    if (link_adopt(to->link, s->link, wire_u64_get(payload + WIRE_TOKEN_LEN)) < 0) {
        refuse(s, "the launch's frame count does not match");
        return;
    }
    log_info("launch %u: resumed by rank %d (connection of launch %u)", to->id, s->peer, s->id);
    if (to->awaiting) {
        to->awaiting = 0;
        uv_timer_stop(&to->wait);
    }
    finish(s);
    maybe_finish(to);
}

static void on_frame(struct link *l, const struct wire_header *h, const uint8_t *payload)
{
    struct session *s = link_data(l);
    unsigned left_out;

    if (s->phase == WAITING && h->type == WIRE_LAUNCH) {
        launch(s, payload, h->len);
        return;
    }
    if (s->phase == WAITING && h->type == WIRE_RESUME) {
        resume(s, payload, h->len);
        return;
    }
    if (s->phase == RUNNING && h->type == WIRE_BYE) {
        start_kill(s, "the launcher is done");
        return;
    }
    if (s->phase == RUNNING && (h->type == WIRE_TDATA || h->type == WIRE_TCLOSE) &&
        tunnels_frame(s->tunnels, h, payload) == 0)
        return;
    if (s->phase == RUNNING && h->type == WIRE_SIGNAL && h->len == 4) {
        int sig = (int)wire_u32_get(payload);
        for (size_t i = 0; i < sizeof(forwarded_signals) / sizeof(int); i++)
            if (sig == forwarded_signals[i]) {
                /* Once reaped, its pid may be another process's. */
                if (s->exited) {
                    log_info("launch %u: signal %d from the launcher: %s pid %d already "
                             "ended, not sent",
                             s->id, sig, s->daemon, (int)s->pid);
                    return;
                }
                log_info("launch %u: signal %d from the launcher to %s pid %d", s->id, sig,
                         s->daemon, (int)s->pid);
                kill(s->pid, sig);
                return;
            }
    }
    if (s->phase == KILLING || s->phase == FINISHED)
        return;
    if (ratelimit_ok(&s->refused_log, monotonic_ms(), 1000, &left_out))
        log_warnx("launch %u from rank %d: unexpected %s frame (channel %u, %u bytes): ending it",
                  s->id, s->peer, wire_type_name(h->type), h->chan, h->len);
    start_kill(s, "protocol error");
}

static void on_link_closed(struct link *l, const char *why)
{
    struct session *s = link_data(l);

    s->link = NULL;
    if (s->tunnels != NULL) {
        tunnels_free(s->tunnels);
        s->tunnels = NULL;
    }
    if (s->phase == FINISHED)
        return;
    if (s->phase == WAITING)
        log_warnx("launch %u from rank %d: %s before asking for anything", s->id, s->peer, why);
    start_kill(s, why);
}

static void on_link_drained(struct link *l)
{
    sources_resume(link_data(l));
}

static void on_wait_timeout(uv_timer_t *t)
{
    struct session *s = t->data;

    log_warnx("launch %u: the launcher did not resume within %d ms", s->id,
              s->exited ? EXITED_WAIT_MS : s->env.resume_ms);
    s->awaiting = 0;
    start_kill(s, "the launcher is gone");
    maybe_finish(s);
}

/* The launcher's connection broke: it reconnects and resumes (wire.h), or
   the daemon is ended after resume_ms.  Output and runtime bytes wait in the
   link meanwhile (their sources pause at its high water). */
static void on_link_broken(struct link *l, const char *why)
{
    struct session *s = link_data(l);

    if (s->phase == FINISHED || s->phase == KILLING) {
        finish(s);
        return;
    }
    log_info("launch %u from rank %d: connection lost (%s): waiting %d ms for the launcher to "
             "resume",
             s->id, s->peer, why, s->env.resume_ms);
    s->awaiting = 1;
    uv_timer_start(&s->wait, on_wait_timeout,
                   (uint64_t)(s->exited ? EXITED_WAIT_MS : s->env.resume_ms), 0);
}

static const struct link_ops session_link_ops = {on_frame, on_link_closed, on_link_drained,
                                                 on_link_broken, NULL};

/* --- ending ---------------------------------------------------------------- */

static void on_kill_timeout(uv_timer_t *t)
{
    struct session *s = t->data;

    if (!s->exited)
        log_warnx("launch %u: %s pid %d still running %d ms after SIGTERM: SIGKILL", s->id,
                  s->daemon, (int)s->pid, s->env.grace_ms);
    session_signal(s->pid, SIGKILL);
    s->drained = 1;
    maybe_finish(s);
}

static void start_kill(struct session *s, const char *why)
{
    if (s->phase == KILLING || s->phase == FINISHED)
        return;
    /* Ending: no launcher is waited for any more. */
    s->awaiting = 0;
    uv_timer_stop(&s->wait);
    if (!s->launched || s->exited) {
        finish(s);
        return;
    }
    s->phase = KILLING;
    log_info("launch %u: %s: ending %s pid %d and its processes", s->id, why, s->daemon,
             (int)s->pid);
    session_signal(s->pid, SIGTERM);
    uv_timer_stop(&s->timer);
    uv_timer_start(&s->timer, on_kill_timeout, (uint64_t)s->env.grace_ms, 0);
}

static void finish(struct session *s)
{
    uint8_t status[8];

    if (s->phase == FINISHED)
        return;
    s->phase = FINISHED;
    if (s->launched && session_signal(s->pid, SIGKILL) > 0)
        log_info("launch %u: killed what was left of %s pid %d's session", s->id, s->daemon,
                 (int)s->pid);
    if (s->link != NULL) {
        if (s->exited) {
            wire_u32_put(status, (uint32_t)s->exit_code);
            wire_u32_put(status + 4, (uint32_t)s->term_signal);
            link_send(s->link, WIRE_EXIT, 0, status, sizeof(status));
        }
        link_close(s->link);
        s->link = NULL;
    }
    if (s->tunnels != NULL) {
        tunnels_free(s->tunnels);
        s->tunnels = NULL;
    }
    uv_timer_stop(&s->timer);
    close_handle((uv_handle_t *)&s->wait, &s->wait_open);
    /* Once a process has been spawned, libuv must see its exit: close
       the handle only then (kill above made sure it comes). */
    close_handle((uv_handle_t *)&s->listener, &s->listener_open);
    close_handle((uv_handle_t *)&s->out, &s->out_open);
    close_handle((uv_handle_t *)&s->err, &s->err_open);
    if (!s->launched || s->exited)
        close_handle((uv_handle_t *)&s->proc, &s->proc_open);
    close_handle((uv_handle_t *)&s->timer, &s->timer_open);
}

static void on_launch_timeout(uv_timer_t *t)
{
    struct session *s = t->data;

    log_warnx("launch %u from rank %d: nothing asked within %d ms: closed", s->id, s->peer,
              s->env.launch_ms);
    finish(s);
}

struct session *session_new(const struct session_env *env, int fd, qcg_tls *tls, int peer,
                            unsigned id)
{
    struct session *s = calloc(1, sizeof(*s));

    if (s == NULL) {
        qcg_tls_free(tls);
        close(fd);
        return NULL;
    }
    s->env = *env;
    s->id = id;
    s->peer = peer;
    s->link = link_new(env->loop, fd, tls, &session_link_ops, s);
    if (s->link == NULL) {
        free(s);
        return NULL;
    }
    s->tunnels = tunnels_new(env->loop, s->link);
    if (s->tunnels == NULL) {
        link_close(s->link);
        free(s);
        return NULL;
    }
    uv_timer_init(env->loop, &s->timer);
    uv_timer_init(env->loop, &s->wait);
    s->timer.data = s->wait.data = s;
    s->timer_open = s->wait_open = 1;
    s->handles = 2;
    uv_timer_start(&s->timer, on_launch_timeout, (uint64_t)env->launch_ms, 0);
    return s;
}

void session_stop(struct session *s)
{
    start_kill(s, "the agent stops");
}

int session_launched(const struct session *s)
{
    return s->launched;
}

int session_has_token(const struct session *s, const uint8_t *token)
{
    return s->phase == RUNNING && s->link != NULL && link_has_token(s->link, token);
}
