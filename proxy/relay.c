/* The proxy's data loop: accept, token, pairing, timeouts; see relay.h. */
#include "relay.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backlog.h"
#include "dlist.h"
#include "engine.h"
#include "log.h"
#include "pair.h"
#include "htable.h"
#include "ratelimit.h"
#include "seen.h"
#include "sockaddr_text.h"
#include "sockets.h"
#include "tally.h"

#define RELAY_ACCEPTS_PER_EVENT 64
#define RELAY_PIPE_IDLE_MS 2000     /* an empty pipe idle this long is dropped */
#define RELAY_EXPIRE_EVERY_MS 10000 /* seen tokens past expiry + skew are forgotten */
#define RELAY_MIN_TOKENS_PER_ADDRESS 256
/* What a remembered token costs on average (seen.h: 8 bytes at a load of
   3/8 to 3/4), for sizing the shares from token-memory. */
#define RELAY_BYTES_PER_TOKEN 16
/* The longest token lifetime taken (the broker gives 60 s): a token whose
   expiry is further ahead than this + token-skew is refused, so that the
   seen-token buckets cover every token taken. */
#define RELAY_TOKEN_LIFETIME_MAX 600
/* Refusal lines: a burst seen in full, a flood not written out. */
#define RELAY_LOG_WINDOW_MS 1000
#define RELAY_LOG_BURST 10

enum conn_state { CONN_HELLO, CONN_WAITING };

/* A connection that has not been paired yet: the engine's until then (its
   hello deadline, its address's count, the cut of the oldest). */
struct conn {
    struct engine_conn ec; /* first: the engine frees a conn; ec.source: its address's group */
    struct relay *r;
    enum conn_state state;
    bool dead;
    size_t got;
    unsigned char buf[RELAY_HELLO_LEN];
    char addr[PAIR_ADDR_MAX];
    unsigned char pair[TOKEN_PAIR_LEN]; /* waiting: its pair (the key in r->waiting), and side */
    int side;
};

struct relay {
    struct engine *engine;
    int port, backlog;
    struct proxy_key key;
    unsigned token_skew, pair_timeout;
    uint64_t stall_ms, next_stall_check_ms; /* stall_ms 0: no check */
    unsigned hello_ms, hellos_per_address;  /* relay.h: until the hello */
    int max_pairs;
    size_t pipe_size;

    struct seen *tokens;    /* every (pair, side) taken, until expiry + skew */
    struct htable *waiting; /* of struct conn in CONN_WAITING, by pair id */
    struct ratelimit refused_log, closed_log, short_pipe_log;
    struct dlist pairs;      /* of struct pair, by last activity, oldest first */
    struct pair *ready;      /* pairs with work left */
    struct pair *dead_pairs; /* closed this turn */
    uint64_t next_expire_ms;

    atomic_ullong pairs_active, pairs_total, bytes_relayed, pairs_stalled;
    atomic_ullong refused_bad_token, refused_replay, refused_expired, refused_full,
        refused_peer_gone, unpaired_timeouts, unpaired_waiting;
    atomic_ullong hellos_waiting, hello_timeouts, hellos_cut, refused_address_hellos,
        refused_address_tokens, refused_job_tokens;
    atomic_ullong tokens_remembered, token_bytes; /* the seen tokens' size, for the stats */
    atomic_ullong pipes_short;                    /* pipes smaller than pipe_size (short_pipe) */
};

static void count(atomic_ullong *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* The seen tokens changed: their size for relay_counters. */
static void tokens_changed(struct relay *r)
{
    atomic_store_explicit(&r->tokens_remembered, seen_count(r->tokens), memory_order_relaxed);
    atomic_store_explicit(&r->token_bytes, seen_bytes(r->tokens), memory_order_relaxed);
}

static uint64_t now_ms(const struct relay *r)
{
    return engine_now(r->engine);
}

/* ---- lists ---- */

/* Pair ids are random bytes chosen by the broker and covered by the token's
   MAC, so their first bytes are a good hash that no client can steer. */
static uint64_t pair_hash(const unsigned char pair[TOKEN_PAIR_LEN])
{
    uint64_t h;
    memcpy(&h, pair, sizeof(h));
    return h;
}

static bool conn_has_pair(const void *entry, const void *pair)
{
    return memcmp(((const struct conn *)entry)->pair, pair, TOKEN_PAIR_LEN) == 0;
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
    engine_conn_first_done(&c->ec);
    engine_conn_trusted(&c->ec);
    atomic_fetch_sub_explicit(&r->hellos_waiting, 1, memory_order_relaxed);
}

/* Closes c (its socket unless moved to a pair); freed by the engine once
   its handles have closed. */
static void conn_close(struct relay *r, struct conn *c)
{
    if (c->dead)
        return;
    c->dead = true;
    if (c->state == CONN_HELLO)
        leave_hello(r, c);
    if (c->state == CONN_WAITING) {
        if (htable_find(r->waiting, pair_hash(c->pair), c->pair) == c)
            htable_remove(r->waiting, pair_hash(c->pair), c->pair);
        atomic_fetch_sub_explicit(&r->unpaired_waiting, 1, memory_order_relaxed);
    }
    engine_conn_close(&c->ec);
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
    if (ratelimit_burst_ok(&r->refused_log, now_ms(r), RELAY_LOG_WINDOW_MS, RELAY_LOG_BURST,
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
    if (ratelimit_burst_ok(&r->closed_log, now_ms(r), RELAY_LOG_WINDOW_MS, RELAY_LOG_BURST,
                           &left_out))
        log_info("%s %s after %zu of the %d bytes of its token%s", c->addr, how, c->got,
                 RELAY_HELLO_LEN, left_out ? " (and others not logged)" : "");
    conn_close(r, c);
}

/* A connection refused for a cap or a shortage: logged at most once a
   second. */
static void refuse(struct relay *r, const char *addr, const char *why)
{
    engine_refused_log(r->engine, addr, why);
    count(&r->refused_full);
}

static void refuse_at(struct relay *r, const struct sockaddr_storage *ss, socklen_t len,
                      const char *why)
{
    char addr[PAIR_ADDR_MAX];

    sockaddr_text(ss, len, addr, sizeof(addr));
    refuse(r, addr, why);
}

/* ---- accepting (the engine's checks in between) ---- */

static bool admit(void *arg, const struct sockaddr_storage *ss, socklen_t len)
{
    struct relay *r = arg;

    if (atomic_load(&r->pairs_active) < (unsigned long long)r->max_pairs)
        return true;
    refuse_at(r, ss, len, "max-pairs reached");
    return false;
}

static void refused(void *arg, enum engine_refusal why, const struct sockaddr_storage *ss,
                    socklen_t len, const char *source)
{
    struct relay *r = arg;

    if (why == ENGINE_REFUSED_FULL) {
        refuse_at(r, ss, len, "max-pairs reached");
        return;
    }
    char addr[PAIR_ADDR_MAX], text[160];
    sockaddr_text(ss, len, addr, sizeof(addr));
    snprintf(text, sizeof(text), "%u connections from %s have not sent their token yet",
             r->hellos_per_address, source);
    engine_refused_log(r->engine, addr, text);
    count(&r->refused_address_hellos);
}

/* Every slot taken: the connection that has had the longest to send its 132
   bytes makes room (legitimate clients send them at once), so that a flood
   of idle ones cannot lock new clients out. */
static void cut(void *arg, struct engine_conn *oldest)
{
    struct relay *r = arg;
    struct conn *c = (struct conn *)oldest;

    conn_refuse(r, c, &r->hellos_cut,
                "no token after %llu ms, cut to make room for a new connection",
                (unsigned long long)(now_ms(r) - oldest->opened_ms));
}

static void conn_io(struct engine_watch *w, int status, int events);
static void conn_deadline(struct engine_conn *ec);

static void accepted(void *arg, int fd, const struct sockaddr_storage *ss, socklen_t len,
                     const char *source)
{
    struct relay *r = arg;
    struct conn *c = calloc(1, sizeof(*c));

    if (c == NULL) {
        refuse_at(r, ss, len, "out of memory");
        close(fd);
        return;
    }
    c->r = r;
    c->state = CONN_HELLO;
    sockaddr_text(ss, len, c->addr, sizeof(c->addr));
    c->ec.w.owner = c;
    c->ec.w.on_io = conn_io;
    c->ec.on_deadline = conn_deadline;
    if (engine_conn_open(r->engine, &c->ec, fd, source) < 0) {
        refuse(r, c->addr, "out of memory");
        close(fd);
        free(c);
        return;
    }
    sock_tune(fd);
    atomic_fetch_add_explicit(&r->hellos_waiting, 1, memory_order_relaxed);
    log_debug("connection from %s", c->addr);
}

/* ---- pairs ---- */

static void pair_end_log(struct relay *r, struct pair *p, const char *how, const char *err)
{
    char id[9];
    pair_id_text(p->id, id);
    uint64_t ms = now_ms(r) - p->started_ms;
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

/* Closed; freed after the turn's events (free_dead), which may still name
   it.  Its own link, not ready_next: it may be on the ready list. */
static void pair_end(struct relay *r, struct pair *p, bool abort)
{
    dlist_remove(&r->pairs, &p->link);
    pair_close(p, abort);
    atomic_fetch_sub_explicit(&r->pairs_active, 1, memory_order_relaxed);
    p->dead_next = r->dead_pairs;
    r->dead_pairs = p;
}

/* Pipes beyond the user's allowance (fs.pipe-user-pages-soft: 64 MiB, 256
   pipes of 256 KiB, unless privileged) get 2 pages: such pairs relay at a
   fraction of the speed, so the log says why, at most once a minute. */
static void short_pipe(struct relay *r, struct pair *p)
{
    unsigned left_out = 0;

    count(&r->pipes_short);
    if (ratelimit_burst_ok(&r->short_pipe_log, now_ms(r), 60000, 1, &left_out))
        log_warnx("a pipe of %zu bytes, not pipe-size %zu: this user's pipe memory is spent "
                  "(fs.pipe-user-pages-soft), so pairs beyond it relay slower; raise that sysctl "
                  "(0: no limit) or lower pipe-size (%u more since the last line)",
                  p->short_pipe, r->pipe_size, left_out);
    p->short_pipe = 0;
}

static void pair_step(struct relay *r, struct pair *p)
{
    char err[256];
    uint64_t moved = 0;

    enum pair_result res = pair_run(p, r->pipe_size, &moved, err, sizeof(err));
    if (p->short_pipe)
        short_pipe(r, p);
    if (moved) {
        atomic_fetch_add_explicit(&r->bytes_relayed, moved, memory_order_relaxed);
        p->active_ms = now_ms(r);
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

static void pair_event(struct engine_edge *x, uint32_t events)
{
    struct pair_end *end = (struct pair_end *)x;
    struct pair *p = end->pair;
    struct relay *r = p->relay;

    if (p->closed)
        return;
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
    pair_id_text(a->pair, id);

    if (atomic_load(&r->pairs_active) >= (unsigned long long)r->max_pairs) {
        conn_refuse(r, c[0], &r->refused_full, "pair %s: max-pairs reached", id);
        conn_refuse(r, c[1], &r->refused_full, "pair %s: max-pairs reached", id);
        return;
    }
    struct pair *p =
        pair_new(a->pair, c[0]->ec.w.fd, c[0]->addr, c[1]->ec.w.fd, c[1]->addr, now_ms(r));
    if (p == NULL) {
        conn_refuse(r, c[0], &r->refused_full, "pair %s: out of memory", id);
        conn_close(r, c[1]);
        return;
    }
    p->relay = r;
    /* The sockets now belong to the pair (their watches go with the
       connections, before the pair's own are made). */
    engine_conn_take_fd(&c[0]->ec);
    engine_conn_take_fd(&c[1]->ec);
    conn_close(r, c[0]);
    conn_close(r, c[1]);
    atomic_fetch_add_explicit(&r->pairs_active, 1, memory_order_relaxed);
    count(&r->pairs_total);
    dlist_append(&r->pairs, &p->link);

    for (int i = 0; i < 2; i++) {
        static const unsigned char paired = RELAY_PAIRED;
        p->end[i].edge.on_events = pair_event;
        if (engine_edge_add(r->engine, p->end[i].fd, &p->end[i].edge) < 0 ||
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

    if (getpeername(c->ec.w.fd, (struct sockaddr *)&ss, &len) < 0 ||
        sockaddr_host(&ss, len, host, sizeof(host), &port) < 0) {
        log_info("%s: mapping asked, but its address is unknown", c->addr);
        conn_close(r, c);
        return;
    }
    int n = snprintf(line, sizeof(line), "MAPPED %s %d\n", host, port);
    if (send(c->ec.w.fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) != n)
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
    uint64_t now = (uint64_t)time(NULL);
    int rc = token_check(&r->key, text, now, r->token_skew, pair, &side, &expiry);
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
    switch (seen_add(r->tokens, pair, side, forget_at, now, c->ec.source)) {
    case SEEN_NEW:
        tokens_changed(r);
        break;
    case SEEN_REPLAY:
        conn_refuse(r, c, &r->refused_replay, "pair %s: the %s's token was already used", id,
                    side_name);
        return;
    case SEEN_OWNER_FULL:
        conn_refuse(r, c, &r->refused_address_tokens,
                    "pair %s: %u tokens from %s are remembered already, try later", id,
                    seen_owned(r->tokens, c->ec.source), c->ec.source);
        return;
    case SEEN_JOB_FULL: {
        char job[TOKEN_JOB_TAG_TEXT];
        token_pair_tag(pair, job);
        conn_refuse(r, c, &r->refused_job_tokens,
                    "pair %s: %u tokens of job tag %s are remembered already (half of an "
                    "address's share), try later",
                    id, seen_job_owned(r->tokens, job), job);
        return;
    }
    case SEEN_TOO_FAR:
        conn_refuse(r, c, &r->refused_expired,
                    "token expires %llu s from now, more than %u + token-skew %u (the broker's "
                    "clock is ahead?)",
                    (unsigned long long)(expiry - now), RELAY_TOKEN_LIFETIME_MAX, r->token_skew);
        return;
    case SEEN_FULL:
    case SEEN_NO_MEMORY:
        conn_refuse(r, c, &r->refused_full,
                    "pair %s: token memory full (%zu tokens remembered), try later", id,
                    seen_count(r->tokens));
        return;
    }
    memcpy(c->pair, pair, TOKEN_PAIR_LEN);
    c->side = side;
    struct conn *peer = htable_remove(r->waiting, pair_hash(pair), pair);
    if (peer != NULL) {
        /* Its side's token is taken: it is the other side. */
        make_pair(r, c, peer);
        return;
    }
    if (seen_has(r->tokens, pair, 1 - side)) {
        conn_refuse(r, c, &r->refused_peer_gone,
                    "pair %s: the other side's connection came and is gone", id);
        return;
    }
    if (htable_insert(r->waiting, pair_hash(pair), c) < 0) {
        conn_refuse(r, c, &r->refused_full, "pair %s: out of memory", id);
        return;
    }
    leave_hello(r, c);
    c->state = CONN_WAITING;
    engine_conn_deadline(&c->ec, (uint64_t)r->pair_timeout * 1000);
    /* Bytes it sends early are the peer's: only an error is awaited. */
    engine_watch_want(&c->ec.w, UV_PRIORITIZED);
    atomic_fetch_add_explicit(&r->unpaired_waiting, 1, memory_order_relaxed);
    log_debug("pair %s: %s (%s) waits for the other side", id, c->addr, side_name);
}

static void conn_io(struct engine_watch *w, int status, int events)
{
    struct conn *c = w->owner;
    struct relay *r = c->r;

    (void)events;
    if (c->dead)
        return;
    if (c->state == CONN_WAITING) {
        /* Bytes sent early stay in the socket for the peer; only a reset
           ends the wait early (a FIN may be a half-close after data). */
        if (status < 0)
            conn_refuse(r, c, &r->unpaired_timeouts, "connection reset while waiting for its peer");
        else
            engine_watch_want(w, 0); /* shut both ways: its deadline ends it */
        return;
    }
    while (c->got < RELAY_HELLO_LEN) {
        /* Exactly the hello: what follows is the peer's, left in the socket. */
        ssize_t n = recv(w->fd, c->buf + c->got, RELAY_HELLO_LEN - c->got, 0);
        if (n > 0) {
            c->got += (size_t)n;
        } else if (n == 0) {
            conn_gone(r, c, "closed");
            return;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (status < 0)
                conn_gone(r, c, "failed");
            return;
        } else if (errno != EINTR) {
            conn_gone(r, c, strerror(errno));
            return;
        }
    }
    hello_done(r, c);
}

/* ---- timers ---- */

static void conn_deadline(struct engine_conn *ec)
{
    struct conn *c = (struct conn *)ec;
    struct relay *r = c->r;

    if (c->state == CONN_HELLO) {
        count(&r->hello_timeouts);
        conn_refuse(r, c, &r->unpaired_timeouts, "no token within %u s (%zu of %d bytes came)",
                    r->hello_ms / 1000, c->got, RELAY_HELLO_LEN);
        return;
    }
    char id[9];
    pair_id_text(c->pair, id);
    conn_refuse(r, c, &r->unpaired_timeouts, "pair %s: the other side did not come within %u s", id,
                r->pair_timeout);
}

/* Pairs one side of which acknowledges nothing (pair_stalled): aborted, so
   that both ends see it at once and connect anew, rather than when the
   stalled leg's keepalive or retransmissions give up minutes later (the
   live end's data is acknowledged by us meanwhile, so it cannot tell).
   Checked four times per timeout; an idle pair costs one ioctl per side. */
static void check_stalls(struct relay *r)
{
    struct pair *p, *next;

    if (r->stall_ms == 0 || now_ms(r) < r->next_stall_check_ms)
        return;
    r->next_stall_check_ms = now_ms(r) + (r->stall_ms / 4 > 0 ? r->stall_ms / 4 : 1);
    for (p = pair_of(r->pairs.head); p != NULL; p = next) {
        next = pair_of(p->link.next);
        /* One with work queued moves bytes (and its ready_next is taken). */
        int side = p->ready ? -1 : pair_stalled(p, now_ms(r), r->stall_ms);
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

static void tick(void *arg)
{
    struct relay *r = arg;

    check_stalls(r);
    /* Pairs are kept oldest activity first: stop at the first recent one. */
    for (struct pair *p = pair_of(r->pairs.head);
         p && p->active_ms + RELAY_PIPE_IDLE_MS <= now_ms(r); p = pair_of(p->link.next))
        pair_trim(p);
    if (now_ms(r) >= r->next_expire_ms) {
        size_t n = seen_expire(r->tokens, (uint64_t)time(NULL));
        tokens_changed(r);
        if (n)
            log_debug("forgot %zu expired tokens, %zu remembered in %zu bytes", n,
                      seen_count(r->tokens), seen_bytes(r->tokens));
        r->next_expire_ms = now_ms(r) + RELAY_EXPIRE_EVERY_MS;
    }
}

static void free_dead(struct relay *r)
{
    while (r->dead_pairs) {
        struct pair *p = r->dead_pairs;
        r->dead_pairs = p->dead_next;
        free(p);
    }
}

/* After each turn's events: the pairs that stopped after their share, then
   the memory of those closed. */
static void run_ready(void *arg)
{
    struct relay *r = arg;
    struct pair *list = r->ready;

    r->ready = NULL;
    while (list) {
        struct pair *p = list;
        list = p->ready_next;
        p->ready = false;
        p->ready_next = NULL;
        if (!p->closed)
            pair_step(r, p);
    }
    free_dead(r);
    engine_busy(r->engine, r->ready != NULL);
}

/* ---- the loop ---- */

/* Every connection and pair closed; pairs are reset, so neither side takes
   the cut for a clean end of its data. */
static void close_all(struct relay *r)
{
    struct engine_conn *ec;
    struct pair *p;

    while ((ec = engine_oldest(r->engine)) != NULL)
        conn_close(r, (struct conn *)ec);
    while ((p = pair_of(r->pairs.head)) != NULL)
        pair_end(r, p, true);
    r->ready = NULL;
    free_dead(r);
}

int relay_run(struct relay *r)
{
    r->next_expire_ms = now_ms(r) + RELAY_EXPIRE_EVERY_MS;
    int rc = engine_run(r->engine);

    /* Stop: nothing new (the engine closed the listener), and every
       connection closed. */
    unsigned long long active = atomic_load(&r->pairs_active);
    size_t unpaired = engine_conns(r->engine);
    close_all(r);
    log_info("relay stopped: closed %llu pairs and %zu unpaired connections", active, unpaired);
    return rc;
}

void relay_stop(struct relay *r)
{
    engine_stop(r->engine);
}

/* ---- set-up ---- */

/* The default share of the seen tokens (relay.h): a quarter of what
   token-memory holds, so that no one address fills it, yet a NATed site (one
   address for all its nodes) can start the proxied pairs of large jobs
   within a token's lifetime + skew: 64 MiB hold about 4 million tokens, an
   address a million, one job of it half a million (the relayed pairs of a
   1000-rank job, ~250k, with room to spare). */
static unsigned tokens_per_address(size_t memory)
{
    size_t share = memory / RELAY_BYTES_PER_TOKEN / 4;

    if (share > UINT32_MAX)
        share = UINT32_MAX;
    return share < RELAY_MIN_TOKENS_PER_ADDRESS ? RELAY_MIN_TOKENS_PER_ADDRESS : (unsigned)share;
}

static const struct engine_ops relay_ops = {
    .admit = admit,
    .refused = refused,
    .cut = cut,
    .accepted = accepted,
    .tick = tick,
    .after_io = run_ready,
};

struct relay *relay_new(const struct relay_config *cfg, char *err, size_t errlen)
{
    struct relay *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->key = *cfg->key;
    r->token_skew = cfg->token_skew;
    r->pair_timeout = cfg->pair_timeout ? cfg->pair_timeout : 1;
    r->stall_ms = (uint64_t)cfg->stall_timeout * 1000u;
    unsigned hello_s = cfg->hello_timeout ? cfg->hello_timeout : RELAY_DEFAULT_HELLO_TIMEOUT;
    r->hello_ms = 1000 * (hello_s < r->pair_timeout ? hello_s : r->pair_timeout);
    r->hellos_per_address =
        cfg->hellos_per_address ? cfg->hellos_per_address : RELAY_DEFAULT_HELLOS_PER_ADDRESS;
    r->max_pairs = cfg->max_pairs > 0 ? cfg->max_pairs : 1;
    r->pipe_size = cfg->pipe_size;
    size_t memory = cfg->token_memory ? cfg->token_memory : RELAY_DEFAULT_TOKEN_MEMORY;
    r->tokens = seen_new(
        memory, cfg->tokens_per_address ? cfg->tokens_per_address : tokens_per_address(memory),
        RELAY_TOKEN_LIFETIME_MAX + 2 * r->token_skew);
    r->waiting = htable_new(conn_has_pair);
    if (r->tokens == NULL || r->waiting == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    /* Every connection slot may be a connect of one burst (a NATed site's
       storm): the accept queue holds them all (backlog.h). */
    r->backlog = backlog_for(2L * r->max_pairs);
    int fd = sock_listen(cfg->listen_addr, cfg->port, r->backlog, err, errlen);
    if (fd < 0)
        goto fail;
    r->port = sock_port(fd);
    struct engine_config ec = {
        .listen_fd = fd,
        .listen_fd2 = -1,
        .accepts_per_run = RELAY_ACCEPTS_PER_EVENT,
        /* Every pair was two connections once. */
        .conns_max = 2 * (unsigned)r->max_pairs,
        .per_address = r->hellos_per_address,
        .ipv6_prefix = cfg->ipv6_prefix, /* 0: source_group's default */
        .first_ms = r->hello_ms,
        .shed = &r->refused_full,
        .ops = &relay_ops,
        .arg = r,
    };
    r->engine = engine_new(&ec, err, errlen);
    if (r->engine == NULL)
        goto fail;
    return r;
fail:
    relay_free(r);
    return NULL;
}

int relay_port(const struct relay *r)
{
    return r->port;
}

int relay_backlog(const struct relay *r)
{
    return r->backlog;
}

void relay_free(struct relay *r)
{
    if (r == NULL)
        return;
    if (r->engine != NULL) {
        /* relay_run closes every connection; this is for a relay never run. */
        close_all(r);
        engine_free(r->engine);
    }
    seen_free(r->tokens);
    htable_free(r->waiting);
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
    out->tokens_remembered = atomic_load(&r->tokens_remembered);
    out->token_bytes = atomic_load(&r->token_bytes);
    out->pipes_short = atomic_load(&r->pipes_short);
}
