/* libqcgconn-reversed-unit: the library's side of reversed and proxied
   connections against a fake helper (fake_helper.c), the peers played by
   threads of this test: a reversed connection claimed by the connect that
   waits for its token (also when it arrives before the plan), a wrong token
   refused, the fallback with the techniques tried (to nothing, and to a
   proxy), a proxy that refuses, and descriptors the helper hands over for
   either handshake role.  Ports 18560-18575, the proxy's from the kernel. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "fixtures.h"
#include "fake_helper.h"
#include "handshake_blocking.h"
#include "internal.h"
#include "qcgconn.h"
#include "tls_psk.h"

#define PORT_LOW 18560
#define PORT_HIGH 18575

static char sock_path[108];
static struct fake_helper *fh;

static const char token_a[] = "0123456789abcdef0123456789abcdef";
static const char token_b[] = "fedcba9876543210fedcba9876543210";

static qcg_ctx *open_rank_encrypt(int rank, int encrypt)
{
    struct qcg_options o = {.job = "job1",
                            .rank = rank,
                            .secret = TEST_SECRET,
                            .helper_socket = sock_path,
                            .encrypt = encrypt};
    qcg_ctx *ctx = NULL;

    REQUIRE_EQ(qcg_open(&ctx, &o), 0);
    REQUIRE_EQ(qcg_listen(ctx), 0);
    return ctx;
}

static qcg_ctx *open_rank(int rank)
{
    struct qcg_options o = {
        .job = "job1", .rank = rank, .secret = TEST_SECRET, .helper_socket = sock_path};
    qcg_ctx *ctx = NULL;

    REQUIRE_EQ(qcg_open(&ctx, &o), 0);
    REQUIRE_EQ(qcg_listen(ctx), 0);
    return ctx;
}

static void set_plan(int32_t rank, uint32_t tried, uint32_t technique, uint16_t port,
                     const char *token)
{
    struct local_plan p = {.technique = technique, .port = port};

    strcpy(p.cluster, "far");
    strcpy(p.node, "n9");
    strcpy(p.address, "127.0.0.1");
    snprintf(p.token, sizeof(p.token), "%s", token);
    fake_helper_set_plan(fh, rank, tried, &p, 0, NULL);
}

static int tcp_connect(uint16_t port)
{
    struct sockaddr_in sin = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    REQUIRE(fd >= 0);
    REQUIRE_EQ(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    return fd;
}

/* The target's side of a reversed connection: its helper connected to the
   initiator's listener; it sends the hello with the token and reads the
   answer. */
struct target {
    uint16_t port; /* the initiator's listener */
    int32_t from, to;
    const char *token;
    unsigned after_lookups; /* > 0: calls back once the helper has served this many lookups */
    int rc;                 /* the handshake's */
    char why[QCG_ERRMSG_MAX];
    int echo;
};

static void *target_run(void *arg)
{
    struct target *t = arg;
    struct hs_self self = {.job = "job1", .rank = t->from, .secret = TEST_SECRET, .cluster = "far"};
    int fd;

    if (t->after_lookups > 0)
        WAIT_UNTIL(fake_helper_lookups(fh) >= t->after_lookups, 5000, "the connect's lookup");
    fd = tcp_connect(t->port);
    t->rc = hs_initiate_ex(fd, &self, t->to, t->token, false, now_us() + 8000000u, NULL, t->why,
                           sizeof(t->why));
    if (t->rc == 0 && t->echo) {
        char b;

        REQUIRE(set_nonblocking(fd, false) == 0);
        REQUIRE(read(fd, &b, 1) == 1 && write(fd, &b, 1) == 1);
    }
    close(fd);
    return NULL;
}

/* The target's side on a socket already connected. */
struct target_fd {
    struct target *t;
    int fd;
};

static void *target_on_fd(void *arg)
{
    struct target_fd *tf = arg;
    struct hs_self self = {
        .job = "job1", .rank = tf->t->from, .secret = TEST_SECRET, .cluster = "far"};

    tf->t->rc = hs_initiate_ex(tf->fd, &self, tf->t->to, tf->t->token, false, now_us() + 3000000u,
                               NULL, tf->t->why, sizeof(tf->t->why));
    return NULL;
}

static uint16_t listen_port(qcg_ctx *ctx)
{
    struct qcg_contact me;

    REQUIRE_EQ(qcg_local_contact(ctx, &me), 0);
    return me.port;
}

static void echo_check(int fd)
{
    char c = 'x';

    REQUIRE_EQ(write(fd, &c, 1), 1);
    c = 0;
    REQUIRE_EQ(read(fd, &c, 1), 1);
    REQUIRE_EQ(c, 'x');
}

/* The peer calls back with the token once the connect has its plan: the
   connect completes with that connection, technique reversed. */
static void test_reversed(void)
{
    qcg_ctx *a = open_rank(0);
    struct target t = {.port = listen_port(a),
                       .from = 1,
                       .to = 0,
                       .token = token_a,
                       .after_lookups = fake_helper_lookups(fh) + 1,
                       .echo = 1};
    struct qcg_conn_info info;
    pthread_t th;
    int fd;

    set_plan(1, 0, QCG_TECH_REVERSED, 18570, token_a);
    REQUIRE(pthread_create(&th, NULL, target_run, &t) == 0);
    fd = qcg_connect(a, 1, 3000, &info);
    if (fd < 0)
        fprintf(stderr, "reversed: %s\n", qcg_last_error(a));
    REQUIRE(fd >= 0);
    REQUIRE_EQ(info.technique, QCG_TECH_REVERSED);
    REQUIRE_EQ(info.peer_rank, 1);
    echo_check(fd);
    REQUIRE(pthread_join(th, NULL) == 0);
    REQUIRE_EQ(t.rc, 0);
    close(fd);
    /* The application never sees the reversed connection as an incoming one. */
    REQUIRE_EQ(qcg_accept(a, NULL), QCG_EAGAIN);
    qcg_close(a);
}

/* The connection back arrives before the plan (its order overtook our
   lookup's answer): it waits, verified, and the connect claims it. */
static void test_early(void)
{
    qcg_ctx *a = open_rank(0);
    struct target t = {.port = listen_port(a), .from = 1, .to = 0, .token = token_b, .echo = 1};
    struct qcg_conn_info info;
    pthread_t th;
    int fd, parked = 0;
    uint64_t t0;

    set_plan(1, 0, QCG_TECH_REVERSED, 18570, token_b);
    REQUIRE(pthread_create(&th, NULL, target_run, &t) == 0);
    /* The application's accept reads the hello and parks it. */
    for (int i = 0; i < 100 && !parked; i++) {
        struct pollfd p = {.fd = qcg_accept_pollfd(a), .events = POLLIN};

        poll(&p, 1, 50);
        REQUIRE_EQ(qcg_accept(a, NULL), QCG_EAGAIN);
        for (int k = 0; k < a->pending_cap; k++)
            parked = parked || (a->pending[k].fd >= 0 && a->pending[k].state == P_CLAIM);
    }
    REQUIRE(parked);
    t0 = now_us();
    fd = qcg_connect(a, 1, 3000, &info);
    REQUIRE(fd >= 0);
    REQUIRE(now_us() - t0 < 1000000u);
    REQUIRE_EQ(info.technique, QCG_TECH_REVERSED);
    echo_check(fd);
    REQUIRE(pthread_join(th, NULL) == 0);
    REQUIRE_EQ(t.rc, 0);
    close(fd);
    qcg_close(a);
}

/* A hello with another token (or from another rank) is not ours: the caller
   of it is told nobody waits; our connect gives up on reversed after
   REVERSED_TIMEOUT_MS, asks again with reversed tried, and the error names
   the attempt. */
static void test_wrong_token(void)
{
    qcg_ctx *a = open_rank(0);
    struct target wrong = {.port = listen_port(a), .from = 2, .to = 0, .token = token_b};
    struct target other_rank = {.port = listen_port(a), .from = 7, .to = 0, .token = token_a};
    pthread_t t1, t2;
    uint64_t t0 = now_us();
    int rc;

    set_plan(2, 0, QCG_TECH_REVERSED, 18570, token_a);
    fake_helper_set_plan(fh, 2, 1u << QCG_TECH_REVERSED, NULL, QCG_ETECHNIQUE,
                         "rank 2 needs technique proxy: reversed already tried; proxy needed, "
                         "but the broker has no proxy configured; no technique left");
    REQUIRE(pthread_create(&t1, NULL, target_run, &wrong) == 0);
    REQUIRE(pthread_create(&t2, NULL, target_run, &other_rank) == 0);
    rc = qcg_connect(a, 2, 10000, NULL);
    REQUIRE_EQ(rc, QCG_ETECHNIQUE);
    REQUIRE(now_us() - t0 >= REVERSED_TIMEOUT_MS * 1000u);
    REQUIRE(now_us() - t0 < (REVERSED_TIMEOUT_MS + 2000) * 1000u);
    REQUIRE_EQ(fake_helper_last_tried(fh), 1u << QCG_TECH_REVERSED);
    REQUIRE(strstr(qcg_last_error(a), "reversed: rank 2 did not connect back within 5000 ms") !=
            NULL);
    REQUIRE(strstr(qcg_last_error(a), "no technique left") != NULL);
    REQUIRE(pthread_join(t1, NULL) == 0);
    REQUIRE(pthread_join(t2, NULL) == 0);
    REQUIRE_EQ(wrong.rc, QCG_EPEER);
    REQUIRE(strstr(wrong.why, "no longer waits") != NULL);
    REQUIRE_EQ(other_rank.rc, QCG_EPEER);
    qcg_close(a);
}

/* A proxy played by a thread: checks the preamble, answers the paired byte
   (or closes), then takes the target's side of the handshake. */
struct fake_proxy {
    int lfd;
    int rank; /* the target's, in the handshake */
    const char *token;
    int refuse;     /* connections closed after their preamble... */
    bool then_pair; /* ... before the one paired */
    int rc;
    int accepted;
};

/* The proxy's side of one connection: the preamble, then (pair) the paired
   byte, the handshake and one echoed byte. */
static void proxy_one(struct fake_proxy *px, int fd, bool pair)
{
    struct hs_self self = {
        .job = "job1", .rank = px->rank, .secret = TEST_SECRET, .cluster = "far"};
    uint8_t pre[PROXY_PREAMBLE_SIZE], one = PROXY_PAIRED;
    char err[QCG_ERRMSG_MAX];
    struct hs_hello peer;

    REQUIRE(set_nonblocking(fd, true) == 0);
    px->rc = read_full(fd, pre, sizeof(pre), now_us() + 5000000u);
    if (px->rc == 0 && (memcmp(pre, "QCGP", 4) != 0 || strcmp((char *)pre + 4, px->token) != 0))
        px->rc = -100;
    if (px->rc == 0 && pair) {
        REQUIRE_EQ(write(fd, &one, 1), 1);
        px->rc = hs_respond(fd, &self, now_us() + 5000000u, &peer, err, sizeof(err));
        if (px->rc == 0) {
            char b;

            REQUIRE(set_nonblocking(fd, false) == 0);
            REQUIRE(read(fd, &b, 1) == 1 && write(fd, &b, 1) == 1);
        }
    }
    close(fd);
}

static void *proxy_run(void *arg)
{
    struct fake_proxy *px = arg;
    int n = px->refuse + (px->then_pair ? 1 : 0);

    for (int i = 0; i < n && px->rc == 0; i++) {
        int fd = accept(px->lfd, NULL, NULL);

        REQUIRE(fd >= 0);
        px->accepted++;
        proxy_one(px, fd, i == px->refuse);
    }
    return NULL;
}

/* A listener on a port the kernel picks (*port). */
static int proxy_listen(uint16_t *port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    REQUIRE(fd >= 0);
    REQUIRE(bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    REQUIRE(listen(fd, 4) == 0);
    REQUIRE(getsockname(fd, (struct sockaddr *)&sin, &len) == 0);
    *port = ntohs(sin.sin_port);
    return fd;
}

/* Nobody calls back: after the reversed attempt the connect goes through the
   proxy, presents its token and completes the handshake over it. */
static void test_fallback_to_proxy(void)
{
    static const char ptok[] = "01aa55aa55aa55aa55aa55aa55aa55aa5500000000000000000000000000000000"
                               "1111222233334444ffff";
    qcg_ctx *a = open_rank(0);
    uint16_t port;
    struct fake_proxy px = {
        .lfd = proxy_listen(&port), .rank = 3, .token = ptok, .then_pair = true};
    struct qcg_conn_info info;
    pthread_t th;
    uint64_t t0 = now_us();
    int fd;

    set_plan(3, 0, QCG_TECH_REVERSED, 18570, token_a);
    set_plan(3, 1u << QCG_TECH_REVERSED, QCG_TECH_PROXY, port, ptok);
    REQUIRE(pthread_create(&th, NULL, proxy_run, &px) == 0);
    fd = qcg_connect(a, 3, 10000, &info);
    if (fd < 0)
        fprintf(stderr, "fallback: %s\n", qcg_last_error(a));
    REQUIRE(fd >= 0);
    REQUIRE(now_us() - t0 >= REVERSED_TIMEOUT_MS * 1000u);
    REQUIRE_EQ(info.technique, QCG_TECH_PROXY);
    REQUIRE_EQ(info.peer_rank, 3);
    echo_check(fd);
    REQUIRE(pthread_join(th, NULL) == 0);
    REQUIRE_EQ(px.rc, 0);
    close(fd);
    close(px.lfd);
    qcg_close(a);
}

/* The proxy closes without pairing, twice: each attempt fails at once, the
   proxy is asked for again once (new tokens), then the lookup says proxy was
   tried, and the error names both attempts with the relay's code (not "no
   technique": a caller may try again). */
static void test_proxy_refused(void)
{
    qcg_ctx *a = open_rank(0);
    uint16_t port;
    struct fake_proxy px = {.lfd = proxy_listen(&port), .rank = 4, .token = "abc", .refuse = 2};
    char want[256];
    pthread_t th;
    uint64_t t0 = now_us();
    unsigned lookups = fake_helper_lookups(fh);

    set_plan(4, 0, QCG_TECH_PROXY, port, "abc");
    fake_helper_set_plan(fh, 4, 1u << QCG_TECH_PROXY, NULL, QCG_ETECHNIQUE,
                         "rank 4 needs technique proxy: proxy already tried; no technique left");
    REQUIRE(pthread_create(&th, NULL, proxy_run, &px) == 0);
    REQUIRE_EQ(qcg_connect(a, 4, 5000, NULL), QCG_EPEER);
    REQUIRE(now_us() - t0 < 2000000u);
    REQUIRE_EQ(fake_helper_lookups(fh) - lookups, 3u);
    REQUIRE_EQ(fake_helper_last_tried(fh), 1u << QCG_TECH_PROXY);
    snprintf(want, sizeof(want),
             "proxy: the proxy at 127.0.0.1 port %u closed the connection before pairing "
             "(token refused, or rank 4 never came); proxy: the proxy at 127.0.0.1 port %u "
             "closed",
             port, port);
    if (strstr(qcg_last_error(a), want) == NULL)
        fprintf(stderr, "proxy refused: %s\n", qcg_last_error(a));
    REQUIRE(strstr(qcg_last_error(a), want) != NULL);
    REQUIRE(strstr(qcg_last_error(a), "no technique left") != NULL);
    REQUIRE(pthread_join(th, NULL) == 0);
    REQUIRE_EQ(px.accepted, 2);
    close(px.lfd);
    qcg_close(a);
}

/* The proxy closes the first connection without pairing (its hello timeout
   under a storm): the second proxy plan connects, and the connection says it
   came through the proxy. */
static void test_proxy_again(void)
{
    qcg_ctx *a = open_rank(0);
    uint16_t port;
    struct fake_proxy px = {
        .lfd = proxy_listen(&port), .rank = 5, .token = "abd", .refuse = 1, .then_pair = true};
    struct qcg_conn_info info;
    pthread_t th;
    unsigned lookups = fake_helper_lookups(fh);
    int fd;

    set_plan(5, 0, QCG_TECH_PROXY, port, "abd");
    REQUIRE(pthread_create(&th, NULL, proxy_run, &px) == 0);
    fd = qcg_connect(a, 5, 5000, &info);
    if (fd < 0)
        fprintf(stderr, "proxy again: %s\n", qcg_last_error(a));
    REQUIRE(fd >= 0);
    REQUIRE_EQ(info.technique, QCG_TECH_PROXY);
    REQUIRE_EQ(fake_helper_lookups(fh) - lookups, 2u);
    REQUIRE_EQ(fake_helper_last_tried(fh), 0u);
    echo_check(fd);
    REQUIRE(pthread_join(th, NULL) == 0);
    REQUIRE_EQ(px.rc, 0);
    REQUIRE_EQ(px.accepted, 2);
    close(fd);
    close(px.lfd);
    qcg_close(a);
}

/* The initiator's side when our helper connected for us: it reads our hello
   (which must carry the token) and answers with status. */
struct initiator {
    int fd;
    enum hs_status status;
    char token[HS_TOKEN_MAX];
    int rc;
    unsigned delay_ms; /* a process starved of CPU: answers this late */
};

static void *initiator_run(void *arg)
{
    struct initiator *in = arg;
    struct hs_self self = {.job = "job1", .rank = 5, .secret = TEST_SECRET, .cluster = "c1"};
    struct hs_hello h;
    char err[QCG_ERRMSG_MAX];

    if (in->delay_ms > 0)
        usleep(in->delay_ms * 1000u);

    in->rc = hs_respond_ex(in->fd, &self, in->status == HS_OK, now_us() + 5000000u, &h, NULL, err,
                           sizeof(err));
    memcpy(in->token, h.token, sizeof(in->token));
    /* A refusal is the answer asked for. */
    if (in->status != HS_OK && in->rc < 0)
        in->rc = 0;
    return NULL;
}

static int accept_one(qcg_ctx *ctx, int timeout_ms, struct qcg_conn_info *info)
{
    uint64_t deadline = now_us() + (uint64_t)timeout_ms * 1000u;
    int rc = QCG_ETIMEDOUT;

    while (now_us() < deadline) {
        struct pollfd p = {.fd = qcg_accept_pollfd(ctx), .events = POLLIN};

        if (poll(&p, 1, 100) <= 0)
            continue;
        rc = qcg_accept(ctx, info);
        if (rc != QCG_EAGAIN)
            return rc;
    }
    return rc;
}

/* LOCAL_INCOMING with role HELLO: we send the hello carrying the token; the
   answer decides. */
static void test_incoming_hello(void)
{
    qcg_ctx *b = open_rank(6);
    struct initiator in = {.status = HS_OK};
    struct qcg_conn_info info;
    pthread_t th;
    int mine, theirs, fd;
    char c = 'r';

    tcp_pair(&mine, &theirs);
    in.fd = mine;
    REQUIRE(pthread_create(&th, NULL, initiator_run, &in) == 0);
    REQUIRE_EQ(
        fake_helper_incoming_role(fh, 6, 5, QCG_TECH_REVERSED, LOCAL_ROLE_HELLO, token_a, theirs),
        0);
    close(theirs);
    fd = accept_one(b, 3000, &info);
    REQUIRE(pthread_join(th, NULL) == 0);
    REQUIRE_EQ(in.rc, 0);
    REQUIRE(strcmp(in.token, token_a) == 0);
    REQUIRE(fd >= 0);
    REQUIRE_EQ(info.peer_rank, 5);
    REQUIRE_EQ(info.technique, QCG_TECH_REVERSED);
    REQUIRE_EQ(write(mine, &c, 1), 1);
    c = 0;
    REQUIRE_EQ(read(fd, &c, 1), 1);
    REQUIRE_EQ(c, 'r');
    close(fd);
    close(mine);

    /* The initiator answers after REVERSED_TIMEOUT_MS (its process was
       starved in a storm): the connection waits for the answer. */
    tcp_pair(&mine, &theirs);
    in = (struct initiator){.fd = mine, .status = HS_OK, .delay_ms = REVERSED_TIMEOUT_MS + 1500};
    REQUIRE(pthread_create(&th, NULL, initiator_run, &in) == 0);
    REQUIRE_EQ(
        fake_helper_incoming_role(fh, 6, 5, QCG_TECH_REVERSED, LOCAL_ROLE_HELLO, token_b, theirs),
        0);
    close(theirs);
    fd = accept_one(b, REVERSED_TIMEOUT_MS + 5000, &info);
    if (fd < 0)
        fprintf(stderr, "late answer: %s\n", qcg_last_error(b));
    REQUIRE(pthread_join(th, NULL) == 0);
    REQUIRE_EQ(in.rc, 0);
    REQUIRE(fd >= 0);
    REQUIRE_EQ(info.peer_rank, 5);
    close(fd);
    close(mine);

    /* The initiator no longer waits: refused, nothing for the application. */
    tcp_pair(&mine, &theirs);
    in = (struct initiator){.fd = mine, .status = HS_NO_WAITER};
    REQUIRE(pthread_create(&th, NULL, initiator_run, &in) == 0);
    REQUIRE_EQ(
        fake_helper_incoming_role(fh, 6, 5, QCG_TECH_REVERSED, LOCAL_ROLE_HELLO, token_b, theirs),
        0);
    close(theirs);
    REQUIRE(accept_one(b, 1000, &info) < 0);
    REQUIRE(pthread_join(th, NULL) == 0);
    REQUIRE(strstr(qcg_last_error(b), "no longer waits") != NULL);
    close(mine);

    /* Role HELLO without a token is the helper's error: the link goes. */
    tcp_pair(&mine, &theirs);
    REQUIRE_EQ(fake_helper_incoming_role(fh, 6, 5, QCG_TECH_REVERSED, LOCAL_ROLE_HELLO, "", theirs),
               0);
    close(theirs);
    REQUIRE_EQ(accept_one(b, 3000, &info), QCG_EPROTO);
    close(mine);
    qcg_close(b);
}

/* A handed-over connection whose hello carries a token is refused: tokens
   answer our own connects only. */
static void test_incoming_token_refused(void)
{
    qcg_ctx *b = open_rank(8);
    struct target t = {.from = 5, .to = 8, .token = token_a};
    int mine, theirs;

    tcp_pair(&mine, &theirs);
    REQUIRE_EQ(fake_helper_incoming(fh, 8, 5, QCG_TECH_PROXY, theirs), 0);
    close(theirs);
    t.port = 0;
    {
        pthread_t th;
        struct target_fd tf = {.t = &t, .fd = mine};

        REQUIRE(pthread_create(&th, NULL, target_on_fd, &tf) == 0);
        REQUIRE(accept_one(b, 3000, NULL) < 0);
        REQUIRE(pthread_join(th, NULL) == 0);
    }
    /* Refused as malformed: a decode_error alert. */
    REQUIRE_EQ(t.rc, QCG_EPROTO);
    REQUIRE(strstr(t.why, "malformed") != NULL);
    close(mine);
    qcg_close(b);
}

/* A reversed connection between two contexts: initiator rank 10 with policy
   `initiator`, target rank 11 with policy never (qcg-probe's test endpoint
   takes what the prober asks for).  The target offers both, the initiator's
   policy picks: TLS when it demands it (the target used to offer plain only,
   which such an initiator refused), plain when it does not. */
static void reversed_to_never(int initiator, bool want_tls)
{
    qcg_ctx *a = open_rank_encrypt(10, initiator), *b = open_rank_encrypt(11, QCG_ENCRYPT_NEVER);
    unsigned lookups = fake_helper_lookups(fh);
    struct qcg_conn_info ia = {0}, ib = {0};
    qcg_connect_op *op = NULL;
    uint64_t deadline;
    int fa = QCG_EAGAIN, fb = QCG_EAGAIN, fd;
    char c = 'n';

    set_plan(11, 0, QCG_TECH_REVERSED, 18571, token_b);
    REQUIRE_EQ(qcg_connect_start(a, 11, 5000, &op), 0);
    WAIT_UNTIL(fake_helper_lookups(fh) > lookups, 5000, "the connect's lookup");
    fd = tcp_connect(listen_port(a));
    REQUIRE_EQ(
        fake_helper_incoming_role(fh, 11, 10, QCG_TECH_REVERSED, LOCAL_ROLE_HELLO, token_b, fd), 0);
    close(fd);
    deadline = now_us() + 8000000u;
    while ((fa == QCG_EAGAIN || fb == QCG_EAGAIN) && now_us() < deadline) {
        struct pollfd p[2] = {{.fd = qcg_connect_pollfd(op), .events = POLLIN},
                              {.fd = qcg_accept_pollfd(b), .events = POLLIN}};

        (void)poll(p, 2, 50);
        if (fa == QCG_EAGAIN)
            fa = qcg_connect_finish(op, &ia);
        if (fb == QCG_EAGAIN)
            fb = qcg_accept(b, &ib);
    }
    if (fa < 0 || fb < 0)
        fprintf(stderr, "reversed to never: %s / %s\n", qcg_last_error(a), qcg_last_error(b));
    CHECKF(fa >= 0 && fb >= 0, "reversed, initiator %s, target never: connected (%d, %d)",
           initiator == QCG_ENCRYPT_ALWAYS ? "always" : "never", fa, fb);
    if (fa >= 0 && fb >= 0) {
        CHECK_EQ(ia.technique, QCG_TECH_REVERSED);
        CHECK_EQ(ib.technique, QCG_TECH_REVERSED);
        CHECKF((ia.tls != NULL) == want_tls && (ib.tls != NULL) == want_tls,
               "reversed to never: both ends %s (%s, %s)", want_tls ? "tls" : "plain",
               qcg_encryption_name(ia.encryption), qcg_encryption_name(ib.encryption));
        if (want_tls && ia.tls != NULL && ib.tls != NULL) {
            CHECK_EQ(qcg_tls_send(ia.tls, &c, 1), 1);
            c = 0;
            CHECK_EQ(qcg_tls_recv(ib.tls, &c, 1), 1);
        } else if (!want_tls) {
            CHECK_EQ(write(fa, &c, 1), 1);
            c = 0;
            CHECK_EQ(read(fb, &c, 1), 1);
        }
        CHECK_EQ(c, 'n');
    }
    qcg_tls_free(ia.tls);
    qcg_tls_free(ib.tls);
    if (fa >= 0)
        close(fa);
    if (fb >= 0)
        close(fb);
    qcg_connect_free(op);
    qcg_close(a);
    qcg_close(b);
}

/* How many connections wait in a's pending set for a connect's claim. */
static int parked(qcg_ctx *a)
{
    int n = 0;

    for (int k = 0; k < a->pending_cap; k++)
        n += a->pending[k].fd >= 0 && a->pending[k].state == P_CLAIM;
    return n;
}

/* Accepts on a (bounded, 5 s) until n connections wait for a claim; none
   may become a connection meanwhile. */
static void wait_parked(qcg_ctx *a, int n)
{
    struct qcg_conn_info info;

    for (int i = 0; i < 100 && parked(a) < n; i++) {
        struct pollfd p = {.fd = qcg_accept_pollfd(a), .events = POLLIN};

        poll(&p, 1, 50);
        REQUIRE_EQ(qcg_accept(a, &info), QCG_EAGAIN);
    }
}

/* The target's side of test_replayed_hello: its handshake on sp[0],
   relayed between sp[1] and the genuine connection. */
struct relay {
    struct tls_hs *c;
    int sp1, genuine;
    int rc;
};

static void *relay_run(void *arg)
{
    struct relay *r = arg;
    uint64_t end = now_us() + 6000000u;
    int fd0 = tls_hs_fd(r->c);

    r->rc = TLS_WANT_READ;
    while (now_us() < end) {
        struct pollfd p[3] = {{.fd = fd0, .events = POLLIN},
                              {.fd = r->sp1, .events = POLLIN},
                              {.fd = r->genuine, .events = POLLIN}};
        char buf[4096];
        ssize_t n;

        if (r->rc == TLS_WANT_READ || r->rc == TLS_WANT_WRITE)
            r->rc = tls_hs_step(r->c);
        (void)poll(p, 3, 50);
        if ((n = recv(r->sp1, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
            REQUIRE(write(r->genuine, buf, (size_t)n) == n);
        if ((n = recv(r->genuine, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
            REQUIRE(write(r->sp1, buf, (size_t)n) == n);
        else if (n == 0)
            break;
    }
    return NULL;
}

/* Two connections carry one token: a copy of the target's ClientHello
   replayed by someone who saw it, accepted first, and the target's own.
   The connect gets the target's (the one whose client finishes the
   handshake), never the replay, which a hand-over before the Finished
   (0.5-RTT, as for a token's only connection) would have given it. */
static void test_replayed_hello(void)
{
    qcg_ctx *a = open_rank_encrypt(0, QCG_ENCRYPT_ALWAYS);
    struct hs_self self = {.job = "job1",
                           .rank = 1,
                           .secret = TEST_SECRET,
                           .cluster = "far",
                           .policy = QCG_ENCRYPT_ALWAYS};
    struct sockaddr_in got, want;
    socklen_t gl = sizeof(got), wl = sizeof(want);
    struct qcg_conn_info info;
    struct tls_self ts;
    uint8_t psk[32], hello[4096];
    struct relay r;
    int sp[2], replay, fd;
    ssize_t hn;
    pthread_t th;

    r.c = hs_reversed_hello(sp, &self, 0, token_a, TLS_OFFER_TLS, &ts, psk);
    REQUIRE(r.c != NULL);
    hn = recv(sp[1], hello, sizeof(hello), 0);
    REQUIRE(hn > 0);
    replay = tcp_connect(listen_port(a));
    REQUIRE(write(replay, hello, (size_t)hn) == hn);
    wait_parked(a, 1);
    r.genuine = tcp_connect(listen_port(a));
    REQUIRE(write(r.genuine, hello, (size_t)hn) == hn);
    wait_parked(a, 2);
    REQUIRE_EQ(parked(a), 2);
    r.sp1 = sp[1];
    REQUIRE(pthread_create(&th, NULL, relay_run, &r) == 0);
    set_plan(1, 0, QCG_TECH_REVERSED, 18570, token_a);
    fd = qcg_connect(a, 1, 4000, &info);
    if (fd < 0)
        fprintf(stderr, "replayed hello: %s\n", qcg_last_error(a));
    CHECK(fd >= 0);
    REQUIRE(getsockname(r.genuine, (struct sockaddr *)&want, &wl) == 0);
    CHECK(fd >= 0 && getpeername(fd, (struct sockaddr *)&got, &gl) == 0 &&
          got.sin_port == want.sin_port);
    REQUIRE(pthread_join(th, NULL) == 0);
    CHECK_EQ(r.rc, (int)TLS_DONE);
    if (fd >= 0) {
        qcg_tls_free(info.tls);
        close(fd);
    }
    tls_hs_free(r.c);
    SSL_CTX_free(ts.ssl_ctx);
    close(replay);
    close(r.genuine);
    close(sp[0]);
    close(sp[1]);
    qcg_close(a);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

    snprintf(sock_path, sizeof(sock_path), "%s/qcg-fakehelper-rev-%d.sock", tmp, (int)getpid());
    fh = fake_helper_new(sock_path, PORT_LOW, PORT_HIGH);
    test_reversed();
    test_early();
    test_replayed_hello();
    test_proxy_refused();
    test_proxy_again();
    test_incoming_hello();
    test_incoming_token_refused();
    test_wrong_token();
    test_fallback_to_proxy();
    reversed_to_never(QCG_ENCRYPT_ALWAYS, true);
    reversed_to_never(QCG_ENCRYPT_NEVER, false);
    fake_helper_free(fh);
    return check_result("libqcgconn-reversed-unit");
}
