/* The proxy's data loop: accept, token, pairing, timeouts; see relay.h. */
#include "relay.h"

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "acceptor.h"
#include "dlist.h"
#include "handle.h"
#include "log.h"
#include "monotonic.h"
#include "pair.h"
#include "pairtable.h"
#include "ratelimit.h"
#include "sockaddr_text.h"
#include "sockets.h"
#include "tally.h"

#define RELAY_EVENTS 256
#define RELAY_ACCEPTS_PER_EVENT 64
#define RELAY_TICK_MS 1000           /* timer housekeeping */
#define RELAY_PIPE_IDLE_MS 2000      /* an empty pipe idle this long is dropped */
#define RELAY_EXPIRE_EVERY_MS 10000  /* seen tokens past expiry + skew are forgotten */
#define RELAY_TOKENS_PER_PAIR 16     /* seen-token table: entries per max-pairs */
#define RELAY_MIN_TOKENS_PER_ADDRESS 256
/* Refusal lines: a burst seen in full, a flood not written out. */
#define RELAY_LOG_WINDOW_MS 1000
#define RELAY_LOG_BURST 10

enum conn_state { CONN_HELLO, CONN_WAITING };

/* A connection that has not been paired yet. */
struct conn {
    struct handle h; /* HANDLE_CONN, HANDLE_DEAD once closed */
    int fd;
    enum conn_state state;
    uint64_t deadline_ms;
    size_t got;
    unsigned char buf[RELAY_HELLO_LEN];
    char addr[PAIR_ADDR_MAX];
    char source[TALLY_KEY_MAX]; /* what its address is counted under */
    struct pt_entry *entry;     /* waiting: the pair's entry, and our side */
    int side;
    struct dlink link; /* in the hello or waiting list, in deadline order */
    struct conn *dead_next;
};

struct relay {
    int epfd, listen_fd, wake_fd;
    struct acceptor acc;
    struct handle listen_h, wake_h;
    int port;
    struct proxy_key key;
    unsigned token_skew, pair_timeout;
    uint64_t stall_ms, next_stall_check_ms; /* stall_ms 0: no check */
    unsigned hello_ms, hellos_per_address; /* relay.h: until the hello */
    unsigned ipv6_prefix;                   /* relay.h */
    int max_pairs;
    size_t pipe_size;
    volatile sig_atomic_t stop;

    struct pairtable *tokens;
    struct tally *hellos; /* CONN_HELLO connections per source */
    struct ratelimit refused_log, closed_log;
    struct dlist hello, waiting; /* of struct conn */
    size_t nconns;
    struct dlist pairs; /* of struct pair, by last activity, oldest first */
    struct pair *ready; /* pairs with work left */
    struct conn *dead_conns;
    struct pair *dead_pairs; /* linked through ready_next */
    uint64_t now_ms, next_tick_ms, next_expire_ms;

    atomic_ullong pairs_active, pairs_total, bytes_relayed, pairs_stalled;
    atomic_ullong refused_bad_token, refused_replay, refused_expired, refused_full,
        refused_peer_gone, unpaired_timeouts, unpaired_waiting;
    atomic_ullong hellos_waiting, hello_timeouts, hellos_cut, refused_address_hellos,
        refused_address_tokens, refused_job_tokens;
};

static void count(atomic_ullong *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* ---- lists ---- */

static struct conn *first_conn(const struct dlist *l)
{
    return dlist_entry_or_null(l->head, struct conn, link);
}

static struct pair *pair_of(struct dlink *link)
{
    return dlist_entry_or_null(link, struct pair, link);
}

static void make_ready(struct relay *r, struct pair *p)
{
    if (!p->ready) {
        p->ready = true;
        p->ready_next = r->ready;
        r->ready = p;
    }
}

/* ---- connections ---- */

/* c has sent its hello, or goes: its address's count of hellos follows. */
static void leave_hello(struct relay *r, struct conn *c)
{
    if (c->state != CONN_HELLO)
        return;
    dlist_remove(&r->hello, &c->link);
    tally_give(r->hellos, c->source);
    atomic_fetch_sub_explicit(&r->hellos_waiting, 1, memory_order_relaxed);
}

/* Closes c (its fd unless moved to a pair, fd == -1); freed after the batch. */
static void conn_close(struct relay *r, struct conn *c)
{
    if (c->h.kind == HANDLE_DEAD)
        return;
    if (c->state == CONN_HELLO)
        leave_hello(r, c);
    else
        dlist_remove(&r->waiting, &c->link);
    if (c->state == CONN_WAITING) {
        if (c->entry && c->entry->waiting[c->side] == c)
            c->entry->waiting[c->side] = NULL;
        atomic_fetch_sub_explicit(&r->unpaired_waiting, 1, memory_order_relaxed);
    }
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->h.kind = HANDLE_DEAD;
    r->nconns--;
    c->dead_next = r->dead_conns;
    r->dead_conns = c;
}

/* A refusal: a log line with the client's address and the reason, at most
   RELAY_LOG_BURST a second (anyone may make refusals), the first one after
   a flood with the count left out. */
static void conn_refuse(struct relay *r, struct conn *c, atomic_ullong *counter, const char *fmt,
                        ...) __attribute__((format(printf, 4, 5)));
static void conn_refuse(struct relay *r, struct conn *c, atomic_ullong *counter, const char *fmt,
                        ...)
{
    unsigned left_out = 0;
    if (counter)
        count(counter);
    if (ratelimit_burst_ok(&r->refused_log, r->now_ms, RELAY_LOG_WINDOW_MS, RELAY_LOG_BURST,
                           &left_out)) {
        char why[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
        if (left_out)
            log_warnx("refused %s: %s (%u more refusals not logged)", c->addr, why, left_out);
        else
            log_warnx("refused %s: %s", c->addr, why);
    }
    conn_close(r, c);
}

/* A client that went before its hello: not an error of ours, but anyone can
   make many, so the lines are limited like refusals. */
static void conn_gone(struct relay *r, struct conn *c, const char *how)
{
    unsigned left_out = 0;
    if (ratelimit_burst_ok(&r->closed_log, r->now_ms, RELAY_LOG_WINDOW_MS, RELAY_LOG_BURST,
                           &left_out))
        log_info("%s %s after %zu of the %d bytes of its token%s", c->addr, how, c->got,
                 RELAY_HELLO_LEN, left_out ? " (and others not logged)" : "");
    conn_close(r, c);
}

/* A connection refused for a cap or a shortage: logged at most once a
   second. */
static void refuse(struct relay *r, const char *addr, const char *why)
{
    acceptor_refused(&r->acc, r->now_ms, addr, why);
    count(&r->refused_full);
}

static void new_conn(void *arg, int fd, const struct sockaddr_storage *ss, socklen_t len)
{
    struct relay *r = arg;
    char addr[PAIR_ADDR_MAX], source[TALLY_KEY_MAX];

    sockaddr_text(ss, len, addr, sizeof(addr));
    tally_source_key_prefix(ss, len, r->ipv6_prefix, source);
    if (atomic_load(&r->pairs_active) >= (unsigned long long)r->max_pairs) {
        refuse(r, addr, "max-pairs reached");
        close(fd);
        return;
    }
    if (tally_count(r->hellos, source) >= r->hellos_per_address) {
        char why[160];
        snprintf(why, sizeof(why), "%u connections from %s have not sent their token yet",
                 r->hellos_per_address, source);
        acceptor_refused(&r->acc, r->now_ms, addr, why);
        count(&r->refused_address_hellos);
        close(fd);
        return;
    }
    if (r->nconns >= 2 * (size_t)r->max_pairs) {
        /* Every slot taken: the connection that has had the longest to send
           its 132 bytes makes room (legitimate clients send them at once),
           so that a flood of idle ones cannot lock new clients out. */
        struct conn *oldest = first_conn(&r->hello);
        if (oldest == NULL) {
            refuse(r, addr, "max-pairs reached");
            close(fd);
            return;
        }
        conn_refuse(r, oldest, &r->hellos_cut,
                    "no token after %llu ms, cut to make room for a new connection",
                    (unsigned long long)(r->now_ms + r->hello_ms - oldest->deadline_ms));
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL || !tally_take(r->hellos, source, r->hellos_per_address)) {
        refuse(r, addr, "out of memory");
        free(c);
        close(fd);
        return;
    }
    c->h.kind = HANDLE_CONN;
    c->fd = fd;
    c->state = CONN_HELLO;
    snprintf(c->addr, sizeof(c->addr), "%s", addr);
    memcpy(c->source, source, sizeof(source));
    c->deadline_ms = r->now_ms + r->hello_ms;
    sock_tune(fd);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = c};
    if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        log_warn("epoll_ctl for %s", addr);
        tally_give(r->hellos, source);
        close(fd);
        free(c);
        return;
    }
    dlist_append(&r->hello, &c->link);
    atomic_fetch_add_explicit(&r->hellos_waiting, 1, memory_order_relaxed);
    r->nconns++;
    log_debug("connection from %s", addr);
}

static void do_accept(struct relay *r)
{
    acceptor_run(&r->acc, RELAY_ACCEPTS_PER_EVENT, r->now_ms, new_conn, r);
}

/* ---- pairs ---- */

static void pair_end_log(struct relay *r, struct pair *p, const char *how, const char *err)
{
    char id[9];
    pair_id_text(p->id, id);
    uint64_t ms = r->now_ms - p->started_ms;
    if (err)
        log_warnx("pair %s %s: %s; %llu bytes %s -> %s, %llu bytes back, %llu.%03llu s", id, how,
                  err, (unsigned long long)p->dir[0].bytes, p->end[0].addr, p->end[1].addr,
                  (unsigned long long)p->dir[1].bytes, (unsigned long long)(ms / 1000),
                  (unsigned long long)(ms % 1000));
    else
        log_info("pair %s %s: %llu bytes %s -> %s, %llu bytes back, %llu.%03llu s", id, how,
                 (unsigned long long)p->dir[0].bytes, p->end[0].addr, p->end[1].addr,
                 (unsigned long long)p->dir[1].bytes, (unsigned long long)(ms / 1000),
                 (unsigned long long)(ms % 1000));
}

static void pair_end(struct relay *r, struct pair *p, bool abort)
{
    dlist_remove(&r->pairs, &p->link);
    pair_close(p, abort);
    atomic_fetch_sub_explicit(&r->pairs_active, 1, memory_order_relaxed);
    p->ready_next = r->dead_pairs;
    r->dead_pairs = p;
}

static void pair_step(struct relay *r, struct pair *p)
{
    char err[256];
    uint64_t moved = 0;

    enum pair_result res = pair_run(p, r->pipe_size, &moved, err, sizeof(err));
    if (moved) {
        atomic_fetch_add_explicit(&r->bytes_relayed, moved, memory_order_relaxed);
        p->active_ms = r->now_ms;
        if (r->pairs.tail != &p->link) {
            dlist_remove(&r->pairs, &p->link);
            dlist_append(&r->pairs, &p->link);
        }
    }
    switch (res) {
    case PAIR_WAIT:
        break;
    case PAIR_MORE:
        make_ready(r, p);
        break;
    case PAIR_DONE:
        pair_end_log(r, p, "done", NULL);
        pair_end(r, p, false);
        break;
    case PAIR_FAILED:
        pair_end_log(r, p, "aborted", err);
        pair_end(r, p, true);
        break;
    }
}

static void pair_event(struct relay *r, struct pair_end *end, uint32_t events)
{
    struct pair *p = end->pair;

    if (events & EPOLLERR) {
        int e = 0;
        socklen_t len = sizeof(e);
        getsockopt(end->fd, SOL_SOCKET, SO_ERROR, &e, &len);
        char err[128];
        snprintf(err, sizeof(err), "%s: %s", end->addr, e ? strerror(e) : "socket error");
        pair_end_log(r, p, "aborted", err);
        pair_end(r, p, true);
        return;
    }
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP))
        end->readable = true;
    if (events & (EPOLLOUT | EPOLLHUP))
        end->writable = true;
    pair_step(r, p);
}

/* Both sides are here: one pair from two waiting/hello connections. */
static void make_pair(struct relay *r, struct conn *a, struct conn *b)
{
    struct conn *c[2];
    c[a->side] = a;
    c[b->side] = b;
    char id[9];
    pair_id_text(a->entry->pair, id);

    if (atomic_load(&r->pairs_active) >= (unsigned long long)r->max_pairs) {
        conn_refuse(r, c[0], &r->refused_full, "pair %s: max-pairs reached", id);
        conn_refuse(r, c[1], &r->refused_full, "pair %s: max-pairs reached", id);
        return;
    }
    struct pair *p =
        pair_new(a->entry->pair, c[0]->fd, c[0]->addr, c[1]->fd, c[1]->addr, r->now_ms);
    if (p == NULL) {
        conn_refuse(r, c[0], &r->refused_full, "pair %s: out of memory", id);
        conn_close(r, c[1]);
        return;
    }
    /* The sockets now belong to the pair. */
    c[0]->fd = c[1]->fd = -1;
    conn_close(r, c[0]);
    conn_close(r, c[1]);
    atomic_fetch_add_explicit(&r->pairs_active, 1, memory_order_relaxed);
    count(&r->pairs_total);
    dlist_append(&r->pairs, &p->link);

    for (int i = 0; i < 2; i++) {
        static const unsigned char paired = RELAY_PAIRED;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                                 .data.ptr = &p->end[i]};
        if (epoll_ctl(r->epfd, EPOLL_CTL_MOD, p->end[i].fd, &ev) < 0 ||
            send(p->end[i].fd, &paired, 1, MSG_NOSIGNAL) != 1) {
            char err[128];
            snprintf(err, sizeof(err), "telling %s: %s", p->end[i].addr, strerror(errno));
            pair_end_log(r, p, "aborted", err);
            pair_end(r, p, true);
            return;
        }
    }
    log_info("pair %s: %s (initiator) <-> %s (target)", id, p->end[0].addr, p->end[1].addr);
    /* Bytes sent right after the token are already waiting. */
    p->end[0].readable = p->end[1].readable = true;
    p->end[0].writable = p->end[1].writable = true;
    make_ready(r, p);
}

/* The mapping observer (relay.h): where this connection came from, then close. */
static void answer_mapped(struct relay *r, struct conn *c)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char host[INET6_ADDRSTRLEN], line[128];
    int port;

    if (getpeername(c->fd, (struct sockaddr *)&ss, &len) < 0 ||
        sockaddr_host(&ss, len, host, sizeof(host), &port) < 0) {
        log_info("%s: mapping asked, but its address is unknown", c->addr);
        conn_close(r, c);
        return;
    }
    int n = snprintf(line, sizeof(line), "MAPPED %s %d\n", host, port);
    if (send(c->fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) != n)
        log_info("%s: mapping not sent: %s", c->addr, strerror(errno));
    log_debug("%s: mapping asked", c->addr);
    conn_close(r, c);
}

static void hello_done(struct relay *r, struct conn *c)
{
    char text[RELAY_HELLO_TOKEN + 1];
    unsigned char pair[TOKEN_PAIR_LEN];
    uint64_t expiry = 0;
    int side = 0;

    switch (relay_hello_parse(c->buf, text)) {
    case RELAY_HELLO_MAP:
        answer_mapped(r, c);
        return;
    case RELAY_HELLO_BAD_MAGIC:
        conn_refuse(r, c, &r->refused_bad_token, "not a proxy client (bad magic)");
        return;
    case RELAY_HELLO_NOT_PADDED:
        conn_refuse(r, c, &r->refused_bad_token, "malformed token (not NUL-padded)");
        return;
    case RELAY_HELLO_TOKEN_TEXT:
        break;
    }
    int rc = token_check(&r->key, text, (uint64_t)time(NULL), r->token_skew, pair, &side, &expiry);
    if (rc == TOKEN_EEXPIRED) {
        conn_refuse(r, c, &r->refused_expired,
                    "token expired (more than %u s of accepted clock skew ago)", r->token_skew);
        return;
    }
    if (rc != TOKEN_OK) {
        conn_refuse(r, c, &r->refused_bad_token, "%s token", token_error(rc));
        return;
    }
    char id[9];
    pair_id_text(pair, id);
    const char *side_name = side == TOKEN_SIDE_INITIATOR ? "initiator" : "target";
    uint64_t forget_at = expiry > UINT64_MAX - r->token_skew ? UINT64_MAX : expiry + r->token_skew;
    enum pt_refusal full;
    struct pt_entry *e = pairtable_get(r->tokens, pair, forget_at, c->source, &full);
    if (e == NULL && full == PT_OWNER_FULL) {
        conn_refuse(r, c, &r->refused_address_tokens,
                    "pair %s: %u tokens from %s are remembered already, try later", id,
                    pairtable_owned(r->tokens, c->source), c->source);
        return;
    }
    if (e == NULL && full == PT_JOB_FULL) {
        char job[TOKEN_JOB_TAG_TEXT];
        token_pair_tag(pair, job);
        conn_refuse(r, c, &r->refused_job_tokens,
                    "pair %s: %u tokens of job tag %s are remembered already (half of an "
                    "address's share), try later",
                    id, pairtable_job_owned(r->tokens, job), job);
        return;
    }
    if (e == NULL) {
        conn_refuse(r, c, &r->refused_full, "pair %s: too many tokens seen, try later", id);
        return;
    }
    if (e->used[side]) {
        conn_refuse(r, c, &r->refused_replay, "pair %s: the %s's token was already used", id,
                    side_name);
        return;
    }
    e->used[side] = 1;
    c->entry = e;
    c->side = side;
    struct conn *peer = e->waiting[1 - side];
    if (peer != NULL) {
        e->waiting[1 - side] = NULL;
        make_pair(r, c, peer);
        return;
    }
    if (e->used[1 - side]) {
        conn_refuse(r, c, &r->refused_peer_gone,
                    "pair %s: the other side's connection came and is gone", id);
        return;
    }
    leave_hello(r, c);
    c->state = CONN_WAITING;
    c->deadline_ms = r->now_ms + (uint64_t)r->pair_timeout * 1000;
    dlist_append(&r->waiting, &c->link);
    e->waiting[side] = c;
    atomic_fetch_add_explicit(&r->unpaired_waiting, 1, memory_order_relaxed);
    log_debug("pair %s: %s (%s) waits for the other side", id, c->addr, side_name);
}

static void conn_event(struct relay *r, struct conn *c, uint32_t events)
{
    if (c->state == CONN_WAITING) {
        /* Bytes sent early stay in the socket for the peer; only a reset
           ends the wait early (a FIN may be a half-close after data). */
        if (events & EPOLLERR)
            conn_refuse(r, c, &r->unpaired_timeouts, "connection reset while waiting for its peer");
        return;
    }
    while (c->got < RELAY_HELLO_LEN) {
        /* Exactly the hello: what follows is the peer's, left in the socket. */
        ssize_t n = recv(c->fd, c->buf + c->got, RELAY_HELLO_LEN - c->got, 0);
        if (n > 0) {
            c->got += (size_t)n;
        } else if (n == 0) {
            conn_gone(r, c, "closed");
            return;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return;
        } else if (errno != EINTR) {
            conn_gone(r, c, strerror(errno));
            return;
        }
    }
    hello_done(r, c);
}

/* ---- timers ---- */

static void expire_conns(struct relay *r)
{
    struct conn *c;

    while ((c = first_conn(&r->hello)) != NULL && c->deadline_ms <= r->now_ms) {
        count(&r->hello_timeouts);
        conn_refuse(r, c, &r->unpaired_timeouts, "no token within %u s (%zu of %d bytes came)",
                    r->hello_ms / 1000, c->got, RELAY_HELLO_LEN);
    }
    while ((c = first_conn(&r->waiting)) != NULL && c->deadline_ms <= r->now_ms) {
        char id[9];
        pair_id_text(c->entry->pair, id);
        conn_refuse(r, c, &r->unpaired_timeouts, "pair %s: the other side did not come within %u s",
                    id, r->pair_timeout);
    }
}

/* Pairs one side of which acknowledges nothing (pair_stalled): aborted, so
   that both ends see it at once and connect anew, rather than when the
   stalled leg's keepalive or retransmissions give up minutes later (the
   live end's data is acknowledged by us meanwhile, so it cannot tell).
   Checked four times per timeout; an idle pair costs one ioctl per side. */
static void check_stalls(struct relay *r)
{
    struct pair *p, *next;

    if (r->stall_ms == 0 || r->now_ms < r->next_stall_check_ms)
        return;
    r->next_stall_check_ms = r->now_ms + (r->stall_ms / 4 > 0 ? r->stall_ms / 4 : 1);
    for (p = pair_of(r->pairs.head); p != NULL; p = next) {
        next = pair_of(p->link.next);
        /* One with work queued moves bytes (and its ready_next is taken). */
        int side = p->ready ? -1 : pair_stalled(p, r->now_ms, r->stall_ms);
        if (side < 0)
            continue;
        char why[160];
        snprintf(why, sizeof(why),
                 "%s acknowledged nothing for %llu s (stall-timeout: a NAT or firewall on its "
                 "way forgot the connection?)",
                 p->end[side].addr, (unsigned long long)(r->stall_ms / 1000));
        count(&r->pairs_stalled);
        pair_end_log(r, p, "aborted", why);
        pair_end(r, p, true);
    }
}

static void tick(struct relay *r)
{
    check_stalls(r);
    /* Pairs are kept oldest activity first: stop at the first recent one. */
    for (struct pair *p = pair_of(r->pairs.head);
         p && p->active_ms + RELAY_PIPE_IDLE_MS <= r->now_ms; p = pair_of(p->link.next))
        pair_trim(p);
    if (r->now_ms >= r->next_expire_ms) {
        size_t n = pairtable_expire(r->tokens, (uint64_t)time(NULL));
        if (n)
            log_debug("forgot %zu expired tokens, %zu remembered", n, pairtable_count(r->tokens));
        r->next_expire_ms = r->now_ms + RELAY_EXPIRE_EVERY_MS;
    }
    r->next_tick_ms = r->now_ms + RELAY_TICK_MS;
}

static int next_timeout(struct relay *r)
{
    uint64_t next = r->next_tick_ms;
    if (r->ready)
        return 0;
    for (int i = 0; i < 2; i++) {
        const struct conn *c = first_conn(i == 0 ? &r->hello : &r->waiting);
        if (c != NULL && c->deadline_ms < next)
            next = c->deadline_ms;
    }
    return next <= r->now_ms ? 0 : (int)(next - r->now_ms);
}

static void run_ready(struct relay *r)
{
    struct pair *list = r->ready;
    r->ready = NULL;
    while (list) {
        struct pair *p = list;
        list = p->ready_next;
        p->ready = false;
        p->ready_next = NULL;
        if (p->end[0].h.kind != HANDLE_DEAD)
            pair_step(r, p);
    }
}

static void free_dead(struct relay *r)
{
    while (r->dead_conns) {
        struct conn *c = r->dead_conns;
        r->dead_conns = c->dead_next;
        free(c);
    }
    while (r->dead_pairs) {
        struct pair *p = r->dead_pairs;
        r->dead_pairs = p->ready_next;
        free(p);
    }
}

/* ---- the loop ---- */

/* Every connection and pair closed; pairs are reset, so neither side takes
   the cut for a clean end of its data. */
static void close_all(struct relay *r)
{
    struct conn *c;
    struct pair *p;

    while ((c = first_conn(&r->hello)) != NULL || (c = first_conn(&r->waiting)) != NULL)
        conn_close(r, c);
    while ((p = pair_of(r->pairs.head)) != NULL)
        pair_end(r, p, true);
}

int relay_run(struct relay *r)
{
    struct epoll_event evs[RELAY_EVENTS];
    int rc = 0;

    r->now_ms = monotonic_ms();
    r->next_tick_ms = r->now_ms + RELAY_TICK_MS;
    r->next_expire_ms = r->now_ms + RELAY_EXPIRE_EVERY_MS;
    while (!r->stop) {
        int n = epoll_wait(r->epfd, evs, RELAY_EVENTS, next_timeout(r));
        if (n < 0 && errno != EINTR) {
            log_warn("epoll_wait");
            rc = -1;
            break;
        }
        r->now_ms = monotonic_ms();
        for (int i = 0; i < n; i++) {
            struct handle *h = evs[i].data.ptr;
            switch (h->kind) {
            case HANDLE_LISTEN:
                do_accept(r);
                break;
            case HANDLE_WAKE:
                break;
            case HANDLE_CONN:
                conn_event(r, (struct conn *)h, evs[i].events);
                break;
            case HANDLE_PAIR_END:
                pair_event(r, (struct pair_end *)h, evs[i].events);
                break;
            case HANDLE_DEAD:
                break;
            }
        }
        run_ready(r);
        expire_conns(r);
        if (r->now_ms >= r->next_tick_ms)
            tick(r);
        free_dead(r);
    }

    /* Stop: nothing new, and every connection closed.  Pairs are reset so
       neither side takes the cut for a clean end of its data. */
    unsigned long long active = atomic_load(&r->pairs_active);
    size_t unpaired = r->nconns;
    epoll_ctl(r->epfd, EPOLL_CTL_DEL, r->listen_fd, NULL);
    close(r->listen_fd);
    r->listen_fd = -1;
    close_all(r);
    r->ready = NULL;
    free_dead(r);
    log_info("relay stopped: closed %llu pairs and %zu unpaired connections", active, unpaired);
    return rc;
}

void relay_stop(struct relay *r)
{
    uint64_t one = 1;
    r->stop = 1;
    /* Async-signal-safe; a full counter already wakes the loop. */
    ssize_t n = write(r->wake_fd, &one, sizeof(one));
    (void)n;
}

/* ---- set-up ---- */

/* The default share of the seen-token table (relay.h): a quarter of it, so
   that no one address fills it, yet a NATed site (one address for all its
   nodes) can start the proxied pairs of several large jobs within a token's
   lifetime + skew; never so small that a small proxy's one busy site runs
   short.  A sixteenth (max-pairs) refused a site's pairs after a few storms
   of 80 ranks in a row, whenever the descriptor limit cut max-pairs. */
static unsigned tokens_per_address(int max_pairs)
{
    unsigned share = (unsigned)max_pairs * RELAY_TOKENS_PER_PAIR / 4;

    return share < RELAY_MIN_TOKENS_PER_ADDRESS ? RELAY_MIN_TOKENS_PER_ADDRESS : share;
}

struct relay *relay_new(const struct relay_config *cfg, char *err, size_t errlen)
{
    struct relay *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->epfd = r->listen_fd = r->wake_fd = -1;
    r->acc.spare_fd = -1;
    r->key = *cfg->key;
    r->token_skew = cfg->token_skew;
    r->pair_timeout = cfg->pair_timeout ? cfg->pair_timeout : 1;
    r->stall_ms = (uint64_t)cfg->stall_timeout * 1000u;
    unsigned hello_s = cfg->hello_timeout ? cfg->hello_timeout : RELAY_DEFAULT_HELLO_TIMEOUT;
    r->hello_ms = 1000 * (hello_s < r->pair_timeout ? hello_s : r->pair_timeout);
    r->hellos_per_address =
        cfg->hellos_per_address ? cfg->hellos_per_address : RELAY_DEFAULT_HELLOS_PER_ADDRESS;
    r->ipv6_prefix = cfg->ipv6_prefix; /* 0: source_group's default */
    r->max_pairs = cfg->max_pairs > 0 ? cfg->max_pairs : 1;
    r->pipe_size = cfg->pipe_size;
    r->listen_h.kind = HANDLE_LISTEN;
    r->wake_h.kind = HANDLE_WAKE;
    r->tokens = pairtable_new((size_t)r->max_pairs * RELAY_TOKENS_PER_PAIR,
                              cfg->tokens_per_address ? cfg->tokens_per_address
                                                      : tokens_per_address(r->max_pairs));
    r->hellos = tally_new();
    if (r->tokens == NULL || r->hellos == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    r->listen_fd = sock_listen(cfg->listen_addr, cfg->port, err, errlen);
    if (r->listen_fd < 0)
        goto fail;
    r->port = sock_port(r->listen_fd);
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    r->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    acceptor_init(&r->acc, r->listen_fd, &r->refused_full);
    if (r->epfd < 0 || r->wake_fd < 0) {
        snprintf(err, errlen, "epoll/eventfd: %s", strerror(errno));
        goto fail;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &r->listen_h};
    struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &r->wake_h};
    if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->listen_fd, &ev) < 0 ||
        epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->wake_fd, &wev) < 0) {
        snprintf(err, errlen, "epoll_ctl: %s", strerror(errno));
        goto fail;
    }
    return r;
fail:
    relay_free(r);
    return NULL;
}

int relay_port(const struct relay *r)
{
    return r->port;
}

void relay_free(struct relay *r)
{
    if (r == NULL)
        return;
    /* relay_run closes every connection; this is for a relay never run. */
    close_all(r);
    free_dead(r);
    if (r->listen_fd >= 0)
        close(r->listen_fd);
    if (r->wake_fd >= 0)
        close(r->wake_fd);
    acceptor_free(&r->acc);
    if (r->epfd >= 0)
        close(r->epfd);
    pairtable_free(r->tokens);
    tally_free(r->hellos);
    explicit_bzero(&r->key, sizeof(r->key));
    free(r);
}

void relay_counters(struct relay *r, struct relay_counters *out)
{
    out->pairs_active = atomic_load(&r->pairs_active);
    out->pairs_total = atomic_load(&r->pairs_total);
    out->pairs_stalled = atomic_load(&r->pairs_stalled);
    out->bytes_relayed = atomic_load(&r->bytes_relayed);
    out->refused_bad_token = atomic_load(&r->refused_bad_token);
    out->refused_replay = atomic_load(&r->refused_replay);
    out->refused_expired = atomic_load(&r->refused_expired);
    out->refused_full = atomic_load(&r->refused_full);
    out->refused_peer_gone = atomic_load(&r->refused_peer_gone);
    out->unpaired_timeouts = atomic_load(&r->unpaired_timeouts);
    out->unpaired_waiting = atomic_load(&r->unpaired_waiting);
    out->hellos_waiting = atomic_load(&r->hellos_waiting);
    out->hello_timeouts = atomic_load(&r->hello_timeouts);
    out->hellos_cut = atomic_load(&r->hellos_cut);
    out->refused_address_hellos = atomic_load(&r->refused_address_hellos);
    out->refused_address_tokens = atomic_load(&r->refused_address_tokens);
    out->refused_job_tokens = atomic_load(&r->refused_job_tokens);
}
