/* qcg-agent: one per node and job, started by the job's user.  It publishes
   itself to the grid as rank 0 of the job's agent job for this node (jobid.h)
   and runs, as its user, the Open MPI daemon that holders of the job secret
   ask for through qcg-launch (session.c).  It exits when its last launch
   ends (or, --persist, after idle-timeout without one), on SIGTERM/SIGINT
   after ending its launches, or when no launch came within idle-timeout. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "agent.h"
#include "jobid.h"
#include "log.h"
#include "monotonic.h"
#include "proto.h"
#include "qcgconn.h"
#include "ratelimit.h"
#include "session.h"
#include "wire.h"

static const char usage[] = "qcg-agent [--config FILE] [--job ID] [--node NAME] [options]\n"
                            "       (the job secret comes from $QCG_JOB_SECRET or --secret-file)";

struct agent {
    struct agent_config *cfg;
    uv_loop_t loop;
    qcg_ctx *ctx;
    uv_poll_t poll;
    uv_timer_t idle;
    uv_timer_t retry; /* accepting again after a failure */
    uv_signal_t sigterm, sigint;
    struct session_env env;
    struct session **slots; /* max_launches of them */
    int count;
    unsigned next_id;
    int launched_any;
    int stopping;
    int closed;
    int accepting;
    unsigned long refused_seen;
    struct ratelimit refused_log;
    int rc;
};

extern char **environ;

static void stop(struct agent *a, const char *why, int rc);

static void on_idle(uv_timer_t *t)
{
    struct agent *a = t->data;
    char why[96];

    snprintf(why, sizeof(why), "no launch for %d s", a->cfg->idle_timeout);
    stop(a, why, 0);
}

static void idle_arm(struct agent *a)
{
    uv_timer_start(&a->idle, on_idle, (uint64_t)a->cfg->idle_timeout * 1000, 0);
}

static void check_refused(struct agent *a)
{
    unsigned long n = qcg_accept_refused(a->ctx);
    unsigned left_out;

    if (n == a->refused_seen)
        return;
    if (ratelimit_ok(&a->refused_log, monotonic_ms(), 1000, &left_out))
        log_warnx("connection refused: %s (%lu refused so far)", qcg_last_error(a->ctx), n);
    a->refused_seen = n;
}

static void session_gone(void *arg, struct session *s)
{
    struct agent *a = arg;

    for (int i = 0; i < a->cfg->max_launches; i++)
        if (a->slots[i] == s)
            a->slots[i] = NULL;
    /* Only a daemon started counts: a connection refused, or closed before
       it asked, must not end an agent that mpirun has yet to use. */
    if (session_launched(s))
        a->launched_any = 1;
    free(s);
    a->count--;
    if (a->count > 0)
        return;
    if (a->stopping) {
        stop(a, NULL, a->rc);
        return;
    }
    if (!a->accepting) {
        stop(a, "the helper is gone and no launch is left", 1);
        return;
    }
    if (a->launched_any && !a->cfg->persist) {
        stop(a, "the last launch ended", 0);
        return;
    }
    idle_arm(a);
}

/* The running launch a RESUME names (session.h). */
static struct session *find_session(void *arg, const uint8_t *token)
{
    struct agent *a = arg;

    for (int i = 0; i < a->cfg->max_launches; i++)
        if (a->slots[i] != NULL && session_has_token(a->slots[i], token))
            return a->slots[i];
    return NULL;
}

static void on_accept_ready(uv_poll_t *p, int status, int events);

static void on_retry(uv_timer_t *t)
{
    struct agent *a = t->data;

    if (a->accepting && !a->stopping)
        uv_poll_start(&a->poll, UV_READABLE, on_accept_ready);
}

static void on_accept_ready(uv_poll_t *p, int status, int events)
{
    struct agent *a = p->data;
    struct qcg_conn_info info = {0};
    int fd;

    (void)events;
    if (status < 0)
        return;
    for (int i = 0; i < 64; i++) {
        fd = qcg_accept(a->ctx, &info);
        check_refused(a);
        if (fd == QCG_EAGAIN)
            return;
        if (fd == QCG_ENOHELPER) {
            log_error("cannot take launches any more: %s: %s", qcg_strerror(fd),
                      qcg_last_error(a->ctx));
            uv_poll_stop(&a->poll);
            a->accepting = 0;
            if (a->count == 0)
                stop(a, "the helper is gone", 1);
            return;
        }
        if (fd < 0) {
            /* Out of descriptors or memory for a moment: try again in a
               second rather than spin on a listener that stays readable. */
            unsigned left_out;
            if (ratelimit_ok(&a->refused_log, monotonic_ms(), 1000, &left_out))
                log_warnx("accepting a launch failed: %s: %s (retrying in 1 s)", qcg_strerror(fd),
                          qcg_last_error(a->ctx));
            uv_poll_stop(&a->poll);
            uv_timer_start(&a->retry, on_retry, 1000, 0);
            return;
        }
        int slot = 0;
        while (slot < a->cfg->max_launches && a->slots[slot] != NULL)
            slot++;
        if (slot == a->cfg->max_launches) {
            log_warnx("connection from rank %d closed: %d launches already running", info.peer_rank,
                      a->count);
            qcg_tls_free(info.tls);
            close(fd);
            continue;
        }
        a->slots[slot] = session_new(&a->env, fd, info.tls, info.peer_rank, ++a->next_id);
        if (a->slots[slot] == NULL) {
            log_warnx("connection from rank %d closed: out of memory", info.peer_rank);
            continue;
        }
        log_info("launch %u: connection from rank %d (%s, %s, %.1f ms)", a->next_id, info.peer_rank,
                 qcg_technique_name(info.technique), qcg_encryption_name(info.encryption),
                 (double)info.setup_us / 1000.0);
        a->count++;
        uv_timer_stop(&a->idle);
    }
}

static void on_signal(uv_signal_t *h, int sig)
{
    struct agent *a = h->data;
    char why[64];

    snprintf(why, sizeof(why), "%s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    stop(a, why, 0);
}

static void stop(struct agent *a, const char *why, int rc)
{
    if (a->closed)
        return;
    if (why != NULL)
        log_info("stopping: %s", why);
    if (!a->stopping) {
        a->stopping = 1;
        a->rc = rc;
        if (a->accepting)
            uv_poll_stop(&a->poll);
        a->accepting = 0;
        for (int i = 0; i < a->cfg->max_launches; i++)
            if (a->slots[i] != NULL)
                session_stop(a->slots[i]);
    }
    if (a->count > 0)
        return; /* again once the last session is gone */
    a->closed = 1;
    uv_close((uv_handle_t *)&a->poll, NULL);
    uv_close((uv_handle_t *)&a->idle, NULL);
    uv_close((uv_handle_t *)&a->retry, NULL);
    uv_close((uv_handle_t *)&a->sigterm, NULL);
    uv_close((uv_handle_t *)&a->sigint, NULL);
}

/* The variables the agent sets in the daemon's environment (allocated by
   daemon_environ; every other entry points into ours). */
static int set_by_agent(const char *e)
{
    return strncmp(e, "QCG_JOB=", 8) == 0 || strncmp(e, "QCG_JOB_SECRET=", 15) == 0 ||
           strncmp(e, "QCG_HELPER_SOCKET=", 18) == 0 || strncmp(e, "QCG_COLOUR_SITE=", 16) == 0 ||
           strncmp(e, "QCG_COLOUR_NODE=", 16) == 0;
}

/* The daemon's environment: ours, with the job's id and secret (the BTL's
   QCG_JOB and QCG_JOB_SECRET), the helper's socket, and the colours of the
   ranks it starts (libqcgcolour): the node's cluster as its frontend
   declared it to the grid, and the node's name in host lists. */
static char **daemon_environ(const struct agent_config *cfg, const char *secret,
                             const char *cluster)
{
    size_t n = 0, k = 0;
    char **env;

    while (environ[n] != NULL)
        n++;
    env = calloc(n + 6, sizeof(*env));
    if (env == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!set_by_agent(environ[i]))
            env[k++] = environ[i];
    if (asprintf(&env[k++], "QCG_JOB=%s", cfg->job) < 0 ||
        asprintf(&env[k++], "QCG_JOB_SECRET=%s", secret) < 0 ||
        asprintf(&env[k++], "QCG_COLOUR_SITE=%s", cluster) < 0 ||
        asprintf(&env[k++], "QCG_COLOUR_NODE=%s", cfg->node) < 0 ||
        (cfg->helper_socket != NULL &&
         asprintf(&env[k++], "QCG_HELPER_SOCKET=%s", cfg->helper_socket) < 0))
        return NULL;
    return env;
}

static int run(struct agent_config *cfg, const char *secret)
{
    struct agent a;
    struct qcg_options opts = {.rank = 0,
                               .secret = secret,
                               .helper_socket = cfg->helper_socket,
                               .encrypt = cfg->encrypt_mode};
    struct qcg_contact c;
    char job[GRID_JOB_MAX];
    int rc;

    memset(&a, 0, sizeof(a));
    a.cfg = cfg;
    if (agent_job_id(job, cfg->job, cfg->node) < 0) {
        fprintf(stderr, "qcg-agent: job '%s' and node '%s' make no valid id\n", cfg->job,
                cfg->node);
        return 2;
    }
    opts.job = job;
    rc = qcg_open(&a.ctx, &opts);
    if (rc < 0) {
        fprintf(stderr, "qcg-agent: cannot reach the node's qcg-helper: %s: %s\n", qcg_strerror(rc),
                qcg_last_error(NULL));
        return 1;
    }
    rc = qcg_listen(a.ctx);
    if (rc < 0) {
        if (rc == QCG_EBUSY)
            fprintf(stderr, "qcg-agent: an agent of job %s for node %s is already running: %s\n",
                    cfg->job, cfg->node, qcg_last_error(a.ctx));
        else
            fprintf(stderr, "qcg-agent: cannot publish the agent of job %s: %s: %s\n", cfg->job,
                    qcg_strerror(rc), qcg_last_error(a.ctx));
        qcg_close(a.ctx);
        return 1;
    }
    if (qcg_local_contact(a.ctx, &c) < 0) {
        fprintf(stderr, "qcg-agent: cannot tell the node's cluster: %s\n", qcg_last_error(a.ctx));
        qcg_close(a.ctx);
        return 1;
    }
    a.env = (struct session_env){
        .job = cfg->job,
        .orted = cfg->orted,
        .prted = cfg->prted,
        .environ = daemon_environ(cfg, secret, c.cluster),
        .launch_ms = cfg->launch_timeout,
        .grace_ms = cfg->grace,
        .resume_ms = WIRE_RESUME_WAIT_MS,
        .find = find_session,
        .gone = session_gone,
        .arg = &a,
    };
    a.slots = calloc((size_t)cfg->max_launches, sizeof(*a.slots));
    if (a.env.environ == NULL || a.slots == NULL || uv_loop_init(&a.loop) < 0) {
        fprintf(stderr, "qcg-agent: out of memory\n");
        qcg_close(a.ctx);
        return 1;
    }
    a.env.loop = &a.loop;
    uv_poll_init(&a.loop, &a.poll, qcg_accept_pollfd(a.ctx));
    uv_timer_init(&a.loop, &a.idle);
    uv_timer_init(&a.loop, &a.retry);
    uv_signal_init(&a.loop, &a.sigterm);
    uv_signal_init(&a.loop, &a.sigint);
    a.poll.data = a.idle.data = a.retry.data = a.sigterm.data = a.sigint.data = &a;
    uv_poll_start(&a.poll, UV_READABLE, on_accept_ready);
    a.accepting = 1;
    uv_signal_start(&a.sigterm, on_signal, SIGTERM);
    uv_signal_start(&a.sigint, on_signal, SIGINT);
    signal(SIGPIPE, SIG_IGN);
    idle_arm(&a);
    log_info("ready: agent of job %s for node %s (cluster %s, %s port %u), orted = %s, "
             "prted = %s, uid %d, encrypt = %s",
             cfg->job, cfg->node, c.cluster, c.address, c.port, cfg->orted, cfg->prted,
             (int)getuid(), cfg->encrypt);
    uv_run(&a.loop, UV_RUN_DEFAULT);
    uv_loop_close(&a.loop);
    qcg_close(a.ctx);
    for (char **e = a.env.environ; *e != NULL; e++)
        if (set_by_agent(*e))
            free(*e);
    free(a.env.environ);
    free(a.slots);
    log_info("stopped");
    return a.rc;
}

int main(int argc, char **argv)
{
    struct agent_config cfg;
    char err[512], secret[QCG_SECRET_MAX + 1];
    int first, rc;

    memset(&cfg, 0, sizeof(cfg));
    switch (config_load(agent_options, &cfg, argc, argv, usage, &first, err, sizeof(err))) {
    case CONFIG_EXIT_OK:
        config_free(agent_options, &cfg);
        return 0;
    case CONFIG_ERROR:
        /* config_load's message already starts with the program's name. */
        fprintf(stderr, "%s\n", err);
        config_free(agent_options, &cfg);
        return 2;
    case CONFIG_OK:
        break;
    }
    if (first < argc) {
        fprintf(stderr,
                "qcg-agent: unexpected argument '%s' (the agent takes no command: "
                "qcg-launch sends it what to run)\n",
                argv[first]);
        config_free(agent_options, &cfg);
        return 2;
    }
    if (agent_config_check(&cfg, secret, sizeof(secret), err, sizeof(err)) < 0) {
        fprintf(stderr, "qcg-agent: %s\n", err);
        config_free(agent_options, &cfg);
        return 2;
    }
    log_init("agent", (enum log_level)log_level_parse(cfg.log_level), false);
    rc = run(&cfg, secret);
    memset(secret, 0, sizeof(secret));
    config_free(agent_options, &cfg);
    return rc;
}
