/* libqcgconn-handshake: both sides of the process-to-process handshake
   (TLS 1.3, the job's PSK) over a socketpair, the initiator in a thread:
   refusals, the encryption policy, the data of an encrypted connection
   (not in clear on the wire, a tampered or truncated record refused). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "check.h"
#include "handshake_blocking.h"
#include "internal.h"
#include "tls_psk.h"
#include "tls_session.h"

struct side {
    int fd;
    struct hs_self self;
    int32_t to_rank;
    bool encrypt;
    qcg_tls *session;
    int rc;
    char err[QCG_ERRMSG_MAX];
};

static void *initiator(void *arg)
{
    struct side *s = arg;

    s->rc = hs_initiate_ex(s->fd, &s->self, s->to_rank, NULL, s->encrypt, now_us() + 5000000u,
                           &s->session, s->err, sizeof(s->err));
    return NULL;
}

/* One handshake between a (initiator, encrypting or not) and b on the
   sockets sp (a: sp[0], b: sp[1], left open); the sessions in *as, *bs
   (NULL: plain).  Returns b's result, *init_rc a's; *init_err a's reason. */
static int run_on(int sp[2], const struct hs_self *a, bool encrypt, const struct hs_self *b,
                  int32_t to_rank, int *init_rc, struct hs_hello *peer, qcg_tls **as, qcg_tls **bs,
                  char *init_err, char *err)
{
    struct side s = {.self = *a, .to_rank = to_rank, .encrypt = encrypt, .fd = sp[0]};
    pthread_t t;
    int rc;

    err[0] = '\0';
    REQUIRE(pthread_create(&t, NULL, initiator, &s) == 0);
    rc = hs_respond_ex(sp[1], b, true, now_us() + 5000000u, peer, bs, err, QCG_ERRMSG_MAX);
    if (rc < 0)
        shutdown(sp[1], SHUT_RDWR);
    REQUIRE(pthread_join(t, NULL) == 0);
    *init_rc = s.rc;
    *as = s.session;
    memcpy(init_err, s.err, QCG_ERRMSG_MAX);
    if (rc < 0)
        REQUIRE(err[0] != '\0');
    if (s.rc < 0)
        REQUIRE(s.err[0] != '\0');
    return rc;
}

static char last_init_err[QCG_ERRMSG_MAX], last_err[QCG_ERRMSG_MAX];

/* Runs one plain handshake; returns the acceptor's result, *init_rc the
   initiator's. */
static int run_mode(const struct hs_self *a, bool encrypt, const struct hs_self *b, int32_t to_rank,
                    int *init_rc, struct hs_hello *peer)
{
    qcg_tls *as, *bs;
    int sp[2], rc;

    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) == 0);
    rc = run_on(sp, a, encrypt, b, to_rank, init_rc, peer, &as, &bs, last_init_err, last_err);
    REQUIRE((as != NULL) == (encrypt && *init_rc == 0));
    REQUIRE((bs != NULL) == (encrypt && rc == 0));
    qcg_tls_free(as);
    qcg_tls_free(bs);
    close(sp[0]);
    close(sp[1]);
    return rc;
}

static int run(const struct hs_self *a, const struct hs_self *b, int32_t to_rank, int *init_rc,
               struct hs_hello *peer)
{
    return run_mode(a, false, b, to_rank, init_rc, peer);
}

static const struct hs_self rank0 = {
    .job = "job1", .rank = 0, .secret = "s3cret", .cluster = "a", .policy = QCG_ENCRYPT_NEVER};
static const struct hs_self rank1 = {
    .job = "job1", .rank = 1, .secret = "s3cret", .cluster = "b", .policy = QCG_ENCRYPT_NEVER};

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
    REQUIRE(strstr(last_err, "wrong job secret") != NULL);
    REQUIRE(strstr(last_init_err, "not the same job secret") != NULL);
    /* Encrypted or not, the same refusal. */
    REQUIRE_EQ(run_mode(&bad, true, &rank1, 1, &irc, &peer), QCG_EDENIED);
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

/* The identity: what it carries, what a malformed one is. */
static void test_identity(void)
{
    uint8_t id[HS_IDENTITY_SIZE];
    struct hs_hello h, peer;

    REQUIRE(hs_identity_build(id, &h, "job1", 0, "a", 1, "tok", QCG_TECH_TRAVERSING) == 0);
    REQUIRE_EQ(hs_identity_parse(id, sizeof(id), &peer), HS_OK);
    REQUIRE(peer.from_rank == 0 && peer.to_rank == 1 && strcmp(peer.token, "tok") == 0);
    REQUIRE_EQ(peer.technique, QCG_TECH_TRAVERSING);
    REQUIRE_EQ(hs_identity_parse(id, sizeof(id) - 1, &peer), HS_MALFORMED);
    id[0] ^= 1;
    REQUIRE_EQ(hs_identity_parse(id, sizeof(id), &peer), HS_MALFORMED);
    id[0] ^= 1;
    id[5] ^= 1;
    REQUIRE_EQ(hs_identity_parse(id, sizeof(id), &peer), HS_BAD_VERSION);
    id[5] ^= 1;
    memset(id + 16, 'j', HS_JOB_MAX);
    REQUIRE_EQ(hs_identity_parse(id, sizeof(id), &peer), HS_MALFORMED);
}

/* The policy: who may ask for what. */
static void test_policy(void)
{
    struct hs_self always = rank1, off = rank1, inter = rank1, inter_a = rank1;
    struct hs_hello peer;
    int irc;

    always.policy = QCG_ENCRYPT_ALWAYS;
    REQUIRE_EQ(run(&rank0, &always, 1, &irc, &peer), QCG_EDENIED);
    REQUIRE_EQ(irc, QCG_EDENIED);
    REQUIRE(strstr(last_init_err, "demands encryption") != NULL);
    REQUIRE_EQ(run_mode(&rank0, true, &always, 1, &irc, &peer), 0);
    REQUIRE_EQ(irc, 0);
    /* A caller that reads plain sockets only refuses encryption. */
    off.policy = QCG_ENCRYPT_OFF;
    REQUIRE_EQ(run_mode(&rank0, true, &off, 1, &irc, &peer), QCG_EPROTO);
    REQUIRE_EQ(irc, QCG_EPROTO);
    REQUIRE(strstr(last_init_err, "plain sockets only") != NULL);
    REQUIRE_EQ(run(&rank0, &off, 1, &irc, &peer), 0);
    /* inter-site: plain from another cluster refused, from ours taken. */
    inter.policy = QCG_ENCRYPT_INTER_SITE;
    REQUIRE_EQ(run(&rank0, &inter, 1, &irc, &peer), QCG_EDENIED);
    inter_a.policy = QCG_ENCRYPT_INTER_SITE;
    inter_a.cluster = "a";
    REQUIRE_EQ(run(&rank0, &inter_a, 1, &irc, &peer), 0);
    REQUIRE_EQ(irc, 0);
}

/* Relays a's bytes to b and b's to a, keeping a copy of what a sent, until
   both ends close. */
struct relay {
    int a, b;
    uint8_t seen[1 << 16];
    size_t seen_len;
};

static void *relay_run(void *arg)
{
    struct relay *r = arg;
    uint8_t buf[4096];
    bool a_open = true, b_open = true;

    while (a_open || b_open) {
        struct pollfd p[2] = {{.fd = a_open ? r->a : -1, .events = POLLIN},
                              {.fd = b_open ? r->b : -1, .events = POLLIN}};

        if (poll(p, 2, 5000) <= 0)
            break;
        for (int i = 0; i < 2; i++) {
            int from = i == 0 ? r->a : r->b, to = i == 0 ? r->b : r->a;
            ssize_t n;

            if (p[i].revents == 0)
                continue;
            n = read(from, buf, sizeof(buf));
            if (n <= 0) {
                shutdown(to, SHUT_WR);
                if (i == 0)
                    a_open = false;
                else
                    b_open = false;
                continue;
            }
            if (i == 0 && r->seen_len + (size_t)n <= sizeof(r->seen)) {
                memcpy(r->seen + r->seen_len, buf, (size_t)n);
                r->seen_len += (size_t)n;
            }
            REQUIRE(write(to, buf, (size_t)n) == n);
        }
    }
    return NULL;
}

static bool contains(const uint8_t *hay, size_t len, const uint8_t *needle, size_t nlen)
{
    for (size_t i = 0; i + nlen <= len; i++) {
        if (memcmp(hay + i, needle, nlen) == 0)
            return true;
    }
    return false;
}

/* A known 64-byte pattern sent through a recording relay: absent from the
   wire when encrypted, present when plain (so the check can fail). */
static void test_on_the_wire(void)
{
    uint8_t pattern[64], got[64];

    for (size_t i = 0; i < sizeof(pattern); i++)
        pattern[i] = (uint8_t)('A' + i % 26);
    for (int enc = 0; enc < 2; enc++) {
        struct relay *r = calloc(1, sizeof(*r));
        int sa[2], sb[2], ends[2], irc;
        char ie[QCG_ERRMSG_MAX], e[QCG_ERRMSG_MAX];
        struct hs_hello peer;
        qcg_tls *as, *bs;
        pthread_t t;
        size_t have = 0;

        REQUIRE(r != NULL);
        REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sa) == 0);
        REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sb) == 0);
        r->a = sa[1];
        r->b = sb[0];
        REQUIRE(pthread_create(&t, NULL, relay_run, r) == 0);
        ends[0] = sa[0];
        ends[1] = sb[1];
        REQUIRE_EQ(run_on(ends, &rank0, enc == 1, &rank1, 1, &irc, &peer, &as, &bs, ie, e), 0);
        REQUIRE_EQ(irc, 0);
        REQUIRE((as != NULL) == (enc == 1));
        REQUIRE(set_nonblocking(ends[0], false) == 0 && set_nonblocking(ends[1], false) == 0);
        /* The way callers holding either move bytes: the session when
           there is one, else the socket. */
        REQUIRE_EQ(qcg_conn_send(ends[0], as, pattern, sizeof(pattern)), (long)sizeof(pattern));
        while (have < sizeof(got)) {
            long n = qcg_conn_recv(ends[1], bs, got + have, sizeof(got) - have);

            REQUIRE(n > 0);
            have += (size_t)n;
        }
        REQUIRE(memcmp(got, pattern, sizeof(got)) == 0);
        qcg_tls_free(as);
        qcg_tls_free(bs);
        close(ends[0]);
        close(ends[1]);
        REQUIRE(pthread_join(t, NULL) == 0);
        close(sa[1]);
        close(sb[0]);
        if (enc)
            CHECK(!contains(r->seen, r->seen_len, pattern, sizeof(pattern)));
        else
            CHECK(contains(r->seen, r->seen_len, pattern, sizeof(pattern)));
        free(r);
    }
}

/* An encrypted pair on sp, and a's first record (16 bytes) taken off b's
   socket into wire: b's descriptor then reads what is written to *writer
   (a socket of type).  The record's length. */
static ssize_t take_record(int sp[2], qcg_tls **as, qcg_tls **bs, uint8_t *wire, size_t cap,
                           int type, int *writer)
{
    int q[2], irc;
    char ie[QCG_ERRMSG_MAX], e[QCG_ERRMSG_MAX];
    struct hs_hello peer;
    ssize_t n;

    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) == 0);
    REQUIRE_EQ(run_on(sp, &rank0, true, &rank1, 1, &irc, &peer, as, bs, ie, e), 0);
    REQUIRE(*as != NULL && *bs != NULL);
    REQUIRE_EQ(qcg_tls_send(*as, "sixteen bytes!!!", 16), 16L);
    WAIT_UNTIL((n = recv(sp[1], wire, cap, MSG_PEEK)) >= 5 + 16 + 16 + 1, 5000, "the record");
    n = read(sp[1], wire, cap);
    REQUIRE(n > 5 + 16);
    REQUIRE(socketpair(AF_UNIX, type, 0, q) == 0);
    REQUIRE(dup2(q[1], sp[1]) == sp[1]);
    close(q[1]);
    *writer = q[0];
    return n;
}

static void free_pair(int sp[2], qcg_tls *as, qcg_tls *bs, int writer)
{
    qcg_tls_free(as);
    qcg_tls_free(bs);
    if (writer >= 0)
        close(writer);
    close(sp[0]);
    close(sp[1]);
}

/* Bad records on an encrypted connection: a flipped bit, a record cut
   short.  The receiver fails with EPROTO and a reason; nothing of the
   record is delivered. */
static void test_bad_records(void)
{
    for (int kind = 0; kind < 2; kind++) {
        int sp[2], w;
        uint8_t wire[256], buf[64];
        qcg_tls *as, *bs;
        ssize_t n = take_record(sp, &as, &bs, wire, sizeof(wire), SOCK_STREAM, &w);

        if (kind == 0) {
            wire[n - 3] ^= 0x40;
            REQUIRE(write(w, wire, (size_t)n) == n);
        } else {
            REQUIRE(write(w, wire, (size_t)n - 7) == n - 7);
            close(w);
            w = -1;
        }
        errno = 0;
        REQUIRE_EQ(qcg_conn_recv(sp[1], bs, buf, sizeof(buf)), -1L);
        CHECK_EQ(errno, EPROTO);
        CHECK(qcg_tls_error(bs)[0] != '\0');
        CHECK(strcmp(qcg_conn_strerror(bs, EPROTO), qcg_tls_error(bs)) == 0);
        free_pair(sp, as, bs, w);
    }
}

/* Not a TLS 1.3 ClientHello: a TLS 1.2 one (a downgrade), and bytes that are
   no TLS at all.  Refused with a reason, never waited on to the deadline. */
static void test_downgrade(void)
{
    SSL_CTX *c = SSL_CTX_new(TLS_method());
    struct hs_hello peer;
    char err[QCG_ERRMSG_MAX];
    uint64_t t0 = now_us();
    int sp[2];
    SSL *ssl;

    /* TLS 1.2, then TLS 1.3 without a PSK (a certificate handshake). */
    REQUIRE(c != NULL);
    for (int v = 0; v < 2; v++) {
        REQUIRE(SSL_CTX_set_max_proto_version(c, v == 0 ? TLS1_2_VERSION : TLS1_3_VERSION) == 1);
        REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) == 0);
        ssl = SSL_new(c);
        REQUIRE(ssl != NULL && SSL_set_fd(ssl, sp[0]) == 1);
        REQUIRE(SSL_connect(ssl) <= 0); /* the ClientHello is out, non-blocking */
        REQUIRE_EQ(hs_respond(sp[1], &rank1, now_us() + 3000000u, &peer, err, sizeof(err)),
                   QCG_EPROTO);
        REQUIRE(now_us() - t0 < 2000000u);
        SSL_free(ssl);
        close(sp[0]);
        close(sp[1]);
    }
    SSL_CTX_free(c);

    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) == 0);
    REQUIRE(write(sp[0], "GET / HTTP/1.0\r\n\r\n", 18) == 18);
    REQUIRE_EQ(hs_respond(sp[1], &rank1, now_us() + 3000000u, &peer, err, sizeof(err)), QCG_EPROTO);
    close(sp[0]);
    close(sp[1]);
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
    REQUIRE_EQ(write(sp[0], "\x16\x03\x01", 3), 3);
    close(sp[0]);
    REQUIRE_EQ(hs_respond(sp[1], &rank1, now_us() + 1000000u, &peer, err, sizeof(err)), QCG_EPEER);
    close(sp[1]);
}

/* A record that arrives in two parts: the read of the first gets EAGAIN
   and the session then says nothing is pending (a caller that reads while
   qcg_tls_pending is not 0 must not spin on half a record); the second
   part delivers the whole. */
static void test_partial_record(void)
{
    int sp[2], w;
    uint8_t wire[256], buf[64];
    qcg_tls *as, *bs;
    ssize_t n = take_record(sp, &as, &bs, wire, sizeof(wire), SOCK_STREAM | SOCK_NONBLOCK, &w);

    REQUIRE(write(w, wire, 13) == 13);
    errno = 0;
    CHECK_EQ(qcg_tls_recv(bs, buf, sizeof(buf)), -1L);
    CHECK_EQ(errno, EAGAIN);
    CHECK_EQ(qcg_tls_pending(bs), (size_t)0);
    REQUIRE(write(w, wire + 13, (size_t)n - 13) == n - 13);
    CHECK_EQ(qcg_tls_recv(bs, buf, sizeof(buf)), 16L);
    CHECK(memcmp(buf, "sixteen bytes!!!", 16) == 0);
    free_pair(sp, as, bs, w);
}

/* A plain connection whose peer is gone: the writer gets EPIPE, not a
   SIGPIPE that would end it (qcg_conn_send on the socket). */
static void test_plain_peer_gone(void)
{
    int sp[2];

    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
    close(sp[1]);
    errno = 0;
    CHECK_EQ(qcg_conn_send(sp[0], NULL, "x", 1), -1L);
    CHECK_EQ(errno, EPIPE);
    CHECK(strcmp(qcg_conn_strerror(NULL, EPIPE), strerror(EPIPE)) == 0);
    close(sp[0]);
}

/* qcg_tls_recv on an unblocking socket, waiting up to 5 s for bytes. */
static long recv_wait(qcg_tls *t, int fd, void *buf, size_t len)
{
    for (int i = 0; i < 100; i++) {
        struct pollfd q = {.fd = fd, .events = POLLIN};
        long n = qcg_tls_recv(t, buf, len);

        if (n >= 0 || errno != EAGAIN)
            return n;
        (void)poll(&q, 1, 50);
    }
    return -1;
}

/* hs_serve as rank1 with policy. */
static struct tls_hs *serve(int fd, int policy, struct tls_self *ts, uint8_t psk[TLS_PSK_SIZE],
                            int *rc)
{
    struct hs_self b = rank1;
    struct tls_hs *t;

    b.policy = policy;
    REQUIRE((t = hs_serve(fd, &b, ts, psk, rc)) != NULL);
    return t;
}

static const char hs_token[] = "0123456789abcdef";

/* hs_reversed_hello as rank0 with policy. */
static struct tls_hs *reversed_hello(int sp[2], int policy, const char *token, int offer,
                                     struct tls_self *cs, uint8_t psk[TLS_PSK_SIZE])
{
    struct hs_self a = rank0;
    struct tls_hs *c;

    a.policy = policy;
    REQUIRE((c = hs_reversed_hello(sp, &a, 1, token, offer, cs, psk)) != NULL);
    return c;
}

/* hello (hn bytes, a target's ClientHello) replayed to a server of policy
   on a new socketpair rp: the session it hands over before any Finished. */
static qcg_tls *replayed(const uint8_t *hello, ssize_t hn, int policy, int rp[2],
                         struct tls_self *ss, uint8_t psk[TLS_PSK_SIZE])
{
    struct tls_hs *sv;
    qcg_tls *s = NULL;
    unsigned enc;
    int rc;

    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, rp) == 0);
    REQUIRE(write(rp[0], hello, (size_t)hn) == hn);
    sv = serve(rp[1], policy, ss, psk, &rc);
    REQUIRE_EQ(rc, (int)TLS_DONE);
    REQUIRE(tls_hs_take(sv, &s, &enc) == 0 && s != NULL);
    return s;
}

/* A reversed connection's sessions, socketpair and contexts. */
static void free_half_rtt(int sp[2], qcg_tls *ssess, qcg_tls *csess, struct tls_self *cs,
                          struct tls_self *ss)
{
    free_pair(sp, ssess, csess, -1);
    SSL_CTX_free(cs->ssl_ctx);
    SSL_CTX_free(ss->ssl_ctx);
}

/* The initiator of a reversed connection (the TLS server: its peer's side
   connected back) writes as soon as its flight is out, before the client's
   Finished: a connect waits one round trip less.  Only an encrypted answer
   to a token; a connection without token, or a plain one, still waits.  A
   replayed ClientHello gets that write sealed for its maker only, and the
   session fails when no Finished follows. */
static void test_half_rtt(void)
{
    static const char *const tokens[] = {hs_token, NULL, hs_token};

    for (int kind = 0; kind < 3; kind++) {
        int policy = kind == 2 ? QCG_ENCRYPT_NEVER : QCG_ENCRYPT_INTER_SITE;
        struct tls_self cs, ss;
        uint8_t cpsk[TLS_PSK_SIZE], spsk[TLS_PSK_SIZE], hello[4096], buf[64];
        struct tls_hs *c, *sv;
        qcg_tls *csess = NULL, *ssess = NULL;
        unsigned enc;
        int sp[2], rc;
        ssize_t hn;

        c = reversed_hello(sp, policy, tokens[kind], kind == 2 ? TLS_OFFER_PLAIN : TLS_OFFER_TLS,
                           &cs, cpsk);
        hn = recv(sp[1], hello, sizeof(hello), MSG_PEEK);
        REQUIRE(hn > 0);
        sv = serve(sp[1], policy, &ss, spsk, &rc);
        if (kind != 0) {
            /* The client's Finished is not in: no connection yet. */
            CHECK_EQ(rc, (int)TLS_WANT_READ);
            CHECK_EQ(hs_step_until(c, 2000), (int)TLS_DONE);
            CHECK_EQ(hs_step_until(sv, 2000), (int)TLS_DONE);
            tls_hs_free(c);
            tls_hs_free(sv);
            free_half_rtt(sp, NULL, NULL, &cs, &ss);
            continue;
        }
        CHECK_EQ(rc, (int)TLS_DONE);
        REQUIRE(rc == TLS_DONE && tls_hs_take(sv, &ssess, &enc) == 0 && ssess != NULL);
        CHECK(ssess->unfinished);
        /* Written while the client has not even read the server's flight,
           on a blocking socket (as qcg_connect returns it): the send does
           not wait for the Finished (a read would, up to SO_RCVTIMEO). */
        {
            struct timeval rcv = {.tv_sec = 3};
            uint64_t t0 = now_us();

            REQUIRE(set_nonblocking(sp[1], false) == 0);
            REQUIRE(setsockopt(sp[1], SOL_SOCKET, SO_RCVTIMEO, &rcv, sizeof(rcv)) == 0);
            CHECK_EQ(qcg_tls_send(ssess, "first", 5), 5L);
            CHECK(now_us() - t0 < 1500000u);
            REQUIRE(set_nonblocking(sp[1], true) == 0);
        }
        REQUIRE_EQ(hs_step_until(c, 2000), (int)TLS_DONE);
        REQUIRE(tls_hs_take(c, &csess, &enc) == 0 && csess != NULL);
        CHECK_EQ(recv_wait(csess, sp[0], buf, sizeof(buf)), 5L);
        CHECK(memcmp(buf, "first", 5) == 0);
        /* The client's Finished makes the server's socket readable, with
           no data after it: a blocking read returns at once (EINTR), it
           does not wait for data (qcg-cat polls, then reads). */
        {
            struct pollfd q = {.fd = sp[1], .events = POLLIN};
            uint64_t t0;

            REQUIRE(poll(&q, 1, 5000) == 1);
            REQUIRE(set_nonblocking(sp[1], false) == 0);
            t0 = now_us();
            errno = 0;
            CHECK_EQ(qcg_tls_recv(ssess, buf, sizeof(buf)), -1L);
            CHECK_EQ(errno, EINTR);
            CHECK(now_us() - t0 < 1500000u);
            CHECK(!ssess->unfinished);
            CHECK_EQ(qcg_tls_send(csess, "reply", 5), 5L);
            CHECK_EQ(qcg_tls_recv(ssess, buf, sizeof(buf)), 5L);
            CHECK(memcmp(buf, "reply", 5) == 0);
            REQUIRE(set_nonblocking(sp[1], true) == 0);
        }
        CHECK(!ssess->unfinished);
        CHECK_EQ(qcg_tls_send(ssess, "again", 5), 5L);
        CHECK_EQ(recv_wait(csess, sp[0], buf, sizeof(buf)), 5L);
        free_pair(sp, ssess, csess, -1);

        /* The same ClientHello replayed, twice: the first replayer sends
           garbage for a Finished, the second nothing. */
        for (int replay = 0; replay < 2; replay++) {
            int rp[2];
            uint8_t wire[4096];
            ssize_t wn;

            SSL_CTX_free(ss.ssl_ctx);
            ssess = replayed(hello, hn, policy, rp, &ss, spsk);
            CHECK_EQ(qcg_tls_send(ssess, "not for replayers", 17), 17L);
            wn = read(rp[0], wire, sizeof(wire));
            CHECK(wn > 0 && !contains(wire, (size_t)wn, (const uint8_t *)"not for", 7));
            errno = 0;
            if (replay == 0) {
                REQUIRE(write(rp[0], "\x17\x03\x03\x00\x05hello", 10) == 10);
                CHECK_EQ(recv_wait(ssess, rp[1], buf, sizeof(buf)), -1L);
                CHECK_EQ(errno, EPROTO);
            } else {
                ssess->finish_by_us = now_us();
                CHECK_EQ(qcg_tls_send(ssess, "x", 1), -1L);
                CHECK_EQ(errno, ETIMEDOUT);
                CHECK(strstr(qcg_tls_error(ssess), "did not finish") != NULL);
            }
            free_pair(rp, ssess, NULL, -1);
        }
        SSL_CTX_free(cs.ssl_ctx);
        SSL_CTX_free(ss.ssl_ctx);
    }
}

/* A replayed ClientHello that never sends a Finished, on a blocking socket
   (qcg_connect returns it so): recv and shutdown fail with ETIMEDOUT at the
   session's deadline (SO_RCVTIMEO only bounds the test). */
static void test_blocking_deadline(void)
{
    for (int op = 0; op < 2; op++) {
        struct tls_self cs, ss;
        uint8_t cpsk[TLS_PSK_SIZE], spsk[TLS_PSK_SIZE], hello[4096], buf[64];
        struct timeval rcv = {.tv_sec = 6};
        struct tls_hs *c;
        qcg_tls *ssess;
        int sp[2], rp[2];
        ssize_t hn;
        uint64_t t0;
        long r;

        c = reversed_hello(sp, QCG_ENCRYPT_INTER_SITE, hs_token, TLS_OFFER_TLS, &cs, cpsk);
        hn = recv(sp[1], hello, sizeof(hello), 0);
        REQUIRE(hn > 0);
        ssess = replayed(hello, hn, QCG_ENCRYPT_INTER_SITE, rp, &ss, spsk);
        ssess->finish_by_us = now_us() + 1000000u;
        REQUIRE(set_nonblocking(rp[1], false) == 0);
        REQUIRE(setsockopt(rp[1], SOL_SOCKET, SO_RCVTIMEO, &rcv, sizeof(rcv)) == 0);
        t0 = now_us();
        errno = 0;
        r = op == 0 ? qcg_tls_recv(ssess, buf, sizeof(buf)) : (long)qcg_tls_shutdown(ssess);
        CHECK_EQ(r, -1L);
        CHECK_EQ(errno, ETIMEDOUT);
        CHECK(now_us() - t0 >= 900000u && now_us() - t0 < 4000000u);
        CHECK(strstr(qcg_tls_error(ssess), "did not finish") != NULL);
        tls_hs_free(c);
        free_half_rtt(rp, ssess, NULL, &cs, &ss);
        close(sp[0]);
        close(sp[1]);
    }
}

/* Flushes from and reads into until *got reaches sent (bounded), checking
   the pattern (byte i is i % 251); whether the sender's flush ended at 0. */
static bool pattern_moved(qcg_tls *from, qcg_tls *into, long sent, long *got, bool *bad)
{
    static uint8_t rbuf[65536];
    bool flushed = false;

    for (int i = 0; i < 1000 && !(flushed && *got >= sent); i++) {
        long n;

        flushed = qcg_tls_flush(from) == 0;
        n = qcg_tls_recv(into, rbuf, sizeof(rbuf));
        for (long k = 0; k < n; k++)
            *bad = *bad || rbuf[k] != (uint8_t)((*got + k) % 251);
        if (n > 0)
            *got += n;
        else if (n < 0 && errno != EAGAIN)
            break;
        (void)poll(NULL, 0, 2);
    }
    return flushed;
}

/* Small 0.5-RTT writes on a non-blocking socket until it is full: every
   byte qcg_tls_send took reaches the client, in order, once qcg_tls_flush
   says 0, and the stream goes on intact after the Finished is taken
   (records held in OpenSSL's handshake buffer were lost there). */
static void test_early_backlog(void)
{
    struct tls_self cs, ss;
    uint8_t cpsk[TLS_PSK_SIZE], spsk[TLS_PSK_SIZE], chunk[1000], rbuf[65536];
    struct tls_hs *c, *sv;
    qcg_tls *ssess = NULL, *csess = NULL;
    unsigned enc;
    int sp[2], rc, sndbuf = 16384;
    long sent = 0, got = 0, n;
    bool bad = false;

    c = reversed_hello(sp, QCG_ENCRYPT_INTER_SITE, hs_token, TLS_OFFER_TLS, &cs, cpsk);
    (void)setsockopt(sp[1], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    sv = serve(sp[1], QCG_ENCRYPT_INTER_SITE, &ss, spsk, &rc);
    REQUIRE_EQ(rc, (int)TLS_DONE);
    REQUIRE(tls_hs_take(sv, &ssess, &enc) == 0 && ssess != NULL);
    for (int i = 0; i < 100000; i++) {
        for (size_t k = 0; k < sizeof(chunk); k++)
            chunk[k] = (uint8_t)((sent + (long)k) % 251);
        n = qcg_tls_send(ssess, chunk, sizeof(chunk));
        if (n < 0)
            break;
        sent += n;
        if ((size_t)n < sizeof(chunk))
            break;
    }
    /* Stopped by a full socket, with records waiting. */
    CHECK(n < 0 && errno == EAGAIN && sent > 0);
    CHECK(qcg_tls_unsent(ssess) > 0);
    REQUIRE_EQ(hs_step_until(c, 2000), (int)TLS_DONE);
    REQUIRE(tls_hs_take(c, &csess, &enc) == 0 && csess != NULL);
    CHECK(pattern_moved(ssess, csess, sent, &got, &bad));
    CHECK_EQ(got, sent);
    CHECK_EQ(qcg_tls_unsent(ssess), (size_t)0);
    /* The server takes the Finished, then writes on. */
    (void)qcg_tls_recv(ssess, rbuf, sizeof(rbuf));
    CHECK(!ssess->unfinished);
    for (size_t k = 0; k < sizeof(chunk); k++)
        chunk[k] = (uint8_t)((sent + (long)k) % 251);
    CHECK_EQ(qcg_tls_send(ssess, chunk, sizeof(chunk)), (long)sizeof(chunk));
    sent += (long)sizeof(chunk);
    CHECK(pattern_moved(ssess, csess, sent, &got, &bad));
    CHECK_EQ(got, sent);
    CHECK(!bad);
    free_half_rtt(sp, ssess, csess, &cs, &ss);
}

/* A reversed connection's initiator ends it before the client's Finished
   is in: qcg_tls_shutdown sends nothing yet and says to wait for the
   socket to be readable (qcg_tls_unsent 0); called again once the
   Finished is in, its close_notify goes, and the client reads a clean end
   (0, not a stream cut short).  Called again after that: 0, reading
   nothing of the peer's. */
static void test_shutdown_unfinished(void)
{
    struct tls_self cs, ss;
    uint8_t cpsk[TLS_PSK_SIZE], spsk[TLS_PSK_SIZE], buf[64];
    struct tls_hs *c, *sv;
    qcg_tls *ssess = NULL, *csess = NULL;
    unsigned enc;
    int sp[2], rc;

    c = reversed_hello(sp, QCG_ENCRYPT_INTER_SITE, hs_token, TLS_OFFER_TLS, &cs, cpsk);
    sv = serve(sp[1], QCG_ENCRYPT_INTER_SITE, &ss, spsk, &rc);
    REQUIRE_EQ(rc, (int)TLS_DONE);
    REQUIRE(tls_hs_take(sv, &ssess, &enc) == 0 && ssess != NULL);
    CHECK_EQ(qcg_tls_send(ssess, "last", 4), 4L);
    errno = 0;
    CHECK_EQ(qcg_tls_shutdown(ssess), -1);
    CHECK_EQ(errno, EAGAIN);
    CHECK_EQ(qcg_tls_unsent(ssess), (size_t)0);
    REQUIRE_EQ(hs_step_until(c, 2000), (int)TLS_DONE);
    REQUIRE(tls_hs_take(c, &csess, &enc) == 0 && csess != NULL);
    {
        struct pollfd q = {.fd = sp[1], .events = POLLIN};

        CHECK_EQ(poll(&q, 1, 5000), 1);
    }
    CHECK_EQ(qcg_tls_shutdown(ssess), 0);
    CHECK_EQ(qcg_tls_shutdown(ssess), 0);
    CHECK_EQ(recv_wait(csess, sp[0], buf, sizeof(buf)), 4L);
    CHECK(memcmp(buf, "last", 4) == 0);
    CHECK_EQ(recv_wait(csess, sp[0], buf, sizeof(buf)), 0L);
    /* The client's end, sent after the second call, is still to read. */
    CHECK_EQ(qcg_tls_shutdown(csess), 0);
    CHECK_EQ(recv_wait(ssess, sp[1], buf, sizeof(buf)), 0L);
    free_half_rtt(sp, ssess, csess, &cs, &ss);
}

int main(void)
{
    test_ok();
    test_wrong_secret();
    test_wrong_job();
    test_wrong_rank();
    test_identity();
    test_policy();
    test_on_the_wire();
    test_bad_records();
    test_partial_record();
    test_plain_peer_gone();
    test_half_rtt();
    test_early_backlog();
    test_shutdown_unfinished();
    test_blocking_deadline();
    test_downgrade();
    test_silent_peer();
    return check_result("libqcgconn-handshake");
}
