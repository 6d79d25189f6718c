/* qcg_accept, and the handshakes of every connection that arrives: on our
   listener (direct, or the peer's side of a reversed connection that one of
   our connects waits for), or handed over by the helper (LOCAL_INCOMING: a
   proxied connection where we wait for the hello, or a reversed one where
   we send it).  The handshake is TLS 1.3 with the job's PSK (tls_psk.h):
   we are its server on accepted connections, its client on reversed ones.
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

#include "internal.h"
#include "tls_psk.h"

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
    tls_hs_free(p->tls);
    qcg_tls_free(p->session);
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
    return s == P_HELLO_IN || s == P_CLAIM || s == P_HELLO_OUT;
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

/* A connection on our listener that has not sent its ClientHello: anyone
   can open one, so it may be cut to make room (internal.h,
   PENDING_PER_SOURCE). */
static bool stranger(const struct pending *p)
{
    return p->fd >= 0 && p->listener && p->state == P_HELLO_IN && p->tls != NULL &&
           !tls_hs_hello_seen(p->tls);
}

/* One pass over the table: the listener's share taken, the strangers, and
   the oldest of them (of all, and of one source). */
struct census {
    int listener, strangers, same;
    struct pending *oldest, *oldest_same;
};

static void take_census(qcg_ctx *ctx, const struct source_group *source, struct census *c)
{
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < ctx->pending_cap; i++) {
        struct pending *p = &ctx->pending[i];

        if (p->fd < 0 || !p->listener)
            continue;
        c->listener++;
        if (!stranger(p))
            continue;
        c->strangers++;
        if (c->oldest == NULL || p->start_us < c->oldest->start_us)
            c->oldest = p;
        if (source == NULL || !source_group_eq(&p->source, source))
            continue;
        c->same++;
        if (c->oldest_same == NULL || p->start_us < c->oldest_same->start_us)
            c->oldest_same = p;
    }
}

/* A stranger goes to make room: not a refusal (nothing was refused, and
   a peer of the job is never a stranger for long). */
static void cut(qcg_ctx *ctx, struct pending *p, const char *why)
{
    char src[SOURCE_GROUP_TEXT_MAX];

    source_group_text(&p->source, src, sizeof(src));
    ctx_seterr(ctx, "incoming connection from %s cut: %s", src, why);
    pending_drop(ctx, p);
}

/* Whether the listener may take one more connection: within its share with
   a free slot, or by cutting a stranger. */
static bool listener_room(qcg_ctx *ctx)
{
    struct census c;

    take_census(ctx, NULL, &c);
    return c.oldest != NULL ||
           (c.listener < PENDING_MAX - PENDING_RESERVED && free_slot(ctx) != NULL);
}

/* The listener is watched only while there is room for what it holds:
   otherwise it would keep every poller awake. */
static void listener_update(qcg_ctx *ctx)
{
    bool want = ctx->listen_fd >= 0 && ctx->accepting && listener_room(ctx) &&
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
    return ctx->listener_watched || !listener_room(ctx) ? 0 : -1;
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
    struct census c;

    /* The helper's hand-overs never wait behind strangers. */
    if (p == NULL) {
        take_census(ctx, NULL, &c);
        if (c.oldest != NULL) {
            cut(ctx, c.oldest, "room for a connection the helper handed over");
            p = free_slot(ctx);
        }
    }
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

/* The server's side of a new connection; NULL when it was dropped. */
static struct pending *add_server(qcg_ctx *ctx, int fd, int32_t expect_rank, uint32_t technique)
{
    struct pending *p = new_pending(ctx, fd, EPOLLIN, "incoming connection");
    struct tls_self self;
    char why[256];

    if (p == NULL)
        return NULL;
    ctx_tls_self(ctx, &self);
    p->tls = tls_hs_server(&self, fd, expect_rank, why, sizeof(why));
    if (p->tls == NULL) {
        ctx_seterr(ctx, "incoming connection dropped: %s", why);
        pending_drop(ctx, p);
        return NULL;
    }
    p->state = P_HELLO_IN;
    p->expect_rank = expect_rank;
    p->technique = technique;
    p->deadline_us = p->start_us + ACCEPT_HANDSHAKE_TIMEOUT_MS * 1000u;
    return p;
}

void accept_add_pending(qcg_ctx *ctx, int fd, int32_t expect_rank, uint32_t technique)
{
    add_server(ctx, fd, expect_rank, technique);
    listener_update(ctx);
    rearm(ctx);
}

void accept_add_hello(qcg_ctx *ctx, int fd, int32_t peer_rank, uint32_t technique,
                      const char *token)
{
    struct pending *p = new_pending(ctx, fd, EPOLLOUT, "reversed connection");
    struct tls_self self;
    char why[256];

    if (p == NULL)
        return;
    ctx_tls_self(ctx, &self);
    /* The helper connected across the sites, as a rule: inter-site.  Never
       leaves the choice to the initiator, as it does when accepting. */
    p->tls = tls_hs_client(
        &self, fd, peer_rank, token, QCG_TECH_REVERSED,
        self.policy == QCG_ENCRYPT_ALWAYS || self.policy == QCG_ENCRYPT_INTER_SITE ? TLS_OFFER_TLS
        : self.policy == QCG_ENCRYPT_NEVER ? TLS_OFFER_EITHER
                                           : TLS_OFFER_PLAIN,
        why, sizeof(why));
    if (p->tls == NULL) {
        ctx_seterr(ctx, "reversed connection to rank %d dropped: %s", peer_rank, why);
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

static void handshake(qcg_ctx *ctx, struct pending *p);

/* A connection from our listener: a stranger until its ClientHello, room
   made for it by cutting the oldest stranger of its source (over its
   share) or of all (the listener's share taken).  Its hello is read at
   once: a peer's is usually there already, so it is no stranger. */
static void accept_one(qcg_ctx *ctx, int fd, const struct sockaddr_storage *ss, socklen_t len)
{
    struct source_group source;
    struct pending *p;
    struct census c;

    source_group_of(ss, len, SOURCE_PREFIX6_DEFAULT, &source);
    take_census(ctx, &source, &c);
    if (c.same >= PENDING_PER_SOURCE)
        cut(ctx, c.oldest_same, "its source holds too many connections without a hello");
    else if (c.oldest != NULL &&
             (c.listener >= PENDING_MAX - PENDING_RESERVED || free_slot(ctx) == NULL))
        cut(ctx, c.oldest, "the oldest of the connections without a hello, for room");
    p = add_server(ctx, fd, -1, QCG_TECH_DIRECT);
    if (p == NULL)
        return;
    p->listener = true;
    p->source = source;
    p->deadline_us = p->start_us + STRANGER_FIRST_BYTE_MS * 1000u;
    handshake(ctx, p);
}

/* Accepts what the listener holds, as far as there is room. */
static int accept_new(qcg_ctx *ctx)
{
    if (ctx->listen_fd < 0 || !ctx->accepting || now_us() < ctx->accept_rest_until_us)
        return 0;
    for (int i = 0; i < PENDING_MAX && listener_room(ctx); i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd =
            accept4(ctx->listen_fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd >= 0) {
            accept_one(ctx, fd, &ss, len);
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

static bool token_matches(const struct waiter *w, const struct hs_hello *peer)
{
    return w->rank == peer->from_rank &&
           CRYPTO_memcmp(w->token, peer->token, sizeof(w->token)) == 0;
}

/* How many connections other than p carry w's token, waiting for a claim
   or claimed and still in their handshake. */
static int token_copies(const qcg_ctx *ctx, const struct pending *p, const struct waiter *w)
{
    int n = 0;

    for (int i = 0; i < ctx->pending_cap; i++) {
        const struct pending *q = &ctx->pending[i];

        if (q != p && q->fd >= 0 && (q->state == P_CLAIM || (q->claimed && q->tls != NULL)) &&
            token_matches(w, &q->hs))
            n++;
    }
    return n;
}

/* p (P_CLAIM) carries w's token: its handshake goes on, and the connection
   goes to w once verified.  Two connections with one token: one is a
   replay of the other's ClientHello, which can never finish, so each waits
   for its client's Finished and the first verified goes to w.  Always 1
   (the waiter is found again then). */
static int claim(qcg_ctx *ctx, struct pending *p, struct waiter *w)
{
    tls_hs_claim(p->tls, true, token_copies(ctx, p, w) == 0);
    /* The peer called back with the token: the connect's progress. */
    connect_progress(w->op);
    p->claimed = true;
    p->state = P_HELLO_IN;
    p->deadline_us = now_us() + ACCEPT_HANDSHAKE_TIMEOUT_MS * 1000u;
    handshake(ctx, p);
    return 1;
}

/* A verified connection of a token: for the connect that waits for it. */
static void hand_over(qcg_ctx *ctx, struct pending *p)
{
    for (struct waiter *w = ctx->waiters; w != NULL; w = w->next) {
        if (token_matches(w, &p->hs)) {
            w->fd = p->fd;
            w->session = p->session;
            w->encryption = p->encryption;
            pending_release(p);
            accept_unwait(ctx, w);
            connect_wake(w->op);
            return;
        }
    }
    /* Our own connect gave up (it lost a simultaneous connect, or moved on
       to another technique): not a refusal of the peer. */
    ctx_seterr(ctx, "reversed connection from rank %d dropped: its connect ended meanwhile",
               p->hs.from_rank);
    pending_drop(ctx, p);
}

/* The handshake of p is over and verified. */
static void verified(qcg_ctx *ctx, struct pending *p)
{
    bool server = p->state == P_HELLO_IN;
    int rc;

    if (server)
        p->hs = *tls_hs_peer(p->tls);
    rc = tls_hs_take(p->tls, &p->session, &p->encryption);
    p->tls = NULL;
    accept_unwatch(ctx, p->fd);
    if (rc < 0) {
        ctx_seterr(ctx, "incoming connection dropped: out of memory");
        pending_drop(ctx, p);
        return;
    }
    if (p->claimed) {
        hand_over(ctx, p);
        return;
    }
    p->state = P_READY;
    p->peer_rank = server ? p->hs.from_rank : p->expect_rank;
    /* On our listener a traversed or punched connection looks direct: the
       initiator's word, covered by the PSK binder, says which it was. */
    if (server && p->technique == QCG_TECH_DIRECT &&
        (p->hs.technique == QCG_TECH_TRAVERSING || p->hs.technique == QCG_TECH_HOLEPUNCH))
        p->technique = p->hs.technique;
    /* A reversed connection: the helper connected across the sites, as a
       rule. */
    p->keepalive = server ? strcmp(p->hs.cluster, ctx->cluster) != 0 : true;
}

/* Moves p's handshake on as far as its socket allows. */
static void handshake(qcg_ctx *ctx, struct pending *p)
{
    int rc = tls_hs_step(p->tls);

    switch (rc) {
    case TLS_WANT_READ:
    case TLS_WANT_WRITE:
        if (epoll_set(ctx->io_epfd, p->fd, rc == TLS_WANT_READ ? EPOLLIN : EPOLLOUT) < 0) {
            ctx_seterr(ctx, "connection dropped during its handshake: %s", keep_errno(errno));
            pending_drop(ctx, p);
        }
        return;
    case TLS_CLAIM:
        /* The peer's side of a reversed connection: for the connect that
           waits for it, which may not know yet (its plan can arrive after
           the connection). */
        p->hs = *tls_hs_peer(p->tls);
        p->state = P_CLAIM;
        p->deadline_us = now_us() + CLAIM_TIMEOUT_MS * 1000u;
        accept_unwatch(ctx, p->fd);
        for (struct waiter *w = ctx->waiters; w != NULL; w = w->next) {
            if (token_matches(w, &p->hs)) {
                claim(ctx, p, w);
                return;
            }
        }
        return;
    case TLS_DONE:
        verified(ctx, p);
        return;
    default:
        if (p->state == P_HELLO_OUT)
            ctx_seterr(ctx, "reversed connection to rank %d refused: %s", p->expect_rank,
                       tls_hs_why(p->tls));
        else if (p->expect_rank >= 0 && tls_hs_peer(p->tls)->job[0] != '\0' &&
                 tls_hs_peer(p->tls)->from_rank != p->expect_rank)
            ctx_seterr(ctx,
                       "incoming connection refused: the helper announced rank %d, "
                       "the hello says rank %d",
                       p->expect_rank, tls_hs_peer(p->tls)->from_rank);
        else
            ctx_seterr(ctx, "incoming connection refused: hello from rank %d: %s",
                       tls_hs_peer(p->tls)->from_rank, tls_hs_why(p->tls));
        /* A peer that gave its attempt up (the loser of a simultaneous
           connect, a connect that moved on) was not refused: nothing to
           report in a healthy job. */
        if (!tls_hs_abandoned(p->tls))
            ctx->refused++;
        pending_drop(ctx, p);
        return;
    }
}

/* Our answer to a verified ClientHello (its PSK binder holds the job
   secret) is out: the peer is a process of the job, and it either sends its
   Finished or closes (we see the close at once).  Under load (100 ranks of
   one process per node on two busy cores) Finisheds came after 10 s, both
   while TCP still retransmitted our answer and after it was acked; dropping
   the connection then failed connects whose peers were about to finish. */
static bool answered_peer(const struct pending *p, uint64_t now)
{
    return tls_hs_answered(p->tls) && now - p->start_us < ACCEPT_ANSWER_MAX_MS * 1000u;
}

/* A deadline passed: the connection goes, not counted in refused (we
   refused nothing: a peer too slow or gone, a scanner holding a connection
   open; the connect on the other side reports its own failure).  Counted,
   they made btl_qcg warn in jobs that succeeded. */
static void expire(qcg_ctx *ctx, struct pending *p, uint64_t now, bool crowded)
{
    switch (p->state) {
    case P_HELLO_IN:
        /* A stranger's first deadline: no byte yet while strangers crowd
           the table, it goes; else it has the usual time. */
        if (stranger(p) && now < p->start_us + ACCEPT_HANDSHAKE_TIMEOUT_MS * 1000u) {
            if (crowded && !tls_hs_heard(p->tls)) {
                cut(ctx, p, "no byte within the first deadline while the table is crowded");
                return;
            }
            p->deadline_us = p->start_us + ACCEPT_HANDSHAKE_TIMEOUT_MS * 1000u;
            return;
        }
        if (answered_peer(p, now)) {
            p->deadline_us = now + ANSWER_RECHECK_MS * 1000u;
            return;
        }
        ctx_seterr(ctx, "incoming connection dropped: no complete handshake within %d ms (%s)",
                   ACCEPT_HANDSHAKE_TIMEOUT_MS, tls_hs_waits_for(p->tls));
        break;
    case P_CLAIM:
        /* Best effort: the refusal's alert, so that the peer knows why: the
           token's connect of ours ended (a simultaneous connect it lost, a
           fallback) or never was. */
        tls_hs_claim(p->tls, false, false);
        (void)tls_hs_step(p->tls);
        ctx_seterr(ctx,
                   "reversed connection from rank %d dropped: no connect of ours waits "
                   "for its token",
                   p->hs.from_rank);
        break;
    default:
        /* P_HELLO_OUT: the initiator waits for this connection and answers
           it, or closes it when its connect moved on; a process starved of
           CPU (a storm on two cores) answered after 5 s, and dropping the
           connection then failed a connect that was about to succeed. */
        if (now - p->start_us < ACCEPT_ANSWER_MAX_MS * 1000u) {
            p->deadline_us = p->start_us + ACCEPT_ANSWER_MAX_MS * 1000u;
            return;
        }
        ctx_seterr(ctx, "reversed connection to rank %d dropped: no answer within %d ms",
                   p->expect_rank, ACCEPT_ANSWER_MAX_MS);
        break;
    }
    pending_drop(ctx, p);
}

static void progress(qcg_ctx *ctx, struct pending *p, uint64_t now, bool crowded)
{
    if (p->state == P_HELLO_IN || p->state == P_HELLO_OUT)
        handshake(ctx, p);
    if (p->fd >= 0 && timed_state(p->state) && now >= p->deadline_us)
        expire(ctx, p, now, crowded);
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
    struct census c;
    take_census(ctx, NULL, &c);
    for (int i = 0; i < ctx->pending_cap; i++) {
        if (ctx->pending[i].fd >= 0)
            progress(ctx, &ctx->pending[i], now, c.strangers > PENDING_PER_SOURCE);
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

        /* Every connection of the token (claim says how many there are). */
        if (p->fd >= 0 && p->state == P_CLAIM && token_matches(w, &p->hs))
            claim(ctx, p, w);
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
    if ((rc = ctx_check_info(ctx, info, info_size)) < 0)
        return rc;
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
        conn_info_out(info, info_size, p->peer_rank, p->technique, p->start_us, p->encryption,
                      p->session);
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
