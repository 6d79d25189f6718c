/* libqcgconn-api: what qcgconn.h promises beyond connecting, against the
   fake helper: the errno behind a failure (this node short of descriptors
   vs. a peer refusing), qcg_close with connect operations still open, the
   blocking bounds of qcg_close and qcg_accept, the version, and public
   structs of another size than ours (older and newer callers).
   Ports 18040-18049. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../check.h"
#include "../fixtures.h"
#include "fake_helper.h"
#include "handshake.h"
#include "internal.h"
#include "qcgconn.h"

#define PORT_LOW 18040
#define PORT_HIGH 18049

static char sock_path[108];
static struct fake_helper *fh;

static qcg_ctx *open_rank(int rank)
{
    struct qcg_options o = {
        .job = "api", .rank = rank, .secret = TEST_SECRET, .helper_socket = sock_path};
    qcg_ctx *ctx = NULL;
    int rc = qcg_open(&ctx, &o);

    if (rc != 0)
        fprintf(stderr, "qcg_open: %s: %s\n", qcg_strerror(rc), qcg_last_error(NULL));
    CHECK(rc == 0);
    return ctx;
}

/* Polls op and finishes it until it is done (bounded by its own deadline). */
static int finish(qcg_connect_op *op, struct qcg_conn_info *info)
{
    int rc = QCG_EAGAIN;

    for (int i = 0; i < 1000 && rc == QCG_EAGAIN; i++) {
        struct pollfd p = {.fd = qcg_connect_pollfd(op), .events = POLLIN};

        if (poll(&p, 1, 5000) <= 0)
            break;
        rc = qcg_connect_finish(op, info);
    }
    return rc;
}

/* The lowest descriptor number free now: with RLIMIT_NOFILE there, no new
   descriptor can be made (EMFILE). */
static int lowest_free_fd(void)
{
    int fd = dup(0);

    if (fd >= 0)
        close(fd);
    return fd;
}

static uint16_t sock_port(int fd)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);

    if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
        return 0;
    return ntohs(sa.sin_port);
}

static void test_version(void)
{
    char want[32];

    CHECK(qcg_version() == QCG_VERSION_HEX);
    CHECK(QCG_VERSION_HEX ==
          (unsigned)((QCG_VERSION_MAJOR << 16) | (QCG_VERSION_MINOR << 8) | QCG_VERSION_PATCH));
    snprintf(want, sizeof(want), "%d.%d.%d", QCG_VERSION_MAJOR, QCG_VERSION_MINOR,
             QCG_VERSION_PATCH);
    CHECK_STR(qcg_version_string(), want);
    CHECK_STR(qcg_strerror(QCG_EINUSE), "connect operations of the context were still open");
}

/* qcg_open: no helper socket (ENOENT) and no descriptor left (EMFILE) are
   told apart, whatever the code; a success clears it. */
static void test_open_errno(void)
{
    struct qcg_options o = {
        .job = "api", .rank = 0, .secret = TEST_SECRET, .helper_socket = "/nonexistent/h"};
    struct rlimit saved, low;
    qcg_ctx *ctx = NULL;

    CHECK(qcg_open(&ctx, &o) == QCG_ENOHELPER);
    CHECK(qcg_last_errno(NULL) == ENOENT);

    o.helper_socket = sock_path;
    CHECK(getrlimit(RLIMIT_NOFILE, &saved) == 0);
    low = saved;
    low.rlim_cur = (rlim_t)lowest_free_fd();
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    CHECK(qcg_open(&ctx, &o) == QCG_ESYS);
    CHECK(setrlimit(RLIMIT_NOFILE, &saved) == 0);
    CHECK(qcg_last_errno(NULL) == EMFILE);
    CHECK(ctx == NULL);

    ctx = open_rank(0);
    CHECK(qcg_last_errno(NULL) == 0);
    qcg_close(ctx);
}

/* A connect: the peer's refusal (ECONNREFUSED), this node out of
   descriptors (EMFILE), and a failure with no system call behind it (0). */
static void test_connect_errno(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct local_plan dead = {.technique = QCG_TECH_DIRECT};
    int closed = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    qcg_ctx *a = open_rank(0), *b = open_rank(1);
    struct rlimit saved, low;
    qcg_connect_op *op;

    /* Bound and never listened on: refused while held. */
    CHECK(closed >= 0 && bind(closed, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    dead.port = sock_port(closed);
    strcpy(dead.cluster, "c1");
    strcpy(dead.address, "127.0.0.1");
    fake_helper_set_plan_only(fh, 5, 0, QCG_TECH_DIRECT, &dead, 0, NULL);
    CHECK(qcg_connect_start_only(a, 5, QCG_TECH_DIRECT, 3000, &op) == 0);
    CHECK(finish(op, NULL) == QCG_EPEER);
    CHECK(qcg_connect_errno(op) == ECONNREFUSED);
    CHECK(qcg_last_errno(a) == ECONNREFUSED);
    CHECK_HAS(qcg_last_error(a), strerror(ECONNREFUSED));
    qcg_connect_free(op);
    close(closed);

    /* Started with its descriptors, then none left for the socket: the
       connect waits and asks again, and says why when its time is up. */
    CHECK(qcg_listen(b) == 0);
    CHECK(qcg_connect_start(a, 1, 600, &op) == 0);
    CHECK(getrlimit(RLIMIT_NOFILE, &saved) == 0);
    low = saved;
    low.rlim_cur = (rlim_t)lowest_free_fd();
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    CHECK(finish(op, NULL) == QCG_ESYS);
    CHECK(setrlimit(RLIMIT_NOFILE, &saved) == 0);
    CHECK(qcg_connect_errno(op) == EMFILE);
    CHECK(qcg_last_errno(a) == EMFILE);
    CHECK_HAS(qcg_last_error(a), "short of ports or descriptors");
    qcg_connect_free(op);

    /* Nobody publishes rank 7: not published until the timeout, no errno
       (not the last failure's). */
    CHECK(qcg_connect(a, 7, 200, NULL) == QCG_ENOTFOUND);
    CHECK(qcg_last_errno(a) == 0);
    qcg_close(b);
    qcg_close(a);
}

/* qcg_close with operations still open: QCG_EINUSE, the context closed and
   withdrawn all the same, the operations ended (their finish fails at once,
   their descriptor is readable, their free works).  ASan checks that
   nothing leaks and nothing reaches into the freed context. */
static void test_close_open_ops(void)
{
    struct local_plan back = {.technique = QCG_TECH_REVERSED};
    qcg_ctx *a = open_rank(0);
    qcg_connect_op *looking, *reversed, *finished;
    unsigned withdraws;

    CHECK(qcg_close(NULL) == 0);
    /* One retrying its lookup (rank 8 is never published), one waiting for
       a reversed connection that never comes, one finished. */
    strcpy(back.cluster, "c2");
    strcpy(back.address, "127.0.0.1");
    strcpy(back.token, "tok");
    back.port = 1;
    fake_helper_set_plan(fh, 9, 0, &back, 0, NULL);
    CHECK(qcg_connect_start(a, 8, 5000, &looking) == 0);
    CHECK(qcg_connect_start(a, 9, 5000, &reversed) == 0);
    CHECK(qcg_connect_start(a, 8, 100, &finished) == 0);
    CHECK(finish(finished, NULL) == QCG_ENOTFOUND);
    CHECK(qcg_connect_finish(reversed, NULL) == QCG_EAGAIN);
    withdraws = fake_helper_withdraws(fh);

    CHECK(qcg_close(a) == QCG_EINUSE);
    CHECK(fake_helper_withdraws(fh) == withdraws + 1);
    for (int i = 0; i < 2; i++) {
        qcg_connect_op *op = i == 0 ? looking : reversed;
        struct pollfd p = {.fd = qcg_connect_pollfd(op), .events = POLLIN};

        CHECK(poll(&p, 1, 1000) == 1);
        CHECK(qcg_connect_finish(op, NULL) == QCG_EINVAL);
        CHECK(qcg_connect_errno(op) == 0);
        qcg_connect_free(op);
    }
    qcg_connect_free(finished);

    /* Every operation finished or freed first: 0. */
    a = open_rank(0);
    CHECK(qcg_connect_start(a, 8, 100, &finished) == 0);
    CHECK(finish(finished, NULL) == QCG_ENOTFOUND);
    CHECK(qcg_close(a) == 0);
    qcg_connect_free(finished);
}

/* qcg_close waits for the withdrawal at most QCG_CLOSE_MAX_MS; qcg_accept
   never waits for a peer's hello. */
static void test_bounds(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct qcg_contact me;
    qcg_ctx *a = open_rank(0);
    int half = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct pollfd p;
    uint64_t t0;
    int rc = QCG_EAGAIN;

    CHECK(qcg_listen(a) == 0 && qcg_local_contact(a, &me) == 0);
    sa.sin_port = htons(me.port);
    CHECK(connect(half, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    CHECK(write(half, "QCGH", 4) == 4);
    p = (struct pollfd){.fd = qcg_accept_pollfd(a), .events = POLLIN};
    CHECK(poll(&p, 1, 2000) == 1);
    /* Until the 4 bytes are read: each call returns at once. */
    for (int i = 0; i < 5; i++) {
        t0 = now_us();
        rc = qcg_accept(a, NULL);
        CHECK(rc == QCG_EAGAIN);
        CHECK(now_us() - t0 < 100000u);
        poll(NULL, 0, 20);
    }
    close(half);

    fake_helper_mute_next(fh, LOCAL_WITHDRAW);
    t0 = now_us();
    CHECK(qcg_close(a) == 0);
    t0 = now_us() - t0;
    CHECK(t0 >= (QCG_CLOSE_MAX_MS - 100) * 1000u && t0 < (QCG_CLOSE_MAX_MS + 500) * 1000u);
}

/* accept() out of descriptors: qcg_accept says so once (EMFILE) and the
   listener rests, so the caller's poll does not spin on it; once descriptors
   are back, the waiting connection is taken. */
static void test_accept_shortage(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct qcg_contact me;
    struct rlimit saved, low;
    qcg_ctx *a = open_rank(0);
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    char junk[HS_IDENTITY_SIZE];
    struct pollfd p, pc;
    int rc = 0, woke = 0;

    CHECK(qcg_listen(a) == 0 && qcg_local_contact(a, &me) == 0);
    sa.sin_port = htons(me.port);
    CHECK(connect(c, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    memset(junk, 'x', sizeof(junk));
    CHECK(write(c, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
    p = (struct pollfd){.fd = qcg_accept_pollfd(a), .events = POLLIN};
    CHECK(poll(&p, 1, 2000) == 1);

    CHECK(getrlimit(RLIMIT_NOFILE, &saved) == 0);
    low = saved;
    low.rlim_cur = (rlim_t)lowest_free_fd();
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    rc = qcg_accept(a, NULL);
    CHECK_EQ(rc, QCG_ESYS);
    CHECK_EQ(qcg_last_errno(a), EMFILE);
    /* Resting: not readable although the connection still waits. */
    CHECK_EQ(poll(&p, 1, 20), 0);
    CHECK(setrlimit(RLIMIT_NOFILE, &saved) == 0);

    /* The rest ends by itself; the junk hello is then read and refused. */
    pc = (struct pollfd){.fd = c, .events = POLLIN};
    for (int i = 0; i < 100 && poll(&pc, 1, 0) == 0; i++) {
        if (poll(&p, 1, 50) == 1) {
            woke++;
            rc = qcg_accept(a, NULL);
            CHECK(rc == QCG_EAGAIN || rc == QCG_EPROTO);
        }
    }
    CHECK(woke > 0);
    CHECK(poll(&pc, 1, 0) == 1);
    close(c);
    qcg_close(a);
}

/* Structs of another size than this library's: an older caller's through
   0.1's entry points (read and written exactly: ASan would see more), a
   newer caller's larger ones (what we do not know must be zero on the way
   in, and is zeroed on the way out).  The older options are bytes, not a
   struct qcg_options (gcc 14's -Walloc-size: smaller than the type). */
static void test_sizes(void)
{
    void *old = malloc(OPTIONS_SIZE_0_1);
    struct qcg_contact *old_contact = malloc(CONTACT_SIZE_0_1);
    struct {
        struct qcg_options o;
        unsigned char later[16];
    } newer = {.o = {.job = "api", .rank = 0, .secret = TEST_SECRET, .helper_socket = sock_path}};
    struct {
        struct qcg_contact c;
        unsigned char later[16];
    } contact;
    qcg_ctx *ctx = NULL;

    CHECK(old != NULL && old_contact != NULL);
    memcpy(old, &newer.o, OPTIONS_SIZE_0_1);
    CHECK((qcg_open)(&ctx, old) == 0);
    CHECK(qcg_listen(ctx) == 0);
    CHECK((qcg_local_contact)(ctx, old_contact) == 0);
    CHECK(old_contact->port >= PORT_LOW && old_contact->port <= PORT_HIGH);
    memset(&contact, 0xaa, sizeof(contact));
    CHECK(qcg_local_contact_sized(ctx, &contact.c, sizeof(contact)) == 0);
    CHECK(contact.c.port == old_contact->port);
    for (size_t i = 0; i < sizeof(contact.later); i++)
        CHECK(contact.later[i] == 0);
    qcg_close(ctx);
    free(old);
    free(old_contact);

    CHECK(qcg_open_sized(&ctx, &newer.o, sizeof(newer)) == 0);
    qcg_close(ctx);
    newer.later[3] = 1;
    CHECK(qcg_open_sized(&ctx, &newer.o, sizeof(newer)) == QCG_EINVAL);
    CHECK_HAS(qcg_last_error(NULL), "struct qcg_options");
    CHECK(ctx == NULL);
    CHECK(qcg_open_sized(&ctx, &newer.o, 8) == QCG_EINVAL);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

    snprintf(sock_path, sizeof(sock_path), "%s/qcg-api-%d.sock", tmp, (int)getpid());
    fh = fake_helper_new(sock_path, PORT_LOW, PORT_HIGH);
    CHECK(fh != NULL);
    test_version();
    test_open_errno();
    test_connect_errno();
    test_close_open_ops();
    test_bounds();
    test_accept_shortage();
    test_sizes();
    fake_helper_free(fh);
    return check_result("libqcgconn-api");
}
