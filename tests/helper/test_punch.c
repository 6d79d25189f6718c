/*
 * helper-punch: the reflector on 127.0.0.1:18420 and punches on one libuv
 * loop.  Two punches pair up and get the two ends of one connection (bytes
 * both ways); a refused token, a peer that never connects (the retry
 * schedule, then the timeout), bad parameters, and cancels at each step.
 * An on-path attacker (a thread between a punch and the reflector) who
 * forges or alters the PEER answer does not redirect the punch (issue 17).
 * Ports 18420-18449.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <stdbool.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "log.h"
#include "punch.h"
#include "reflector.h"

#define REFLECTOR_PORT 18420
#define REFLECTOR6_PORT 18421

static struct proxy_key key;
static struct reflector *refl, *refl4, *refl6; /* refl: the one new_pair expects on */

struct outcome {
    int called;
    struct punch_result r;
};

static void on_result(void *arg, const struct punch_result *r)
{
    struct outcome *o = arg;
    o->called++;
    o->r = *r;
}

static void new_pair(unsigned char pair[TOKEN_PAIR_LEN], unsigned char tag)
{
    struct reflector_side sides[2];

    memset(sides, 0, sizeof(sides));
    memset(pair, 0, TOKEN_PAIR_LEN);
    pair[0] = tag;
    pair[1] = (unsigned char)time(NULL);
    snprintf(sides[0].cluster, sizeof(sides[0].cluster), "lo");
    snprintf(sides[1].cluster, sizeof(sides[1].cluster), "lo");
    reflector_expect(refl, pair, sides, (uint64_t)time(NULL) + 60);
}

static void params(struct punch_params *p, const unsigned char pair[TOKEN_PAIR_LEN], int side,
                   uint16_t low, uint16_t high, unsigned timeout_ms)
{
    memset(p, 0, sizeof(*p));
    snprintf(p->reflector_addr, sizeof(p->reflector_addr), "127.0.0.1");
    p->reflector_port = REFLECTOR_PORT;
    token_issue(&key, pair, side, (uint64_t)time(NULL) + 60, p->token, sizeof(p->token));
    snprintf(p->local, sizeof(p->local), "127.0.0.1");
    p->port_low = low;
    p->port_high = high;
    p->timeout_ms = timeout_ms;
}

static void run(uv_loop_t *loop)
{
    /* Bounded: every punch has its own deadline. */
    for (int i = 0; i < 1000 && uv_run(loop, UV_RUN_ONCE); i++)
        ;
}

static int blocking(int fd)
{
    return fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
}

static int transfer(int from, int to, size_t n)
{
    static unsigned char out[65536], in[65536];
    for (size_t i = 0; i < n; i++)
        out[i] = (unsigned char)(i * 31 + (size_t)from);
    if (send(from, out, n, MSG_NOSIGNAL) != (ssize_t)n)
        return -1;
    size_t got = 0;
    while (got < n) {
        ssize_t k = recv(to, in + got, n - got, 0);
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return memcmp(in, out, n) == 0 ? 0 : -1;
}

/* v6: through the reflector on ::1, from ::1 (a punch over IPv6). */
static void test_pair(uv_loop_t *loop, bool v6)
{
    unsigned char pair[TOKEN_PAIR_LEN];
    struct punch_params pa, pb;
    struct outcome a = {0}, b = {0};
    char why[256];

    refl = v6 ? refl6 : refl4;
    new_pair(pair, v6 ? 9 : 1);
    params(&pa, pair, 0, 18430, 18434, 3000);
    params(&pb, pair, 1, 18440, 18444, 3000);
    if (v6) {
        snprintf(pa.reflector_addr, sizeof(pa.reflector_addr), "::1");
        snprintf(pb.reflector_addr, sizeof(pb.reflector_addr), "::1");
        pa.reflector_port = pb.reflector_port = REFLECTOR6_PORT;
        snprintf(pa.local, sizeof(pa.local), "::1");
        snprintf(pb.local, sizeof(pb.local), "::1");
    }
    struct punch *x = punch_start(loop, &pa, on_result, &a, why, sizeof(why));
    struct punch *y = punch_start(loop, &pb, on_result, &b, why, sizeof(why));
    CHECKF(x != NULL && y != NULL, "punch_start: %s", why);
    run(loop);
    CHECKF(a.called == 1 && b.called == 1, "callbacks %d %d", a.called, b.called);
    CHECKF(a.r.status == 0 && a.r.fd >= 0, "a: %s", a.r.why);
    CHECKF(b.r.status == 0 && b.r.fd >= 0, "b: %s", b.r.why);
    if (a.r.status != 0 || b.r.status != 0)
        return;
    CHECKF(a.r.peer_port == b.r.local_port && b.r.peer_port == a.r.local_port,
           "mappings: a %u->%u, b %u->%u", a.r.local_port, a.r.peer_port, b.r.local_port,
           b.r.peer_port);
    CHECKF(a.r.local_port >= 18430 && a.r.local_port <= 18434, "a's port %u", a.r.local_port);
    struct sockaddr_storage pa_peer, pb_me;
    socklen_t l1 = sizeof(pa_peer), l2 = sizeof(pb_me);
    getpeername(a.r.fd, (struct sockaddr *)&pa_peer, &l1);
    getsockname(b.r.fd, (struct sockaddr *)&pb_me, &l2);
    CHECKF(l1 == l2 && memcmp(&pa_peer, &pb_me, l1) == 0, "the two ends of one connection");
    CHECKF(pa_peer.ss_family == (v6 ? AF_INET6 : AF_INET) &&
               strcmp(a.r.peer_addr, v6 ? "::1" : "127.0.0.1") == 0,
           "over %s: peer %s", v6 ? "IPv6" : "IPv4", a.r.peer_addr);
    blocking(a.r.fd);
    blocking(b.r.fd);
    CHECKF(transfer(a.r.fd, b.r.fd, 65536) == 0, "a -> b");
    CHECKF(transfer(b.r.fd, a.r.fd, 65536) == 0, "b -> a");
    printf("pair over %s: connected in %u and %u ms\n", v6 ? "IPv6" : "IPv4", a.r.setup_ms,
           b.r.setup_ms);
    close(a.r.fd);
    close(b.r.fd);
}

static void test_refused_token(uv_loop_t *loop)
{
    unsigned char pair[TOKEN_PAIR_LEN];
    struct punch_params p;
    struct outcome o = {0};
    char why[256];

    memset(pair, 0x5a, sizeof(pair)); /* never expected */
    params(&p, pair, 0, 18430, 18434, 3000);
    CHECKF(punch_start(loop, &p, on_result, &o, why, sizeof(why)) != NULL, "start: %s", why);
    run(loop);
    CHECKF(o.called == 1 && o.r.status < 0 && o.r.fd == -1, "refused token: status %d", o.r.status);
    CHECKF(strstr(o.r.why, "reflector: FAIL") && strstr(o.r.why, "no punch expected"), "why: %s",
           o.r.why);
}

/* The peer's side is a bare client that gets PEER and leaves: every connect
   is refused; the schedule runs out, the listener waits until the deadline. */
static void test_peer_never_connects(uv_loop_t *loop)
{
    unsigned char pair[TOKEN_PAIR_LEN];
    struct punch_params p;
    struct outcome o = {0};
    char why[256], line[300];

    new_pair(pair, 2);
    params(&p, pair, 0, 18430, 18434, 2500);
    CHECKF(punch_start(loop, &p, on_result, &o, why, sizeof(why)) != NULL, "start: %s", why);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(REFLECTOR_PORT)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECKF(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "bare client");
    char tok[TOKEN_TEXT_LEN + 1];
    token_issue(&key, pair, 1, (uint64_t)time(NULL) + 60, tok, sizeof(tok));
    snprintf(line, sizeof(line), "PUNCH %s 127.0.0.1 18449\n", tok);
    CHECKF(send(fd, line, strlen(line), 0) > 0, "send");
    run(loop);
    close(fd);
    CHECKF(o.called == 1 && o.r.status < 0, "no peer: status %d", o.r.status);
    CHECKF(strstr(o.r.why, "after 5 tries") != NULL, "why: %s", o.r.why);
    CHECKF(o.r.setup_ms >= 2400 && o.r.setup_ms < 3500, "failed after %u ms", o.r.setup_ms);
    printf("peer never connects: %s (%u ms)\n", o.r.why, o.r.setup_ms);
}

static void on_cancel_timer(uv_timer_t *t)
{
    punch_cancel(t->data);
    uv_close((uv_handle_t *)t, NULL);
}

static void test_cancel(uv_loop_t *loop)
{
    unsigned char pair[TOKEN_PAIR_LEN];
    struct punch_params p;
    struct outcome o = {0};
    char why[256];
    uv_timer_t t;

    new_pair(pair, 3);
    params(&p, pair, 0, 18430, 18434, 3000);
    /* At once (connecting to the reflector). */
    struct punch *x = punch_start(loop, &p, on_result, &o, why, sizeof(why));
    punch_cancel(x);
    punch_cancel(x); /* twice is harmless before the loop turns */
    run(loop);
    /* While the reflector holds us, waiting for the peer. */
    params(&p, pair, 1, 18430, 18434, 3000);
    x = punch_start(loop, &p, on_result, &o, why, sizeof(why));
    uv_timer_init(loop, &t);
    t.data = x;
    uv_timer_start(&t, on_cancel_timer, 100, 0);
    run(loop);
    CHECKF(o.called == 0, "a cancelled punch called back");
}

static void test_bad_params(uv_loop_t *loop)
{
    unsigned char pair[TOKEN_PAIR_LEN] = {0};
    struct punch_params p;
    struct outcome o = {0};
    char why[256];

    params(&p, pair, 0, 18430, 18434, 1000);
    snprintf(p.reflector_addr, sizeof(p.reflector_addr), "broker.example");
    CHECKF(punch_start(loop, &p, on_result, &o, why, sizeof(why)) == NULL, "name accepted");
    params(&p, pair, 0, 18434, 18430, 1000);
    CHECKF(punch_start(loop, &p, on_result, &o, why, sizeof(why)) == NULL, "empty range");
    params(&p, pair, 0, 18430, 18434, 1000);
    snprintf(p.token, sizeof(p.token), "two words");
    CHECKF(punch_start(loop, &p, on_result, &o, why, sizeof(why)) == NULL, "token with a space");
    /* A range whose only port is taken. */
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(18435)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECKF(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "bind 18435");
    params(&p, pair, 0, 18435, 18435, 1000);
    CHECKF(punch_start(loop, &p, on_result, &o, why, sizeof(why)) == NULL &&
               strstr(why, "no free port"),
           "taken range: %s", why);
    close(fd);
}

/* The reflector's answer line alone (what fuzz-reflector feeds too). */
#define MITM_PORT 18421
#define ATTACKER_PORT 18422

/* Between a punch and the reflector: forges the answer (alter 0) or relays
   the request to the reflector and points its answer at the attacker. */
struct mitm {
    int listen_fd;
    int alter;
    int relayed; /* the reflector's answer reached us */
};

static int read_line(int fd, char *buf, size_t len)
{
    size_t got = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (got < len - 1 && poll(&p, 1, 5000) == 1) {
        ssize_t n = recv(fd, buf + got, 1, 0);
        if (n <= 0)
            break;
        if (buf[got++] == '\n')
            break;
    }
    buf[got] = '\0';
    return got > 0 && buf[got - 1] == '\n' ? 0 : -1;
}

static void *mitm_main(void *arg)
{
    struct mitm *m = arg;
    struct pollfd p = {.fd = m->listen_fd, .events = POLLIN};
    char line[300], ans[600], port[16] = "0";
    if (poll(&p, 1, 5000) != 1)
        return NULL;
    int c = accept(m->listen_fd, NULL, NULL);
    if (c < 0 || read_line(c, line, sizeof(line)) < 0) {
        if (c >= 0)
            close(c);
        return NULL;
    }
    sscanf(line, "PUNCH %*s %*s %15s", port);
    snprintf(ans, sizeof(ans), "PEER 127.0.0.1 %d 127.0.0.1 %s\n", ATTACKER_PORT, port);
    if (m->alter) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(REFLECTOR_PORT)};
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
        int r = socket(AF_INET, SOCK_STREAM, 0);
        char real[600], pa[64], oa[64], tag[80] = "";
        int pp, op;
        if (r >= 0 && connect(r, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
            send(r, line, strlen(line), 0) > 0 && read_line(r, real, sizeof(real)) == 0) {
            int n = sscanf(real, "PEER %63s %d %63s %d %79s", pa, &pp, oa, &op, tag);
            if (n >= 4) {
                m->relayed = 1;
                snprintf(ans, sizeof(ans), "PEER %s %d %s %d%s%s\n", pa, ATTACKER_PORT, oa, op,
                         n == 5 ? " " : "", tag);
            }
        }
        if (r >= 0)
            close(r);
    }
    send(c, ans, strlen(ans), MSG_NOSIGNAL);
    shutdown(c, SHUT_WR);
    read_line(c, line, sizeof(line)); /* until the punch closes */
    close(c);
    return NULL;
}

static int listen_on(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 8) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* alter 0: an answer made up on the way; 1: the reflector's answer with the
   peer's port changed.  Either way the punch refuses it and never connects
   to the attacker. */
static void test_forged_peer(uv_loop_t *loop, int alter)
{
    unsigned char pair[TOKEN_PAIR_LEN];
    struct punch_params pa, pb;
    struct outcome a = {0}, b = {0};
    struct mitm m = {.listen_fd = listen_on(MITM_PORT), .alter = alter};
    int attacker = listen_on(ATTACKER_PORT);
    char why[256];
    pthread_t th;

    REQUIRE(m.listen_fd >= 0 && attacker >= 0);
    REQUIRE(pthread_create(&th, NULL, mitm_main, &m) == 0);
    new_pair(pair, (unsigned char)(10 + alter));
    params(&pa, pair, 0, 18423, 18425, 2000);
    pa.reflector_port = MITM_PORT;
    params(&pb, pair, 1, 18426, 18428, 2000);
    struct punch *x = punch_start(loop, &pa, on_result, &a, why, sizeof(why));
    struct punch *y = alter ? punch_start(loop, &pb, on_result, &b, why, sizeof(why)) : NULL;
    CHECKF(x != NULL && (!alter || y != NULL), "punch_start: %s", why);
    run(loop);
    pthread_join(th, NULL);
    CHECKF(!alter || m.relayed, "the reflector's answer went through the attacker");
    CHECKF(a.called == 1 && a.r.status < 0 && a.r.fd == -1, "%s answer: status %d",
           alter ? "altered" : "forged", a.r.status);
    CHECKF(strstr(a.r.why, "authentication tag") != NULL, "why: %s", a.r.why);
    int got = accept(attacker, NULL, NULL);
    CHECKF(got < 0, "the punch connected to the attacker's port");
    if (got >= 0)
        close(got);
    if (a.r.fd >= 0)
        close(a.r.fd);
    if (b.r.fd >= 0)
        close(b.r.fd);
    close(attacker);
    close(m.listen_fd);
}

static void test_answer_parse(void)
{
    static const char *const bad[] = {"PEER 203.0.113.20 23001 203.0.113.30",
                                      "PEER 203.0.113.20 23001 203.0.113.30 24001 x",
                                      "PEER 203.0.113.20 0 203.0.113.30 24001",
                                      "PEER 203.0.113.20 023001 203.0.113.30 24001",
                                      "PEER 2001:db8::1 23001 203.0.113.30 24001",
                                      "PEER 203.0.113.20 23001 203.0.113.30 65536",
                                      "",
                                      NULL};
    struct punch_result r;
    struct sockaddr_storage peer;
    char line[128], why[256];

    snprintf(line, sizeof(line), "PEER 203.0.113.20 23001 203.0.113.30 24001");
    CHECKF(punch_answer_parse(line, AF_INET, &r, &peer, why, sizeof(why)) == 0 &&
               strcmp(r.peer_addr, "203.0.113.20") == 0 && r.peer_port == 23001 &&
               strcmp(r.own_addr, "203.0.113.30") == 0 && r.own_port == 24001 &&
               peer.ss_family == AF_INET &&
               ((struct sockaddr_in *)&peer)->sin_addr.s_addr == inet_addr("203.0.113.20") &&
               ntohs(((struct sockaddr_in *)&peer)->sin_port) == 23001,
           "good answer: %s", why);
    /* A punch over IPv6 (its reflector's family) takes IPv6 endpoints only. */
    snprintf(line, sizeof(line), "PEER 2001:db8:6::11 23001 2001:db8:3:2::11 24001");
    CHECKF(punch_answer_parse(line, AF_INET6, &r, &peer, why, sizeof(why)) == 0 &&
               strcmp(r.peer_addr, "2001:db8:6::11") == 0 && peer.ss_family == AF_INET6 &&
               ntohs(((struct sockaddr_in6 *)&peer)->sin6_port) == 23001 &&
               strcmp(r.own_addr, "2001:db8:3:2::11") == 0 && r.own_port == 24001,
           "good IPv6 answer: %s", why);
    snprintf(line, sizeof(line), "PEER 203.0.113.20 23001 203.0.113.30 24001");
    CHECKF(punch_answer_parse(line, AF_INET6, &r, &peer, why, sizeof(why)) < 0 &&
               strstr(why, "IPv6") != NULL,
           "an IPv4 answer to a punch over IPv6 is refused: %s", why);
    snprintf(line, sizeof(line), "PEER 2001:db8:6::11 23001 203.0.113.30 24001");
    CHECKF(punch_answer_parse(line, AF_INET6, &r, &peer, why, sizeof(why)) < 0,
           "mixed families refused");
    snprintf(line, sizeof(line), "FAIL no punch expected");
    CHECKF(punch_answer_parse(line, AF_INET, &r, &peer, why, sizeof(why)) < 0 &&
               strcmp(why, "reflector: FAIL no punch expected") == 0,
           "FAIL: %s", why);
    for (int i = 0; bad[i] != NULL; i++) {
        snprintf(line, sizeof(line), "%s", bad[i]);
        CHECKF(punch_answer_parse(line, AF_INET, &r, &peer, why, sizeof(why)) < 0 &&
                   strstr(why, "unexpected answer"),
               "'%s' accepted or why '%s'", bad[i], why);
    }
}

int main(void)
{
    struct reflector_tuning t = {.pair_wait_ms = 2000};
    char err[200];
    uv_loop_t loop;

    log_init("helper", getenv("VERBOSE") ? LOG_LEVEL_DEBUG : LOG_LEVEL_ERROR, false);
    for (size_t i = 0; i < sizeof(key.bytes); i++)
        key.bytes[i] = (unsigned char)(i * 13 + 5);
    refl = refl4 = reflector_start_tuned("127.0.0.1:18420", &key, NULL, NULL, &t, err, sizeof(err));
    refl6 = refl4 != NULL
                ? reflector_start_tuned("[::1]:18421", &key, NULL, NULL, &t, err, sizeof(err))
                : NULL;
    if (refl6 == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    test_answer_parse();
    uv_loop_init(&loop);
    test_pair(&loop, false);
    test_pair(&loop, true);
    refl = refl4;
    test_refused_token(&loop);
    test_peer_never_connects(&loop);
    test_cancel(&loop);
    test_bad_params(&loop);
    test_forged_peer(&loop, 0);
    test_forged_peer(&loop, 1);
    run(&loop);
    CHECKF(uv_loop_close(&loop) == 0, "handles left on the loop");
    reflector_stop(refl4);
    reflector_stop(refl6);
    return check_result("helper-punch");
}
