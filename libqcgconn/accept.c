/* qcg_accept, and the handshakes of every connection that arrives: on our
   listener (direct, or the peer's side of a reversed connection that one of
   our connects waits for), or handed over by the helper (LOCAL_INCOMING: a
   proxied connection where we wait for the hello, or a reversed one where
   we send it).
   Nothing here blocks: accept_pump reads and writes what the sockets allow
   and keeps the state in struct pending.  A process that both accepts and
   connects in one thread must never block on a peer that is itself waiting
   for us; a connect waiting for its reversed connection pumps too, so that
   the connection reaches it even while the application is not accepting.
   Deadlines are kept by a timerfd in the I/O set. */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "handshake.h"
#include "internal.h"

static int epoll_set(int epfd, int fd, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.fd = fd};

    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0)
        return 0;
    if (errno != EEXIST)
        return -1;
    return epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev);
}

int accept_watch(qcg_ctx *ctx, int fd)
{
    return epoll_set(ctx->io_epfd, fd, EPOLLIN);
}

void accept_unwatch(qcg_ctx *ctx, int fd)
{
    if (fd >= 0)
        epoll_ctl(ctx->io_epfd, EPOLL_CTL_DEL, fd, NULL);
}

int accept_init(qcg_ctx *ctx)
{
    ctx->io_epfd = epoll_create1(EPOLL_CLOEXEC);
    ctx->accept_epfd = epoll_create1(EPOLL_CLOEXEC);
    ctx->ready_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ctx->accept_timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ctx->io_epfd < 0 || ctx->accept_epfd < 0 || ctx->ready_efd < 0 || ctx->accept_timer < 0)
        return -1;
    /* The caller's descriptor: progress possible, or a connection ready. */
    if (accept_watch(ctx, ctx->accept_timer) < 0 ||
        epoll_set(ctx->accept_epfd, ctx->io_epfd, EPOLLIN) < 0 ||
        epoll_set(ctx->accept_epfd, ctx->ready_efd, EPOLLIN) < 0)
        return -1;
    return 0;
}

static void pending_drop(qcg_ctx *ctx, struct pending *p)
{
    accept_unwatch(ctx, p->fd);
    close(p->fd);
    memset(p, 0, sizeof(*p));
    p->fd = -1;
}

/* The slot's descriptor now belongs to someone else. */
static void pending_release(struct pending *p)
{
    memset(p, 0, sizeof(*p));
    p->fd = -1;
}

void accept_cleanup(qcg_ctx *ctx)
{
    for (int i = 0; i < ctx->pending_cap; i++) {
        if (ctx->pending[i].fd >= 0)
            pending_drop(ctx, &ctx->pending[i]);
    }
    /* Connects still waiting were not freed first (a caller error): they
       must not reach into a freed context. */
    while (ctx->waiters != NULL)
        accept_unwait(ctx, ctx->waiters);
    free(ctx->pending);
    ctx->pending = NULL;
    ctx->pending_cap = 0;
    if (ctx->accept_timer >= 0)
        close(ctx->accept_timer);
    if (ctx->ready_efd >= 0)
        close(ctx->ready_efd);
    if (ctx->accept_epfd >= 0)
        close(ctx->accept_epfd);
    if (ctx->io_epfd >= 0)
        close(ctx->io_epfd);
    ctx->accept_timer = ctx->ready_efd = ctx->accept_epfd = ctx->io_epfd = -1;
}

static bool timed_state(enum pending_state s)
{
    return s == P_HELLO_IN || s == P_CLAIM || s == P_HELLO_OUT || s == P_ANSWER_IN;
}

/* Arms the timer at the earliest pending deadline (disarms if none). */
static void rearm(qcg_ctx *ctx)
{
    struct itimerspec its;
    uint64_t first = 0;

    for (int i = 0; i < ctx->pending_cap; i++) {
        const struct pending *p = &ctx->pending[i];

        if (p->fd >= 0 && timed_state(p->state) && (first == 0 || p->deadline_us < first))
            first = p->deadline_us;
    }
    if (ctx->accept_rest_until_us > now_us() && (first == 0 || ctx->accept_rest_until_us < first))
        first = ctx->accept_rest_until_us;
    /* The helper's reconnection: the next attempt, or an answer's deadline. */
    if (ctx->hstate != H_UP && (first == 0 || ctx->helper_at_us < first))
        first = ctx->helper_at_us;
    memset(&its, 0, sizeof(its));
    if (first != 0) {
        its.it_value.tv_sec = (time_t)(first / 1000000u);
        its.it_value.tv_nsec = (long)(first % 1000000u) * 1000 + 1;
    }
    timerfd_settime(ctx->accept_timer, TFD_TIMER_ABSTIME, &its, NULL);
}

/* A free slot, the table grown (doubled, up to PENDING_MAX) when full.
   Nothing keeps a pointer to a slot across calls, so growing may move them. */
static struct pending *free_slot(qcg_ctx *ctx)
{
    struct pending *grown;
    int cap;

    for (int i = 0; i < ctx->pending_cap; i++) {
        if (ctx->pending[i].fd < 0)
            return &ctx->pending[i];
    }
    if (ctx->pending_cap >= PENDING_MAX)
        return NULL;
    cap = ctx->pending_cap > 0 ? 2 * ctx->pending_cap : PENDING_FIRST;
    grown = realloc(ctx->pending, (size_t)cap * sizeof(*grown));
    if (grown == NULL)
        return NULL;
    memset(grown + ctx->pending_cap, 0, (size_t)(cap - ctx->pending_cap) * sizeof(*grown));
    for (int i = ctx->pending_cap; i < cap; i++)
        grown[i].fd = -1;
    ctx->pending = grown;
    ctx->pending_cap = cap;
    return free_slot(ctx);
}

/* The listener is watched only while there is room for what it holds:
   otherwise it would keep every poller awake. */
static void listener_update(qcg_ctx *ctx)
{
    bool want = ctx->listen_fd >= 0 && ctx->accepting && free_slot(ctx) != NULL &&
                now_us() >= ctx->accept_rest_until_us;

    if (want == ctx->listener_watched)
        return;
    if (want) {
        if (accept_watch(ctx, ctx->listen_fd) < 0)
            return;
    } else if (ctx->listen_fd >= 0) {
        accept_unwatch(ctx, ctx->listen_fd);
    }
    ctx->listener_watched = want;
}

int accept_listen_start(qcg_ctx *ctx)
{
    ctx->accepting = true;
    ctx->listener_watched = false;
    listener_update(ctx);
    return ctx->listener_watched || free_slot(ctx) == NULL ? 0 : -1;
}

/* The eventfd in the caller's set is readable exactly while a connection is
   ready. */
static void ready_update(qcg_ctx *ctx)
{
    bool any = false;
    uint64_t v = 1;

    for (int i = 0; i < ctx->pending_cap && !any; i++)
        any = ctx->pending[i].fd >= 0 && ctx->pending[i].state == P_READY;
    if (any && !ctx->ready_signalled) {
        if (write(ctx->ready_efd, &v, sizeof(v)) == sizeof(v))
            ctx->ready_signalled = true;
    } else if (!any && ctx->ready_signalled) {
        if (read(ctx->ready_efd, &v, sizeof(v)) < 0) {
            /* EAGAIN: already clear. */
        }
        ctx->ready_signalled = false;
    }
}

static struct pending *new_pending(qcg_ctx *ctx, int fd, uint32_t events, const char *what)
{
    struct pending *p = free_slot(ctx);

    if (p == NULL) {
        ctx_seterr(ctx, "%s dropped: %d handshakes already pending", what, PENDING_MAX);
        close(fd);
        return NULL;
    }
    if (set_nonblocking(fd, true) < 0 || epoll_set(ctx->io_epfd, fd, events) < 0) {
        ctx_seterr(ctx, "%s dropped: %s", what, keep_errno(errno));
        close(fd);
        return NULL;
    }
    memset(p, 0, sizeof(*p));
    p->fd = fd;
    p->start_us = now_us();
    return p;
}

void accept_add_pending(qcg_ctx *ctx, int fd, int32_t expect_rank, uint32_t technique)
{
    struct pending *p = new_pending(ctx, fd, EPOLLIN, "incoming connection");

    if (p == NULL)
        return;
    p->state = P_HELLO_IN;
    p->expect_rank = expect_rank;
    p->technique = technique;
    p->deadline_us = p->start_us + ACCEPT_HANDSHAKE_TIMEOUT_MS * 1000u;
    listener_update(ctx);
    rearm(ctx);
}

void accept_add_hello(qcg_ctx *ctx, int fd, int32_t peer_rank, uint32_t technique,
                      const char *token)
{
    struct hs_self self = {
        .job = ctx->job, .rank = ctx->rank, .secret = ctx->secret, .cluster = ctx->cluster};
    struct pending *p = new_pending(ctx, fd, EPOLLOUT, "reversed connection");

    if (p == NULL)
        return;
    if (hs_hello_build(p->hello, &p->hs, &self, peer_rank, token) < 0) {
        ctx_seterr(ctx, "reversed connection to rank %d dropped: cannot build the hello",
                   peer_rank);
        pending_drop(ctx, p);
        return;
    }
    p->state = P_HELLO_OUT;
    p->expect_rank = peer_rank;
    p->technique = technique;
    p->deadline_us = p->start_us + REVERSED_TIMEOUT_MS * 1000u;
    listener_update(ctx);
    rearm(ctx);
}

QCG_EXPORT int qcg_accept_pollfd(const qcg_ctx *ctx)
{
    if (ctx == NULL || ctx->listen_fd < 0)
        return QCG_EINVAL;
    return ctx->accept_epfd;
}

static int nonce_seen(qcg_ctx *ctx, const uint8_t nonce[HS_NONCE_SIZE])
{
    for (unsigned i = 0; i < RECENT_NONCES; i++) {
        if (memcmp(ctx->recent_nonces[i], nonce, HS_NONCE_SIZE) == 0)
            return 1;
    }
    memcpy(ctx->recent_nonces[ctx->nonce_next], nonce, HS_NONCE_SIZE);
    ctx->nonce_next = (ctx->nonce_next + 1) % RECENT_NONCES;
    return 0;
}

/* Accepts what the listener holds, as far as there is room. */
static int accept_new(qcg_ctx *ctx)
{
    if (ctx->listen_fd < 0 || !ctx->accepting || now_us() < ctx->accept_rest_until_us)
        return 0;
    for (int i = 0; i < PENDING_MAX && free_slot(ctx) != NULL; i++) {
        int fd = accept4(ctx->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd >= 0) {
            accept_add_pending(ctx, fd, -1, QCG_TECH_DIRECT);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        if (local_shortage(errno)) {
            ctx->accept_rest_until_us = now_us() + ACCEPT_REST_MS * 1000u;
            ctx_seterr(ctx, "accept: %s (new connections wait %d ms)", keep_errno(errno),
                       ACCEPT_REST_MS);
            return QCG_ESYS;
        }
        ctx_seterr(ctx, "accept: %s", keep_errno(errno));
        return QCG_ESYS;
    }
    return 0;
}

/* Sends our answer to p's hello.  40 bytes into a fresh socket's empty
   buffer: all or nothing.  0, or -1 (last_error set). */
static int answer(qcg_ctx *ctx, struct pending *p, enum hs_status st, const struct hs_hello *peer)
{
    uint8_t out[HS_ACCEPT_SIZE];
    ssize_t n;

    hs_accept_build(out, st, peer, ctx->secret);
    n = send(p->fd, out, sizeof(out), MSG_NOSIGNAL);
    if (n != (ssize_t)sizeof(out)) {
        ctx_seterr(ctx, "incoming connection from rank %d lost while answering: %s",
                   peer->from_rank, n < 0 ? keep_errno(errno) : "short write");
        return -1;
    }
    return 0;
}

static void refuse(qcg_ctx *ctx, struct pending *p, enum hs_status st, const struct hs_hello *peer)
{
    (void)answer(ctx, p, st, peer);
    ctx_seterr(ctx, "incoming connection refused: hello from rank %d: %s", peer->from_rank,
               hs_status_name(st));
    ctx->refused++;
    pending_drop(ctx, p);
}

static bool token_matches(const struct waiter *w, const struct hs_hello *peer)
{
    return w->rank == peer->from_rank &&
           CRYPTO_memcmp(w->token, peer->token, sizeof(w->token)) == 0;
}

/* p (P_CLAIM) holds w's connection: answer it and hand it over.  1 when
   claimed, 0 when it was lost instead. */
static int claim(qcg_ctx *ctx, struct pending *p, struct waiter *w)
{
    if (answer(ctx, p, HS_OK, &p->hs) < 0) {
        pending_drop(ctx, p);
        return 0;
    }
    accept_unwatch(ctx, p->fd);
    w->fd = p->fd;
    pending_release(p);
    accept_unwait(ctx, w);
    connect_wake(w->op);
    return 1;
}

/* The whole hello of p is in. */
static void hello_in(qcg_ctx *ctx, struct pending *p)
{
    struct hs_self self = {
        .job = ctx->job, .rank = ctx->rank, .secret = ctx->secret, .cluster = ctx->cluster};
    struct hs_hello peer;
    enum hs_status st = hs_hello_check(p->hello, &self, &peer);

    if (st == HS_OK && nonce_seen(ctx, peer.nonce))
        st = HS_REPLAY;
    /* Tokens name our connects; a connection the helper handed over is no
       answer to one. */
    if (st == HS_OK && peer.token[0] != '\0' && p->expect_rank >= 0)
        st = HS_MALFORMED;
    if (st != HS_OK) {
        refuse(ctx, p, st, &peer);
        return;
    }
    if (p->expect_rank >= 0 && peer.from_rank != p->expect_rank) {
        ctx_seterr(ctx,
                   "incoming connection refused: the helper announced rank %d, "
                   "the hello says rank %d",
                   p->expect_rank, peer.from_rank);
        ctx->refused++;
        (void)answer(ctx, p, HS_DENIED, &peer);
        pending_drop(ctx, p);
        return;
    }
    if (peer.token[0] != '\0') {
        /* The peer's side of a reversed connection: for the connect that
           waits for it, which may not know yet (its plan can arrive after
           the connection). */
        p->hs = peer;
        p->state = P_CLAIM;
        p->deadline_us = now_us() + CLAIM_TIMEOUT_MS * 1000u;
        accept_unwatch(ctx, p->fd);
        for (struct waiter *w = ctx->waiters; w != NULL; w = w->next) {
            if (token_matches(w, &peer)) {
                claim(ctx, p, w);
                return;
            }
        }
        return;
    }
    if (answer(ctx, p, HS_OK, &peer) < 0) {
        pending_drop(ctx, p);
        return;
    }
    accept_unwatch(ctx, p->fd);
    p->state = P_READY;
    p->peer_rank = peer.from_rank;
    p->keepalive = strcmp(peer.cluster, ctx->cluster) != 0;
}

/* Our hello of a reversed connection was answered. */
static void answer_in(qcg_ctx *ctx, struct pending *p)
{
    const char *why = "";
    int rc = hs_accept_check(p->answer, &p->hs, ctx->secret, &why);

    if (rc < 0) {
        ctx_seterr(ctx, "reversed connection to rank %d refused: %s", p->expect_rank, why);
        pending_drop(ctx, p);
        return;
    }
    accept_unwatch(ctx, p->fd);
    p->state = P_READY;
    p->peer_rank = p->expect_rank;
    /* The helper connected across the sites, as a rule. */
    p->keepalive = true;
}

/* Reads into buf[*got..len): 1 complete, 0 not yet, -1 dropped. */
static int read_some(qcg_ctx *ctx, struct pending *p, uint8_t *buf, size_t len, const char *what)
{
    while (p->got < len) {
        ssize_t n = recv(p->fd, buf + p->got, len - p->got, 0);

        if (n > 0) {
            p->got += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        ctx_seterr(ctx, "%s dropped: %s before its %s",
                   p->state == P_HELLO_IN ? "incoming connection" : "reversed connection",
                   n == 0 ? "closed" : keep_errno(errno), what);
        pending_drop(ctx, p);
        return -1;
    }
    return 1;
}

static void hello_out(qcg_ctx *ctx, struct pending *p)
{
    while (p->sent < sizeof(p->hello)) {
        ssize_t n = send(p->fd, p->hello + p->sent, sizeof(p->hello) - p->sent, MSG_NOSIGNAL);

        if (n > 0) {
            p->sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        ctx_seterr(ctx, "reversed connection to rank %d dropped: %s", p->expect_rank,
                   n < 0 ? keep_errno(errno) : "send failed");
        pending_drop(ctx, p);
        return;
    }
    p->state = P_ANSWER_IN;
    p->got = 0;
    if (epoll_set(ctx->io_epfd, p->fd, EPOLLIN) < 0) {
        ctx_seterr(ctx, "reversed connection dropped: %s", keep_errno(errno));
        pending_drop(ctx, p);
    }
}

static void expire(qcg_ctx *ctx, struct pending *p)
{
    switch (p->state) {
    case P_HELLO_IN:
        ctx_seterr(ctx, "incoming connection dropped: no hello within %d ms",
                   ACCEPT_HANDSHAKE_TIMEOUT_MS);
        break;
    case P_CLAIM:
        (void)answer(ctx, p, HS_NO_WAITER, &p->hs);
        ctx_seterr(ctx,
                   "reversed connection from rank %d dropped: no connect of ours waits "
                   "for its token",
                   p->hs.from_rank);
        break;
    default:
        ctx_seterr(ctx, "reversed connection to rank %d dropped: no answer within %d ms",
                   p->expect_rank, REVERSED_TIMEOUT_MS);
        break;
    }
    ctx->refused++;
    pending_drop(ctx, p);
}

static void progress(qcg_ctx *ctx, struct pending *p, uint64_t now)
{
    switch (p->state) {
    case P_HELLO_IN:
        if (read_some(ctx, p, p->hello, sizeof(p->hello), "hello") > 0)
            hello_in(ctx, p);
        break;
    case P_HELLO_OUT:
        hello_out(ctx, p);
        if (p->fd < 0 || p->state != P_ANSWER_IN)
            break;
        /* The answer may be there already. */
        __attribute__((fallthrough));
    case P_ANSWER_IN:
        if (read_some(ctx, p, p->answer, sizeof(p->answer), "answer") > 0)
            answer_in(ctx, p);
        break;
    default:
        break;
    }
    if (p->fd >= 0 && timed_state(p->state) && now >= p->deadline_us)
        expire(ctx, p);
}

int accept_pump(qcg_ctx *ctx)
{
    uint64_t expirations;
    int rc;

    if (read(ctx->accept_timer, &expirations, sizeof(expirations)) < 0) {
        /* EAGAIN: not fired. */
    }
    /* INCOMING descriptors, and the connects' replies on the way; a helper
       that went away is connected again when due (direct connections keep
       coming on the listener meanwhile). */
    helper_tick(ctx);
    rc = accept_new(ctx);
    uint64_t now = now_us();
    for (int i = 0; i < ctx->pending_cap; i++) {
        if (ctx->pending[i].fd >= 0)
            progress(ctx, &ctx->pending[i], now);
    }
    listener_update(ctx);
    rearm(ctx);
    ready_update(ctx);
    return rc;
}

void accept_wait_token(qcg_ctx *ctx, struct waiter *w)
{
    w->fd = -1;
    w->next = ctx->waiters;
    ctx->waiters = w;
    for (int i = 0; i < ctx->pending_cap; i++) {
        struct pending *p = &ctx->pending[i];

        if (p->fd >= 0 && p->state == P_CLAIM && token_matches(w, &p->hs)) {
            claim(ctx, p, w);
            break;
        }
    }
    rearm(ctx);
}

void accept_unwait(qcg_ctx *ctx, struct waiter *w)
{
    for (struct waiter **pp = &ctx->waiters; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            w->next = NULL;
            return;
        }
    }
}

QCG_EXPORT unsigned long qcg_accept_refused(const qcg_ctx *ctx)
{
    return ctx != NULL ? ctx->refused : 0;
}

QCG_EXPORT int qcg_accept_sized(qcg_ctx *ctx, struct qcg_conn_info *info, size_t info_size)
{
    int rc;

    if (ctx == NULL || ctx->listen_fd < 0)
        return QCG_EINVAL;
    rc = accept_pump(ctx);
    for (int i = 0; i < ctx->pending_cap; i++) {
        struct pending *p = &ctx->pending[i];
        int fd = p->fd;

        if (fd < 0 || p->state != P_READY)
            continue;
        /* The caller gets an ordinary blocking socket. */
        if (set_nonblocking(fd, false) < 0 || conn_set_options(fd, p->keepalive) < 0) {
            ctx_seterr(ctx, "incoming connection: socket options: %s", keep_errno(errno));
            pending_drop(ctx, p);
            continue;
        }
        conn_info_out(info, info_size, p->peer_rank, p->technique, p->start_us);
        pending_release(p);
        listener_update(ctx);
        ready_update(ctx);
        return fd;
    }
    if (ctx->helper_error < 0) {
        rc = ctx->helper_error;
        ctx->helper_error = 0;
        return rc;
    }
    /* A refused peer is not the caller's failure: QCG_EAGAIN. */
    return rc < 0 ? rc : QCG_EAGAIN;
}
