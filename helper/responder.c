/* qcg-probe's test endpoints; see responder.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "localproto.h"
#include "log.h"
#include "monotonic.h"
#include "proto.h"
#include "qcgconn.h"
#include "ratelimit.h"
#include "responder.h"

#define ECHO_BUF 4096
#define ACCEPTS_PER_TICK 16
#define REFUSED_LOG_MS 10000 /* one line per endpoint per 10 s about bad records */

/* One echoed connection. */
struct echo {
    int fd;       /* -1: free */
    qcg_tls *tls; /* its session when the prober asked for encryption, else NULL */
    uint64_t deadline_ms;
    size_t echoed;   /* bytes read so far (at most RESPONDER_ECHO_MAX) */
    size_t off, len; /* of buf still to write back */
    bool done_line;  /* it began with QCG_PROBE_DONE_LINE */
    bool flushing;   /* the session holds records the socket did not take yet */
    char buf[ECHO_BUF];
};

struct responder {
    struct responders *rs;
    pthread_t thread;
    int used;         /* loop thread: the slot holds a thread not joined yet */
    atomic_int ended; /* set by the thread as its last act */
    char job[QCG_JOB_MAX];
    char secret[QCG_TOKEN_MAX];
    int rank;
    int seconds;
    unsigned served[QCG_TECH_PROXY + 1]; /* thread only: connections by technique */
    unsigned encrypted;                  /* thread only: of those, TLS */
    unsigned bad_records;                /* thread only: closed on a record that did not
                                            authenticate */
    struct ratelimit refused_rl;         /* thread only */
    struct echo echo[RESPONDER_CONNS_MAX];
};

struct responders {
    uv_loop_t *loop;
    const struct helper_config *cfg;
    atomic_int stop;
    struct responder slot[RESPONDERS_MAX];
    uv_timer_t timer; /* the stop's bound */
    void (*done)(void *arg);
    void *done_arg;

    pthread_mutex_t lock; /* guards async_closed: threads wake the loop under it */
    uv_async_t async;     /* a thread ended */
    int async_closed;
};

static void echo_close(struct echo *e)
{
    if (e->tls != NULL)
        (void)qcg_tls_shutdown(e->tls); /* best effort: the socket is non-blocking */
    qcg_tls_free(e->tls);
    e->tls = NULL;
    e->flushing = false;
    if (e->fd >= 0)
        close(e->fd);
    e->fd = -1;
}

/* Whether records taken by the session still wait for the socket. */
static bool echo_unflushed(struct echo *e)
{
    return e->tls != NULL && qcg_tls_flush(e->tls) < 0;
}

/* Something to write back: the echo, or records the session still holds. */
static bool echo_writing(const struct echo *e)
{
    return e->len > e->off || e->flushing;
}

/* Bytes the session has already read, which poll does not show: read them
   now (part of a record, after a read that wanted more, does not count). */
static bool echo_session_ready(const struct echo *e)
{
    return !echo_writing(e) && e->tls != NULL && qcg_tls_pending(e->tls) > 0;
}

/* Ends a connection whose I/O failed (errno set); a record that did not
   authenticate is the peer's doing: said, rate-limited. */
static void echo_fail(struct responder *r, struct echo *e)
{
    unsigned left_out;

    if (e->tls != NULL && errno == EPROTO) {
        r->bad_records++;
        if (ratelimit_ok(&r->refused_rl, monotonic_ms(), REFUSED_LOG_MS, &left_out))
            log_warnx("probe endpoint for job %s rank %d: a connection closed: %s (%u more "
                      "since the last line)",
                      r->job, r->rank, qcg_conn_strerror(e->tls, EPROTO), left_out);
    }
    echo_close(e);
}

/* Moves one echoed connection on: writes back what is pending, else reads
   more.  Never blocks (the socket is non-blocking); a record that does not
   authenticate (EPROTO) ends the connection like a socket error. */
static void echo_step(struct responder *r, struct echo *e, short revents)
{
    if (echo_writing(e)) {
        ssize_t n =
            e->len > e->off ? qcg_conn_send(e->fd, e->tls, e->buf + e->off, e->len - e->off) : 0;

        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            echo_fail(r, e);
            return;
        }
        if (n > 0)
            e->off += (size_t)n;
        if (e->off < e->len)
            return;
        e->off = e->len = 0;
        e->flushing = echo_unflushed(e);
        if (e->flushing) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                echo_fail(r, e);
            return;
        }
        if (e->echoed >= RESPONDER_ECHO_MAX)
            echo_close(e);
        return;
    }
    if (!(revents & (POLLIN | POLLHUP | POLLERR)))
        return;
    size_t room = RESPONDER_ECHO_MAX - e->echoed;
    ssize_t n = qcg_conn_recv(e->fd, e->tls, e->buf, room < sizeof(e->buf) ? room : sizeof(e->buf));

    if (n == 0) {
        echo_close(e);
        return;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        echo_fail(r, e);
        return;
    }
    if (n > 0) {
        /* The line comes in one segment in practice; when it does not, the
           endpoint just lives out its seconds. */
        if (e->echoed == 0 && (size_t)n == strlen(QCG_PROBE_DONE_LINE) &&
            memcmp(e->buf, QCG_PROBE_DONE_LINE, (size_t)n) == 0)
            e->done_line = true;
        e->echoed += (size_t)n;
        e->len = (size_t)n;
        e->off = 0;
        echo_step(r, e, 0);
    }
}

/* Takes every verified connection waiting; 0, or -1 when the helper
   connection is gone (nothing more will come). */
static int take_connections(struct responder *r, qcg_ctx *ctx)
{
    for (int i = 0; i < ACCEPTS_PER_TICK; i++) {
        struct qcg_conn_info info;
        int fd = qcg_accept(ctx, &info);
        int k;

        if (fd == QCG_EAGAIN)
            return 0;
        if (fd == QCG_ENOHELPER)
            return -1;
        if (fd < 0) {
            log_debug("probe endpoint for job %s rank %d: a connection failed: %s: %s", r->job,
                      r->rank, qcg_strerror(fd), qcg_last_error(ctx));
            continue;
        }
        if (info.technique <= QCG_TECH_PROXY)
            r->served[info.technique]++;
        if (info.tls != NULL)
            r->encrypted++;
        for (k = 0; k < RESPONDER_CONNS_MAX && r->echo[k].fd >= 0; k++)
            ;
        if (k == RESPONDER_CONNS_MAX || fcntl(fd, F_SETFL, O_NONBLOCK) < 0) {
            log_warnx("probe endpoint for job %s rank %d: a %s connection from rank %d closed "
                      "unechoed: %d connections are being echoed",
                      r->job, r->rank, qcg_technique_name(info.technique), info.peer_rank,
                      RESPONDER_CONNS_MAX);
            qcg_tls_free(info.tls);
            close(fd);
            continue;
        }
        log_debug("probe endpoint for job %s rank %d: %s connection from rank %d, %s", r->job,
                  r->rank, qcg_technique_name(info.technique), info.peer_rank,
                  qcg_encryption_name(info.encryption));
        r->echo[k] = (struct echo){
            .fd = fd, .tls = info.tls, .deadline_ms = monotonic_ms() + RESPONDER_ECHO_MS};
    }
    return 0;
}

/* Accepts and echoes until the time is up or the helper stops. */
static void serve(struct responder *r, qcg_ctx *ctx)
{
    uint64_t end = monotonic_ms() + (uint64_t)r->seconds * 1000u;
    int afd = qcg_accept_pollfd(ctx);

    while (!atomic_load(&r->rs->stop)) {
        struct pollfd p[1 + RESPONDER_CONNS_MAX];
        int map[1 + RESPONDER_CONNS_MAX], n = 0;
        uint64_t now = monotonic_ms();

        if (now >= end)
            break;
        uint64_t wait = end - now < RESPONDER_TICK_MS ? end - now : RESPONDER_TICK_MS;

        p[n] = (struct pollfd){.fd = afd, .events = POLLIN};
        map[n++] = -1;
        for (int k = 0; k < RESPONDER_CONNS_MAX; k++) {
            struct echo *e = &r->echo[k];

            if (e->fd < 0)
                continue;
            if (now >= e->deadline_ms) {
                echo_close(e);
                continue;
            }
            p[n] = (struct pollfd){.fd = e->fd, .events = echo_writing(e) ? POLLOUT : POLLIN};
            if (echo_session_ready(e))
                wait = 0;
            map[n++] = k;
        }
        if (poll(p, (nfds_t)n, (int)wait) < 0 && errno != EINTR) {
            log_warn("probe endpoint for job %s rank %d: poll", r->job, r->rank);
            break;
        }
        bool prober_done = false;
        for (int i = 1; i < n; i++) {
            struct echo *e = &r->echo[map[i]];
            short revents = p[i].revents;

            if (echo_session_ready(e))
                revents |= POLLIN;
            if (revents != 0)
                echo_step(r, e, revents);
            prober_done = prober_done || (e->done_line && !echo_writing(e));
        }
        if (prober_done) {
            log_debug("probe endpoint for job %s rank %d: the prober is done", r->job, r->rank);
            break;
        }
        if ((p[0].revents & POLLIN) && take_connections(r, ctx) < 0) {
            log_warnx("probe endpoint for job %s rank %d: the helper connection is gone", r->job,
                      r->rank);
            break;
        }
    }
    for (int k = 0; k < RESPONDER_CONNS_MAX; k++)
        echo_close(&r->echo[k]);
}

static void wake_loop(struct responders *rs)
{
    pthread_mutex_lock(&rs->lock);
    if (!rs->async_closed)
        uv_async_send(&rs->async);
    pthread_mutex_unlock(&rs->lock);
}

static void *responder_main(void *arg)
{
    struct responder *r = arg;
    struct qcg_options opts = {.job = r->job,
                               .rank = r->rank,
                               .secret = r->secret,
                               .helper_socket = r->rs->cfg->socket,
                               /* Takes what the prober asks for (qcg-probe --encrypt). */
                               .encrypt = QCG_ENCRYPT_NEVER};
    struct qcg_contact me;
    qcg_ctx *ctx = NULL;
    unsigned total = 0;
    int rc;

    for (int k = 0; k < RESPONDER_CONNS_MAX; k++)
        r->echo[k].fd = -1;
    rc = qcg_open(&ctx, &opts);
    if (rc < 0) {
        log_warnx("probe endpoint for job %s rank %d: cannot open: %s: %s", r->job, r->rank,
                  qcg_strerror(rc), qcg_last_error(NULL));
        goto out;
    }
    rc = qcg_listen(ctx);
    if (rc < 0 || qcg_local_contact(ctx, &me) < 0) {
        log_warnx("probe endpoint for job %s rank %d: cannot publish: %s: %s", r->job, r->rank,
                  qcg_strerror(rc), qcg_last_error(ctx));
        qcg_close(ctx);
        goto out;
    }
    log_info("probe endpoint for job %s rank %d on port %u for %d s", r->job, r->rank, me.port,
             r->seconds);
    serve(r, ctx);
    qcg_close(ctx);
    for (int t = 0; t <= QCG_TECH_PROXY; t++)
        total += r->served[t];
    log_info("probe endpoint for job %s rank %d served %u connections (direct %u, reversed %u, "
             "traversing %u, holepunch %u, proxy %u; %u encrypted, %u closed on a bad "
             "record)%s",
             r->job, r->rank, total, r->served[QCG_TECH_DIRECT], r->served[QCG_TECH_REVERSED],
             r->served[QCG_TECH_TRAVERSING], r->served[QCG_TECH_HOLEPUNCH],
             r->served[QCG_TECH_PROXY], r->encrypted, r->bad_records,
             atomic_load(&r->rs->stop) ? "; ended early: the helper is stopping" : "");
out:
    explicit_bzero(r->secret, sizeof(r->secret));
    atomic_store(&r->ended, 1);
    wake_loop(r->rs);
    return NULL;
}

static unsigned running(const struct responders *rs)
{
    unsigned n = 0;

    for (int i = 0; i < RESPONDERS_MAX; i++)
        n += rs->slot[i].used ? 1u : 0u;
    return n;
}

/* Joins the threads that have ended (they are past their last step). */
static void reap(struct responders *rs)
{
    for (int i = 0; i < RESPONDERS_MAX; i++) {
        struct responder *r = &rs->slot[i];

        if (r->used && atomic_load(&r->ended)) {
            pthread_join(r->thread, NULL);
            r->used = 0;
        }
    }
}

static void close_handles(struct responders *rs)
{
    pthread_mutex_lock(&rs->lock);
    if (!rs->async_closed) {
        rs->async_closed = 1;
        uv_close((uv_handle_t *)&rs->async, NULL);
        uv_close((uv_handle_t *)&rs->timer, NULL);
    }
    pthread_mutex_unlock(&rs->lock);
}

static void stop_finished(struct responders *rs)
{
    void (*done)(void *) = rs->done;

    rs->done = NULL;
    close_handles(rs);
    if (done != NULL)
        done(rs->done_arg);
}

static void on_async(uv_async_t *a)
{
    struct responders *rs = a->data;

    reap(rs);
    if (atomic_load(&rs->stop) && rs->done != NULL && running(rs) == 0)
        stop_finished(rs);
}

static void on_stop_timeout(uv_timer_t *t)
{
    struct responders *rs = t->data;

    reap(rs);
    if (running(rs) > 0)
        log_warnx("%u probe endpoint(s) still ending after %d ms; closing the socket under them",
                  running(rs), RESPONDERS_STOP_MS);
    stop_finished(rs);
}

struct responders *responders_new(uv_loop_t *loop, const struct helper_config *cfg, char *err,
                                  size_t errlen)
{
    struct responders *rs = calloc(1, sizeof(*rs));

    if (rs == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    rs->loop = loop;
    rs->cfg = cfg;
    pthread_mutex_init(&rs->lock, NULL);
    if (uv_async_init(loop, &rs->async, on_async) < 0) {
        snprintf(err, errlen, "cannot create the probe endpoints' wake-up");
        pthread_mutex_destroy(&rs->lock);
        free(rs);
        return NULL;
    }
    rs->async.data = rs;
    uv_timer_init(loop, &rs->timer);
    rs->timer.data = rs;
    return rs;
}

void responders_start(struct responders *rs, const struct command *cmd)
{
    struct responder *r = NULL;
    sigset_t all, old;
    int seconds = cmd->seconds, rc;

    reap(rs);
    if (atomic_load(&rs->stop)) {
        log_info("probe-listen for job %s rank %d dropped: the helper is stopping", cmd->job,
                 cmd->rank);
        return;
    }
    /* An order must not make the helper publish for a job of real processes. */
    if (strncmp(cmd->job, QCG_PROBE_JOB_PREFIX, QCG_PROBE_JOB_PREFIX_LEN) != 0) {
        log_warnx("probe-listen for job %s rank %d refused: not a probe job (probe-...)", cmd->job,
                  cmd->rank);
        return;
    }
    for (int i = 0; i < RESPONDERS_MAX; i++) {
        struct responder *s = &rs->slot[i];

        if (s->used && s->rank == cmd->rank && strcmp(s->job, cmd->job) == 0) {
            log_warnx("probe-listen for job %s rank %d refused: already served here", cmd->job,
                      cmd->rank);
            return;
        }
        if (!s->used && r == NULL)
            r = s;
    }
    if (r == NULL) {
        log_warnx("probe-listen for job %s rank %d refused: %d probe endpoints already run on "
                  "this node",
                  cmd->job, cmd->rank, RESPONDERS_MAX);
        return;
    }
    if (seconds < 1 || seconds > QCG_PROBE_TTL_MAX) {
        int clamped = seconds < 1 ? 1 : QCG_PROBE_TTL_MAX;

        log_warnx("probe-listen for job %s rank %d: %d s clamped to %d s", cmd->job, cmd->rank,
                  seconds, clamped);
        seconds = clamped;
    }
    memset(r, 0, sizeof(*r));
    r->rs = rs;
    snprintf(r->job, sizeof(r->job), "%s", cmd->job);
    snprintf(r->secret, sizeof(r->secret), "%s", cmd->token);
    r->rank = cmd->rank;
    r->seconds = seconds;
    atomic_init(&r->ended, 0);
    /* Signals stay with the loop's thread. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&r->thread, NULL, responder_main, r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        log_warnx("probe-listen for job %s rank %d: cannot start a thread: %s", cmd->job, cmd->rank,
                  strerror(rc));
        explicit_bzero(r, sizeof(*r));
        return;
    }
    r->used = 1;
}

void responders_stop(struct responders *rs, void (*done)(void *arg), void *arg)
{
    atomic_store(&rs->stop, 1);
    rs->done = done;
    rs->done_arg = arg;
    reap(rs);
    if (running(rs) == 0) {
        stop_finished(rs);
        return;
    }
    log_info("waiting for %u probe endpoint(s) to withdraw", running(rs));
    uv_timer_start(&rs->timer, on_stop_timeout, RESPONDERS_STOP_MS, 0);
}

void responders_free(struct responders *rs)
{
    if (rs == NULL)
        return;
    atomic_store(&rs->stop, 1);
    /* Never stopped (the helper failed to start): the loop closes the
       handles before their memory goes. */
    if (!rs->async_closed) {
        close_handles(rs);
        uv_run(rs->loop, UV_RUN_NOWAIT);
    }
    for (int i = 0; i < RESPONDERS_MAX; i++) {
        if (rs->slot[i].used)
            pthread_join(rs->slot[i].thread, NULL);
    }
    pthread_mutex_destroy(&rs->lock);
    explicit_bzero(rs, sizeof(*rs));
    free(rs);
}
