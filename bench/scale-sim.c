/*
 * scale-sim: many ranks of one job in one event-driven process (issue 29,
 * bench/scale-sim.sh runs one per lab node).  Each rank is a libqcgconn
 * context of its own (its own helper connection, listener and contact), as an
 * MPI rank's btl_qcg has; one thread drives them all with epoll: the
 * non-blocking connect (qcg_connect_start / _pollfd / _finish) and
 * qcg_accept, nothing spins.
 *
 *   scale-sim --job J --ranks N --first R --count C --pattern P
 *             --dir DIR [--window W] [--timeout MS] [--run-ms MS]
 *             [--mode qcg|tcp --addr IP]
 *
 * Ranks R..R+C-1 of an N-rank job.  Patterns (which pairs connect,
 * each pair once; who initiates is fixed so both ends know):
 *   storm    every pair (all-to-all); of i < j, i initiates when i + j is
 *            odd, j otherwise, so every rank initiates half its pairs;
 *            each rank's targets in the order r+1, r+2, ... (mod N)
 *   stencil  3-D periodic grid, dimensions as MPI_Dims_create, 6 neighbours
 *   ring     r -> r+1 mod N
 *   tree     binomial tree from rank 0 (a broadcast): p -> p + 2^k
 * A rank keeps at most W (default 32, btl_qcg's max_connects) connects in
 * flight.  Every connection, once made, carries 16 bytes from the initiator
 * (magic, from, to, a check word) that the acceptor checks against the
 * handshake's peer rank and the pattern, then echoes; the initiator checks
 * the echo.  The initiator then closes with a reset (SO_LINGER 0) and the
 * acceptor on the reset: no TIME_WAIT holds a 4-tuple (a lab node has 1000
 * ports, and every proxied connection of a node goes to one address:port).
 *
 * --mode tcp is the baseline: the same ranks, pattern and bytes over a plain
 * TCP connect to a listener of the peer (no helper, no lookup) followed by
 * the same TLS 1.3 PSK handshake as libqcgconn's (its own code,
 * qcgconn_internal), encrypted as a cross-site connection is.  Ranks find
 * each other's listeners in DIR/contacts-*.
 *
 * Synchronisation with the driver through DIR: once every rank is published
 * (or listening) the process writes DIR/ready-R; it starts connecting when
 * DIR/go exists, writes DIR/out-done-R when every connect of its ranks ended
 * (made or failed) and DIR/done-R when all their pairs were checked at both
 * ends, and keeps serving until DIR/stop exists or --run-ms has passed since
 * go.
 * Results go to DIR/result-R, one line each:
 *   ok FROM TO TECHNIQUE SETUP_US TOTAL_US     a connection this process made
 *   fail out FROM TO STAGE REASON...           a connection it could not make
 *   fail in RANK PEER STAGE REASON...          an incoming one whose check failed
 *   refused RANK COUNT LAST-REASON...          qcg_accept_refused of a rank
 *   missing out|in RANK PEER STATE [TCP LOCAL PEER]  still unfinished at the
 *     stop; with its socket, the kernel's state of it and its addresses
 *   unended in RANK PEER waiting-end TCP LOCAL PEER   checked at both ends,
 *     but the initiator's reset never came (put_missing)
 *   summary FIRST COUNT OUT_OK OUT_FAIL IN_OK IN_EXPECTED GO_MS LAST_MS CPU_US
 *     (GO_MS, LAST_MS: wall clock at go and at the last connection's end;
 *     CPU_US: this process's CPU from go to the stop)
 * A benchmark: it asserts nothing about time.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bounded_io.h"
#include "qcgconn.h"
#include "sockaddr_text.h"
#include "tls_psk.h"

#define MSG_LEN 16
#define MAGIC 0x51534d31u /* "QSM1" */
#define MAX_EVENTS 256

enum pattern { P_STORM, P_STENCIL, P_RING, P_TREE };

enum watch_kind { W_ACCEPT, W_LISTEN, W_CONN };

struct watch {
    enum watch_kind kind;
    void *ptr;
};

enum conn_state {
    C_CONNECT,  /* qcg: the op runs; tcp: the TCP connect */
    C_HS,       /* tcp: the TLS handshake */
    C_SEND,     /* initiator: sending the 16 bytes */
    C_ECHO,     /* initiator: waiting for the echo */
    C_READ,     /* acceptor: reading the 16 bytes */
    C_REPLY,    /* acceptor: sending the echo */
    C_WAIT_END, /* acceptor: waiting for the initiator's reset or end */
};

static const char *state_name[] = {"connecting", "handshake", "sending",    "waiting-echo",
                                   "reading",    "echoing",   "waiting-end"};

/* What a rank knows of each peer's connection to it. */
enum in_state { IN_NONE, IN_EXPECTED, IN_CHECKED };

struct rank;

struct conn {
    struct watch w;
    struct rank *r;
    struct conn *prev, *next; /* in live */
    int peer;                 /* -1 for an incoming one until known */
    bool out;
    enum conn_state st;
    int fd;
    uint32_t events;
    qcg_connect_op *op;
    qcg_tls *tls;
    struct tls_hs *hs;
    uint8_t msg[MSG_LEN], buf[MSG_LEN];
    size_t done;
    uint64_t t0, setup_us;
    int technique;
};

struct rank {
    int id;
    qcg_ctx *ctx;
    int lfd; /* tcp mode: the listener */
    struct watch w;
    struct tls_self ts;
    int *targets, ntargets, next, inflight;
    int out_ok, out_fail, in_ok, in_expected;
    unsigned char *in_state; /* per peer rank: enum in_state */
    unsigned long refused;
};

static struct {
    const char *job, *dir, *addr;
    enum pattern pattern;
    int n, first, count, window, timeout_ms, run_ms;
    bool tcp;
    int dims[3];
    int ep;
    struct rank *ranks;
    struct conn *live;
    FILE *out;
    uint8_t psk[TLS_PSK_SIZE];
    SSL_CTX *ssl;
    struct sockaddr_in *contacts; /* tcp mode, per rank */
    uint64_t last_end_ms;
} sim;

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "scale-sim: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* A reason on one line (the report's last field). */
static void put_reason(const char *s)
{
    for (; *s; s++)
        fputc(*s == '\n' || *s == '\r' ? ' ' : *s, sim.out);
    fputc('\n', sim.out);
}

static bool path_exists(const char *name)
{
    char p[4096];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", sim.dir, name);
    return stat(p, &st) == 0;
}

static void touch(const char *fmt, int n)
{
    char name[256], p[4096];
    snprintf(name, sizeof(name), fmt, n);
    snprintf(p, sizeof(p), "%s/%s", sim.dir, name);
    FILE *f = fopen(p, "w");
    if (f == NULL)
        die("%s: %s", p, strerror(errno));
    fclose(f);
}

/* ---- patterns ------------------------------------------------------------ */

/* Whether a initiates the pair {a, b} of the storm. */
static bool storm_initiates(int a, int b)
{
    int lo = a < b ? a : b, hi = a < b ? b : a;
    return ((lo + hi) & 1) ? a == lo : a == hi;
}

/* MPI_Dims_create's balanced factorisation of n into 3. */
static void dims_create(int n, int d[3])
{
    d[0] = d[1] = d[2] = 1;
    int f[64], nf = 0;
    for (int p = 2; n > 1 && nf < 64;) {
        if (n % p == 0) {
            f[nf++] = p;
            n /= p;
        } else
            p++;
    }
    for (int i = nf - 1; i >= 0; i--) { /* largest factor to the smallest dim */
        int m = 0;
        for (int k = 1; k < 3; k++)
            if (d[k] < d[m])
                m = k;
        d[m] *= f[i];
    }
    /* descending, as MPI does */
    for (int i = 0; i < 3; i++)
        for (int k = i + 1; k < 3; k++)
            if (d[k] > d[i]) {
                int t = d[i];
                d[i] = d[k];
                d[k] = t;
            }
}

/* Calls fn(r, peer, r_initiates) for every pair of r in the pattern. */
static void pairs_of(int r, void (*fn)(struct rank *, int, bool), struct rank *rk)
{
    int n = sim.n;
    switch (sim.pattern) {
    case P_STORM:
        for (int k = 1; k < n; k++) {
            int j = (r + k) % n;
            fn(rk, j, storm_initiates(r, j));
        }
        break;
    case P_RING:
        if (n == 2) {
            fn(rk, 1 - r, r == 0);
        } else if (n > 2) {
            fn(rk, (r + 1) % n, true);
            fn(rk, (r + n - 1) % n, false);
        }
        break;
    case P_TREE:
        if (r > 0) {
            int hb = 1;
            while (hb * 2 <= r)
                hb *= 2;
            fn(rk, r - hb, false);
        }
        for (int b = 1; b < n; b *= 2)
            if (b > r && r + b < n)
                fn(rk, r + b, true);
        break;
    case P_STENCIL: {
        int *d = sim.dims, c[3] = {r % d[0], (r / d[0]) % d[1], r / (d[0] * d[1])};
        for (int k = 0; k < 3; k++) {
            if (d[k] == 1)
                continue;
            for (int s = -1; s <= 1; s += 2) {
                int cc[3] = {c[0], c[1], c[2]};
                cc[k] = (cc[k] + s + d[k]) % d[k];
                int p = cc[0] + d[0] * (cc[1] + d[1] * cc[2]);
                if (d[k] == 2 && s == -1)
                    continue; /* +1 and -1 are the same neighbour */
                /* the pair {r, p} once: the one whose + neighbour the other is
                   initiates (with d == 2, the one at coordinate 0) */
                bool init = d[k] == 2 ? c[k] == 0 : s == 1;
                fn(rk, p, init);
            }
        }
        break;
    }
    }
}

static void add_pair(struct rank *rk, int peer, bool init)
{
    if (init) {
        rk->targets[rk->ntargets++] = peer;
    } else if (rk->in_state[peer] == IN_NONE) {
        rk->in_state[peer] = IN_EXPECTED;
        rk->in_expected++;
    }
}

/* ---- connections --------------------------------------------------------- */

static void watch_set(struct conn *c, uint32_t events)
{
    if (c->events == events)
        return;
    struct epoll_event ev = {.events = events, .data.ptr = &c->w};
    int op = c->events == 0 ? EPOLL_CTL_ADD : events == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
    int fd = c->op != NULL ? qcg_connect_pollfd(c->op) : c->fd;
    if (epoll_ctl(sim.ep, op, fd, &ev) < 0)
        die("epoll_ctl: %s", strerror(errno));
    c->events = events;
}

static struct conn *conn_new(struct rank *r, int peer, bool out)
{
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        die("out of memory");
    c->w = (struct watch){W_CONN, c};
    c->r = r;
    c->peer = peer;
    c->out = out;
    c->fd = -1;
    c->t0 = mono_us();
    c->next = sim.live;
    if (sim.live)
        sim.live->prev = c;
    sim.live = c;
    return c;
}

static void conn_free(struct conn *c, bool reset)
{
    watch_set(c, 0);
    if (c->op)
        qcg_connect_free(c->op);
    if (c->hs)
        tls_hs_free(c->hs);
    qcg_tls_free(c->tls);
    if (c->fd >= 0) {
        if (reset) {
            struct linger l = {1, 0};
            setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
        }
        close(c->fd);
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        sim.live = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->out)
        c->r->inflight--;
    uint64_t t = wall_ms();
    if (t > sim.last_end_ms)
        sim.last_end_ms = t;
    free(c);
}

static void start_next(struct rank *r);

static void conn_fail(struct conn *c, const char *stage, const char *fmt, ...)
{
    char why[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (c->out) {
        fprintf(sim.out, "fail out %d %d %s ", c->r->id, c->peer, stage);
        c->r->out_fail++;
    } else {
        fprintf(sim.out, "fail in %d %d %s ", c->r->id, c->peer, stage);
    }
    put_reason(why);
    struct rank *r = c->r;
    bool out = c->out;
    conn_free(c, true);
    if (out)
        start_next(r);
}

/* The 16 bytes of from -> to. */
static void msg_make(uint8_t m[MSG_LEN], int from, int to)
{
    uint32_t w[4] = {htonl(MAGIC), htonl((uint32_t)from), htonl((uint32_t)to),
                     htonl((uint32_t)(from * 2654435761u ^ to * 40503u))};
    memcpy(m, w, MSG_LEN);
}

/* Moves data of c on: sends msg[done..] or reads into buf[done..].  1 when
   the 16 bytes are through, 0 to wait, -1 failed (c freed). */
static int pump(struct conn *c, bool sending, const char *stage)
{
    while (c->done < MSG_LEN) {
        long n = sending ? qcg_conn_send(c->fd, c->tls, c->msg + c->done, MSG_LEN - c->done)
                         : qcg_conn_recv(c->fd, c->tls, c->buf + c->done, MSG_LEN - c->done);
        if (n > 0) {
            c->done += (size_t)n;
            continue;
        }
        if (n == 0) {
            conn_fail(c, stage, "the peer closed the connection after %zu of %d bytes", c->done,
                      MSG_LEN);
            return -1;
        }
        if (errno == EAGAIN || errno == EINTR) {
            watch_set(c, sending ? EPOLLOUT : EPOLLIN);
            return 0;
        }
        int e = errno;
        conn_fail(c, stage, "%s", qcg_conn_strerror(c->tls, e));
        return -1;
    }
    if (sending && c->tls && qcg_tls_unsent(c->tls) > 0) {
        if (qcg_tls_flush(c->tls) < 0) {
            int e = errno;
            if (e == EAGAIN) {
                watch_set(c, EPOLLOUT);
                return 0;
            }
            conn_fail(c, stage, "flush: %s", qcg_conn_strerror(c->tls, e));
            return -1;
        }
    }
    c->done = 0;
    return 1;
}

/* The connection is made (either side): on to the bytes. */
static void conn_ready(struct conn *c);

static void initiator_step(struct conn *c)
{
    int rc;
    if (c->st == C_SEND) {
        if ((rc = pump(c, true, "send")) <= 0)
            return;
        c->st = C_ECHO;
    }
    if (c->st == C_ECHO) {
        if ((rc = pump(c, false, "echo")) <= 0)
            return;
        if (memcmp(c->buf, c->msg, MSG_LEN) != 0) {
            conn_fail(c, "echo", "the echo differs from the 16 bytes sent");
            return;
        }
        struct rank *r = c->r;
        fprintf(sim.out, "ok %d %d %s %llu %llu\n", r->id, c->peer,
                sim.tcp ? "tcp" : qcg_technique_name((enum qcg_technique)c->technique),
                (unsigned long long)c->setup_us, (unsigned long long)(mono_us() - c->t0));
        r->out_ok++;
        conn_free(c, true);
        start_next(r);
    }
}

static void acceptor_step(struct conn *c)
{
    int rc;
    struct rank *r = c->r;
    if (c->st == C_READ) {
        if ((rc = pump(c, false, "read")) <= 0)
            return;
        uint8_t want[MSG_LEN];
        uint32_t from;
        memcpy(&from, c->buf + 4, 4);
        from = ntohl(from);
        if (c->peer < 0)
            c->peer = (int)from;
        msg_make(want, c->peer, r->id);
        if (memcmp(c->buf, want, MSG_LEN) != 0) {
            conn_fail(c, "check", "the 16 bytes are not those of rank %d to rank %d (from %d)",
                      c->peer, r->id, (int)from);
            return;
        }
        if (c->peer < 0 || c->peer >= sim.n || r->in_state[c->peer] != IN_EXPECTED) {
            conn_fail(c, "check", "rank %d connected to rank %d, not a pair of the pattern%s",
                      c->peer, r->id,
                      c->peer >= 0 && c->peer < sim.n && r->in_state[c->peer] == IN_CHECKED
                          ? " (again)"
                          : "");
            return;
        }
        r->in_state[c->peer] = IN_CHECKED;
        r->in_ok++;
        memcpy(c->msg, c->buf, MSG_LEN);
        c->st = C_REPLY;
    }
    if (c->st == C_REPLY) {
        if ((rc = pump(c, true, "reply")) <= 0)
            return;
        c->st = C_WAIT_END;
        watch_set(c, EPOLLIN);
        return;
    }
    if (c->st == C_WAIT_END) {
        uint8_t b[64];
        long n = qcg_conn_recv(c->fd, c->tls, b, sizeof(b));
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        conn_free(c, false); /* end, reset or stray bytes: done either way */
    }
}

/* A connection still open at the stop, with what the kernel says of its
   socket and its addresses (to find it in the services' logs).  An
   acceptor that checked the bytes and echoed them, whose socket is still
   established, only never heard the initiator's reset: a reset is sent
   once and never again, and one lost on the way leaves it waiting.
   That connection was made and checked at both ends, so it is "unended",
   not "missing"; one whose end did arrive unnoticed stays "missing". */
static void put_missing(const struct conn *c)
{
    static const char *tcp_state[] = {"?",          "established", "syn-sent",  "syn-recv",
                                      "fin-wait1",  "fin-wait2",   "time-wait", "close",
                                      "close-wait", "last-ack",    "listen",    "closing"};
    struct tcp_info ti;
    socklen_t tl = sizeof(ti);
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof(me), pl = sizeof(peer);
    char mt[64] = "-", pt[64] = "-", kernel[160] = "";
    bool established = false;

    if (c->fd >= 0 && getsockopt(c->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0) {
        if (getsockname(c->fd, (struct sockaddr *)&me, &ml) == 0)
            sockaddr_text(&me, ml, mt, sizeof(mt));
        if (getpeername(c->fd, (struct sockaddr *)&peer, &pl) == 0)
            sockaddr_text(&peer, pl, pt, sizeof(pt));
        established = ti.tcpi_state == 1;
        snprintf(kernel, sizeof(kernel), " %s %s %s",
                 ti.tcpi_state < sizeof(tcp_state) / sizeof(tcp_state[0]) ? tcp_state[ti.tcpi_state]
                                                                          : "?",
                 mt, pt);
    }
    fprintf(sim.out, "%s %s %d %d %s%s\n",
            c->st == C_WAIT_END && established ? "unended" : "missing", c->out ? "out" : "in",
            c->r->id, c->peer, state_name[c->st], kernel);
}

static void conn_ready(struct conn *c)
{
    if (set_nonblocking(c->fd, true) < 0) {
        conn_fail(c, "socket", "O_NONBLOCK: %s", strerror(errno));
        return;
    }
    c->done = 0;
    if (c->out) {
        msg_make(c->msg, c->r->id, c->peer);
        c->st = C_SEND;
        initiator_step(c);
    } else {
        c->st = C_READ;
        watch_set(c, EPOLLIN);
        acceptor_step(c);
    }
}

/* ---- qcg mode ------------------------------------------------------------ */

/* Incoming connections refused since the last look, with the context's last
   error.  Looked at after every call that may refuse one (qcg_accept, and
   qcg_connect_finish, which moves the accepts on for a reversed connect) and
   before qcg_connect_start, which clears that error. */
static void note_refused(struct rank *r)
{
    unsigned long refused = qcg_accept_refused(r->ctx);
    if (refused != r->refused) {
        fprintf(sim.out, "refused %d %lu ", r->id, refused - r->refused);
        put_reason(qcg_last_error(r->ctx));
        r->refused = refused;
    }
}

static void qcg_op_event(struct conn *c)
{
    struct qcg_conn_info info = {0};
    int fd = qcg_connect_finish(c->op, &info);
    if (fd == QCG_EAGAIN) {
        note_refused(c->r);
        return;
    }
    if (fd < 0) {
        int e = qcg_connect_errno(c->op);
        conn_fail(c, "connect", "%s: %s%s%s", qcg_strerror(fd), qcg_last_error(c->r->ctx),
                  e ? " errno " : "", e ? strerror(e) : "");
        return;
    }
    note_refused(c->r);
    watch_set(c, 0);
    qcg_connect_free(c->op);
    c->op = NULL;
    c->fd = fd;
    c->tls = info.tls;
    c->technique = info.technique;
    c->setup_us = info.setup_us;
    conn_ready(c);
}

static void qcg_accept_event(struct rank *r)
{
    for (;;) {
        struct qcg_conn_info info = {0};
        int fd = qcg_accept(r->ctx, &info);
        note_refused(r);
        if (fd == QCG_EAGAIN)
            return;
        if (fd < 0) {
            fprintf(sim.out, "fail in %d -1 accept %s: ", r->id, qcg_strerror(fd));
            put_reason(qcg_last_error(r->ctx));
            return;
        }
        struct conn *c = conn_new(r, info.peer_rank, false);
        c->fd = fd;
        c->tls = info.tls;
        c->technique = info.technique;
        conn_ready(c);
    }
}

/* ---- tcp mode: plain connect + libqcgconn's TLS handshake ---------------- */

static void tcp_hs_step(struct conn *c)
{
    int rc = tls_hs_step(c->hs);
    if (rc == TLS_WANT_READ || rc == TLS_WANT_WRITE) {
        watch_set(c, rc == TLS_WANT_READ ? EPOLLIN : EPOLLOUT);
        return;
    }
    if (rc == TLS_CLAIM) {
        tls_hs_claim(c->hs, false, false);
        tcp_hs_step(c);
        return;
    }
    if (rc < 0) {
        conn_fail(c, "handshake", "%s", tls_hs_why(c->hs));
        return;
    }
    if (!c->out)
        c->peer = tls_hs_peer(c->hs)->from_rank;
    unsigned enc;
    struct tls_hs *hs = c->hs;
    c->hs = NULL;
    if (tls_hs_take(hs, &c->tls, &enc) < 0) {
        conn_fail(c, "handshake", "out of memory");
        return;
    }
    c->setup_us = mono_us() - c->t0;
    c->technique = QCG_TECH_DIRECT;
    conn_ready(c);
}

/* Either side's handshake, once tls_hs_client or tls_hs_server made it. */
static void tcp_hs_begin(struct conn *c, struct tls_hs *hs, const char *why)
{
    if ((c->hs = hs) == NULL) {
        conn_fail(c, "handshake", "%s", why);
        return;
    }
    c->st = C_HS;
    tcp_hs_step(c);
}

static void tcp_connected(struct conn *c)
{
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == EINPROGRESS)
        return;
    if (err) {
        conn_fail(c, "connect", "TCP connect: %s", strerror(err));
        return;
    }
    char why[256] = "";
    tcp_hs_begin(c,
                 tls_hs_client(&c->r->ts, c->fd, c->peer, NULL, QCG_TECH_DIRECT, TLS_OFFER_TLS, why,
                               sizeof(why)),
                 why);
}

static void tcp_accept_event(struct rank *r)
{
    for (;;) {
        int fd = accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR) {
                fprintf(sim.out, "fail in %d -1 accept ", r->id);
                put_reason(strerror(errno));
            }
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct conn *c = conn_new(r, -1, false);
        c->fd = fd;
        char why[256] = "";
        tcp_hs_begin(c, tls_hs_server(&r->ts, fd, -1, why, sizeof(why)), why);
    }
}

/* ---- ranks --------------------------------------------------------------- */

static void start_next(struct rank *r)
{
    while (r->inflight < sim.window && r->next < r->ntargets) {
        int peer = r->targets[r->next++];
        struct conn *c = conn_new(r, peer, true);
        r->inflight++;
        if (!sim.tcp) {
            note_refused(r);
            int rc = qcg_connect_start(r->ctx, peer, sim.timeout_ms, &c->op);
            if (rc < 0) {
                c->op = NULL;
                conn_fail(c, "start", "%s: %s", qcg_strerror(rc), qcg_last_error(r->ctx));
                return; /* conn_fail started the next */
            }
            watch_set(c, EPOLLIN);
            qcg_op_event(c); /* may be done at once */
            continue;
        }
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->fd < 0) {
            conn_fail(c, "connect", "socket: %s", strerror(errno));
            return;
        }
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(c->fd, (struct sockaddr *)&sim.contacts[peer], sizeof(sim.contacts[peer])) <
                0 &&
            errno != EINPROGRESS) {
            conn_fail(c, "connect", "TCP connect: %s", strerror(errno));
            return;
        }
        watch_set(c, EPOLLOUT);
    }
}

static void rank_open(struct rank *r)
{
    if (sim.tcp) {
        r->ts = (struct tls_self){.job = sim.job,
                                  .rank = r->id,
                                  .cluster = "baseline",
                                  .psk = sim.psk,
                                  .ssl_ctx = sim.ssl,
                                  .policy = QCG_ENCRYPT_ALWAYS};
        struct sockaddr_in sa = {.sin_family = AF_INET};
        r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        socklen_t len = sizeof(sa);
        if (r->lfd < 0 || inet_pton(AF_INET, sim.addr, &sa.sin_addr) != 1 ||
            bind(r->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(r->lfd, SOMAXCONN) < 0 ||
            getsockname(r->lfd, (struct sockaddr *)&sa, &len) < 0)
            die("rank %d: listener on %s: %s", r->id, sim.addr, strerror(errno));
        r->w = (struct watch){W_LISTEN, r};
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &r->w};
        if (epoll_ctl(sim.ep, EPOLL_CTL_ADD, r->lfd, &ev) < 0)
            die("epoll_ctl: %s", strerror(errno));
        char p[4096];
        snprintf(p, sizeof(p), "%s/contacts-%d", sim.dir, sim.first);
        FILE *f = fopen(p, "a");
        if (f == NULL)
            die("%s: %s", p, strerror(errno));
        fprintf(f, "%d %s %u\n", r->id, sim.addr, ntohs(sa.sin_port));
        fclose(f);
        return;
    }
    struct qcg_options o = {.job = sim.job, .rank = r->id, .encrypt = QCG_ENCRYPT_INTER_SITE};
    int rc = qcg_open(&r->ctx, &o);
    if (rc == 0)
        rc = qcg_listen(r->ctx);
    if (rc != 0)
        die("rank %d: %s: %s", r->id, qcg_strerror(rc), qcg_last_error(r->ctx));
    r->w = (struct watch){W_ACCEPT, r};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &r->w};
    if (epoll_ctl(sim.ep, EPOLL_CTL_ADD, qcg_accept_pollfd(r->ctx), &ev) < 0)
        die("epoll_ctl: %s", strerror(errno));
}

/* tcp mode: every rank's listener from DIR/contacts-*, once go is there. */
static void read_contacts(void)
{
    sim.contacts = calloc((size_t)sim.n, sizeof(*sim.contacts));
    char p[4096];
    snprintf(p, sizeof(p), "cat %s/contacts-* 2>/dev/null", sim.dir);
    FILE *f = popen(p, "r");
    int rank, found = 0;
    char addr[64];
    unsigned port;
    while (f && fscanf(f, "%d %63s %u", &rank, addr, &port) == 3) {
        if (rank < 0 || rank >= sim.n)
            continue;
        sim.contacts[rank].sin_family = AF_INET;
        sim.contacts[rank].sin_port = htons((uint16_t)port);
        inet_pton(AF_INET, addr, &sim.contacts[rank].sin_addr);
        found++;
    }
    if (f)
        pclose(f);
    if (found != sim.n)
        die("%d of %d contacts in %s/contacts-*", found, sim.n, sim.dir);
}

/* Whether every rank's own connects ended (made or failed), and with
   incoming too, whether every pair of its ranks was checked. */
static bool all_done(bool incoming)
{
    for (int i = 0; i < sim.count; i++) {
        struct rank *r = &sim.ranks[i];
        if (r->next < r->ntargets || r->inflight > 0 || (incoming && r->in_ok < r->in_expected))
            return false;
    }
    return true;
}

static const char *pattern_names[] = {"storm", "stencil", "ring", "tree"};

/* An enum pattern, or -1. */
static int pattern_parse(const char *name)
{
    for (int p = P_STORM; p <= P_TREE; p++)
        if (!strcmp(name, pattern_names[p]))
            return p;
    return -1;
}

static void usage(void)
{
    fprintf(stderr, "usage: scale-sim --job J --ranks N --first R --count C --dir DIR\n"
                    "         [--pattern storm|stencil|ring|tree] [--window W]\n"
                    "         [--timeout MS] [--run-ms MS] [--mode qcg|tcp --addr IP]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    sim.pattern = P_STORM;
    sim.window = 32;
    sim.timeout_ms = 30000;
    sim.run_ms = 120000;
    sim.first = -1;
    const struct {
        const char *name;
        int *v;
    } int_opts[] = {
        {"--ranks", &sim.n},       {"--first", &sim.first},        {"--count", &sim.count},
        {"--window", &sim.window}, {"--timeout", &sim.timeout_ms}, {"--run-ms", &sim.run_ms}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL)
            usage();
        i++;
        int *num = NULL;
        for (size_t k = 0; k < sizeof(int_opts) / sizeof(int_opts[0]); k++)
            if (!strcmp(a, int_opts[k].name))
                num = int_opts[k].v;
        if (num != NULL)
            *num = atoi(v);
        else if (!strcmp(a, "--job"))
            sim.job = v;
        else if (!strcmp(a, "--dir"))
            sim.dir = v;
        else if (!strcmp(a, "--addr"))
            sim.addr = v;
        else if (!strcmp(a, "--mode") && (!strcmp(v, "qcg") || !strcmp(v, "tcp")))
            sim.tcp = !strcmp(v, "tcp");
        else if (!strcmp(a, "--pattern") && pattern_parse(v) >= 0)
            sim.pattern = (enum pattern)pattern_parse(v);
        else
            usage();
    }
    if (!sim.job || !sim.dir || sim.n < 2 || sim.first < 0 || sim.count < 1 ||
        sim.first + sim.count > sim.n || sim.window < 1 || (sim.tcp && !sim.addr))
        usage();
    dims_create(sim.n, sim.dims);

    /* Descriptors: 6 per context, 3 per connect in flight, 1-2 per connection. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        struct rlimit big = {1 << 20, 1 << 20};
        if (setrlimit(RLIMIT_NOFILE, &big) != 0)
            setrlimit(RLIMIT_NOFILE, &rl);
    }

    char p[4096];
    snprintf(p, sizeof(p), "%s/result-%d", sim.dir, sim.first);
    if ((sim.out = fopen(p, "w")) == NULL)
        die("%s: %s", p, strerror(errno));
    if ((sim.ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
        die("epoll_create1: %s", strerror(errno));
    if (sim.tcp) {
        const char *secret = getenv("QCG_JOB_SECRET");
        if (!secret || (sim.ssl = tls_ctx_new()) == NULL ||
            tls_psk_derive(sim.psk, secret, sim.job) < 0)
            die("tcp mode: QCG_JOB_SECRET and OpenSSL are needed");
    }

    sim.ranks = calloc((size_t)sim.count, sizeof(*sim.ranks));
    for (int i = 0; i < sim.count; i++) {
        struct rank *r = &sim.ranks[i];
        r->id = sim.first + i;
        r->lfd = -1;
        r->targets = calloc((size_t)sim.n, sizeof(int));
        r->in_state = calloc((size_t)sim.n, 1);
        pairs_of(r->id, add_pair, r);
        rank_open(r);
    }
    touch("ready-%d", sim.first);

    /* Wait for go (the driver: every process is ready), serving meanwhile. */
    uint64_t t_wait = mono_us();
    while (!path_exists("go")) {
        if (mono_us() - t_wait > (uint64_t)sim.run_ms * 1000u)
            die("no %s/go within %d ms", sim.dir, sim.run_ms);
        struct epoll_event ev[MAX_EVENTS];
        epoll_wait(sim.ep, ev, MAX_EVENTS, 10);
        for (int i = 0; i < sim.count && !sim.tcp; i++)
            qcg_accept_event(&sim.ranks[i]);
    }
    if (sim.tcp)
        read_contacts();
    struct rusage ru0;
    getrusage(RUSAGE_SELF, &ru0);
    uint64_t open_cpu_us = (uint64_t)(ru0.ru_utime.tv_sec + ru0.ru_stime.tv_sec) * 1000000u +
                           (uint64_t)(ru0.ru_utime.tv_usec + ru0.ru_stime.tv_usec);
    uint64_t go_ms = wall_ms(), go_us = mono_us();
    sim.last_end_ms = go_ms;
    for (int i = 0; i < sim.count; i++)
        start_next(&sim.ranks[i]);

    bool done = false, out_done = false;
    /* The longest turn of the loop: every rank of the process waits that
       long for its events (a peer, or the proxy, may give up meanwhile). */
    uint64_t turn_max_us = 0;
    for (;;) {
        struct epoll_event ev[MAX_EVENTS];
        int n = epoll_wait(sim.ep, ev, MAX_EVENTS, 100);
        if (n < 0 && errno != EINTR)
            die("epoll_wait: %s", strerror(errno));
        uint64_t turn_us = mono_us();
        for (int i = 0; i < n; i++) {
            struct watch *w = ev[i].data.ptr;
            if (w->kind == W_ACCEPT) {
                qcg_accept_event(w->ptr);
                continue;
            }
            if (w->kind == W_LISTEN) {
                tcp_accept_event(w->ptr);
                continue;
            }
            struct conn *c = w->ptr;
            switch (c->st) {
            case C_CONNECT:
                if (sim.tcp)
                    tcp_connected(c);
                else
                    qcg_op_event(c);
                break;
            case C_HS:
                tcp_hs_step(c);
                break;
            case C_SEND:
            case C_ECHO:
                initiator_step(c);
                break;
            default:
                acceptor_step(c);
            }
        }
        if (!out_done && all_done(false)) {
            out_done = true;
            fflush(sim.out);
            touch("out-done-%d", sim.first);
        }
        if (!done && all_done(true)) {
            done = true;
            fflush(sim.out);
            touch("done-%d", sim.first);
        }
        if (mono_us() - turn_us > turn_max_us)
            turn_max_us = mono_us() - turn_us;
        if (path_exists("stop") || mono_us() - go_us > (uint64_t)sim.run_ms * 1000u)
            break;
    }
    fprintf(sim.out, "turn %d %llu\n", sim.first, (unsigned long long)(turn_max_us / 1000u));

    int out_ok = 0, out_fail = 0, in_ok = 0, in_exp = 0;
    for (struct conn *c = sim.live; c; c = c->next)
        put_missing(c);
    for (int i = 0; i < sim.count; i++) {
        struct rank *r = &sim.ranks[i];
        for (int k = r->next; k < r->ntargets; k++)
            fprintf(sim.out, "missing out %d %d not-started\n", r->id, r->targets[k]);
        out_ok += r->out_ok;
        out_fail += r->out_fail;
        in_ok += r->in_ok;
        in_exp += r->in_expected;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t cpu_us = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000u +
                      (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) - open_cpu_us;
    fprintf(sim.out, "summary %d %d %d %d %d %d %llu %llu %llu\n", sim.first, sim.count, out_ok,
            out_fail, in_ok, in_exp, (unsigned long long)go_ms, (unsigned long long)sim.last_end_ms,
            (unsigned long long)cpu_us);
    fclose(sim.out);
    /* The contexts end with the process: the helper withdraws a closed
       connection's contacts (process death is a withdrawal). */
    return 0;
}
