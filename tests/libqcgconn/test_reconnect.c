/* libqcgconn-reconnect: a process survives its helper's restart (issue 19).
   The fake helper is stopped (its sockets closed) and started again on the
   same path: the library says HELLO again and publishes the same listener
   again, connects started meanwhile complete once it is back, one whose
   timeout ends first fails with QCG_ENOHELPER and says for how long the
   helper has been gone, a LOOKUP lost with the helper is asked again, a
   re-PUBLISH refused as BUSY is asked again, connections made before the
   restart carry data, and no descriptor leaks.  Ports 18010-18019. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fake_helper.h"
#include "fixtures.h"
#include "handshake_blocking.h"
#include "internal.h"
#include "qcgconn.h"

#define PORT_LOW 18010
#define PORT_HIGH 18019

static char sock_path[108];
static struct fake_helper *fh;

static qcg_ctx *open_rank(int rank)
{
    struct qcg_options o = {
        .job = "job1", .rank = rank, .secret = TEST_SECRET, .helper_socket = sock_path};
    qcg_ctx *ctx = NULL;

    REQUIRE_EQ(qcg_open(&ctx, &o), 0);
    REQUIRE_EQ(qcg_listen(ctx), 0);
    return ctx;
}

/* One round of the event loop of a process holding ctx and ops: waits at
   most ms for any of them, then moves the accept side on (a connection it
   hands over goes to *accepted, which must be free) and each unfinished
   operation (its result to rc[i]). */
static void round_of(qcg_ctx *ctx, int *accepted, qcg_connect_op **ops, int *rc, int n, int ms)
{
    struct pollfd p[8];
    int k = 0, fd;

    p[k++] = (struct pollfd){.fd = qcg_accept_pollfd(ctx), .events = POLLIN};
    for (int i = 0; i < n; i++) {
        if (rc[i] == QCG_EAGAIN)
            p[k++] = (struct pollfd){.fd = qcg_connect_pollfd(ops[i]), .events = POLLIN};
    }
    poll(p, (nfds_t)k, ms);
    fd = qcg_accept(ctx, NULL);
    /* While the helper is away, accepting goes on as usual: no error. */
    CHECK(fd >= 0 || fd == QCG_EAGAIN);
    if (fd >= 0) {
        REQUIRE(accepted != NULL && *accepted < 0);
        *accepted = fd;
    }
    for (int i = 0; i < n; i++) {
        if (rc[i] == QCG_EAGAIN)
            rc[i] = qcg_connect_finish(ops[i], NULL);
    }
}

/* A connection a -> rank 1 (held by b) made while both pump. */
static void connect_pair(qcg_ctx *a, qcg_ctx *b, int *fa, int *fb)
{
    qcg_connect_op *op;
    int rc = QCG_EAGAIN;

    *fb = -1;
    REQUIRE_EQ(qcg_connect_start(a, 1, 5000, &op), 0);
    for (int i = 0; i < 500 && (rc == QCG_EAGAIN || *fb < 0); i++) {
        round_of(a, NULL, &op, &rc, 1, 5);
        round_of(b, fb, NULL, NULL, 0, 5);
    }
    REQUIRE(rc >= 0 && *fb >= 0);
    *fa = rc;
    qcg_connect_free(op);
}

static void check_carries(int from, int to, char c)
{
    char got = 0;

    REQUIRE_EQ(write(from, &c, 1), 1);
    REQUIRE_EQ(read(to, &got, 1), 1);
    CHECK_EQ(got, c);
}

/* A peer that connects straight to a listener (direct: no helper involved)
   and runs the initiator's handshake as rank 5. */
struct direct_peer {
    uint16_t port;
    int fd, rc;
};

static void *direct_peer_run(void *arg)
{
    struct direct_peer *d = arg;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(d->port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct hs_self self = {.job = "job1", .rank = 5, .secret = TEST_SECRET, .cluster = "c1"};
    char err[QCG_ERRMSG_MAX];

    d->rc = QCG_ESYS;
    d->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (d->fd >= 0 && connect(d->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        set_nonblocking(d->fd, true) == 0)
        d->rc = hs_initiate(d->fd, &self, 1, now_us() + 3000000u, err, sizeof(err));
    return NULL;
}

static void test_restart(void)
{
    int fds0 = count_fds(), fa, fb, acc[2] = {-1, -1}, rc[3] = {QCG_EAGAIN, QCG_EAGAIN, QCG_EAGAIN};
    qcg_ctx *a = open_rank(0), *b = open_rank(1);
    struct qcg_contact before, after;
    qcg_connect_op *ops[3];
    uint64_t t0;

    REQUIRE_EQ(qcg_local_contact(b, &before), 0);
    connect_pair(a, b, &fa, &fb);

    /* In flight when the helper dies: a LOOKUP it never answers. */
    fake_helper_mute_next(fh, LOCAL_LOOKUP);
    REQUIRE_EQ(qcg_connect_start(a, 1, 10000, &ops[0]), 0);
    for (t0 = now_us(); now_us() - t0 < 200000u;)
        round_of(a, NULL, ops, rc, 1, 20);
    REQUIRE_EQ(rc[0], QCG_EAGAIN);

    fake_helper_free(fh);
    fh = NULL;
    t0 = now_us();
    /* Started while it is away: one waits, one has less time than the
       outage lasts. */
    REQUIRE_EQ(qcg_connect_start(a, 1, 10000, &ops[1]), 0);
    REQUIRE_EQ(qcg_connect_start(a, 1, 300, &ops[2]), 0);
    while (rc[2] == QCG_EAGAIN && now_us() - t0 < 3000000u) {
        round_of(a, NULL, ops, rc, 3, 20);
        round_of(b, NULL, NULL, NULL, 0, 0);
    }
    CHECK_EQ(rc[2], QCG_ENOHELPER);
    CHECK(now_us() - t0 < 2000000u); /* at its 300 ms timeout, not the outage's end */
    CHECK(strstr(qcg_last_error(a), "has been gone for ") != NULL);
    CHECK(strstr(qcg_last_error(a), sock_path) != NULL);
    CHECK_EQ(rc[0], QCG_EAGAIN);
    CHECK_EQ(rc[1], QCG_EAGAIN);
    /* Connections made before carry on: they never went through it. */
    check_carries(fa, fb, 'x');
    check_carries(fb, fa, 'y');
    {
        /* A direct connection is still accepted meanwhile. */
        struct direct_peer d = {.port = before.port, .fd = -1};
        int got = -1;
        pthread_t th;

        REQUIRE(pthread_create(&th, NULL, direct_peer_run, &d) == 0);
        for (int i = 0; i < 300 && got < 0; i++) {
            round_of(b, &got, NULL, NULL, 0, 10);
            round_of(a, NULL, ops, rc, 2, 0);
        }
        REQUIRE(pthread_join(th, NULL) == 0);
        CHECK_EQ(d.rc, 0);
        CHECK(got >= 0);
        if (got >= 0 && d.rc == 0)
            check_carries(d.fd, got, 'd');
        if (got >= 0)
            close(got);
        if (d.fd >= 0)
            close(d.fd);
    }
    while (now_us() - t0 < 600000u) {
        round_of(a, NULL, ops, rc, 2, 20);
        round_of(b, NULL, NULL, NULL, 0, 0);
    }
    CHECK_EQ(rc[0], QCG_EAGAIN);
    CHECK_EQ(rc[1], QCG_EAGAIN);

    /* Back on the same path, knowing nothing. */
    fh = fake_helper_new(sock_path, PORT_LOW, PORT_HIGH);
    for (int i = 0; i < 1000 && (rc[0] == QCG_EAGAIN || rc[1] == QCG_EAGAIN || acc[1] < 0); i++) {
        round_of(a, NULL, ops, rc, 2, 5);
        round_of(b, acc[0] < 0 ? &acc[0] : &acc[1], NULL, NULL, 0, 5);
    }
    REQUIRE(rc[0] >= 0);
    REQUIRE(rc[1] >= 0);
    REQUIRE(acc[0] >= 0 && acc[1] >= 0);
    CHECK_EQ(fake_helper_hellos(fh), 2u);
    CHECK(fake_helper_published(fh, 0));
    CHECK(fake_helper_published(fh, 1));
    CHECK(a->reconnects == 1 && b->reconnects == 1);
    REQUIRE_EQ(qcg_local_contact(b, &after), 0);
    CHECK_EQ(after.port, before.port);
    {
        /* The new connections carry data (b accepted them in either order). */
        char c0 = 0, c1 = 0;

        REQUIRE_EQ(write(rc[0], "m", 1), 1);
        REQUIRE_EQ(write(rc[1], "n", 1), 1);
        REQUIRE_EQ(read(acc[0], &c0, 1), 1);
        REQUIRE_EQ(read(acc[1], &c1, 1), 1);
        CHECK((c0 == 'm' && c1 == 'n') || (c0 == 'n' && c1 == 'm'));
    }
    check_carries(fa, fb, 'w');
    for (int i = 0; i < 3; i++) {
        if (rc[i] >= 0)
            close(rc[i]);
        qcg_connect_free(ops[i]);
    }
    close(acc[0]);
    close(acc[1]);
    close(fa);
    close(fb);
    qcg_close(a);
    qcg_close(b);
    WAIT_UNTIL(count_fds() == fds0, 2000, "every descriptor closed");
}

/* A re-PUBLISH refused for the moment (the rank still being withdrawn) is
   asked again, and the application hears nothing of it. */
static void test_republish_busy(void)
{
    qcg_ctx *a = open_rank(2);
    unsigned hellos = fake_helper_hellos(fh), publishes = fake_helper_publishes(fh);

    fake_helper_busy_publishes(fh, 2);
    REQUIRE_EQ(fake_helper_drop_rank(fh, 2), 0);
    for (int i = 0; i < 300 && !(fake_helper_published(fh, 2) && a->hstate == H_UP); i++)
        round_of(a, NULL, NULL, NULL, 0, 10);
    CHECK(fake_helper_published(fh, 2));
    CHECK_EQ(fake_helper_hellos(fh), hellos + 1);
    CHECK_EQ(fake_helper_publishes(fh), publishes + 3);
    qcg_close(a);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

    snprintf(sock_path, sizeof(sock_path), "%s/qcg-reconnect-%d.sock", tmp, (int)getpid());
    fh = fake_helper_new(sock_path, PORT_LOW, PORT_HIGH);
    test_restart();
    test_republish_busy();
    fake_helper_free(fh);
    return check_result("libqcgconn-reconnect");
}
