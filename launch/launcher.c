/* qcg-launch: mpirun's launch agent (plm_rsh_agent) over qcg-connect.

     qcg-launch [--timeout S] [--encrypt MODE] [--verbose] HOST orted|prted ARGS...

   Instead of ssh HOST, it connects through the grid to the qcg-agent of the
   job ($QCG_JOB) on HOST, asks it to run the daemon, and stays as its
   stand-in beside mpirun: the daemon's output on our stdout/stderr, each
   runtime connection the daemon opens (to the agent's loopback port) carried
   to mpirun's port on this node, the daemon's exit status as ours, and
   SIGINT/SIGTERM/SIGHUP passed on.  When the connection breaks (an error,
   or nothing heard for a while) it connects to the agent again and resumes
   the launch (wire.h): the daemon and its runtime connections go on.  255
   when the launch itself fails, or cannot be resumed within
   WIRE_RESUME_TRY_MS, with one line naming HOST and why (as ssh does).
   The job secret comes from $QCG_JOB_SECRET, never from the command line. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "jobid.h"
#include "link.h"
#include "monotonic.h"
#include "number.h"
#include "ortecmd.h"
#include "proto.h"
#include "qcgconn.h"
#include "tunnel.h"
#include "verifier.h"
#include "wire.h"

#define LAUNCH_FAILED 255
#define LAUNCH_USAGE 2
/* After a signal passed on, how long the daemon has to end before we go. */
#define SIGNAL_WAIT_MS 10000
#define RANK_TRIES 8
/* A resume tries a new connection for at most this long at a time; the agent
   not published any more (the helper saw it exit) in this many tries in a
   row means it is gone: mpirun hears of it now, not after
   WIRE_RESUME_TRY_MS (a helper restarting publishes it again within
   seconds). */
#define RESUME_TRY_EACH_MS 10000
#define RESUME_UNPUBLISHED_TRIES 2

struct launcher {
    const char *host;
    const char *job, *secret;
    int verbose;
    int encrypt;         /* enum qcg_encrypt */
    uv_timer_t retry;    /* the next try to resume */
    uint64_t resume_by;  /* broken: give up at this time (0: not broken) */
    char broke_why[160]; /* why it broke, and the last try's failure */
    char last_error[320];
    int unpublished; /* resume tries in a row that found the agent not published */
    enum qcg_technique technique;
    uv_loop_t loop;
    struct link *link;
    struct tunnels *tunnels;
    uv_signal_t sig[3];
    uv_timer_t timer;
    char addrs[256];    /* mpirun's runtime addresses, comma-separated */
    const char *daemon; /* orted or prted, for messages */
    uint16_t port;
    int signalled;
    qcg_ctx *ctx;
    uv_timer_t linger;
    int rc;
    int done;
};

struct runtime_connect {
    uv_connect_t req;
    struct launcher *l;
    uint16_t chan;
    int next; /* the next address of addrs to try */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: qcg-launch [--timeout SECONDS] [--encrypt MODE] [--verbose] HOST "
            "orted|prted ARGS...\n"
            "  mpirun's launch agent over qcg-connect: --mca plm_rsh_agent qcg-launch\n"
            "  (Open MPI 5: --mca plm_ssh_agent qcg-launch)\n"
            "  (qcg-mpirun sets it).  Needs QCG_JOB and QCG_JOB_SECRET in the environment,\n"
            "  and a qcg-agent of that job running on HOST.\n"
            "  --timeout S  how long to look for HOST's agent (default $QCG_LAUNCH_TIMEOUT"
            " or 60)\n"
            "  --encrypt MODE  which launch connections are encrypted: inter-site (default:\n"
            "               when the agent is in another cluster), always or never (default\n"
            "               $QCG_ENCRYPT, which qcg-agent reads too)\n"
            "  --verbose    lines on stderr: the technique, encryption and setup time, and\n"
            "               each break and resume of the connection to the agent\n"
            "  --version    print the version and the launch protocol version and exit\n"
            "  A broken connection to the agent is resumed over a new one (tried for %d s).\n"
            "  exit status: the remote command's; 255 the launch failed (as ssh), 2 usage\n"
            "  error.\n",
            WIRE_RESUME_TRY_MS / 1000);
}

static void write_all(int fd, const uint8_t *p, size_t n);

/* A line saying why the launch failed, on stderr and appended to
   $QCG_LAUNCH_REPORT (qcg-mpirun's private file): Open MPI prints its own
   advice after ours, and qcg-mpirun repeats ours last. One write each: the
   launchers of every node share mpirun's stderr and the file. */
static void say_failure(const char *line)
{
    const char *report = getenv("QCG_LAUNCH_REPORT");
    int fd;

    write_all(2, (const uint8_t *)line, strlen(line));
    if (report == NULL || report[0] == '\0')
        return;
    fd = open(report, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return;
    write_all(fd, (const uint8_t *)line, strlen(line));
    close(fd);
}

static void fail(const char *host, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(const char *host, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    int n;

    n = snprintf(line, sizeof(line), "qcg-launch: %.200s: ", host);
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    strcat(line, "\n");
    say_failure(line);
    exit(LAUNCH_FAILED);
}

static void finish(struct launcher *l, int rc)
{
    if (l->done)
        return;
    l->done = 1;
    l->rc = rc;
    /* Over: the agent ends the daemon now rather than wait for a resume. */
    if (l->link != NULL) {
        link_send(l->link, WIRE_BYE, 0, NULL, 0);
        link_close(l->link);
    }
    l->link = NULL;
    tunnels_free(l->tunnels);
    l->tunnels = NULL;
    for (int i = 0; i < 3; i++)
        uv_close((uv_handle_t *)&l->sig[i], NULL);
    uv_close((uv_handle_t *)&l->timer, NULL);
    uv_close((uv_handle_t *)&l->retry, NULL);
    uv_close((uv_handle_t *)&l->linger, NULL);
}

static void write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* nobody reads our output any more: drop it */
        p += w;
        n -= (size_t)w;
    }
}

/* --- runtime connections to mpirun ---------------------------------------- */

static void runtime_try(struct runtime_connect *rc);

static void on_runtime_connected(uv_connect_t *req, int status)
{
    struct runtime_connect *rc = (struct runtime_connect *)req;
    struct launcher *l = rc->l;

    if (l->tunnels == NULL || status == UV_ECANCELED) {
        free(rc);
        return;
    }
    if (status < 0) {
        /* The handle is spent: a new one for the next address. */
        tunnel_close(l->tunnels, rc->chan, 0);
        runtime_try(rc);
        return;
    }
    tunnel_start(l->tunnels, rc->chan);
    free(rc);
}

static void runtime_try(struct runtime_connect *rc)
{
    struct launcher *l = rc->l;
    char addr[64];
    const char *p = l->addrs;
    struct sockaddr_storage ss;
    uv_tcp_t *tcp;

    for (int i = 0; i < rc->next && p != NULL; i++) {
        p = strchr(p, ',');
        if (p != NULL)
            p++;
    }
    while (p != NULL && *p != '\0') {
        size_t n = strcspn(p, ",");
        snprintf(addr, sizeof(addr), "%.*s", (int)n, p);
        rc->next++;
        p = p[n] == ',' ? p + n + 1 : NULL;
        if (uv_ip4_addr(addr, l->port, (struct sockaddr_in *)&ss) != 0 &&
            uv_ip6_addr(addr, l->port, (struct sockaddr_in6 *)&ss) != 0)
            continue;
        tcp = tunnel_prepare(l->tunnels, rc->chan);
        if (tcp == NULL)
            break;
        if (uv_tcp_connect(&rc->req, tcp, (struct sockaddr *)&ss, on_runtime_connected) == 0)
            return;
        tunnel_close(l->tunnels, rc->chan, 0);
    }
    fprintf(stderr, "qcg-launch: %s: cannot reach mpirun's runtime port %s:%u on this node\n",
            l->host, l->addrs, l->port);
    link_send(l->link, WIRE_TCLOSE, rc->chan, NULL, 0);
    free(rc);
}

/* --- the launch connection ------------------------------------------------- */

static void on_frame(struct link *lk, const struct wire_header *h, const uint8_t *payload)
{
    struct launcher *l = link_data(lk);
    struct runtime_connect *rc;

    switch (h->type) {
    case WIRE_OUT:
    case WIRE_ERR:
        write_all(h->type == WIRE_OUT ? 1 : 2, payload, h->len);
        return;
    case WIRE_TOPEN:
        rc = calloc(1, sizeof(*rc));
        if (rc == NULL || h->chan >= WIRE_CHANNELS_MAX) {
            free(rc);
            link_send(lk, WIRE_TCLOSE, h->chan, NULL, 0);
            return;
        }
        rc->l = l;
        rc->chan = h->chan;
        runtime_try(rc);
        return;
    case WIRE_TDATA:
    case WIRE_TCLOSE:
        if (tunnels_frame(l->tunnels, h, payload) == 0)
            return;
        break;
    case WIRE_SESSION:
        if (h->len == WIRE_TOKEN_LEN) {
            link_set_session(lk, payload);
            return;
        }
        break;
    case WIRE_REFUSED:
        fprintf(stderr, "qcg-launch: %s: the agent refused %s: %.*s\n", l->host,
                l->resume_by != 0 ? "to resume the launch" : "the launch", (int)h->len,
                (const char *)payload);
        finish(l, LAUNCH_FAILED);
        return;
    case WIRE_EXIT:
        if (h->len == 8) {
            uint32_t code = wire_u32_get(payload), sig = wire_u32_get(payload + 4);
            if (sig != 0)
                fprintf(stderr, "qcg-launch: %s: %s killed by signal %u\n", l->host, l->daemon,
                        sig);
            finish(l, sig != 0 ? 128 + (int)(sig & 127) : (int)(code & 255));
            return;
        }
        break;
    default:
        break;
    }
    fprintf(stderr, "qcg-launch: %s: the agent sent an unexpected %s frame: giving up\n", l->host,
            wire_type_name(h->type));
    finish(l, LAUNCH_FAILED);
}

static void on_link_closed(struct link *lk, const char *why)
{
    struct launcher *l = link_data(lk);

    l->link = NULL;
    if (!l->done)
        fprintf(stderr, "qcg-launch: %s: lost the connection to its agent: %s\n", l->host, why);
    finish(l, LAUNCH_FAILED);
}

static void on_link_drained(struct link *lk)
{
    struct launcher *l = link_data(lk);

    if (l->tunnels != NULL)
        tunnels_resume(l->tunnels);
}

static void on_retry(uv_timer_t *t);

/* The connection broke after the agent gave the session's token: connect
   again (the grid plans a technique anew) and resume. */
static void on_link_broken(struct link *lk, const char *why)
{
    struct launcher *l = link_data(lk);

    if (l->done)
        return;
    if (l->resume_by == 0) {
        l->resume_by = monotonic_ms() + WIRE_RESUME_TRY_MS;
        snprintf(l->broke_why, sizeof(l->broke_why), "%s", why);
        l->last_error[0] = '\0';
    }
    if (l->verbose)
        fprintf(stderr, "qcg-launch: %s: the connection to its agent broke (%s): resuming\n",
                l->host, why);
    /* Not from within the link's callback. */
    uv_timer_start(&l->retry, on_retry, 0, 0);
}

static void on_link_resumed(struct link *lk, unsigned long resent)
{
    struct launcher *l = link_data(lk);

    if (l->verbose)
        fprintf(stderr,
                "qcg-launch: %s: resumed over a new connection (%s, %llu ms after the break, %lu "
                "frames resent)\n",
                l->host, qcg_technique_name(l->technique),
                (unsigned long long)(monotonic_ms() + WIRE_RESUME_TRY_MS - l->resume_by), resent);
    l->resume_by = 0;
    l->unpublished = 0;
}

static const struct link_ops launcher_link_ops = {on_frame, on_link_closed, on_link_drained,
                                                  on_link_broken, on_link_resumed};

/* The connection stays ours; the context (a helper slot, and our published
   contact) is not needed any more.  Not at once: the helper sends the
   connect's outcome upstream on the connect's own helper connection, and a
   withdrawal on ours could overtake it (the grid then refuses the report and
   learns nothing about the technique). */
#define CONTEXT_LINGER_MS 2000

static void on_linger_done(uv_timer_t *t)
{
    struct launcher *l = t->data;

    if (l->ctx != NULL)
        qcg_close(l->ctx);
    l->ctx = NULL;
}

static void on_signal_timeout(uv_timer_t *t)
{
    struct launcher *l = t->data;

    fprintf(stderr,
            "qcg-launch: %s: %s did not end within %d ms of the signal: leaving it "
            "to its agent\n",
            l->host, l->daemon, SIGNAL_WAIT_MS);
    finish(l, LAUNCH_FAILED);
}

static void on_signal(uv_signal_t *h, int sig)
{
    struct launcher *l = h->data;
    uint8_t b[4];

    /* A second signal, or none can be passed on: go now; the agent ends
       the daemon when our connection closes. */
    if (l->signalled || l->link == NULL) {
        finish(l, 128 + sig);
        return;
    }
    l->signalled = 1;
    wire_u32_put(b, (uint32_t)sig);
    link_send(l->link, WIRE_SIGNAL, 0, b, sizeof(b));
    uv_timer_start(&l->timer, on_signal_timeout, SIGNAL_WAIT_MS, 0);
}

/* --- finding the agent ----------------------------------------------------- */

/* Connects to HOST's agent within timeout_ms (from the call): the connected socket (in
   tlsp its session when encrypted, else NULL; in ctxp the launcher's
   context, for the caller to close), or -1 with why. */
static int connect_agent(struct launcher *l, int timeout_ms, qcg_ctx **ctxp, qcg_tls **tlsp,
                         int *code, char *why, size_t whylen)
{
    const char *host = l->host, *job = l->job;
    char agent_job[GRID_JOB_MAX];
    struct qcg_options opts = {.job = agent_job, .secret = l->secret, .encrypt = l->encrypt};
    struct qcg_conn_info info = {0};
    qcg_ctx *ctx = NULL;
    uint32_t r;
    int rc = QCG_EBUSY, fd;
    uint64_t t0 = monotonic_ms();

    *code = 0;
    *tlsp = NULL;
#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(why, whylen, __VA_ARGS__);                                                        \
        if (ctx != NULL)                                                                           \
            qcg_close(ctx);                                                                        \
        return -1;                                                                                 \
    } while (0)
    if (agent_job_id(agent_job, job, host) < 0)
        FAIL("not a node name (the host list names nodes as their agents know them)");
    /* Launchers are ranks >= 1 of the agent's job; several mpiruns may
       launch on one node at once, so pick at random and retry when taken. */
    for (int i = 0; i < RANK_TRIES && rc == QCG_EBUSY; i++) {
        if (getrandom(&r, sizeof(r), 0) != sizeof(r))
            r = (uint32_t)getpid() * 2654435761u + (uint32_t)i;
        opts.rank = 1 + (int)(r % 0x3fffffffu);
        ctx = NULL;
        rc = qcg_open(&ctx, &opts);
        if (rc < 0) {
            ctx = NULL;
            FAIL("cannot reach this node's qcg-helper: %s: %s", qcg_strerror(rc),
                 qcg_last_error(NULL));
        }
        rc = qcg_listen(ctx);
        if (rc < 0 && rc != QCG_EBUSY)
            FAIL("the grid does not take this launcher: %s: %s", qcg_strerror(rc),
                 qcg_last_error(ctx));
        if (rc < 0) {
            qcg_close(ctx);
            ctx = NULL;
        }
    }
    if (rc < 0)
        FAIL("no free launcher rank in job %s after %d tries", agent_job, RANK_TRIES);
    /* The timeout bounds the whole lookup, the launcher's own publish too. */
    int left_ms = timeout_ms - (int)(monotonic_ms() - t0);
    fd = qcg_connect(ctx, 0, left_ms > 0 ? left_ms : 1, &info);
    *code = fd;
    if (fd < 0) {
        const char *detail = qcg_last_error(ctx);
        switch (fd) {
        case QCG_ETIMEDOUT:
        case QCG_ENOTFOUND:
            FAIL("no qcg-agent of job %s answered within %d s (%s): is one running on %s, "
                 "started with QCG_JOB=%s?",
                 job, (timeout_ms + 999) / 1000, detail[0] ? detail : "not published", host, job);
        case QCG_EDENIED:
            FAIL("the grid refused job %s's secret: the agents were started with another "
                 "QCG_JOB_SECRET (%s)",
                 job, detail);
        default:
            FAIL("cannot connect to its qcg-agent: %s: %s", qcg_strerror(fd), detail);
        }
    }
#undef FAIL
    l->technique = info.technique;
    if (l->verbose)
        fprintf(stderr,
                "qcg-launch: %s: connected to its agent (%s, %s, setup %.1f ms, %llu ms "
                "with the lookup)\n",
                host, qcg_technique_name(info.technique), qcg_encryption_name(info.encryption),
                (double)info.setup_us / 1000.0, (unsigned long long)(monotonic_ms() - t0));
    *ctxp = ctx;
    *tlsp = info.tls;
    return fd;
}

/* One try to resume; the next in a second while WIRE_RESUME_TRY_MS last. */
static void on_retry(uv_timer_t *t)
{
    struct launcher *l = t->data;
    uint64_t now = monotonic_ms();
    qcg_ctx *ctx;
    qcg_tls *tls;
    int fd, code, wait_ms;

    if (l->done || l->link == NULL || l->resume_by == 0)
        return;
    if (now >= l->resume_by) {
        char line[1024];
        snprintf(line, sizeof(line),
                 "qcg-launch: %.200s: lost the connection to its agent (%s) and could not "
                 "resume it within %d s%s%.300s\n",
                 l->host, l->broke_why, WIRE_RESUME_TRY_MS / 1000, l->last_error[0] ? ": " : "",
                 l->last_error);
        say_failure(line);
        finish(l, LAUNCH_FAILED);
        return;
    }
    /* The previous context is done with (its linger, if any, is cut short). */
    uv_timer_stop(&l->linger);
    if (l->ctx != NULL)
        qcg_close(l->ctx);
    l->ctx = NULL;
    wait_ms = (int)(l->resume_by - now);
    if (wait_ms > RESUME_TRY_EACH_MS)
        wait_ms = RESUME_TRY_EACH_MS;
    fd = connect_agent(l, wait_ms, &ctx, &tls, &code, l->last_error, sizeof(l->last_error));
    /* Not published: libqcgconn looks up until the timeout and then says
       so with QCG_ENOTFOUND. */
    l->unpublished = code == QCG_ENOTFOUND ? l->unpublished + 1 : 0;
    if (l->unpublished >= RESUME_UNPUBLISHED_TRIES) {
        char line[1024];
        snprintf(line, sizeof(line),
                 "qcg-launch: %.200s: lost the connection to its agent (%s), and the agent is "
                 "gone: %.300s\n",
                 l->host, l->broke_why, l->last_error);
        say_failure(line);
        finish(l, LAUNCH_FAILED);
        return;
    }
    if (fd < 0 || link_attach(l->link, fd, tls) < 0) {
        if (fd >= 0) {
            snprintf(l->last_error, sizeof(l->last_error), "the new connection failed");
            qcg_close(ctx);
        }
        uv_timer_start(&l->retry, on_retry, 1000, 0);
        return;
    }
    l->ctx = ctx;
    uv_timer_start(&l->linger, on_linger_done, CONTEXT_LINGER_MS, 0);
}

/* args[0..n-1] joined by spaces (as the remote shell would see them); exits
   when out of memory. */
static char *join_args(int n, char **args)
{
    size_t len = 1;
    char *s;

    for (int k = 0; k < n; k++)
        len += strlen(args[k]) + 1;
    if ((s = malloc(len)) == NULL) {
        fprintf(stderr, "qcg-launch: out of memory\n");
        exit(LAUNCH_FAILED);
    }
    s[0] = '\0';
    for (int k = 0; k < n; k++) {
        strcat(s, args[k]);
        if (k + 1 < n)
            strcat(s, " ");
    }
    return s;
}

/* The child forked by stand_in, for the parent's signal handler. */
static volatile pid_t worker;

static void pass_on(int sig)
{
    if (worker > 0)
        kill(worker, sig);
}

/* mpirun may SIGKILL its launch agents (Open MPI 5 does when another
   daemon fails to start), and a killed launcher says no BYE: its agent
   would wait WIRE_RESUME_WAIT_MS for a resume before ending the daemon.
   So the launch runs in a child, in a process group of its own, that gets
   SIGTERM when this process dies however it dies (and ends the daemon as
   for any signal); this one only passes signals on and exits with the
   child's status.  Returns in the child. */
static void stand_in(void)
{
    struct sigaction sa;
    sigset_t block, old;
    int st;
    pid_t pid;

    /* Signals wait until the handler knows the child. */
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    sigprocmask(SIG_BLOCK, &block, &old);
    pid_t self = getpid();
    pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        return; /* then without the stand-in */
    }
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != self)
            _exit(LAUNCH_FAILED); /* gone before we could watch it */
        sigprocmask(SIG_SETMASK, &old, NULL);
        return;
    }
    worker = pid;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = pass_on;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            _exit(LAUNCH_FAILED);
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

int main(int argc, char **argv)
{
    struct launcher l;
    const char *job = getenv("QCG_JOB"), *secret = getenv("QCG_JOB_SECRET");
    const char *env_timeout = getenv("QCG_LAUNCH_TIMEOUT"), *encrypt = getenv("QCG_ENCRYPT");
    const char *timeout_text = env_timeout != NULL ? env_timeout : "60";
    int verbose = 0, i = 1, n, fd, code;
    long timeout_s;
    char *words[WIRE_ARGS_MAX + 1], why[256];
    qcg_tls *tls;
    uint8_t *payload;
    long len;

    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("qcg-launch %s (launch protocol %d)\n", QCG_VERSION, WIRE_VERSION);
            return 0;
        } else if (strcmp(argv[i], "--verbose") == 0) {
            verbose = 1;
        } else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
            timeout_text = argv[++i];
        } else if (strcmp(argv[i], "--encrypt") == 0 && i + 1 < argc) {
            encrypt = argv[++i];
        } else if (strcmp(argv[i], "--timeout") == 0 || strcmp(argv[i], "--encrypt") == 0) {
            fprintf(stderr, "qcg-launch: %s needs a value\n", argv[i]);
            return LAUNCH_USAGE;
        } else {
            fprintf(stderr, "qcg-launch: unknown option '%s' (see --help)\n", argv[i]);
            return LAUNCH_USAGE;
        }
    }
    if (argc - i < 2) {
        fprintf(stderr, "qcg-launch: want HOST and a command (see --help)\n");
        return LAUNCH_USAGE;
    }
    memset(&l, 0, sizeof(l));
    l.encrypt = encrypt != NULL ? qcg_encrypt_parse(encrypt) : QCG_ENCRYPT_INTER_SITE;
    if (l.encrypt < 0) {
        fprintf(stderr,
                "qcg-launch: --encrypt (or QCG_ENCRYPT): want inter-site, always or never, "
                "not '%s'\n",
                encrypt);
        return LAUNCH_USAGE;
    }
    l.host = argv[i++];
    if (number_parse(timeout_text, 1, 3600, &timeout_s) < 0)
        fail(l.host, "--timeout (or QCG_LAUNCH_TIMEOUT) must be 1..3600 seconds, not '%s'",
             timeout_text);
    if (job == NULL || !user_job_valid(job))
        fail(l.host, "QCG_JOB is %s (1..%d characters of A-Z a-z 0-9 . _ -)",
             job == NULL ? "not set" : "not a job id", USER_JOB_MAX);
    if (secret == NULL || !secret_valid(secret))
        fail(l.host, "QCG_JOB_SECRET is not set (it must be in the environment, never on a "
                     "command line)");
    if (!secret_strong(secret))
        fail(l.host, "QCG_JOB_SECRET is too weak (about %d bits, at least %d needed); %s",
             secret_entropy_bits(secret), QCG_SECRET_MIN_BITS, QCG_SECRET_ADVICE);
    /* mpirun wrote these for the shell ssh would start: make them words
       (without the environment PRRTE sets for its daemon first). */
    char *cmd = join_args(argc - i, argv + i);
    char *bare = malloc(strlen(cmd) + 1);
    if (bare == NULL)
        fail(l.host, "out of memory");
    int pre = prrte_strip_preamble(cmd, bare, strlen(cmd) + 1, why, sizeof(why));
    if (pre < 0)
        fail(l.host, "cannot run the command without a shell: %s", why);
    n = pre ? shell_words(1, (const char *const *)&bare, words, WIRE_ARGS_MAX, why, sizeof(why))
            : shell_words(argc - i, (const char *const *)argv + i, words, WIRE_ARGS_MAX, why,
                          sizeof(why));
    free(bare);
    free(cmd);
    if (n < 1)
        fail(l.host, "cannot run the command without a shell: %s", n < 0 ? why : "empty");
    const struct ompi_runtime *rt = runtime_of_line(n, words);
    int uri = rt != NULL ? mca_value_index(rt, n, words, rt->hnp_uri) : -1;
    if (uri < 0 || uri_tcp_endpoint(rt, words[uri], l.addrs, sizeof(l.addrs), &l.port) < 0)
        fail(l.host, "not an Open MPI daemon command line (no tcp orte_hnp_uri or "
                     "prte_hnp_uri): qcg-launch is mpirun's plm_rsh_agent (plm_ssh_agent)");
    l.daemon = rt->daemon;
    /* Our end goes with mpirun (it kills the launch agents' group only on
       some paths). */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1)
        fail(l.host, "mpirun is gone");
    stand_in();
    signal(SIGPIPE, SIG_IGN);

    l.job = job;
    l.secret = secret;
    l.verbose = verbose;
    fd = connect_agent(&l, (int)timeout_s * 1000, &l.ctx, &tls, &code, why, sizeof(why));
    if (fd < 0)
        fail(l.host, "%s", why);
    payload = malloc(WIRE_FRAME_MAX);
    if (payload == NULL)
        fail(l.host, "out of memory");
    len = wire_launch_encode(payload, WIRE_FRAME_MAX, job, n, (const char *const *)words);
    if (len < 0)
        fail(l.host, "the command line is too long for one launch");
    words_free(words);

    uv_loop_init(&l.loop);
    l.link = link_new(&l.loop, fd, tls, &launcher_link_ops, &l);
    if (l.link == NULL || (l.tunnels = tunnels_new(&l.loop, l.link)) == NULL)
        fail(l.host, "out of memory");
    link_send(l.link, WIRE_LAUNCH, 0, payload, (size_t)len);
    free(payload);
    uv_timer_init(&l.loop, &l.timer);
    l.timer.data = &l;
    const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    for (int k = 0; k < 3; k++) {
        uv_signal_init(&l.loop, &l.sig[k]);
        l.sig[k].data = &l;
        uv_signal_start(&l.sig[k], on_signal, sigs[k]);
    }
    uv_timer_init(&l.loop, &l.retry);
    l.retry.data = &l;
    uv_timer_init(&l.loop, &l.linger);
    l.linger.data = &l;
    uv_timer_start(&l.linger, on_linger_done, CONTEXT_LINGER_MS, 0);
    uv_run(&l.loop, UV_RUN_DEFAULT);
    uv_loop_close(&l.loop);
    if (l.ctx != NULL)
        qcg_close(l.ctx);
    return l.rc;
}
