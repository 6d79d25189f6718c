/* libqcgconn-fakehelper: the library against a fake helper (fake_helper.c):
   open, listen, connect (lookup retries, timeouts, technique errors), accept
   (listener and helper-passed descriptors), close.  Ports 18020-18039. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

#define PORT_LOW 18020
#define PORT_HIGH 18039

/* A TCP port of 127.0.0.1 bound and never listened on: a connect to it is
   refused for as long as the socket is held. */
static int closed_port_socket(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static uint16_t sock_port(int fd)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);

    if (fd < 0 || getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
        return 0;
    return ntohs(sa.sin_port);
}

static char sock_path[108];
static struct fake_helper *fh;

static qcg_ctx *open_rank(int rank, const char *secret)
{
    struct qcg_options o = {
        .job = "job1", .rank = rank, .secret = secret, .helper_socket = sock_path};
    qcg_ctx *ctx = NULL;
    int rc = qcg_open(&ctx, &o);

    if (rc != 0)
        fprintf(stderr, "qcg_open: %s: %s\n", qcg_strerror(rc), qcg_last_error(NULL));
    REQUIRE_EQ(rc, 0);
    return ctx;
}

/* Waits up to timeout_ms for one accepted connection; fd or the last error. */
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

struct acceptor {
    qcg_ctx *ctx;
    int timeout_ms;
    int fd;
    struct qcg_conn_info info;
    int echo; /* echo one byte back */
};

static void *acceptor_run(void *arg)
{
    struct acceptor *a = arg;

    a->fd = accept_one(a->ctx, a->timeout_ms, &a->info);
    if (a->fd >= 0 && a->echo) {
        char b;

        if (read(a->fd, &b, 1) == 1 && write(a->fd, &b, 1) != 1)
            a->fd = -100;
    }
    return NULL;
}

/* Sends one byte on fd; the acceptor (echo = 1) sends it back. */
static void echo_byte(int fd, char c)
{
    char back = 0;

    REQUIRE_EQ(write(fd, &c, 1), 1);
    REQUIRE_EQ(read(fd, &back, 1), 1);
    REQUIRE_EQ(back, c);
}

static void test_open_errors(void)
{
    struct qcg_options o = {
        .job = "job1", .rank = 0, .secret = TEST_SECRET, .helper_socket = "/nonexistent/qcg.sock"};
    qcg_ctx *ctx = (qcg_ctx *)1;

    REQUIRE_EQ(qcg_open(&ctx, &o), QCG_ENOHELPER);
    REQUIRE(ctx == NULL);
    REQUIRE(strstr(qcg_last_error(NULL), "/nonexistent/qcg.sock") != NULL);

    o.helper_socket = sock_path;
    o.job = "bad job";
    REQUIRE_EQ(qcg_open(&ctx, &o), QCG_EINVAL);
    REQUIRE(strstr(qcg_last_error(NULL), "job") != NULL);
    o.job = "job1";
    o.secret = "";
    REQUIRE_EQ(qcg_open(&ctx, &o), QCG_EINVAL);
    o.secret = "tab\there";
    REQUIRE_EQ(qcg_open(&ctx, &o), QCG_EINVAL);
    /* A weak secret: refused before the helper is asked, saying how to make one. */
    o.secret = "s3cret-of-the-job";
    REQUIRE_EQ(qcg_open(&ctx, &o), QCG_EINVAL);
    REQUIRE(strstr(qcg_last_error(NULL), "too weak") != NULL);
    REQUIRE(strstr(qcg_last_error(NULL), "openssl rand -hex 32") != NULL);
    o.secret = TEST_SECRET;

    /* The environment fills what the options leave out. */
    setenv("QCG_JOB", "job1", 1);
    setenv("QCG_RANK", "12", 1);
    setenv("QCG_JOB_SECRET", TEST_SECRET, 1);
    setenv("QCG_HELPER_SOCKET", sock_path, 1);
    {
        struct qcg_options env = {.rank = -1};

        REQUIRE_EQ(qcg_open(&ctx, &env), 0);
        qcg_close(ctx);
        REQUIRE_EQ(qcg_open(&ctx, NULL), 0);
        qcg_close(ctx);
        setenv("QCG_RANK", "12x", 1);
        REQUIRE_EQ(qcg_open(&ctx, &env), QCG_EINVAL);
        REQUIRE(strstr(qcg_last_error(NULL), "QCG_RANK") != NULL);
    }
    unsetenv("QCG_JOB");
    unsetenv("QCG_RANK");
    unsetenv("QCG_JOB_SECRET");
    unsetenv("QCG_HELPER_SOCKET");

    /* A helper that answers garbage: a clean protocol error. */
    fake_helper_garbage_next_hello(fh);
    REQUIRE_EQ(qcg_open(&ctx, &o), QCG_EPROTO);
    REQUIRE(ctx == NULL);
    /* A helper that refuses us says why. */
    fake_helper_refuse_next_hello(fh, QCG_EDENIED);
    REQUIRE_EQ(qcg_open(&ctx, &o), QCG_EDENIED);
    REQUIRE(strstr(qcg_last_error(NULL), "uid 4242") != NULL);

    /* Not listening yet. */
    ctx = open_rank(0, TEST_SECRET);
    REQUIRE_EQ(qcg_accept_pollfd(ctx), QCG_EINVAL);
    REQUIRE_EQ(qcg_accept(ctx, NULL), QCG_EINVAL);
    {
        qcg_connect_op *op = (qcg_connect_op *)1;

        REQUIRE_EQ(qcg_connect_start(ctx, -1, 1000, &op), QCG_EINVAL);
        REQUIRE(op == NULL);
        REQUIRE_EQ(qcg_connect_start(ctx, 1, 0, &op), QCG_EINVAL);
    }
    qcg_close(ctx);
}

static void test_direct(void)
{
    qcg_ctx *a = open_rank(0, TEST_SECRET), *b = open_rank(1, TEST_SECRET);
    struct acceptor acc = {.ctx = b, .timeout_ms = 3000, .echo = 1};
    struct qcg_conn_info info;
    struct qcg_contact me;
    pthread_t t;
    int fd, flag = 0;
    socklen_t len = sizeof(flag);

    REQUIRE_EQ(qcg_local_contact(b, &me), QCG_EINVAL);
    REQUIRE_EQ(qcg_listen(b), 0);
    REQUIRE_EQ(qcg_listen(b), 0); /* idempotent */
    REQUIRE_EQ(qcg_local_contact(b, &me), 0);
    REQUIRE(strcmp(me.address, "127.0.0.1") == 0);
    REQUIRE(me.port >= PORT_LOW && me.port <= PORT_HIGH);
    REQUIRE(strcmp(me.cluster, "c1") == 0);
    REQUIRE(fake_helper_published(fh, 1));

    REQUIRE(pthread_create(&t, NULL, acceptor_run, &acc) == 0);
    fd = qcg_connect(a, 1, 3000, &info);
    REQUIRE(fd >= 0);
    /* Connecting published rank 0 too: every context listens. */
    REQUIRE(fake_helper_published(fh, 0));
    REQUIRE_EQ(info.peer_rank, 1);
    REQUIRE_EQ(info.technique, QCG_TECH_DIRECT);
    REQUIRE(info.setup_us > 0 && info.setup_us < 3000000u);
    /* An ordinary blocking socket with TCP_NODELAY. */
    REQUIRE_EQ(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    REQUIRE(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &flag, &len) == 0 && flag == 1);
    /* Same cluster: no keepalive. */
    REQUIRE(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &flag, &len) == 0 && flag == 0);
    echo_byte(fd, 'q');
    REQUIRE(pthread_join(t, NULL) == 0);
    REQUIRE(acc.fd >= 0);
    REQUIRE_EQ(acc.info.peer_rank, 0);
    REQUIRE_EQ(acc.info.technique, QCG_TECH_DIRECT);
    REQUIRE_EQ(fcntl(acc.fd, F_GETFL) & O_NONBLOCK, 0);
    close(acc.fd);
    close(fd);

    /* A second context for a published rank: busy, at once (the helper's
       QCG_EBUSY is final, whatever its message says). */
    {
        qcg_ctx *dup = open_rank(1, TEST_SECRET);
        unsigned before = fake_helper_publishes(fh);

        REQUIRE_EQ(qcg_listen(dup), QCG_EBUSY);
        REQUIRE(qcg_last_error(dup)[0] != '\0');
        REQUIRE_EQ(fake_helper_publishes(fh), before + 1);
        qcg_close(dup);
    }
    /* Refused for the moment (LOCAL_ERETRY) twice: asked again, then
       published; the application hears nothing of it. */
    {
        qcg_ctx *later = open_rank(2, TEST_SECRET);
        unsigned before = fake_helper_publishes(fh);

        fake_helper_busy_publishes(fh, 2);
        REQUIRE_EQ(qcg_listen(later), 0);
        REQUIRE_EQ(fake_helper_publishes(fh), before + 3);
        REQUIRE(fake_helper_published(fh, 2));
        qcg_close(later);
    }
    /* Close withdraws; the rank is then unknown. */
    {
        unsigned before = fake_helper_withdraws(fh);

        qcg_close(b);
        REQUIRE_EQ(fake_helper_withdraws(fh), before + 1);
        REQUIRE(!fake_helper_published(fh, 1));
    }
    qcg_close(a);
}

struct late {
    int delay_ms;
    int rank;
    struct acceptor acc;
};

/* Opens and publishes a rank late, then accepts one connection. */
static void *late_run(void *arg)
{
    struct late *l = arg;
    struct pollfd none = {.fd = -1};

    poll(&none, 0, l->delay_ms); /* the delay under test, not a wait for an event */
    l->acc.ctx = open_rank(l->rank, TEST_SECRET);
    REQUIRE_EQ(qcg_listen(l->acc.ctx), 0);
    acceptor_run(&l->acc);
    return NULL;
}

/* A rank published after the lookup started: the lookup is retried. */
static void test_late_publish(void)
{
    qcg_ctx *a = open_rank(0, TEST_SECRET);
    struct late l = {.delay_ms = 300, .rank = 2, .acc = {.timeout_ms = 3000, .echo = 1}};
    struct qcg_conn_info info;
    qcg_connect_op *op;
    unsigned lookups = fake_helper_lookups(fh);
    pthread_t t;
    int fd = QCG_EAGAIN, pollfd;
    char c = 'z';

    REQUIRE_EQ(qcg_connect_start(a, 2, 3000, &op), 0);
    pollfd = qcg_connect_pollfd(op);
    REQUIRE(pthread_create(&t, NULL, late_run, &l) == 0);
    for (int i = 0; i < 1000 && fd == QCG_EAGAIN; i++) {
        struct pollfd p = {.fd = pollfd, .events = POLLIN};

        poll(&p, 1, 200);
        REQUIRE_EQ(qcg_connect_pollfd(op), pollfd); /* the same descriptor throughout */
        fd = qcg_connect_finish(op, &info);
    }
    if (fd < 0)
        fprintf(stderr, "connect: %s: %s\n", qcg_strerror(fd), qcg_last_error(a));
    REQUIRE(fd >= 0);
    REQUIRE(fake_helper_lookups(fh) >= lookups + 3);
    REQUIRE(info.setup_us >= 300000u);
    /* After success the operation has nothing more to give. */
    REQUIRE_EQ(qcg_connect_finish(op, NULL), QCG_EINVAL);
    qcg_connect_free(op);
    REQUIRE_EQ(write(fd, &c, 1), 1);
    REQUIRE_EQ(read(fd, &c, 1), 1);
    REQUIRE(pthread_join(t, NULL) == 0);
    REQUIRE(l.acc.fd >= 0);
    close(l.acc.fd);
    close(fd);
    qcg_close(l.acc.ctx);
    qcg_close(a);
}

/* A rank never published: the connect runs to its timeout and says so
   with QCG_ENOTFOUND (qcg-launch takes it for a gone agent). */
static void test_timeout(void)
{
    qcg_ctx *a = open_rank(0, TEST_SECRET);
    qcg_connect_op *op;
    uint64_t t0 = now_us();
    int rc;

    /* Blocking: the rank never appears. */
    rc = qcg_connect(a, 7, 400, NULL);
    REQUIRE_EQ(rc, QCG_ENOTFOUND);
    REQUIRE(now_us() - t0 >= 400000u && now_us() - t0 < 1500000u);
    REQUIRE(strstr(qcg_last_error(a), "not published") != NULL);

    /* Non-blocking: the descriptor wakes the caller at the deadline. */
    t0 = now_us();
    REQUIRE_EQ(qcg_connect_start(a, 7, 300, &op), 0);
    rc = QCG_EAGAIN;
    for (int i = 0; i < 100 && rc == QCG_EAGAIN; i++) {
        struct pollfd p = {.fd = qcg_connect_pollfd(op), .events = POLLIN};

        REQUIRE(poll(&p, 1, 5000) == 1);
        rc = qcg_connect_finish(op, NULL);
    }
    REQUIRE_EQ(rc, QCG_ENOTFOUND);
    REQUIRE(now_us() - t0 < 1500000u);
    REQUIRE_EQ(qcg_connect_finish(op, NULL), QCG_ENOTFOUND); /* stays failed */
    qcg_connect_free(op);
    qcg_close(a);
}

/* Runs the operation to its end: the fd or the error. */
static int finish_op(qcg_connect_op *op)
{
    int rc = QCG_EAGAIN;

    for (int i = 0; i < 1000 && rc == QCG_EAGAIN; i++) {
        struct pollfd p = {.fd = qcg_connect_pollfd(op), .events = POLLIN};

        poll(&p, 1, 200);
        rc = qcg_connect_finish(op, NULL);
    }
    return rc;
}

/* Only the last lookup's answer says "not published": a plan whose attempt
   failed and a lookup the helper never answered is a plain timeout (the
   peer may be there), while a peer withdrawn after the plan is
   QCG_ENOTFOUND. */
static void test_timeout_cause(void)
{
    int closed = closed_port_socket();
    struct local_plan plan = {.technique = QCG_TECH_DIRECT};
    qcg_ctx *a = open_rank(0, TEST_SECRET);
    qcg_connect_op *op;
    unsigned lookups;

    strcpy(plan.address, "127.0.0.1");
    strcpy(plan.cluster, "c1");
    plan.port = sock_port(closed);
    REQUIRE(plan.port != 0);

    /* Direct refused, then the second lookup goes unanswered. */
    fake_helper_set_plan(fh, 33, 0, &plan, 0, NULL);
    lookups = fake_helper_lookups(fh);
    REQUIRE_EQ(qcg_connect_start(a, 33, 600, &op), 0);
    /* The first is answered under the helper's lock with its count. */
    for (int i = 0; i < 500 && fake_helper_lookups(fh) == lookups; i++)
        poll(NULL, 0, 10);
    REQUIRE(fake_helper_lookups(fh) == lookups + 1);
    fake_helper_mute_next(fh, LOCAL_LOOKUP);
    CHECK_EQ(finish_op(op), QCG_ETIMEDOUT);
    CHECK(strstr(qcg_last_error(a), "direct: ") != NULL);
    CHECK(strstr(qcg_last_error(a), "not published") == NULL);
    qcg_connect_free(op);

    /* Direct refused, then the rank is not published any more. */
    fake_helper_set_plan(fh, 34, 0, &plan, 0, NULL);
    fake_helper_set_plan(fh, 34, 1u << QCG_TECH_DIRECT, NULL, QCG_ENOTFOUND,
                         "rank 34 of job job1 is not published");
    REQUIRE_EQ(qcg_connect_start(a, 34, 600, &op), 0);
    CHECK_EQ(finish_op(op), QCG_ENOTFOUND);
    CHECK(strstr(qcg_last_error(a), "direct: ") != NULL);
    CHECK(strstr(qcg_last_error(a), "rank 34 not published for 600 ms since its last progress") !=
          NULL);
    qcg_connect_free(op);
    qcg_close(a);
    close(closed);
}

static void test_technique(void)
{
    qcg_ctx *a = open_rank(0, TEST_SECRET);

    fake_helper_set_error(fh, 9, QCG_ETECHNIQUE,
                          "rank 9 (cluster sym, symnat) needs technique proxy");
    REQUIRE_EQ(qcg_connect(a, 9, 2000, NULL), QCG_ETECHNIQUE);
    REQUIRE(strstr(qcg_last_error(a), "proxy") != NULL);
    fake_helper_set_error(fh, 10, QCG_EUPSTREAM, "frontend unreachable");
    REQUIRE_EQ(qcg_connect(a, 10, 2000, NULL), QCG_EUPSTREAM);
    /* A code outside the enum is a protocol error, not passed through. */
    fake_helper_set_error(fh, 11, -1000, "nonsense");
    REQUIRE_EQ(qcg_connect(a, 11, 2000, NULL), QCG_EPROTO);
    qcg_close(a);
}

/* Runs a connect of `only` to rank to its end; the fd or the error. */
static int connect_only(qcg_ctx *ctx, int rank, enum qcg_technique only, int timeout_ms,
                        struct qcg_conn_info *info)
{
    qcg_connect_op *op;
    int rc = qcg_connect_start_only(ctx, rank, only, timeout_ms, &op);

    if (rc < 0)
        return rc;
    for (int i = 0; i < 1000 && (rc = qcg_connect_finish(op, info)) == QCG_EAGAIN; i++) {
        struct pollfd p = {.fd = qcg_connect_pollfd(op), .events = POLLIN};

        poll(&p, 1, 200);
    }
    qcg_connect_free(op);
    return rc;
}

/* qcg_connect_start_only: the lookup carries the technique; the plan is
   that technique or the broker's reason verbatim; a failed attempt ends the
   operation (no fallback: one lookup). */
static void test_only(void)
{
    qcg_ctx *a = open_rank(0, TEST_SECRET), *b = open_rank(21, TEST_SECRET);
    struct acceptor acc = {.ctx = b, .timeout_ms = 3000, .echo = 1};
    static const char reason[] =
        "proxy: no proxy is configured in this grid (the broker's proxy list is empty)";
    struct qcg_conn_info info;
    qcg_connect_op *op = (qcg_connect_op *)1;
    unsigned lookups;
    pthread_t t;
    int fd;

    /* Arguments. */
    REQUIRE_EQ(qcg_connect_start_only(a, 21, QCG_TECH_NONE, 1000, &op), QCG_EINVAL);
    REQUIRE(op == NULL);
    REQUIRE_EQ(qcg_connect_start_only(a, 21, (enum qcg_technique)(QCG_TECH_PROXY + 1), 1000, &op),
               QCG_EINVAL);
    REQUIRE(strstr(qcg_last_error(a), "technique") != NULL);
    REQUIRE_EQ(qcg_connect_start_only(a, -1, QCG_TECH_DIRECT, 1000, &op), QCG_EINVAL);
    REQUIRE_EQ(qcg_connect_start_only(NULL, 21, QCG_TECH_DIRECT, 1000, &op), QCG_EINVAL);

    /* only = direct works, and the lookup said so. */
    REQUIRE_EQ(qcg_listen(b), 0);
    REQUIRE(pthread_create(&t, NULL, acceptor_run, &acc) == 0);
    lookups = fake_helper_lookups(fh);
    fd = connect_only(a, 21, QCG_TECH_DIRECT, 3000, &info);
    if (fd < 0)
        fprintf(stderr, "only direct: %s: %s\n", qcg_strerror(fd), qcg_last_error(a));
    REQUIRE(fd >= 0);
    REQUIRE_EQ(fake_helper_lookups(fh), lookups + 1);
    REQUIRE_EQ(fake_helper_last_only(fh), QCG_TECH_DIRECT);
    REQUIRE_EQ(info.technique, QCG_TECH_DIRECT);
    echo_byte(fd, 'o');
    REQUIRE(pthread_join(t, NULL) == 0);
    REQUIRE(acc.fd >= 0);
    close(acc.fd);
    close(fd);
    /* A normal connect still sends only = 0. */
    REQUIRE(pthread_create(&t, NULL, acceptor_run, &acc) == 0);
    fd = qcg_connect(a, 21, 3000, NULL);
    REQUIRE(fd >= 0);
    REQUIRE_EQ(fake_helper_last_only(fh), QCG_TECH_NONE);
    echo_byte(fd, 'n');
    REQUIRE(pthread_join(t, NULL) == 0);
    close(acc.fd);
    close(fd);

    /* The broker says the technique cannot work: QCG_ETECHNIQUE, its reason
       as it is, one lookup. */
    fake_helper_set_plan_only(fh, 21, 0, QCG_TECH_PROXY, NULL, QCG_ETECHNIQUE, reason);
    lookups = fake_helper_lookups(fh);
    REQUIRE_EQ(connect_only(a, 21, QCG_TECH_PROXY, 3000, NULL), QCG_ETECHNIQUE);
    REQUIRE(strcmp(qcg_last_error(a), reason) == 0);
    REQUIRE_EQ(fake_helper_lookups(fh), lookups + 1);
    REQUIRE_EQ(fake_helper_last_only(fh), QCG_TECH_PROXY);

    /* A failed attempt is the answer: no second lookup, the technique named.
       A direct plan to a port nobody listens on (the fake helper does not
       check); a normal connect would ask for the next technique.  The port
       is bound here and never listened on: one of the range could be a
       context's listener (they start at a random offset). */
    {
        int closed_fd = closed_port_socket();
        struct local_plan dead = {.technique = QCG_TECH_DIRECT, .port = sock_port(closed_fd)};
        int rc;

        REQUIRE(closed_fd >= 0 && dead.port != 0);

        strcpy(dead.cluster, "c1");
        strcpy(dead.node, "n1");
        strcpy(dead.address, "127.0.0.1");
        unsigned reports = fake_helper_reports(fh);

        fake_helper_set_plan_only(fh, 22, 0, QCG_TECH_DIRECT, &dead, 0, NULL);
        lookups = fake_helper_lookups(fh);
        rc = connect_only(a, 22, QCG_TECH_DIRECT, 3000, NULL);
        REQUIRE_EQ(rc, QCG_EPEER);
        REQUIRE_EQ(fake_helper_lookups(fh), lookups + 1);
        /* Reported all the same: a real observation for the broker. */
        for (int i = 0; i < 100 && fake_helper_reports(fh) == reports; i++)
            poll(NULL, 0, 10);
        REQUIRE_EQ(fake_helper_reports(fh), reports + 1);
        REQUIRE(strncmp(qcg_last_error(a), "direct: ", 8) == 0);
        REQUIRE(strstr(qcg_last_error(a), "refused") != NULL);
        REQUIRE(strchr(qcg_last_error(a), '\n') == NULL);

        /* A plan of another technique than asked for is the helper's fault. */
        dead.technique = QCG_TECH_PROXY;
        strcpy(dead.token, "t");
        fake_helper_set_plan_only(fh, 22, 0, QCG_TECH_DIRECT, &dead, 0, NULL);
        REQUIRE_EQ(connect_only(a, 22, QCG_TECH_DIRECT, 3000, NULL), QCG_EPROTO);
        REQUIRE(strstr(qcg_last_error(a), "direct only") != NULL);
        close(closed_fd);
    }
    qcg_close(b);
    qcg_close(a);
}

/* A connecting process with another secret (the fake helper does not check
   secrets): the handshake refuses it on both sides; the acceptor's
   qcg_accept says EAGAIN, and then accepts a good peer. */
static void test_wrong_secret(void)
{
    qcg_ctx *good = open_rank(3, TEST_SECRET), *bad = open_rank(4, TEST_SECRET_2),
            *ok = open_rank(5, TEST_SECRET);
    struct qcg_conn_info info;
    int fd, rc = QCG_ETIMEDOUT;

    REQUIRE_EQ(qcg_listen(good), 0);
    /* One thread drives both sides: a non-blocking connect and accept. */
    {
        qcg_connect_op *op;

        REQUIRE_EQ(qcg_connect_start(bad, 3, 2000, &op), 0);
        rc = QCG_EAGAIN;
        for (int i = 0; i < 200 && rc == QCG_EAGAIN; i++) {
            struct pollfd p[2] = {{.fd = qcg_connect_pollfd(op), .events = POLLIN},
                                  {.fd = qcg_accept_pollfd(good), .events = POLLIN}};

            poll(p, 2, 100);
            if (p[1].revents) {
                REQUIRE_EQ(qcg_accept(good, NULL), QCG_EAGAIN);
                REQUIRE(strstr(qcg_last_error(good), "secret") != NULL);
            }
            rc = qcg_connect_finish(op, NULL);
        }
        REQUIRE_EQ(rc, QCG_EDENIED);
        REQUIRE(strstr(qcg_last_error(bad), "secret") != NULL);
        REQUIRE_EQ(qcg_accept_refused(good), 1);
        qcg_connect_free(op);
    }
    {
        struct acceptor acc = {.ctx = good, .timeout_ms = 3000};
        pthread_t t;

        REQUIRE(pthread_create(&t, NULL, acceptor_run, &acc) == 0);
        fd = qcg_connect(ok, 3, 3000, &info);
        REQUIRE(fd >= 0);
        REQUIRE(pthread_join(t, NULL) == 0);
        REQUIRE(acc.fd >= 0);
        REQUIRE_EQ(acc.info.peer_rank, 5);
        close(acc.fd);
        close(fd);
    }
    qcg_close(good);
    qcg_close(bad);
    qcg_close(ok);
}

/* A connect given up mid-handshake, as btl_qcg drops its own when it takes
   the peer's connection in a simultaneous connect: the acceptor drops the
   half-made connection without counting it as a refusal (a healthy job
   printed 'an incoming connection was refused' for each). */
static void test_abandoned(void)
{
    qcg_ctx *acc = open_rank(41, TEST_SECRET), *quitter = open_rank(42, TEST_SECRET);
    qcg_connect_op *op;
    bool answered = false, dropped = false;

    REQUIRE_EQ(qcg_listen(acc), 0);
    REQUIRE_EQ(qcg_connect_start(quitter, 41, 3000, &op), 0);
    /* Until the acceptor has read the ClientHello and answered it. */
    for (int i = 0; i < 300 && !answered; i++) {
        struct pollfd p[2] = {{.fd = qcg_connect_pollfd(op), .events = POLLIN},
                              {.fd = qcg_accept_pollfd(acc), .events = POLLIN}};

        poll(p, 2, 10);
        if (p[1].revents) {
            REQUIRE_EQ(qcg_accept(acc, NULL), QCG_EAGAIN);
            answered = true;
        } else if (p[0].revents) {
            int rc = qcg_connect_finish(op, NULL);

            if (rc != QCG_EAGAIN)
                fprintf(stderr, "connect: %d %s\n", rc, qcg_last_error(quitter));
            REQUIRE_EQ(rc, QCG_EAGAIN);
        }
    }
    REQUIRE(answered);
    qcg_connect_free(op);
    for (int i = 0; i < 300 && !dropped; i++) {
        struct pollfd p = {.fd = qcg_accept_pollfd(acc), .events = POLLIN};

        poll(&p, 1, 10);
        REQUIRE_EQ(qcg_accept(acc, NULL), QCG_EAGAIN);
        dropped = strstr(qcg_last_error(acc), "closed the connection during the handshake") != NULL;
    }
    REQUIRE(dropped);
    REQUIRE_EQ(qcg_accept_refused(acc), 0);
    qcg_close(acc);
    qcg_close(quitter);
}

struct initiator {
    int fd;
    struct hs_self self;
    int32_t to;
    int rc;
};

static void *initiator_run(void *arg)
{
    struct initiator *in = arg;
    char err[QCG_ERRMSG_MAX];

    in->rc = hs_initiate(in->fd, &in->self, in->to, now_us() + 3000000u, err, sizeof(err));
    return NULL;
}

/* Descriptors handed over by the helper (LOCAL_INCOMING): the same handshake,
   the technique the helper names. */
static void test_incoming(void)
{
    qcg_ctx *b = open_rank(6, TEST_SECRET);
    struct initiator in = {
        .self = {.job = "job1", .rank = 5, .secret = TEST_SECRET, .cluster = "far"}, .to = 6};
    struct qcg_conn_info info;
    pthread_t t;
    int mine, theirs, fd, flag = 0;
    socklen_t len = sizeof(flag);
    char c = 'i';

    /* Sent before the publish: it arrives while qcg_listen waits for its
       reply, is queued, and still wakes the accept descriptor. */
    tcp_pair(&mine, &theirs);
    REQUIRE(set_nonblocking(mine, true) == 0);
    in.fd = mine;
    REQUIRE_EQ(fake_helper_incoming(fh, 6, 5, QCG_TECH_PROXY, theirs), 0);
    close(theirs);
    REQUIRE_EQ(qcg_listen(b), 0);
    REQUIRE(pthread_create(&t, NULL, initiator_run, &in) == 0);
    fd = accept_one(b, 3000, &info);
    REQUIRE(pthread_join(t, NULL) == 0);
    REQUIRE_EQ(in.rc, 0);
    REQUIRE(fd >= 0);
    REQUIRE_EQ(info.peer_rank, 5);
    REQUIRE_EQ(info.technique, QCG_TECH_PROXY);
    /* Another cluster: keepalive on. */
    REQUIRE(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &flag, &len) == 0 && flag == 1);
    REQUIRE_EQ(write(mine, &c, 1), 1);
    c = 0;
    REQUIRE_EQ(read(fd, &c, 1), 1);
    REQUIRE_EQ(c, 'i');
    close(fd);
    close(mine);

    /* The helper announces rank 8 but rank 5 says hello: refused. */
    tcp_pair(&mine, &theirs);
    REQUIRE(set_nonblocking(mine, true) == 0);
    in.fd = mine;
    REQUIRE_EQ(fake_helper_incoming(fh, 6, 8, QCG_TECH_PROXY, theirs), 0);
    close(theirs);
    REQUIRE(pthread_create(&t, NULL, initiator_run, &in) == 0);
    {
        struct pollfd p = {.fd = qcg_accept_pollfd(b), .events = POLLIN};
        int refused = 0;

        /* Wakes for the INCOMING, then for the hello. */
        for (int i = 0; i < 50 && !refused; i++) {
            REQUIRE(poll(&p, 1, 3000) == 1);
            REQUIRE_EQ(qcg_accept(b, &info), QCG_EAGAIN);
            refused = strstr(qcg_last_error(b), "announced rank 8") != NULL;
        }
        REQUIRE(refused);
    }
    REQUIRE(pthread_join(t, NULL) == 0);
    close(mine);

    /* INCOMING without a descriptor: a protocol error, the helper link is
       dropped, and the accept descriptor does not stay readable. */
    REQUIRE_EQ(fake_helper_incoming(fh, 6, 5, QCG_TECH_PROXY, -1), 0);
    {
        struct pollfd p = {.fd = qcg_accept_pollfd(b), .events = POLLIN};

        REQUIRE(poll(&p, 1, 3000) == 1);
        REQUIRE(qcg_accept(b, &info) < 0);
        REQUIRE(qcg_last_error(b)[0] != '\0');
        REQUIRE_EQ(poll(&p, 1, 0), 0);
        REQUIRE_EQ(qcg_accept(b, &info), QCG_EAGAIN);
    }
    qcg_close(b);
}

/* Errors have names. */
#define SHARED_PEERS 8

/* Concurrent connects of one context share its one helper connection; the
   helper's answers, out of order, each reach their own operation. */
static void test_shared(void)
{
    qcg_ctx *a = open_rank(0, TEST_SECRET);
    struct acceptor acc[SHARED_PEERS];
    qcg_connect_op *op[SHARED_PEERS];
    int fd[SHARED_PEERS];
    struct qcg_conn_info info[SHARED_PEERS];
    pthread_t t[SHARED_PEERS];
    unsigned conns, done = 0;

    REQUIRE_EQ(qcg_listen(a), 0);
    for (int i = 0; i < SHARED_PEERS; i++) {
        acc[i] =
            (struct acceptor){.ctx = open_rank(20 + i, TEST_SECRET), .timeout_ms = 5000, .echo = 1};
        REQUIRE_EQ(qcg_listen(acc[i].ctx), 0);
        REQUIRE(pthread_create(&t[i], NULL, acceptor_run, &acc[i]) == 0);
    }
    conns = fake_helper_connections(fh);
    fake_helper_hold_lookups(fh, SHARED_PEERS);
    for (int i = 0; i < SHARED_PEERS; i++) {
        REQUIRE_EQ(qcg_connect_start(a, 20 + i, 5000, &op[i]), 0);
        fd[i] = QCG_EAGAIN;
    }
    /* One loop drives them all, as an MPI progress loop would. */
    for (int round = 0; round < 2000 && done < SHARED_PEERS; round++) {
        struct pollfd p[SHARED_PEERS];

        for (int i = 0; i < SHARED_PEERS; i++)
            p[i] = (struct pollfd){.fd = fd[i] == QCG_EAGAIN ? qcg_connect_pollfd(op[i]) : -1,
                                   .events = POLLIN};
        poll(p, SHARED_PEERS, 100);
        for (int i = 0; i < SHARED_PEERS; i++) {
            if (fd[i] != QCG_EAGAIN)
                continue;
            fd[i] = qcg_connect_finish(op[i], &info[i]);
            if (fd[i] != QCG_EAGAIN)
                done++;
        }
    }
    REQUIRE_EQ(done, SHARED_PEERS);
    /* No helper connection of their own. */
    REQUIRE_EQ(fake_helper_connections(fh), conns);
    for (int i = 0; i < SHARED_PEERS; i++) {
        if (fd[i] < 0)
            fprintf(stderr, "connect %d: %s: %s\n", i, qcg_strerror(fd[i]), qcg_last_error(a));
        REQUIRE(fd[i] >= 0);
        REQUIRE_EQ(info[i].peer_rank, 20 + i);
        echo_byte(fd[i], (char)('a' + i));
        REQUIRE(pthread_join(t[i], NULL) == 0);
        REQUIRE(acc[i].fd >= 0);
        REQUIRE_EQ(acc[i].info.peer_rank, 0);
        close(acc[i].fd);
        close(fd[i]);
        qcg_connect_free(op[i]);
        qcg_close(acc[i].ctx);
    }
    qcg_close(a);
}

/* The helper connection lost (the helper restarted): a connect waiting on
   it goes on once the library is taken back (it says HELLO and publishes
   again), and the accept side reports nothing.  test_reconnect.c has the
   rest. */
static void test_helper_lost(void)
{
    qcg_ctx *a = open_rank(0, TEST_SECRET);
    qcg_connect_op *op;
    unsigned hellos = fake_helper_hellos(fh), lookups;
    int rc = QCG_EAGAIN;

    REQUIRE_EQ(qcg_connect_start(a, 19, 10000, &op), 0); /* never published: lookups repeat */
    REQUIRE_EQ(qcg_connect_finish(op, NULL), QCG_EAGAIN);
    REQUIRE_EQ(fake_helper_drop_rank(fh, 0), 0);
    for (int i = 0; i < 100 && !(fake_helper_hellos(fh) > hellos && fake_helper_published(fh, 0));
         i++) {
        struct pollfd p = {.fd = qcg_connect_pollfd(op), .events = POLLIN};

        poll(&p, 1, 20);
        rc = qcg_connect_finish(op, NULL);
        CHECK_EQ(rc, QCG_EAGAIN);
        CHECK_EQ(qcg_accept(a, NULL), QCG_EAGAIN);
    }
    CHECK_EQ(fake_helper_hellos(fh), hellos + 1);
    CHECK(fake_helper_published(fh, 0));
    /* The connect asks the helper again. */
    lookups = fake_helper_lookups(fh);
    for (int i = 0; i < 100 && fake_helper_lookups(fh) == lookups; i++) {
        struct pollfd p = {.fd = qcg_connect_pollfd(op), .events = POLLIN};

        poll(&p, 1, 20);
        CHECK_EQ(qcg_connect_finish(op, NULL), QCG_EAGAIN);
    }
    CHECK(fake_helper_lookups(fh) > lookups);
    qcg_connect_free(op);
    qcg_close(a);
}

/* The helper lost while a connect waits for its peer's handshake answer:
   the wake-up that tells it must not take its deadline away. */
static void test_helper_lost_midway(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct local_plan plan = {.technique = QCG_TECH_DIRECT};
    int mute = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rc = QCG_EAGAIN;
    qcg_ctx *a = open_rank(0, TEST_SECRET);
    qcg_connect_op *op;
    uint64_t t0;

    /* A listener that never accepts: the TCP connect completes, no answer. */
    REQUIRE(mute >= 0 && bind(mute, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
            listen(mute, 4) == 0);
    strcpy(plan.address, "127.0.0.1");
    strcpy(plan.cluster, "c1");
    plan.port = sock_port(mute);
    fake_helper_set_plan(fh, 32, 0, &plan, 0, NULL);
    t0 = now_us();
    REQUIRE_EQ(qcg_connect_start(a, 32, 1500, &op), 0);
    for (int i = 0; i < 20 && rc == QCG_EAGAIN; i++) {
        struct pollfd p = {.fd = qcg_connect_pollfd(op), .events = POLLIN};

        if (i == 2) {
            REQUIRE_EQ(fake_helper_drop_rank(fh, 0), 0);
            for (int k = 0; k < 20; k++) {
                CHECK_EQ(qcg_accept(a, NULL), QCG_EAGAIN); /* reads the close */
                poll(NULL, 0, 10);
            }
        }
        if (poll(&p, 1, 5000) == 0)
            break;
        rc = qcg_connect_finish(op, NULL);
    }
    REQUIRE_EQ(rc, QCG_ETIMEDOUT);
    REQUIRE(now_us() - t0 < 3000000u);
    /* Freed after its context: allowed once it has finished. */
    qcg_close(a);
    qcg_connect_free(op);
    close(mute);
}

static void test_names(void)
{
    for (int e = QCG_OK; e >= QCG_EINUSE; e--)
        REQUIRE(strcmp(qcg_strerror(e), "unknown error") != 0);
    REQUIRE(strcmp(qcg_strerror(-99), "unknown error") == 0);
    REQUIRE(strcmp(qcg_technique_name(QCG_TECH_DIRECT), "direct") == 0);
    REQUIRE(strcmp(qcg_technique_name(QCG_TECH_REVERSED), "reversed") == 0);
    REQUIRE(strcmp(qcg_technique_name(QCG_TECH_TRAVERSING), "traversing") == 0);
    REQUIRE(strcmp(qcg_technique_name(QCG_TECH_HOLEPUNCH), "holepunch") == 0);
    REQUIRE(strcmp(qcg_technique_name(QCG_TECH_PROXY), "proxy") == 0);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

    snprintf(sock_path, sizeof(sock_path), "%s/qcg-fakehelper-%d.sock", tmp, (int)getpid());
    fh = fake_helper_new(sock_path, PORT_LOW, PORT_HIGH);
    test_names();
    test_open_errors();
    test_direct();
    test_late_publish();
    test_timeout();
    test_timeout_cause();
    test_technique();
    test_only();
    test_wrong_secret();
    test_abandoned();
    test_incoming();
    test_shared();
    test_helper_lost();
    test_helper_lost_midway();
    fake_helper_free(fh);
    return check_result("libqcgconn-fakehelper");
}
