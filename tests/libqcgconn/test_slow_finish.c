/* libqcgconn-slow-finish: a peer of the job whose ClientHello we answered,
   and whose Finished comes after the 10 s handshake deadline, is accepted.
   The peer is a process starved of CPU (100 ranks of one process per node on
   two busy cores): its kernel acked our answer at once, its Finished and
   first bytes came 11.5 s after the connection.  Before, the rank dropped
   the connection at 10 s once TCP had no answer in flight, and the peer,
   whose handshake had completed on its side, failed on its first send
   ("Broken pipe") or read ("unexpected eof").  A relay between the peer and
   the rank holds the peer's bytes after our answer.  Against the fake
   helper (ports 18020-18022). */
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../check.h"
#include "../fixtures.h"
#include "fake_helper.h"
#include "handshake_blocking.h"
#include "internal.h"
#include "qcgconn.h"

#define PORT_LOW 18020
#define PORT_HIGH 18022
/* How long after our answer the peer's bytes come. */
#define HOLD_MS (ACCEPT_HANDSHAKE_TIMEOUT_MS + 1500)

static char sock_path[108];

/* Forwards both ways between peer and rank; what the peer sends after the
   rank's first bytes waits until HOLD_MS after them. */
struct relay {
    int peer, rank;
};

static void *relay_run(void *arg)
{
    struct relay *r = arg;
    uint64_t answered = 0, until = now_us() + (HOLD_MS + 5000) * 1000ull;
    char buf[16384];

    while (now_us() < until) {
        bool hold = answered != 0 && now_us() < answered + HOLD_MS * 1000ull;
        struct pollfd p[2] = {{.fd = r->rank, .events = POLLIN},
                              {.fd = r->peer, .events = hold ? 0 : POLLIN}};

        if (poll(p, 2, 20) <= 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t n = read(p[i].fd, buf, sizeof(buf));
            if (n <= 0)
                return NULL;
            REQUIRE_EQ(write(i == 0 ? r->peer : r->rank, buf, (size_t)n), n);
            if (i == 0 && answered == 0)
                answered = now_us();
        }
    }
    return NULL;
}

struct peer {
    int fd;
    int rc;
    char why[256];
};

static void *peer_run(void *arg)
{
    struct peer *pr = arg;
    struct hs_self self = {.job = "slow", .rank = 1, .secret = TEST_SECRET, .cluster = "c1"};
    char c = 'f';

    pr->rc = hs_initiate(pr->fd, &self, 0, now_us() + (HOLD_MS + 3000) * 1000ull, pr->why,
                         sizeof(pr->why));
    if (pr->rc == 0 && write(pr->fd, &c, 1) != 1)
        pr->rc = -1;
    return NULL;
}

int main(void)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(sock_path, sizeof(sock_path), "%s/qcg-slow-%d.sock", tmp, (int)getpid());
    struct fake_helper *fh = fake_helper_new(sock_path, PORT_LOW, PORT_HIGH);
    REQUIRE(fh != NULL);
    struct qcg_options o = {
        .job = "slow", .rank = 0, .secret = TEST_SECRET, .helper_socket = sock_path};
    qcg_ctx *ctx = NULL;
    REQUIRE_EQ(qcg_open(&ctx, &o), 0);
    REQUIRE_EQ(qcg_listen(ctx), 0);
    struct qcg_contact me;
    REQUIRE_EQ(qcg_local_contact(ctx, &me), 0);

    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons(me.port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct relay r;
    struct peer pr = {0};
    int ends[2];
    r.rank = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(r.rank >= 0);
    REQUIRE(connect(r.rank, (struct sockaddr *)&to, sizeof(to)) == 0);
    tcp_pair(&ends[0], &ends[1]);
    r.peer = ends[1];
    pr.fd = ends[0];
    pthread_t rt, pt;
    REQUIRE(pthread_create(&rt, NULL, relay_run, &r) == 0);
    REQUIRE(pthread_create(&pt, NULL, peer_run, &pr) == 0);

    /* The application's loop: the connection comes, and carries the byte. */
    uint64_t until = now_us() + (HOLD_MS + 3000) * 1000ull;
    struct qcg_conn_info info = {0};
    int fd = QCG_EAGAIN;
    while (fd == QCG_EAGAIN && now_us() < until) {
        struct pollfd p = {.fd = qcg_accept_pollfd(ctx), .events = POLLIN};
        if (poll(&p, 1, 50) == 1)
            fd = qcg_accept(ctx, &info);
    }
    if (fd < 0)
        fprintf(stderr, "accept: %d: %s\n", fd, qcg_last_error(ctx));
    REQUIRE(fd >= 0);
    REQUIRE_EQ(info.peer_rank, 1);
    REQUIRE(pthread_join(pt, NULL) == 0);
    if (pr.rc != 0)
        fprintf(stderr, "peer: %s\n", pr.why);
    REQUIRE_EQ(pr.rc, 0);
    char c = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    REQUIRE_EQ(poll(&p, 1, 5000), 1);
    REQUIRE_EQ(read(fd, &c, 1), 1);
    REQUIRE_EQ(c, 'f');
    close(fd);
    close(pr.fd);
    REQUIRE(pthread_join(rt, NULL) == 0);
    close(r.peer);
    close(r.rank);
    qcg_close(ctx);
    fake_helper_free(fh);
    return 0;
}
