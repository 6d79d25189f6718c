/* libqcgconn-handshake: both sides of the process-to-process handshake over
   a socketpair, the initiator in a thread. */
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "handshake_blocking.h"
#include "internal.h"

struct side {
    int fd;
    struct hs_self self;
    int32_t to_rank;
    int rc;
    char err[QCG_ERRMSG_MAX];
};

static void *initiator(void *arg)
{
    struct side *s = arg;

    s->rc = hs_initiate(s->fd, &s->self, s->to_rank, now_us() + 2000000u, s->err,
                        sizeof(s->err));
    return NULL;
}

/* Runs one handshake; returns the acceptor's result, *init_rc the initiator's. */
static int run(const struct hs_self *a, const struct hs_self *b, int32_t to_rank, int *init_rc,
               struct hs_hello *peer)
{
    struct side s = {.self = *a, .to_rank = to_rank};
    char err[QCG_ERRMSG_MAX] = "";
    pthread_t t;
    int sp[2], rc;

    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) == 0);
    s.fd = sp[0];
    REQUIRE(pthread_create(&t, NULL, initiator, &s) == 0);
    rc = hs_respond(sp[1], b, now_us() + 2000000u, peer, err, sizeof(err));
    close(sp[1]);
    REQUIRE(pthread_join(t, NULL) == 0);
    close(sp[0]);
    *init_rc = s.rc;
    if (rc < 0)
        REQUIRE(err[0] != '\0');
    if (s.rc < 0)
        REQUIRE(s.err[0] != '\0');
    return rc;
}

static const struct hs_self rank0 = {.job = "job1", .rank = 0, .secret = "s3cret", .cluster = "a"};
static const struct hs_self rank1 = {.job = "job1", .rank = 1, .secret = "s3cret", .cluster = "b"};

static void test_ok(void)
{
    struct hs_hello peer;
    int irc;

    REQUIRE_EQ(run(&rank0, &rank1, 1, &irc, &peer), 0);
    REQUIRE_EQ(irc, 0);
    REQUIRE_EQ(peer.from_rank, 0);
    REQUIRE_EQ(peer.to_rank, 1);
    REQUIRE(strcmp(peer.job, "job1") == 0);
    REQUIRE(strcmp(peer.cluster, "a") == 0);
}

static void test_wrong_secret(void)
{
    struct hs_self bad = rank0;
    struct hs_hello peer;
    int irc;

    bad.secret = "s3creT";
    REQUIRE_EQ(run(&bad, &rank1, 1, &irc, &peer), QCG_EDENIED);
    REQUIRE_EQ(irc, QCG_EDENIED);
}

static void test_wrong_job(void)
{
    struct hs_self other = rank0;
    struct hs_hello peer;
    int irc;

    other.job = "job2";
    REQUIRE_EQ(run(&other, &rank1, 1, &irc, &peer), QCG_EDENIED);
    REQUIRE_EQ(irc, QCG_EDENIED);
}

static void test_wrong_rank(void)
{
    struct hs_hello peer;
    int irc;

    REQUIRE(run(&rank0, &rank1, 2, &irc, &peer) < 0);
    REQUIRE_EQ(irc, QCG_EPEER);
}

/* Every single-bit flip of a hello makes it fail. */
static void test_tampered_hello(void)
{
    uint8_t hello[HS_HELLO_SIZE];
    struct hs_hello h, peer;

    REQUIRE(hs_hello_build(hello, &h, &rank0, 1, NULL) == 0);
    REQUIRE_EQ(hs_hello_check(hello, &rank1, &peer), HS_OK);
    for (size_t i = 0; i < sizeof(hello); i++) {
        hello[i] ^= 0x01;
        REQUIRE(hs_hello_check(hello, &rank1, &peer) != HS_OK);
        hello[i] ^= 0x01;
    }
    /* An unterminated job or cluster is malformed, not a crash. */
    memset(hello + 16, 'j', HS_JOB_MAX);
    REQUIRE_EQ(hs_hello_check(hello, &rank1, &peer), HS_MALFORMED);
}

/* Over the wire: a hello whose MAC was altered is refused with an answer
   that says so. */
static void test_tampered_wire(void)
{
    uint8_t hello[HS_HELLO_SIZE], answer[HS_ACCEPT_SIZE];
    struct hs_hello h, peer;
    char err[QCG_ERRMSG_MAX];
    const char *why = "";
    int sp[2];

    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) == 0);
    REQUIRE(hs_hello_build(hello, &h, &rank0, 1, NULL) == 0);
    hello[HS_HELLO_SIZE - 1] ^= 0x80;
    REQUIRE_EQ(write(sp[0], hello, sizeof(hello)), (ssize_t)sizeof(hello));
    REQUIRE_EQ(hs_respond(sp[1], &rank1, now_us() + 1000000u, &peer, err, sizeof(err)),
               QCG_EDENIED);
    REQUIRE(strstr(err, "secret") != NULL);
    REQUIRE_EQ(read_full(sp[0], answer, sizeof(answer), now_us() + 1000000u), 0);
    REQUIRE_EQ(hs_accept_check(answer, &h, rank0.secret, &why), QCG_EDENIED);
    close(sp[0]);
    close(sp[1]);
}

/* The acceptor's proof: a forged or altered answer is refused. */
static void test_tampered_answer(void)
{
    uint8_t hello[HS_HELLO_SIZE], answer[HS_ACCEPT_SIZE];
    struct hs_hello h;
    const char *why = "";

    REQUIRE(hs_hello_build(hello, &h, &rank0, 1, NULL) == 0);
    hs_accept_build(answer, HS_OK, &h, rank0.secret);
    REQUIRE_EQ(hs_accept_check(answer, &h, rank0.secret, &why), 0);
    for (size_t i = 0; i < sizeof(answer); i++) {
        answer[i] ^= 0x04;
        REQUIRE(hs_accept_check(answer, &h, rank0.secret, &why) < 0);
        answer[i] ^= 0x04;
    }
    /* An acceptor with another secret cannot prove anything. */
    hs_accept_build(answer, HS_OK, &h, "other");
    REQUIRE_EQ(hs_accept_check(answer, &h, rank0.secret, &why), QCG_EDENIED);
    /* An answer for another nonce (a replayed answer) fails too. */
    {
        struct hs_hello h2 = h;

        h2.nonce[0] ^= 1;
        hs_accept_build(answer, HS_OK, &h2, rank0.secret);
        REQUIRE_EQ(hs_accept_check(answer, &h, rank0.secret, &why), QCG_EDENIED);
    }
}

static uint8_t seen_nonce[HS_NONCE_SIZE];
static int seen_count;

static int nonce_seen(void *arg, const uint8_t nonce[HS_NONCE_SIZE])
{
    (void)arg;
    if (seen_count > 0 && memcmp(seen_nonce, nonce, HS_NONCE_SIZE) == 0)
        return 1;
    memcpy(seen_nonce, nonce, HS_NONCE_SIZE);
    seen_count++;
    return 0;
}

/* The same hello twice: the second is a replay. */
static void test_replay(void)
{
    struct hs_self acc = rank1;
    uint8_t hello[HS_HELLO_SIZE];
    struct hs_hello h, peer;
    char err[QCG_ERRMSG_MAX];

    acc.nonce_seen = nonce_seen;
    REQUIRE(hs_hello_build(hello, &h, &rank0, 1, NULL) == 0);
    for (int round = 0; round < 2; round++) {
        int sp[2], rc;

        REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) == 0);
        REQUIRE_EQ(write(sp[0], hello, sizeof(hello)), (ssize_t)sizeof(hello));
        rc = hs_respond(sp[1], &acc, now_us() + 1000000u, &peer, err, sizeof(err));
        REQUIRE_EQ(rc, round == 0 ? 0 : QCG_EPROTO);
        close(sp[0]);
        close(sp[1]);
    }
}

/* A peer that says nothing: bounded wait, then QCG_ETIMEDOUT. */
static void test_silent_peer(void)
{
    struct hs_hello peer;
    char err[QCG_ERRMSG_MAX];
    uint64_t t0 = now_us();
    int sp[2];

    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) == 0);
    REQUIRE_EQ(hs_respond(sp[1], &rank1, t0 + 200000u, &peer, err, sizeof(err)), QCG_ETIMEDOUT);
    REQUIRE(now_us() - t0 >= 200000u && now_us() - t0 < 2000000u);
    /* A peer that hangs up half-way. */
    REQUIRE_EQ(write(sp[0], "QCGH", 4), 4);
    close(sp[0]);
    REQUIRE_EQ(hs_respond(sp[1], &rank1, now_us() + 1000000u, &peer, err, sizeof(err)), QCG_EPEER);
    close(sp[1]);
}

int main(void)
{
    test_ok();
    test_wrong_secret();
    test_wrong_job();
    test_wrong_rank();
    test_tampered_hello();
    test_tampered_wire();
    test_tampered_answer();
    test_replay();
    test_silent_peer();
    return check_result("libqcgconn-handshake");
}
