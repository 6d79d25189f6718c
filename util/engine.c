/* The event engine of the relay, the reflector and the metrics endpoint
   on libuv; see engine.h. */
#include "engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "acceptor.h"
#include "log.h"
#include "stall_timer.h"

#define ENGINE_TICK_MS 1000
#define ENGINE_EDGE_EVENTS 256 /* taken from the edge-triggered set per turn */
#define ENGINE_LISTENERS 2

struct engine {
    uv_loop_t loop;
    bool loop_ok;
    struct engine_watch listen[ENGINE_LISTENERS]; /* fd -1: none */
    bool listening[ENGINE_LISTENERS];             /* watched */
    int edge_fd; /* the edge-triggered set (engine_edge), -1 until made */
    struct engine_watch edge;
    bool edge_watched;
    uv_timer_t tick;
    uv_async_t async;
    uv_check_t check;
    uv_idle_t idle;
    int uv_handles; /* of the above, initialised */
    struct acceptor acc;
    struct engine_config cfg;
    struct tally *untrusted; /* connections per source group */
    struct dlist all;        /* open connections, oldest first */
    struct dlist first;      /* ... still sending their first message */
    size_t nconns;
    atomic_int stop;
};

uint64_t engine_now(const struct engine *e)
{
    return uv_now(&e->loop);
}

void engine_refused_log(struct engine *e, const char *addr, const char *why)
{
    acceptor_refused(&e->acc, engine_now(e), addr, why);
}

size_t engine_conns(const struct engine *e)
{
    return e->nconns;
}

struct engine_conn *engine_oldest(const struct engine *e)
{
    return dlist_entry_or_null(e->all.head, struct engine_conn, all);
}

static void on_idle(uv_idle_t *i)
{
    (void)i; /* being active keeps the poll from blocking */
}

void engine_busy(struct engine *e, bool on)
{
    if (on)
        uv_idle_start(&e->idle, on_idle);
    else
        uv_idle_stop(&e->idle);
}

/* ---- watches ---- */

static void conn_handle_closed(struct engine_conn *c)
{
    if (--c->handles > 0)
        return;
    if (c->e->cfg.ops->freed != NULL)
        c->e->cfg.ops->freed(c->e->cfg.arg, c);
    else
        free(c);
}

static void watch_closed(uv_handle_t *h)
{
    struct engine_watch *w = h->data;

    if (w->conn != NULL)
        conn_handle_closed(w->conn);
    else if (w->on_closed != NULL)
        w->on_closed(w);
}

static void watch_io(uv_poll_t *p, int status, int events)
{
    struct engine_watch *w = p->data;

    if (status < 0)
        w->events = 0; /* libuv stopped it */
    w->on_io(w, status, events);
}

int engine_watch_init(struct engine *e, struct engine_watch *w, int fd, struct engine_conn *conn)
{
    int rc = uv_poll_init(&e->loop, &w->poll, fd);
    if (rc < 0) {
        log_warnx("watching descriptor %d: %s", fd, uv_strerror(rc));
        return -1;
    }
    w->poll.data = w;
    w->fd = fd;
    w->events = 0;
    w->conn = conn;
    if (conn != NULL)
        conn->handles++;
    return 0;
}

int engine_watch_want(struct engine_watch *w, int events)
{
    if (events == w->events)
        return 0;
    /* uv_poll_start takes the descriptor out of epoll and puts it back:
       only on a change. */
    int rc = events ? uv_poll_start(&w->poll, events, watch_io) : uv_poll_stop(&w->poll);
    if (rc < 0) {
        log_warnx("watching descriptor %d: %s", w->fd, uv_strerror(rc));
        return -1;
    }
    w->events = events;
    return 0;
}

void engine_watch_close(struct engine_watch *w)
{
    if (!uv_is_closing((uv_handle_t *)&w->poll))
        uv_close((uv_handle_t *)&w->poll, watch_closed);
    w->events = 0;
}

/* ---- connections ---- */

static void conn_deadline(uv_timer_t *t)
{
    struct engine_conn *c = t->data;

    if (c->closing)
        return;
    if (stall_timer_postponed(&c->timer, &c->deadline, conn_deadline))
        return;
    c->on_deadline(c);
}

static void conn_timer_closed(uv_handle_t *h)
{
    conn_handle_closed(h->data);
}

int engine_conn_open(struct engine *e, struct engine_conn *c, int fd, const char *source)
{
    if (!tally_take(e->untrusted, source, e->cfg.per_address))
        return -1;
    c->e = e;
    c->handles = 0;
    if (engine_watch_init(e, &c->w, fd, c) < 0) {
        tally_give(e->untrusted, source);
        return -1;
    }
    uv_timer_init(&e->loop, &c->timer);
    c->timer.data = c;
    c->handles++;
    snprintf(c->source, sizeof(c->source), "%s", source);
    c->untrusted = c->first = true;
    c->closing = false;
    c->opened_ms = engine_now(e);
    dlist_append(&e->all, &c->all);
    dlist_append(&e->first, &c->first_link);
    e->nconns++;
    engine_conn_deadline(c, e->cfg.first_ms);
    engine_watch_want(&c->w, UV_READABLE);
    return 0;
}

void engine_conn_first_done(struct engine_conn *c)
{
    if (c->first) {
        dlist_remove(&c->e->first, &c->first_link);
        c->first = false;
    }
}

void engine_conn_trusted(struct engine_conn *c)
{
    if (c->untrusted) {
        tally_give(c->e->untrusted, c->source);
        c->untrusted = false;
    }
}

void engine_conn_deadline(struct engine_conn *c, uint64_t ms)
{
    if (ms == 0) {
        uv_timer_stop(&c->timer);
        return;
    }
    stall_timer_start(&c->timer, &c->deadline, conn_deadline, ms);
}

int engine_conn_take_fd(struct engine_conn *c)
{
    int fd = c->w.fd;
    c->w.fd = -1;
    return fd;
}

void engine_conn_close(struct engine_conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    engine_conn_first_done(c);
    engine_conn_trusted(c);
    dlist_remove(&c->e->all, &c->all);
    c->e->nconns--;
    int fd = c->w.fd;
    engine_watch_close(&c->w);
    if (fd >= 0)
        close(fd);
    c->w.fd = -1;
    uv_close((uv_handle_t *)&c->timer, conn_timer_closed);
}

/* ---- accepting ---- */

static void accepted(void *arg, int fd, const struct sockaddr_storage *ss, socklen_t len)
{
    struct engine *e = arg;
    const struct engine_ops *ops = e->cfg.ops;
    char source[TALLY_KEY_MAX];

    if (ops->admit != NULL && !ops->admit(e->cfg.arg, ss, len)) {
        close(fd);
        return;
    }
    tally_source_key_prefix(ss, len, e->cfg.ipv6_prefix, source);
    if (tally_count(e->untrusted, source) >= e->cfg.per_address) {
        ops->refused(e->cfg.arg, ENGINE_REFUSED_ADDRESS, ss, len, source);
        close(fd);
        return;
    }
    if (e->nconns >= e->cfg.conns_max) {
        /* The one that has had the longest to send its first message
           makes room: legitimate clients send theirs at once. */
        struct engine_conn *old =
            dlist_entry_or_null(e->first.head, struct engine_conn, first_link);
        if (old == NULL || ops->cut == NULL) {
            ops->refused(e->cfg.arg, ENGINE_REFUSED_FULL, ss, len, source);
            close(fd);
            return;
        }
        ops->cut(e->cfg.arg, old);
        engine_conn_close(old);
    }
    ops->accepted(e->cfg.arg, fd, ss, len, source);
}

static void listen_io(struct engine_watch *w, int status, int events)
{
    struct engine *e = w->owner;

    (void)events;
    if (status < 0) {
        engine_refused_log(e, "connections", uv_strerror(status));
        engine_watch_want(w, UV_READABLE);
        return;
    }
    acceptor_run(&e->acc, w->fd, (int)e->cfg.accepts_per_run, engine_now(e), accepted, e);
}

/* ---- the edge-triggered set ---- */

static void edge_io(struct engine_watch *w, int status, int events)
{
    struct engine *e = w->owner;
    struct epoll_event evs[ENGINE_EDGE_EVENTS];

    (void)events;
    if (status < 0) {
        log_warnx("event engine: its edge-triggered set failed: %s", uv_strerror(status));
        engine_watch_want(w, UV_READABLE);
        return;
    }
    /* What is left over makes the set readable again for the next turn. */
    int n = epoll_wait(e->edge_fd, evs, ENGINE_EDGE_EVENTS, 0);
    for (int i = 0; i < n; i++) {
        struct engine_edge *x = evs[i].data.ptr;
        x->on_events(x, evs[i].events);
    }
}

int engine_edge_add(struct engine *e, int fd, struct engine_edge *x)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = x};

    if (e->edge_fd < 0) {
        e->edge_fd = epoll_create1(EPOLL_CLOEXEC);
        if (e->edge_fd < 0)
            return -1;
        if (engine_watch_init(e, &e->edge, e->edge_fd, NULL) < 0) {
            errno = EBADF;
            return -1;
        }
        e->edge_watched = true;
        e->edge.owner = e;
        e->edge.on_io = edge_io;
        engine_watch_want(&e->edge, UV_READABLE);
    }
    return epoll_ctl(e->edge_fd, EPOLL_CTL_ADD, fd, &ev);
}

/* ---- the loop ---- */

static void on_tick(uv_timer_t *t)
{
    struct engine *e = t->data;

    e->cfg.ops->tick(e->cfg.arg);
}

static void on_async(uv_async_t *a)
{
    struct engine *e = a->data;

    if (atomic_load(&e->stop)) {
        uv_stop(&e->loop);
        return;
    }
    if (e->cfg.ops->woken != NULL)
        e->cfg.ops->woken(e->cfg.arg);
}

static void on_check(uv_check_t *c)
{
    struct engine *e = c->data;

    if (e->cfg.ops->after_io != NULL)
        e->cfg.ops->after_io(e->cfg.arg);
}

/* Stops watching the listeners and closes them: nothing new from here on. */
static void listeners_close(struct engine *e)
{
    for (int i = 0; i < ENGINE_LISTENERS; i++) {
        if (e->listening[i])
            engine_watch_close(&e->listen[i]);
        e->listening[i] = false;
        if (e->listen[i].fd >= 0)
            close(e->listen[i].fd);
        e->listen[i].fd = -1;
    }
}

static int listener_watch(struct engine *e, int i)
{
    if (e->listen[i].fd < 0)
        return 0;
    if (engine_watch_init(e, &e->listen[i], e->listen[i].fd, NULL) < 0)
        return -1;
    e->listening[i] = true;
    e->listen[i].owner = e;
    e->listen[i].on_io = listen_io;
    return engine_watch_want(&e->listen[i], UV_READABLE);
}

struct engine *engine_new(const struct engine_config *cfg, char *err, size_t errlen)
{
    struct engine *e = calloc(1, sizeof(*e));
    int rc;

    if (e == NULL) {
        snprintf(err, errlen, "out of memory");
        close(cfg->listen_fd);
        if (cfg->listen_fd2 >= 0)
            close(cfg->listen_fd2);
        return NULL;
    }
    e->cfg = *cfg;
    e->listen[0].fd = cfg->listen_fd;
    e->listen[1].fd = cfg->listen_fd2;
    e->edge_fd = -1;
    acceptor_init(&e->acc, cfg->shed);
    e->untrusted = tally_new();
    if (e->untrusted == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    rc = uv_loop_init(&e->loop);
    if (rc < 0) {
        snprintf(err, errlen, "event loop: %s", uv_strerror(rc));
        goto fail;
    }
    e->loop_ok = true;
    uv_timer_init(&e->loop, &e->tick);
    uv_async_init(&e->loop, &e->async, on_async);
    uv_check_init(&e->loop, &e->check);
    uv_idle_init(&e->loop, &e->idle);
    e->tick.data = e->async.data = e->check.data = e->idle.data = e;
    e->uv_handles = 4;
    /* Without a tick an idle loop sleeps until an event or a deadline. */
    if (cfg->ops->tick != NULL)
        uv_timer_start(&e->tick, on_tick, ENGINE_TICK_MS, ENGINE_TICK_MS);
    uv_check_start(&e->check, on_check);
    for (int i = 0; i < ENGINE_LISTENERS; i++) {
        if (listener_watch(e, i) < 0) {
            snprintf(err, errlen, "cannot watch the listener");
            goto fail;
        }
    }
    return e;
fail:
    engine_free(e);
    return NULL;
}

int engine_run(struct engine *e)
{
    while (!atomic_load(&e->stop))
        uv_run(&e->loop, UV_RUN_DEFAULT);
    listeners_close(e);
    return 0;
}

void engine_stop(struct engine *e)
{
    atomic_store(&e->stop, 1);
    uv_async_send(&e->async);
}

void engine_wake(struct engine *e)
{
    uv_async_send(&e->async);
}

void engine_free(struct engine *e)
{
    if (e == NULL)
        return;
    listeners_close(e);
    if (e->edge_watched)
        engine_watch_close(&e->edge);
    if (e->loop_ok) {
        if (e->uv_handles) {
            uv_close((uv_handle_t *)&e->tick, NULL);
            uv_close((uv_handle_t *)&e->async, NULL);
            uv_close((uv_handle_t *)&e->check, NULL);
            uv_close((uv_handle_t *)&e->idle, NULL);
        }
        /* The close callbacks: the owner's connections are freed here. */
        uv_run(&e->loop, UV_RUN_DEFAULT);
        if (uv_loop_close(&e->loop) != 0)
            log_warnx("event engine: handles left open at its end");
    }
    if (e->edge_fd >= 0)
        close(e->edge_fd);
    acceptor_free(&e->acc);
    tally_free(e->untrusted);
    free(e);
}
