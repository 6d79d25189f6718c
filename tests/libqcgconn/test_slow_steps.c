/* libqcgconn-slow-steps: a connect's timeout bounds its silence, not its
   length (issue 29).  Under load (80 ranks over five sites on two cores) every
   step of a setup is slow: the helper answers late, the peer process runs
   late.  A connect whose steps each stall for less than its timeout, but for
   longer than it in all, used to fail ("handshake ... timed out") although
   it was moving; it connects now.  A connect that makes no progress still
   ends at its timeout with a reason naming the step, and one that keeps
   trickling ends at its cap (QCG_CONNECT_CAP_FACTOR times the timeout).

   The peer is a real process (rank 1) stopped with SIGSTOP and resumed with
   SIGCONT; the helper is the fake one, stalled for each LOOKUP.  The cap is
   met through a relay that passes the peer's answer one byte a second.
   Ports 18200-18203; about 12 s. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../check.h"
#include "../fixtures.h"
#include "fake_helper.h"
#include "internal.h"
#include "qcgconn.h"

#define PORT_LOW 18200
#define PORT_HIGH 18203
/* The connects' timeout, and how long each slowed step stalls: less than
   it, and two of them more. */
#define BOUND_MS 2000
#define STALL_MS 1500
/* The relay passes a byte of the peer's answer this often (< BOUND_MS). */
#define TRICKLE_MS 700

static char sock_path[108];

/* Rank 1: publishes, says its port on `ready`, then accepts and writes one
   byte on every connection, until the parent ends it (60 s at most). */
static void peer_main(int go, int ready)
{
    struct qcg_options o = {
        .job = "steps", .rank = 1, .secret = TEST_SECRET, .helper_socket = sock_path};
    struct qcg_contact me;
    qcg_ctx *ctx = NULL;
    char c;

    if (read(go, &c, 1) != 1 || qcg_open(&ctx, &o) != 0 || qcg_listen(ctx) != 0 ||
        qcg_local_contact(ctx, &me) != 0)
        _exit(2);
    uint16_t port = me.port;
    if (write(ready, &port, sizeof(port)) != sizeof(port))
        _exit(2);
    for (uint64_t end = now_us() + 60000000ull; now_us() < end;) {
        struct pollfd p = {.fd = qcg_accept_pollfd(ctx), .events = POLLIN};
        struct qcg_conn_info info = {0};

        if (poll(&p, 1, 100) != 1)
            continue;
        int fd = qcg_accept(ctx, &info);
        if (fd >= 0) {
            (void)!write(fd, "k", 1);
            close(fd);
        }
    }
    _exit(0);
}

/* Drives op to its end; at resume_at_us (0: never) sends SIGCONT to pid. */
static int finish(qcg_connect_op *op, pid_t pid, uint64_t resume_at_us, int *fd_out)
{
    uint64_t end = now_us() + (uint64_t)BOUND_MS * QCG_CONNECT_CAP_FACTOR * 1000u + 5000000u;
    int rc = QCG_EAGAIN;

    while (rc == QCG_EAGAIN && now_us() < end) {
        struct pollfd p = {.fd = qcg_connect_pollfd(op), .events = POLLIN};

        if (resume_at_us != 0 && now_us() >= resume_at_us) {
            kill(pid, SIGCONT);
            resume_at_us = 0;
        }
        (void)poll(&p, 1, 20);
        rc = qcg_connect_finish(op, NULL);
    }
    *fd_out = rc;
    return rc;
}

/* The relay for the cap: passes the client's bytes at once and the peer's
   one byte every TRICKLE_MS, so the handshake moves but never ends. */
struct relay {
    int listen_fd;
    uint16_t peer_port;
    volatile int stop;
};

static void *relay_run(void *arg)
{
    struct relay *r = arg;
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons(r->peer_port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct pollfd lp = {.fd = r->listen_fd, .events = POLLIN};
    int one = 1, client, peer;
    uint64_t next = 0;
    char held[4096];
    size_t nheld = 0;

    if (poll(&lp, 1, 10000) != 1 || (client = accept(r->listen_fd, NULL, NULL)) < 0)
        return NULL;
    peer = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (peer < 0 || connect(peer, (struct sockaddr *)&to, sizeof(to)) < 0) {
        close(client);
        return NULL;
    }
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    while (!r->stop) {
        struct pollfd p[2] = {{.fd = client, .events = POLLIN},
                              {.fd = peer, .events = nheld < sizeof(held) ? POLLIN : 0}};
        char buf[4096];

        if (poll(p, 2, 20) < 0)
            break;
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = read(client, buf, sizeof(buf));
            if (n <= 0 || write(peer, buf, (size_t)n) != n)
                break;
        }
        if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = read(peer, held + nheld, sizeof(held) - nheld);
            if (n > 0)
                nheld += (size_t)n;
        }
        if (nheld > 0 && now_us() >= next) {
            if (write(client, held, 1) != 1)
                break;
            memmove(held, held + 1, --nheld);
            next = now_us() + TRICKLE_MS * 1000ull;
        }
    }
    close(client);
    close(peer);
    return NULL;
}

int main(void)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    int go[2], ready[2];
    uint16_t peer_port = 0;
    char c = 'g';

    snprintf(sock_path, sizeof(sock_path), "%s/qcg-steps-%d.sock", tmp, (int)getpid());
    /* The peer forks before any thread exists. */
    REQUIRE(pipe(go) == 0 && pipe(ready) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0)
        peer_main(go[0], ready[1]);

    struct fake_helper *fh = fake_helper_new(sock_path, PORT_LOW, PORT_HIGH);
    REQUIRE(fh != NULL);
    REQUIRE_EQ(write(go[1], &c, 1), 1);
    struct pollfd rp = {.fd = ready[0], .events = POLLIN};
    REQUIRE_EQ(poll(&rp, 1, 15000), 1);
    REQUIRE_EQ(read(ready[0], &peer_port, sizeof(peer_port)), (ssize_t)sizeof(peer_port));
    struct qcg_options o = {
        .job = "steps", .rank = 0, .secret = TEST_SECRET, .helper_socket = sock_path};
    qcg_ctx *ctx = NULL;
    REQUIRE_EQ(qcg_open(&ctx, &o), 0);
    REQUIRE_EQ(qcg_listen(ctx), 0);
    qcg_connect_op *op = NULL;
    int fd;

    /* 1. Each step stalls STALL_MS (the helper's answer, then the peer's
       handshake answer): 2 x 1.5 s, under the 2 s bound each. */
    fake_helper_stall_lookups(fh, STALL_MS);
    REQUIRE_EQ(kill(pid, SIGSTOP), 0);
    uint64_t t0 = now_us();
    REQUIRE_EQ(qcg_connect_start(ctx, 1, BOUND_MS, &op), 0);
    finish(op, pid, t0 + 2 * STALL_MS * 1000ull, &fd);
    unsigned ms = (unsigned)((now_us() - t0) / 1000u);
    CHECKF(fd >= 0, "slowed steps: %d after %u ms: %s", fd, ms, qcg_last_error(ctx));
    CHECKF(ms > BOUND_MS, "took %u ms: the steps were not slowed past the old bound", ms);
    if (fd >= 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        CHECK(poll(&p, 1, 5000) == 1 && read(fd, &c, 1) == 1 && c == 'k');
        close(fd);
    }
    qcg_connect_free(op);
    fake_helper_stall_lookups(fh, 0);
    kill(pid, SIGCONT);
    fprintf(stderr, "slowed steps: connected after %u ms (bound %d ms without progress)\n", ms,
            BOUND_MS);

    /* 2. The peer stays stopped: the handshake makes no progress, and the
       connect ends at its bound, naming the step and the peer. */
    REQUIRE_EQ(kill(pid, SIGSTOP), 0);
    t0 = now_us();
    REQUIRE_EQ(qcg_connect_start(ctx, 1, BOUND_MS, &op), 0);
    finish(op, pid, 0, &fd);
    ms = (unsigned)((now_us() - t0) / 1000u);
    CHECK_EQ(fd, QCG_ETIMEDOUT);
    CHECKF(ms >= BOUND_MS && ms < BOUND_MS * QCG_CONNECT_CAP_FACTOR,
           "no progress: ended after %u ms", ms);
    CHECK_HAS(qcg_last_error(ctx), "direct: handshake with rank 1 at 127.0.0.1 port");
    CHECK_HAS(qcg_last_error(ctx), "no answer for 2000 ms since its last progress");
    fprintf(stderr, "no progress: %u ms: %s\n", ms, qcg_last_error(ctx));
    qcg_connect_free(op);
    kill(pid, SIGCONT);

    /* 3. The peer's answer trickles through a relay: the handshake moves
       more often than the bound, and the cap ends it. */
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    struct relay r = {.peer_port = peer_port};
    pthread_t rt;
    r.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(r.listen_fd >= 0);
    REQUIRE(bind(r.listen_fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    REQUIRE(listen(r.listen_fd, 4) == 0);
    REQUIRE(getsockname(r.listen_fd, (struct sockaddr *)&sin, &len) == 0);
    struct local_plan plan = {.technique = QCG_TECH_DIRECT, .port = ntohs(sin.sin_port)};
    strcpy(plan.cluster, "c1");
    strcpy(plan.node, "n1");
    strcpy(plan.address, "127.0.0.1");
    fake_helper_set_plan(fh, 1, 0, &plan, 0, NULL);
    REQUIRE(pthread_create(&rt, NULL, relay_run, &r) == 0);
    t0 = now_us();
    REQUIRE_EQ(qcg_connect_start(ctx, 1, BOUND_MS, &op), 0);
    finish(op, pid, 0, &fd);
    ms = (unsigned)((now_us() - t0) / 1000u);
    CHECK_EQ(fd, QCG_ETIMEDOUT);
    CHECKF(ms >= BOUND_MS * QCG_CONNECT_CAP_FACTOR - 100 &&
               ms < BOUND_MS * QCG_CONNECT_CAP_FACTOR + 2000,
           "trickle: ended after %u ms, not at the cap", ms);
    CHECK_HAS(qcg_last_error(ctx), "handshake with rank 1 at 127.0.0.1 port");
    CHECK_HAS(qcg_last_error(ctx), "its cap, though it was moving");
    fprintf(stderr, "trickle: %u ms: %s\n", ms, qcg_last_error(ctx));
    qcg_connect_free(op);
    r.stop = 1;
    REQUIRE(pthread_join(rt, NULL) == 0);
    close(r.listen_fd);

    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    qcg_close(ctx);
    fake_helper_free(fh);
    return check_result("libqcgconn-slow-steps");
}
