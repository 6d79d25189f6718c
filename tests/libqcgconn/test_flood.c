/* libqcgconn-flood: a rank's listener flooded with connections that never
   send their hello (anyone who reaches the port can open them) still takes
   a peer's connection at once, and the helper's hand-overs too.  Before,
   the rank kept up to 1024 such connections for 10 s each and stopped
   accepting when full: a peer waited behind the flood in the listen queue
   and a hand-over was dropped ("1024 handshakes already pending").  The
   peers here give up after 5 s, half the 10 s a stranger could hold its
   slot, so they cannot be served by the flood expiring.  Against the fake
   helper; the flood from 127.0.0.x, the peer from 127.0.0.2 (ports
   18003-18009). */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../check.h"
#include "../fixtures.h"
#include "fake_helper.h"
#include "handshake_blocking.h"
#include "internal.h"
#include "qcgconn.h"

#define PORT_LOW 18003
#define PORT_HIGH 18009
/* A peer's whole handshake: less than the 10 s a stranger may wait. */
#define PEER_DEADLINE_US 5000000u

static char sock_path[108];
static struct fake_helper *fh;

static qcg_ctx *open_rank(int rank)
{
    struct qcg_options o = {
        .job = "flood", .rank = rank, .secret = TEST_SECRET, .helper_socket = sock_path};
    qcg_ctx *ctx = NULL;

    REQUIRE_EQ(qcg_open(&ctx, &o), 0);
    REQUIRE_EQ(qcg_listen(ctx), 0);
    return ctx;
}

static uint16_t listen_port(qcg_ctx *ctx)
{
    struct qcg_contact me;

    REQUIRE_EQ(qcg_local_contact(ctx, &me), 0);
    return me.port;
}

/* A connection from 127.0.0.<host> to port (non-blocking; on loopback it
   is in the listener's queue when connect returns). */
static int connect_from(int host, uint16_t port)
{
    struct sockaddr_in src = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000000u | host)};
    struct sockaddr_in dst = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

    REQUIRE(fd >= 0);
    REQUIRE(bind(fd, (struct sockaddr *)&src, sizeof(src)) == 0);
    REQUIRE(connect(fd, (struct sockaddr *)&dst, sizeof(dst)) == 0 || errno == EINPROGRESS);
    return fd;
}

/* How many of the flood's connections the rank closed (EOF readable). */
static int closed_by_rank(const int *fds, int n)
{
    int closed = 0;

    for (int i = 0; i < n; i++) {
        struct pollfd p = {.fd = fds[i], .events = POLLIN};
        char c;

        if (poll(&p, 1, 0) == 1 && recv(fds[i], &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0)
            closed++;
    }
    return closed;
}

/* Pumps the rank's accept side for ms (the application's loop). */
static void pump(qcg_ctx *ctx, int ms)
{
    uint64_t until = now_us() + (uint64_t)ms * 1000u;

    while (now_us() < until) {
        struct pollfd p = {.fd = qcg_accept_pollfd(ctx), .events = POLLIN};

        if (poll(&p, 1, 20) == 1)
            REQUIRE_EQ(qcg_accept(ctx, NULL), QCG_EAGAIN);
    }
}

/* A peer of the job: rank from, over fd (TCP from 127.0.0.2, or the
   helper's hand-over), to rank 0. */
struct peer {
    int fd;
    int32_t from;
    int rc;
    char why[256];
};

static void *peer_run(void *arg)
{
    struct peer *pr = arg;
    struct hs_self self = {
        .job = "flood", .rank = pr->from, .secret = TEST_SECRET, .cluster = "c1"};

    pr->rc = hs_initiate(pr->fd, &self, 0, now_us() + PEER_DEADLINE_US, pr->why, sizeof(pr->why));
    return NULL;
}

/* Accepts until want connections came or the peers' deadline passed;
   records the ranks seen. */
static int accept_peers(qcg_ctx *ctx, int want, int32_t *ranks)
{
    uint64_t until = now_us() + PEER_DEADLINE_US + 1000000u;
    int got = 0;

    while (got < want && now_us() < until) {
        struct pollfd p = {.fd = qcg_accept_pollfd(ctx), .events = POLLIN};
        struct qcg_conn_info info = {0};
        int fd;

        if (poll(&p, 1, 50) != 1)
            continue;
        fd = qcg_accept(ctx, &info);
        if (fd >= 0) {
            ranks[got++] = info.peer_rank;
            close(fd);
        }
    }
    return got;
}

/* One address opens 1100 connections and sends nothing: it keeps at most
   its share (PENDING_PER_SOURCE), the rest are cut, and a peer from
   another address is accepted meanwhile. */
static void test_one_address(void)
{
    enum { N = 1100 };
    qcg_ctx *ctx = open_rank(0);
    uint16_t port = listen_port(ctx);
    static int flood[N];
    struct peer pr = {.from = 1};
    pthread_t th;
    int32_t ranks[1] = {-1};
    int closed = 0;

    for (int i = 0; i < N; i++)
        flood[i] = connect_from(1, port);
    pump(ctx, 300);
    for (int i = 0; i < 50 && (closed = closed_by_rank(flood, N)) < N - PENDING_PER_SOURCE; i++)
        pump(ctx, 20);
    CHECKF(closed >= N - PENDING_PER_SOURCE,
           "one address keeps at most %d connections without a hello: %d of %d cut",
           PENDING_PER_SOURCE, closed, N);

    pr.fd = connect_from(2, port);
    REQUIRE(pthread_create(&th, NULL, peer_run, &pr) == 0);
    CHECK_EQ(accept_peers(ctx, 1, ranks), 1);
    REQUIRE(pthread_join(th, NULL) == 0);
    CHECKF(pr.rc == 0, "the peer's handshake: %s", pr.why);
    CHECK_EQ(ranks[0], 1);
    /* Cutting strangers refuses nobody. */
    CHECK_EQ(qcg_accept_refused(ctx), 0);
    close(pr.fd);
    for (int i = 0; i < N; i++)
        close(flood[i]);
    qcg_close(ctx);
}

/* 24 addresses, 50 each (within their share, more than the table): the
   oldest strangers make room; the crowd's silent connections go after
   their first deadline while they crowd the table; a peer over TCP and one handed over by the
   helper (a proxied connection) are both accepted. */
static void test_many_addresses(void)
{
    enum { HOSTS = 24, EACH = 50, N = HOSTS * EACH };
    qcg_ctx *ctx = open_rank(0);
    uint16_t port = listen_port(ctx);
    static int flood[N];
    struct peer direct = {.from = 1}, handed = {.from = 5};
    pthread_t th[2];
    int32_t ranks[2] = {-1, -1};
    int theirs;

    for (int i = 0; i < N; i++)
        flood[i] = connect_from(10 + i / EACH, port);
    pump(ctx, 300);

    direct.fd = connect_from(2, port);
    tcp_pair(&handed.fd, &theirs);
    REQUIRE_EQ(fake_helper_incoming(fh, 0, 5, QCG_TECH_PROXY, theirs), 0);
    close(theirs);
    REQUIRE(pthread_create(&th[0], NULL, peer_run, &direct) == 0);
    REQUIRE(pthread_create(&th[1], NULL, peer_run, &handed) == 0);
    CHECK_EQ(accept_peers(ctx, 2, ranks), 2);
    REQUIRE(pthread_join(th[0], NULL) == 0);
    REQUIRE(pthread_join(th[1], NULL) == 0);
    CHECKF(direct.rc == 0, "the peer over TCP: %s", direct.why);
    CHECKF(handed.rc == 0, "the peer handed over: %s", handed.why);
    CHECK((ranks[0] == 1 && ranks[1] == 5) || (ranks[0] == 5 && ranks[1] == 1));

    /* Silent strangers in a crowded table go after the first deadline (2 s),
       long before the handshake's 10 s, down to one source's share. */
    pump(ctx, STRANGER_FIRST_BYTE_MS + 500);
    int closed = closed_by_rank(flood, N);
    CHECKF(closed >= N - PENDING_PER_SOURCE, "silent strangers cut: %d of %d", closed, N);
    CHECK_EQ(qcg_accept_refused(ctx), 0);
    close(direct.fd);
    close(handed.fd);
    for (int i = 0; i < N; i++)
        close(flood[i]);
    qcg_close(ctx);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    struct rlimit rl;

    /* Both ends of every connection in this process. */
    REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < 4096) {
        fprintf(stderr, "libqcgconn-flood: skipped, RLIMIT_NOFILE hard limit %lu < 4096\n",
                (unsigned long)rl.rlim_max);
        return 77;
    }
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 8192 ? 8192 : rl.rlim_max;
    REQUIRE(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    snprintf(sock_path, sizeof(sock_path), "%s/qcg-flood-%d.sock", tmp, (int)getpid());
    fh = fake_helper_new(sock_path, PORT_LOW, PORT_HIGH);
    REQUIRE(fh != NULL);
    test_one_address();
    test_many_addresses();
    fake_helper_free(fh);
    return check_result("libqcgconn-flood");
}
