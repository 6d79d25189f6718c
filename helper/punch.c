/* TCP hole punching, the node side; see punch.h. */
#include "punch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "address.h"
#include "log.h"
#include "progress.h"
#include "stall_timer.h"
#include "punch_auth.h"
#include "punch_hops.h"
#include "sock_error.h"
#include "sockaddr_text.h"

#define ANSWER_MAX 512
#define LINE_MAX_LEN 256 /* the reflector's line limit, with the '\n' */
#define ACCEPTS_PER_EVENT 4

enum step { S_REFLECTOR, S_ANSWER, S_HOPS, S_PEER };

/* One socket on the loop.  Freed in its close callback, which also closes the
   descriptor unless it was handed over (fd -1). */
struct watch {
    uv_poll_t poll;
    struct punch *p;
    int fd;
};

struct punch {
    uv_loop_t *loop;
    struct punch_params prm;
    punch_fn cb;
    void *arg;
    enum step step;
    bool over;   /* the callback was called, or the punch cancelled */
    int handles; /* open libuv handles; the last close frees */
    uv_timer_t deadline, retry;
    /* The deadline's bound of silence (core/progress.h): the reflector's
       pairing, which waits for the peer's helper to get its order, starts
       it again, so a pairing slowed by load leaves the tries their time. */
    struct progress prog;
    struct stall_deadline stall; /* the deadline timer's: core/stall.h */
    struct watch *refl, *listener, *conn;
    uint64_t start_ms;
    uint16_t port; /* the local port of every socket */
    char line[LINE_MAX_LEN + 1];
    size_t linelen, sent;
    char ans[ANSWER_MAX];
    size_t got;
    /* One family for all of it: the reflector's (a punch over IPv6 binds
       the node's IPv6 address and meets the peer's). */
    struct sockaddr_storage local, peer;
    socklen_t addrlen;
    char refl_text[QCG_ADDR_MAX + 8]; /* "[v6]:port" */
    unsigned tries, refused;
    char last_err[64];
    char first_err[64]; /* the first try's: a later try may fail for its sake */
    /* The TTL-limited first SYN (punch_hops.h): ttl 0 = the plain variant. */
    struct punch_hops *hops; /* measuring */
    int ttl;
    bool opener, conn_low;
    /* IPv6 without a usable hop count (variant_set): the higher endpoint's
       plain SYN follows the lower one's by stagger_ms. */
    bool staggered, second;
    unsigned stagger_ms;
    unsigned expired; /* first SYNs that expired on the way, as meant */
    char variant[160];
    struct punch_result res;
    unsigned char answer_key[PUNCH_AUTH_KEY_LEN]; /* the PEER answer's (punch_auth.h) */
};

static void maybe_free(struct punch *p)
{
    if (--p->handles > 0)
        return;
    explicit_bzero(p, sizeof(*p));
    free(p);
}

static void on_timer_closed(uv_handle_t *h)
{
    maybe_free(h->data);
}

static void on_watch_closed(uv_handle_t *h)
{
    struct watch *w = h->data;
    struct punch *p = w->p;

    if (w->fd >= 0)
        close(w->fd);
    free(w);
    maybe_free(p);
}

/* fd -1 when the descriptor goes to the caller. */
static void watch_close(struct watch **wp, int keep_fd)
{
    struct watch *w = *wp;

    if (w == NULL)
        return;
    *wp = NULL;
    if (keep_fd)
        w->fd = -1;
    uv_poll_stop(&w->poll);
    uv_close((uv_handle_t *)&w->poll, on_watch_closed);
}

static struct watch *watch_new(struct punch *p, int fd, int events, uv_poll_cb cb)
{
    struct watch *w = calloc(1, sizeof(*w));

    if (w == NULL || uv_poll_init_socket(p->loop, &w->poll, fd) < 0) {
        free(w);
        close(fd);
        return NULL;
    }
    w->p = p;
    w->fd = fd;
    w->poll.data = w;
    p->handles++;
    uv_poll_start(&w->poll, events, cb);
    return w;
}

static void port_mark(uint16_t port, bool busy);

/* Closes the reflector's connection with a reset when its FIN has not been
   read: a FIN of ours first would leave a TIME_WAIT on our port towards the
   reflector, and the kernel refuses a later connect from that port to it
   (EADDRNOTAVAIL).  The answer, if any, is read already: a reset loses
   nothing. */
static void reflector_abort(struct punch *p)
{
    struct linger now = {.l_onoff = 1, .l_linger = 0};

    if (p->refl != NULL && p->refl->fd >= 0)
        setsockopt(p->refl->fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
    watch_close(&p->refl, 0);
}

static void teardown(struct punch *p)
{
    p->over = true;
    punch_hops_cancel(p->hops);
    p->hops = NULL;
    port_mark(p->port, false);
    reflector_abort(p);
    watch_close(&p->listener, 0);
    watch_close(&p->conn, 0);
    uv_timer_stop(&p->deadline);
    uv_timer_stop(&p->retry);
    uv_close((uv_handle_t *)&p->deadline, on_timer_closed);
    uv_close((uv_handle_t *)&p->retry, on_timer_closed);
}

static unsigned elapsed(struct punch *p)
{
    uv_update_time(p->loop);
    return (unsigned)(uv_now(p->loop) - p->start_ms);
}

static void on_deadline(uv_timer_t *t);

/* The deadline in ms; time this helper did not run does not count. */
static void arm(struct punch *p, uint64_t ms)
{
    stall_timer_start(&p->deadline, &p->stall, on_deadline, ms);
}

/* The punch moved (the reflector paired us): its deadline starts again,
   within its cap. */
static void moved(struct punch *p)
{
    uv_update_time(p->loop);
    uint64_t now = uv_now(p->loop) * 1000u;

    progress_mark(&p->prog, now);
    arm(p, (progress_due(&p->prog) - now) / 1000u);
}

static void fail(struct punch *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fail(struct punch *p, const char *fmt, ...)
{
    va_list ap;

    if (p->over)
        return;
    va_start(ap, fmt);
    vsnprintf(p->res.why, sizeof(p->res.why), fmt, ap);
    va_end(ap);
    p->res.status = -1;
    p->res.fd = -1;
    p->res.setup_ms = elapsed(p);
    /* The caller logs it, with the job and ranks, or hands it to the process. */
    log_debug("punch from port %u failed after %u ms (%s): %s", (unsigned)p->port, p->res.setup_ms,
              p->variant, p->res.why);
    struct punch_result res = p->res;
    punch_fn cb = p->cb;
    void *arg = p->arg;
    teardown(p);
    cb(arg, &res);
}

/* The punch is through: fd goes to the caller, with the TTL options of the
   handshake put back. */
static void succeed(struct punch *p, int fd, const char *how)
{
    if (p->ttl > 0) {
        punch_set_min_ttl(fd, p->local.ss_family, 0);
        punch_set_ttl(fd, p->local.ss_family, -1);
    }
    p->res.status = 0;
    p->res.fd = fd;
    p->res.setup_ms = elapsed(p);
    log_info("punch from port %u to %s connected (%s) in %u ms, %u connect tries, %u refused, "
             "%u expired; %s%s",
             (unsigned)p->port, p->res.peer_text, how, p->res.setup_ms, p->tries, p->refused,
             p->expired, p->variant,
             p->staggered  ? (p->second ? ", second" : ", first")
             : p->ttl == 0 ? ""
             : p->opener   ? ", opener"
                           : ", connector");
    struct punch_result res = p->res;
    punch_fn cb = p->cb;
    void *arg = p->arg;
    teardown(p);
    cb(arg, &res);
}

/* Our address with `port`. */
static struct sockaddr_storage local_at(const struct punch *p, uint16_t port)
{
    struct sockaddr_storage sa = p->local;

    if (sa.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&sa)->sin6_port = htons(port);
    else
        ((struct sockaddr_in *)&sa)->sin_port = htons(port);
    return sa;
}

/* A TCP socket bound to our address and port, sharing it with the others. */
static int bound_socket(struct punch *p, int *err)
{
    struct sockaddr_storage sa = local_at(p, p->port);
    int one = 1;
    int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        *err = errno;
        return -1;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&sa, p->addrlen) < 0) {
        *err = errno;
        close(fd);
        return -1;
    }
    return fd;
}

/* Ports of this process's punches in progress.  One helper per node, so this
   is every punch of the node; the kernel cannot tell us (our own sockets
   share the port by design). */
static unsigned char ports_busy[65536 / 8];

static bool port_busy(uint16_t port)
{
    return ports_busy[port / 8] & (1u << (port % 8));
}

static void port_mark(uint16_t port, bool busy)
{
    if (busy)
        ports_busy[port / 8] |= (unsigned char)(1u << (port % 8));
    else
        ports_busy[port / 8] &= (unsigned char)~(1u << (port % 8));
}

/* A port of the range no other program holds: a bind with SO_REUSEADDR alone
   fails on a listener or a socket without it, and succeeds over TIME_WAIT
   and over our own earlier punched connections (their peers differ). */
static int pick_port(struct punch *p, char *why, size_t whylen)
{
    unsigned span = (unsigned)p->prm.port_high - p->prm.port_low + 1;
    unsigned tries = span < PUNCH_BIND_TRIES ? span : PUNCH_BIND_TRIES;
    unsigned start = 0;
    int one = 1;

    if (getrandom(&start, sizeof(start), GRND_NONBLOCK) != (ssize_t)sizeof(start))
        start = (unsigned)getpid();
    for (unsigned i = 0; i < tries; i++) {
        /* Small ranges are walked in order from a random start, large ones
           sampled. */
        unsigned off = span <= PUNCH_BIND_TRIES ? (start + i) % span : (start + i * 40503u) % span;
        uint16_t port = (uint16_t)(p->prm.port_low + off);
        struct sockaddr_storage sa = local_at(p, port);
        if (port_busy(port))
            continue;
        int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            snprintf(why, whylen, "socket: %s", strerror(errno));
            return -1;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        int rc = bind(fd, (struct sockaddr *)&sa, p->addrlen);
        int e = errno;
        close(fd);
        if (rc == 0) {
            p->port = port;
            port_mark(port, true);
            return 0;
        }
        if (e != EADDRINUSE) {
            snprintf(why, whylen, "bind to port %u: %s", (unsigned)port, strerror(e));
            return -1;
        }
    }
    snprintf(why, whylen, "no free port in %u-%u after %u tries", p->prm.port_low, p->prm.port_high,
             tries);
    return -1;
}

/* ---- the peer ---- */

static void on_conn(uv_poll_t *h, int status, int events);
static void on_retry(uv_timer_t *t);

/* A try ended with err (what: the step that failed, "" for the connect). */
static void try_failed(struct punch *p, const char *what, int err)
{
    snprintf(p->last_err, sizeof(p->last_err), "%s%s", what, strerror(err));
    if (p->first_err[0] == '\0')
        snprintf(p->first_err, sizeof(p->first_err), "%s", p->last_err);
}

/* A failure names the first try's error too when it was another: a try
   may fail for the sake of the one before it. */
static const char *first_note(const struct punch *p, char *buf, size_t len)
{
    buf[0] = '\0';
    if (p->first_err[0] != '\0' && strcmp(p->first_err, p->last_err) != 0)
        snprintf(buf, len, " (the first try: %s)", p->first_err);
    return buf;
}

/* With the TTL-limited variant the two sides take roles (start_peer): the
   opener's tries send their SYN with the low TTL (it is built inside
   connect()) and put the normal TTL back at once, so that a simultaneous
   open's SYN/ACK, should the peer's SYN meet this socket, goes all the way;
   the connector's tries are plain.  Each keeps its socket until answered:
   should the connector's SYN be lost (a dropping firewall before the
   opener's state, a node that drops bare SYNs itself), the kernels'
   retransmissions (1 s, normal TTL) still meet in a simultaneous open. */
static void try_connect(struct punch *p)
{
    int err = 0;
    int fd = bound_socket(p, &err);
    bool low = p->opener;

    p->tries++;
    p->conn_low = false;
    if (fd < 0) {
        try_failed(p, "bind: ", err);
        return;
    }
    if (low && punch_set_ttl(fd, p->local.ss_family, p->ttl) < 0)
        low = false;
    if (low)
        punch_set_min_ttl(fd, p->local.ss_family, PUNCH_MIN_TTL);
    else if (p->ttl > 0)
        punch_set_ttl(fd, p->local.ss_family, PUNCH_CONNECTOR_TTL);
    if (connect(fd, (struct sockaddr *)&p->peer, p->addrlen) < 0 && errno != EINPROGRESS) {
        try_failed(p, "", errno);
        close(fd);
        return;
    }
    if (low)
        punch_set_ttl(fd, p->local.ss_family, -1);
    p->conn = watch_new(p, fd, UV_WRITABLE, on_conn);
    if (p->conn == NULL) {
        fail(p, "cannot watch the punch socket");
        return;
    }
    p->conn_low = low;
}

/* A refused connect (the peer's socket was not there yet, our SYN met its
   closed predecessor, or a firewall that resets or answers with ICMP saw it
   before the peer's state was made): again later, doubling, while tries
   remain; then only the listener may still get the peer, else we fail now.
   An opener's next try makes its router's state again (a reset that passed
   it closed the state). */
static void after_refusal(struct punch *p)
{
    p->refused++;
    if (p->refused <= PUNCH_RETRIES) {
        uint64_t delay = (uint64_t)PUNCH_RETRY_MS << (p->refused - 1);
        uv_timer_start(&p->retry, on_retry, delay, 0);
    } else if (p->listener == NULL) {
        char first[96];
        fail(p, "connect to %s: %s after %u tries%s", p->res.peer_text, p->last_err, p->tries,
             first_note(p, first, sizeof(first)));
    }
}

static void connect_or_retry(struct punch *p)
{
    try_connect(p);
    if (!p->over && p->conn == NULL)
        after_refusal(p);
}

static void on_retry(uv_timer_t *t)
{
    connect_or_retry(t->data);
}

/* The opener's TTL-limited SYN expires on the way, as meant: our router's
   state is made, the peer's firewall never sees it.  Its time-exceeded
   comes back one round trip to that router later, and the kernel ends a
   connect in SYN_SENT or SYN_RECV with it unless the connect() call still
   runs (then it is only noted); hence PUNCH_MIN_TTL (punch_hops.h), under
   which the socket never sees it.  The connector's SYN then meets the socket: a
   simultaneous open whose SYN/ACK carries the sequence number our router's
   state has seen (what the listener would answer carries a later one, and
   the router drops the data that follows it).  A time-exceeded that gets
   through (an IPv6 router sending its errors with hop limit 255 that the
   hop count's check missed) ends the try with EHOSTUNREACH; one only noted keeps POLLERR up, so
   such a socket is watched by its TCP state every PUNCH_LOW_CHECK_MS instead.  0: still waiting; 1:
   connected; -1: failed (*err says why: SO_ERROR, else `already`, the error the caller read). */
static int low_conn_state(struct punch *p, int already, int *err)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);

    if (getsockopt(p->conn->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0) {
        *err = errno;
        return -1;
    }
    if (ti.tcpi_state == TCP_SYN_SENT || ti.tcpi_state == TCP_SYN_RECV)
        return 0;
    /* Connected, and perhaps already told the peer's FIN (CLOSE_WAIT): a
       reset leaves it closed. */
    if (ti.tcpi_state != TCP_CLOSE)
        return 1;
    *err = sock_error(p->conn->fd, 0);
    if (*err == 0)
        *err = already;
    return -1;
}

static void conn_over(struct punch *p, int err);

/* The error a router's ICMP time-exceeded leaves on a connect. */
static bool expired_error(int err)
{
    return err == EHOSTUNREACH || err == ENETUNREACH;
}

/* The time-exceeded of the opener's SYN also lands in the socket's error
   queue, and keeps POLLERR up until read: the process that gets the socket
   must not find it there. */
static void drain_errqueue(int fd)
{
    for (int i = 0; i < 16; i++)
        if (sock_queued_error(fd) < 0)
            return;
}

static void on_low_check(uv_timer_t *t)
{
    struct punch *p = t->data;
    int err = 0;

    if (p->conn == NULL)
        return;
    int st = low_conn_state(p, ECONNRESET, &err);
    if (st == 0)
        return;
    uv_timer_stop(&p->retry);
    conn_over(p, st > 0 ? 0 : err);
}

static void on_conn(uv_poll_t *h, int status, int events)
{
    struct watch *w = h->data;
    struct punch *p = w->p;
    int err = sock_error(w->fd, status);

    (void)events;
    if (err == EINPROGRESS)
        return;
    if (p->conn_low && expired_error(err)) {
        int st = low_conn_state(p, err, &err);

        if (st == 0) {
            p->expired++;
            log_debug("punch from port %u to %s: our SYN expired on the way (TTL %d)",
                      (unsigned)p->port, p->res.peer_text, p->ttl);
            drain_errqueue(w->fd);
            uv_poll_stop(&w->poll);
            uv_timer_start(&p->retry, on_low_check, PUNCH_LOW_CHECK_MS, PUNCH_LOW_CHECK_MS);
            return;
        }
        /* Connected already: the peer's SYN met ours before this loop read
           the time-exceeded of our first SYN (a busy node).  That error is
           the one we meant, not the try's end; closing the connection
           would leave its addresses in TIME_WAIT, and every later try
           would fail with EADDRNOTAVAIL. */
        if (st > 0)
            err = 0;
    }
    uv_timer_stop(&p->retry);
    conn_over(p, err);
}

/* The try in p->conn ended: connected (err 0) or not. */
static void conn_over(struct punch *p, int err)
{
    struct watch *w = p->conn;

    if (p->conn_low)
        drain_errqueue(w->fd);
    if (err == 0) {
        int fd = w->fd;
        watch_close(&p->conn, 1);
        succeed(p, fd, "connect");
        return;
    }
    /* A reset or an ICMP error: not the end of the punch, the next try (or
       the listener) may still get through. */
    try_failed(p, p->conn_low && expired_error(err) ? "the first SYN's ICMP error ended it: " : "",
               err);
    log_debug("punch from port %u to %s: try %u: %s", (unsigned)p->port, p->res.peer_text, p->tries,
              p->last_err);
    watch_close(&p->conn, 0);
    after_refusal(p);
}

/* from is the peer's address and port (as the reflector saw them). */
static bool is_peer(const struct punch *p, const struct sockaddr_storage *from)
{
    if (from->ss_family != p->peer.ss_family)
        return false;
    if (from->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)from, *b = (const void *)&p->peer;
        return memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr)) == 0 &&
               a->sin6_port == b->sin6_port;
    }
    const struct sockaddr_in *a = (const void *)from, *b = (const void *)&p->peer;
    return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

/* The peer's SYN found no connecting socket of ours (it came between two
   tries, or on a path without NAT): the listener takes it, if it is the
   peer's. */
static void on_accept(uv_poll_t *h, int status, int events)
{
    struct watch *w = h->data;
    struct punch *p = w->p;

    (void)events;
    if (status < 0)
        return;
    for (int i = 0; i < ACCEPTS_PER_EVENT && !p->over; i++) {
        struct sockaddr_storage from;
        socklen_t len = sizeof(from);
        int fd = accept4(w->fd, (struct sockaddr *)&from, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        if (!is_peer(p, &from)) {
            char a[QCG_ADDR_MAX + 8];
            sockaddr_text(&from, len, a, sizeof(a));
            log_warnx("punch on port %u: dropped a connection from %s, not the peer",
                      (unsigned)p->port, a);
            close(fd);
            continue;
        }
        succeed(p, fd, "accept");
    }
}

/* Our public endpoint sorts before the peer's (as both sides see them). */
static bool endpoint_below(const struct punch *p)
{
    unsigned char own[16], peer[16];
    int family = p->local.ss_family;

    if (inet_pton(family, p->res.own_addr, own) != 1 ||
        inet_pton(family, p->res.peer_addr, peer) != 1)
        return false;
    int c = memcmp(own, peer, family == AF_INET6 ? 16 : 4);
    return c != 0 ? c < 0 : p->res.own_port < p->res.peer_port;
}

static void start_peer(struct punch *p)
{
    int err = 0;
    int fd = bound_socket(p, &err);

    /* Both sides know both public endpoints: the lower one opens. */
    bool below = endpoint_below(p);

    p->step = S_PEER;
    if (fd >= 0 && p->ttl > 0 && !below)
        punch_set_ttl(fd, p->local.ss_family, PUNCH_CONNECTOR_TTL);
    if (fd >= 0 && listen(fd, 4) == 0)
        p->listener = watch_new(p, fd, UV_READABLE, on_accept);
    else if (fd >= 0)
        close(fd);
    if (p->listener == NULL)
        log_debug("punch on port %u: no listener (%s), connecting only", (unsigned)p->port,
                  strerror(fd < 0 ? err : errno));
    p->opener = p->ttl > 0 && p->listener != NULL && below;
    if (p->ttl > 0 && !p->opener) {
        /* The connector lets the opener's SYN leave first. */
        uv_timer_start(&p->retry, on_retry, PUNCH_CONNECTOR_DELAY_MS, 0);
        return;
    }
    if (p->staggered && !below) {
        p->second = true;
        size_t len = strlen(p->variant);
        snprintf(p->variant + len, sizeof(p->variant) - len, " by %u ms", p->stagger_ms);
        uv_timer_start(&p->retry, on_retry, p->stagger_ms, 0);
        return;
    }
    connect_or_retry(p);
}

/* ---- the reflector ---- */

static int parse_port(const char *s, uint16_t *port)
{
    char *end;
    long v;

    if (*s < '1' || *s > '9')
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end != '\0' || v < 1 || v > 65535)
        return -1;
    *port = (uint16_t)v;
    return 0;
}

int punch_answer_parse(char *line, int family, struct punch_result *res,
                       struct sockaddr_storage *peer, char *why, size_t whylen)
{
    unsigned char bin[16];
    char *f[6], *save = NULL;
    int n = 0;

    if (strncmp(line, "FAIL ", 5) == 0) {
        snprintf(why, whylen, "reflector: %s", line);
        return -1;
    }
    /* Up to one field too many, so that a sixth is seen: with room for five,
       the loop's last strtok_r took the sixth and the check after it saw
       none ("PEER a p a p x" was accepted). */
    for (char *t = strtok_r(line, " ", &save); t && n < 6; t = strtok_r(NULL, " ", &save))
        f[n++] = t;
    if (n != 5 || strcmp(f[0], "PEER") != 0 || strlen(f[1]) >= sizeof(res->peer_addr) ||
        strlen(f[3]) >= sizeof(res->own_addr) || inet_pton(family, f[1], bin) != 1 ||
        inet_pton(family, f[3], bin) != 1 || parse_port(f[2], &res->peer_port) < 0 ||
        parse_port(f[4], &res->own_port) < 0 || address_sockaddr(f[1], res->peer_port, peer) == 0 ||
        peer->ss_family != family) {
        snprintf(why, whylen,
                 "reflector: unexpected answer (want PEER <addr> <port> <addr> <port>, %s)",
                 family == AF_INET6 ? "IPv6" : "IPv4");
        return -1;
    }
    snprintf(res->peer_addr, sizeof(res->peer_addr), "%s", f[1]);
    snprintf(res->own_addr, sizeof(res->own_addr), "%s", f[3]);
    return 0;
}

/* Without a usable hop count an IPv6 punch staggers its two SYNs: the first
   one a dropping firewall may take, the second then meets its state.  IPv4
   keeps the plain variant there (the rejecting sites' measurements were
   made with it). */
static void variant_set(struct punch *p, int hops, unsigned rtt_ms, const char *why)
{
    const char *name = p->local.ss_family == AF_INET6 ? "staggered" : "plain";

    p->ttl = hops >= 0 ? punch_first_ttl(hops, why) : 0;
    p->staggered = p->ttl == 0 && p->local.ss_family == AF_INET6;
    if (p->ttl > 0) {
        (void)rtt_ms;
        snprintf(p->variant, sizeof(p->variant), "first SYN with TTL %d (%d hops to the reflector)",
                 p->ttl, hops);
    } else if (hops >= 0 && why != NULL && why[0] != '\0') {
        snprintf(p->variant, sizeof(p->variant), "%s (%d hops to the reflector, but %s)", name,
                 hops, why);
    } else if (hops >= 0) {
        snprintf(p->variant, sizeof(p->variant), "%s (%d hops to the reflector: too few)", name,
                 hops);
    } else {
        snprintf(p->variant, sizeof(p->variant), "%s (hop count unknown: %.40s)", name, why);
    }
}

static void on_hops(void *arg, int hops, unsigned rtt_ms, const char *why)
{
    struct punch *p = arg;

    p->hops = NULL;
    variant_set(p, hops, rtt_ms, why);
    if (hops < 0)
        log_info("punch from port %u: %s", (unsigned)p->port, p->variant);
    if (p->step == S_HOPS) {
        uv_timer_stop(&p->retry);
        start_peer(p);
    }
}

/* The answer is here and the measurement still runs (silent routers): the
   punch goes on without it. */
static void on_hops_late(uv_timer_t *t)
{
    struct punch *p = t->data;

    punch_hops_cancel(p->hops);
    p->hops = NULL;
    variant_set(p, -1, 0, "not measured in time");
    start_peer(p);
}

/* How long the second SYN of a staggered punch waits: twice our round trip
   to the reflector (from its connection), about one way between the two
   sites when the reflector lies between them, so that the first SYN has
   met our firewall (and been dropped there) before ours leaves: only one
   SYN then gets through, to the first side's connecting socket.  Two that
   both get through make two SYN/ACKs, the second of which a Linux firewall
   takes as INVALID (the kernels' retransmission then connects, 1 s later). */
static unsigned stagger_ms(int fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    unsigned ms = 0;

    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0)
        ms = 2 * ti.tcpi_rtt / 1000;
    return ms < PUNCH_CONNECTOR_DELAY_MS ? PUNCH_CONNECTOR_DELAY_MS
           : ms > PUNCH_STAGGER_MAX_MS   ? PUNCH_STAGGER_MAX_MS
                                         : ms;
}

static void on_answer(struct punch *p, char *line)
{
    char why[ANSWER_MAX + 16];

    /* Where we connect to must come from the reflector: a PEER answer
       without its tag is refused (a FAIL needs none, it only stops us). */
    if (strncmp(line, "FAIL ", 5) != 0 &&
        punch_auth_answer(line, p->answer_key, why, sizeof(why)) < 0) {
        fail(p, "%s", why);
        return;
    }
    if (punch_answer_parse(line, p->local.ss_family, &p->res, &p->peer, why, sizeof(why)) < 0) {
        fail(p, "%s", why);
        return;
    }
    hostport_format(p->res.peer_addr, p->res.peer_port, p->res.peer_text, sizeof(p->res.peer_text));
    if (p->local.ss_family == AF_INET6) /* staggered, unless a hop count comes */
        p->stagger_ms = stagger_ms(p->refl->fd);
    hostport_format(p->res.own_addr, p->res.own_port, p->res.own_text, sizeof(p->res.own_text));
    moved(p);
    log_debug("punch from port %u: peer %s, we are %s", (unsigned)p->port, p->res.peer_text,
              p->res.own_text);
    /* The reflector's FIN follows its answer: closing after it leaves the
       TIME_WAIT on the reflector, not on our port (a later punch from this
       port to the reflector would clash with it).  Meanwhile the punch
       starts at once, or once the hop count is known. */
    if (p->hops != NULL) {
        p->step = S_HOPS;
        uv_timer_start(&p->retry, on_hops_late, PUNCH_HOPS_WAIT_MS, 0);
        return;
    }
    start_peer(p);
}

static void read_answer(struct punch *p)
{
    for (int i = 0; i < 4; i++) {
        ssize_t n = recv(p->refl->fd, p->ans + p->got, sizeof(p->ans) - 1 - p->got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n < 0) {
            fail(p, "reflector %s: %s", p->refl_text, strerror(errno));
            return;
        }
        if (n == 0) {
            fail(p, "reflector %s closed without an answer", p->refl_text);
            return;
        }
        p->got += (size_t)n;
        p->ans[p->got] = '\0';
        char *nl = strchr(p->ans, '\n');
        if (nl != NULL) {
            *nl = '\0';
            for (char *c = p->ans; *c; c++)
                if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
                    *c = '?';
            on_answer(p, p->ans);
            return;
        }
        if (p->got == sizeof(p->ans) - 1) {
            fail(p, "reflector: answer longer than %d bytes", ANSWER_MAX - 1);
            return;
        }
    }
}

static void on_reflector(uv_poll_t *h, int status, int events)
{
    struct watch *w = h->data;
    struct punch *p = w->p;
    int err;

    (void)events;
    if (p->step == S_PEER || p->step == S_HOPS) {
        /* Only the reflector's FIN (or a reset) is left to come. */
        char junk[64];
        ssize_t n = status < 0 ? -1 : recv(w->fd, junk, sizeof(junk), 0);
        if (n == 0 || (n < 0 && status < 0) || (n < 0 && errno != EAGAIN && errno != EINTR))
            watch_close(&p->refl, 0);
        return;
    }
    if (status < 0) {
        err = sock_error(w->fd, status);
        fail(p, "reflector %s: %s", p->refl_text, strerror(err));
        return;
    }
    if (p->step == S_ANSWER) {
        read_answer(p);
        return;
    }

    if (p->sent == 0) {
        err = sock_error(w->fd, 0);
        if (err == EINPROGRESS)
            return;
        if (err != 0) {
            fail(p, "reflector %s: connect: %s", p->refl_text, strerror(err));
            return;
        }
        /* Our address as the kernel chose it when we bound the wildcard. */
        struct sockaddr_storage me;
        socklen_t mlen = sizeof(me);
        char addr[QCG_ADDR_MAX] = "0.0.0.0";
        int mport;
        if (getsockname(w->fd, (struct sockaddr *)&me, &mlen) == 0)
            sockaddr_host(&me, mlen, addr, sizeof(addr), &mport);
        char wire[TOKEN_TEXT_LEN + 1];
        if (punch_auth_request(p->prm.token, wire, sizeof(wire), p->answer_key) < 0) {
            fail(p, "the punch token is malformed");
            return;
        }
        int n =
            snprintf(p->line, sizeof(p->line), "PUNCH %s %s %u\n", wire, addr, (unsigned)p->port);
        if (n < 0 || (size_t)n >= sizeof(p->line)) {
            fail(p, "request line too long");
            return;
        }
        p->linelen = (size_t)n;
    }
    while (p->sent < p->linelen) {
        ssize_t n = send(w->fd, p->line + p->sent, p->linelen - p->sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n < 0) {
            fail(p, "reflector %s: send: %s", p->refl_text, strerror(errno));
            return;
        }
        p->sent += (size_t)n;
    }
    explicit_bzero(p->line, sizeof(p->line));
    p->step = S_ANSWER;
    uv_poll_start(&w->poll, UV_READABLE, on_reflector);
}

static void on_deadline(uv_timer_t *t)
{
    struct punch *p = t->data;
    char first[96];

    if (stall_timer_postponed(&p->deadline, &p->stall, on_deadline))
        return;

    switch (p->step) {
    case S_REFLECTOR:
    case S_ANSWER:
        fail(p, "reflector %s: no answer within %u ms (the peer's helper did not come)",
             p->refl_text, elapsed(p));
        break;
    case S_HOPS:
    case S_PEER:
        fail(p,
             "connect to %s: %s after %u tries (%u ms since the reflector paired us, %u ms "
             "in all)%s",
             p->res.peer_text, p->last_err[0] ? p->last_err : "timed out", p->tries,
             progress_idle_ms(&p->prog, uv_now(p->loop) * 1000u), elapsed(p),
             first_note(p, first, sizeof(first)));
        break;
    }
}

/* ---- start, cancel ---- */

static int check_params(const struct punch_params *prm, struct sockaddr_storage *refl,
                        struct sockaddr_storage *local, socklen_t *len, char *why, size_t whylen)
{
    size_t tlen = strnlen(prm->token, sizeof(prm->token));

    if (strnlen(prm->reflector_addr, sizeof(prm->reflector_addr)) == sizeof(prm->reflector_addr) ||
        prm->reflector_port == 0 ||
        (*len = address_sockaddr(prm->reflector_addr, prm->reflector_port, refl)) == 0) {
        snprintf(why, whylen, "the reflector's address is not an IPv4 or IPv6 address and port");
        return -1;
    }
    if (strnlen(prm->local, sizeof(prm->local)) == sizeof(prm->local) ||
        address_sockaddr(prm->local, 0, local) != *len || local->ss_family != refl->ss_family) {
        snprintf(why, whylen, "the node has no %s address for a punch through the reflector %s",
                 refl->ss_family == AF_INET6 ? "IPv6" : "IPv4", prm->reflector_addr);
        return -1;
    }
    if (tlen == 0 || tlen == sizeof(prm->token) || strcspn(prm->token, " \r\n") != tlen) {
        snprintf(why, whylen, "the token is empty, too long or holds a space");
        return -1;
    }
    if (prm->port_low == 0 || prm->port_low > prm->port_high) {
        snprintf(why, whylen, "port range %u-%u is empty", prm->port_low, prm->port_high);
        return -1;
    }
    if (prm->timeout_ms == 0) {
        snprintf(why, whylen, "timeout is 0");
        return -1;
    }
    return 0;
}

/* A free port of the range and a connect from it to the reflector under
   way.  A port whose earlier connection to the reflector still lingers in
   TIME_WAIT (a helper restarted, a punch that timed out elsewhere) cannot
   connect there again for a minute (EADDRNOTAVAIL): the next port is tried. */
static int connect_reflector(struct punch *p, const struct sockaddr_storage *refl, char *why,
                             size_t whylen)
{
    uint16_t lingering[PUNCH_BIND_TRIES];
    unsigned nlingering = 0;
    int fd = -1;

    while (pick_port(p, why, whylen) == 0) {
        int err = 0;
        fd = bound_socket(p, &err);
        if (fd >= 0 &&
            (connect(fd, (const struct sockaddr *)refl, p->addrlen) == 0 || errno == EINPROGRESS))
            break;
        if (fd >= 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
        if (err == EADDRNOTAVAIL && nlingering < PUNCH_BIND_TRIES) {
            /* Kept marked until we are done, so pick_port passes over it. */
            log_debug("punch: port %u still has a connection to the reflector, next port",
                      (unsigned)p->port);
            lingering[nlingering++] = p->port;
            continue;
        }
        snprintf(why, whylen, "reflector %s from port %u: %s", p->refl_text, (unsigned)p->port,
                 strerror(err));
        port_mark(p->port, false);
        break;
    }
    for (unsigned i = 0; i < nlingering; i++)
        port_mark(lingering[i], false);
    if (fd < 0 && nlingering > 0) {
        size_t len = strlen(why);
        snprintf(why + len, whylen - len, " (%u of them still in TIME_WAIT towards the reflector)",
                 nlingering);
    }
    return fd;
}

/* The first SYN's TTL: given, kept from an earlier measurement, or measured
   now, meanwhile the reflector pairs us (on_answer waits for it). */
static void choose_variant(struct punch *p, const struct sockaddr_storage *refl)
{
    int hops;
    unsigned rtt;
    char why[96], note[PUNCH_HOPS_NOTE_MAX];

    if (p->prm.first_ttl < 0) {
        p->ttl = 0;
        snprintf(p->variant, sizeof(p->variant), "plain (asked for by the caller)");
    } else if (p->prm.first_ttl > 0) {
        p->ttl = p->prm.first_ttl;
        snprintf(p->variant, sizeof(p->variant), "first SYN with TTL %d (given by the caller)",
                 p->ttl);
    } else if (punch_hops_cached(p->loop, refl, &hops, &rtt, note) == 0) {
        variant_set(p, hops, rtt, note);
    } else {
        p->hops = punch_hops_start(p->loop, &p->local, refl, on_hops, p, why, sizeof(why));
        if (p->hops == NULL)
            variant_set(p, -1, 0, why);
    }
}

struct punch *punch_start(uv_loop_t *loop, const struct punch_params *prm, punch_fn cb, void *arg,
                          char *why, size_t whylen)
{
    struct sockaddr_storage refl, local;
    socklen_t len = 0;

    if (check_params(prm, &refl, &local, &len, why, whylen) < 0)
        return NULL;
    struct punch *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    p->local = local;
    p->addrlen = len;
    hostport_format(prm->reflector_addr, prm->reflector_port, p->refl_text, sizeof(p->refl_text));
    p->loop = loop;
    p->prm = *prm;
    p->cb = cb;
    p->arg = arg;
    p->res.fd = -1;
    int fd = connect_reflector(p, &refl, why, whylen);
    if (fd < 0) {
        explicit_bzero(p, sizeof(*p));
        free(p);
        return NULL;
    }
    p->res.local_port = p->port;
    uv_timer_init(loop, &p->deadline);
    uv_timer_init(loop, &p->retry);
    p->deadline.data = p->retry.data = p;
    p->handles = 2;
    uv_update_time(loop);
    p->start_ms = uv_now(loop);
    progress_start(&p->prog, p->start_ms * 1000u, prm->timeout_ms,
                   (uint64_t)prm->timeout_ms * PUNCH_CAP_FACTOR, 0);
    p->step = S_REFLECTOR;
    p->refl = watch_new(p, fd, UV_WRITABLE, on_reflector);
    if (p->refl == NULL) {
        snprintf(why, whylen, "cannot watch the reflector socket");
        p->over = true;
        port_mark(p->port, false);
        uv_close((uv_handle_t *)&p->deadline, on_timer_closed);
        uv_close((uv_handle_t *)&p->retry, on_timer_closed);
        return NULL;
    }
    arm(p, prm->timeout_ms);
    log_debug("punch from port %u: asking the reflector %s", (unsigned)p->port, p->refl_text);
    choose_variant(p, &refl);
    return p;
}

void punch_cancel(struct punch *p)
{
    if (p == NULL || p->over)
        return;
    log_info("punch from port %u cancelled after %u ms", (unsigned)p->port, elapsed(p));
    teardown(p);
}

int punch_params_for_node(struct punch_params *p, const char *reflector_addr, int reflector_port,
                          const char *token, const char addrs[][QCG_ADDR_MAX], int naddrs,
                          const int ports[2], int first_ttl)
{
    int family = address_family(reflector_addr), found = -1;

    memset(p, 0, sizeof(*p));
    snprintf(p->reflector_addr, sizeof(p->reflector_addr), "%s", reflector_addr);
    p->reflector_port = (uint16_t)reflector_port;
    snprintf(p->token, sizeof(p->token), "%s", token);
    for (int i = 0; i < naddrs && found < 0; i++)
        if (address_family(addrs[i]) == family)
            found = i;
    if (found >= 0)
        snprintf(p->local, sizeof(p->local), "%s", addrs[found]);
    p->port_low = (uint16_t)ports[0];
    p->port_high = (uint16_t)ports[1];
    p->timeout_ms = PUNCH_TIMEOUT_MS;
    p->first_ttl = first_ttl;
    return found >= 0 ? 0 : -1;
}
