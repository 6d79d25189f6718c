/*
 * The client side of the proxy-relay test: mints tokens with the test key and
 * plays one scenario against a running qcg-proxy on 127.0.0.1, exit 0 when
 * the proxy behaved as a user expects:
 *
 *   relay MIB     two matching clients get 0x01 and exchange MIB MiB each way,
 *                 intact, with half-close: the initiator shuts down writing
 *                 after its data, the target still sends (its data and a
 *                 tail) after seeing that EOF, then the initiator sees EOF
 *   early         the initiator sends data right after its token, before the
 *                 target comes: delivered after pairing
 *   replay        a second connection with a used token is closed without an
 *                 answer; the first one still pairs
 *   forged        a token with a bad MAC, garbage, and a bad magic: closed
 *   expired S     a token past expiry + skew (skew S): closed, one within
 *                 it pairs; one expiring more than 600 s + S ahead: closed
 *   unpaired S    a lone client is closed after about S seconds
 *   paused S      the initiator connects, prints "connected", and sends its
 *                 token 1 s later (the test stops the proxy meanwhile, for
 *                 longer than its S s hello timeout); then the target comes:
 *                 both must be paired once the proxy runs again (the time it
 *                 was stopped is nobody's silence)
 *   stall S       pairs, prints "streaming target-port P" and sends both
 *                 ways; exit 0 when the initiator's end is closed within S s
 *                 (the test drops what goes to port P: the target's NAT
 *                 forgot it, and only the proxy can see that)
 *   stream        pairs, prints "streaming" and sends both ways until the
 *                 proxy goes away; exit 0 when both ends saw an error or EOF
 *                 within 5 s of it (the test kills the proxy)
 *   idle          pairs, prints "paired", then waits for the proxy to close
 *                 both connections (SIGTERM), at most 10 s
 *   full          against --max-pairs 1: while one pair is up, another
 *                 client is closed without an answer; once it ends, a new
 *                 pair is relayed again
 *   crowd N       N connections from 127.0.0.1 that never send their token
 *                 (more than the proxy's slots), held open; then a pair from
 *                 127.0.0.2 must still pair within 3 s and relay
 *   slowloris S   a client that sends its hello one byte every 500 ms is cut
 *                 within S + 1.5 s (S: the proxy's hello timeout), before it
 *                 could finish
 *   tokenflood N  N pairs made and ended one after the other with valid
 *                 tokens; prints how many the proxy took
 *   storm N       N pairs made and ended one after the other, every one must
 *                 pair (a large job's relayed pairs from one NATed site);
 *                 then the first pair's tokens, presented again, are refused
 *
 * Pair ids are random (each pair its own job), or of job PROXY_CLIENT_JOB.
 * Clients connect from 127.0.0.1, or from PROXY_CLIENT_SOURCE when set;
 * relay's target from PROXY_CLIENT_TARGET_SOURCE when set (the proxy
 * bridging families: an IPv6 source connects to ::1, an IPv4 one to
 * 127.0.0.1).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "monotonic.h"
#include "token.h"

#define PATLEN 1048573 /* prime: a shifted or repeated block does not match */
#define TAIL (256 * 1024)

static struct proxy_key key;
static int port;
static const char *source = "127.0.0.1"; /* PROXY_CLIENT_SOURCE */
static const char *target_source;        /* PROXY_CLIENT_TARGET_SOURCE, or source */
static unsigned char *pattern[2];

static void mint(int side, const unsigned char pair[16], int64_t expiry_offset, char *out)
{
    uint64_t expiry = (uint64_t)((int64_t)time(NULL) + expiry_offset);
    if (token_issue(&key, pair, side, expiry, out, TOKEN_TEXT_LEN + 1) != 0) {
        fprintf(stderr, "token_issue failed\n");
        exit(2);
    }
}

/* A random pair id, or one of job PROXY_CLIENT_JOB when set (the broker
   tags pair ids with their job: token.h). */
static void new_pair(unsigned char pair[16])
{
    const char *job = getenv("PROXY_CLIENT_JOB");
    if (job != NULL ? token_pair_new(&key, job, pair) != 0 : RAND_bytes(pair, 16) != 1)
        exit(2);
}

/* A connection to the proxy from the address from: over IPv6 to ::1 when
   from is an IPv6 address, else to 127.0.0.1. */
static int connect_from(const char *from)
{
    struct sockaddr_storage sa = {0}, src = {0};
    socklen_t len = sizeof(struct sockaddr_in);
    int family = strchr(from, ':') != NULL ? AF_INET6 : AF_INET;
    int fd = socket(family, SOCK_STREAM, 0);

    if (family == AF_INET6) {
        struct sockaddr_in6 *to = (struct sockaddr_in6 *)&sa, *me = (struct sockaddr_in6 *)&src;
        to->sin6_family = me->sin6_family = AF_INET6;
        to->sin6_port = htons((uint16_t)port);
        inet_pton(AF_INET6, "::1", &to->sin6_addr);
        inet_pton(AF_INET6, from, &me->sin6_addr);
        len = sizeof(struct sockaddr_in6);
    } else {
        struct sockaddr_in *to = (struct sockaddr_in *)&sa, *me = (struct sockaddr_in *)&src;
        to->sin_family = me->sin_family = AF_INET;
        to->sin_port = htons((uint16_t)port);
        inet_pton(AF_INET, "127.0.0.1", &to->sin_addr);
        inet_pton(AF_INET, from, &me->sin_addr);
    }
    if (fd < 0 || bind(fd, (struct sockaddr *)&src, len) < 0 ||
        connect(fd, (struct sockaddr *)&sa, len) < 0) {
        perror("connect");
        exit(1);
    }
    return fd;
}

/* Connects from `from` and sends the magic and token (raw: the 128 bytes as
   given). */
static int connect_raw_from(const char *from, const char *magic, const char *token)
{
    unsigned char hello[4 + 128] = {0};
    int fd = connect_from(from);

    memcpy(hello, magic, 4);
    memcpy(hello + 4, token, strnlen(token, 128));
    /* A proxy that refused the connection at once may have reset it: the
       caller sees the close. */
    if (send(fd, hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello))
        perror("send hello");
    return fd;
}

static int connect_raw(const char *magic, const char *token)
{
    return connect_raw_from(source, magic, token);
}

static int connect_token(const char *token)
{
    return connect_raw("QCGP", token);
}

/* 1 = readable within ms, 0 = timeout. */
static int wait_readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int n;
    do
        n = poll(&p, 1, ms);
    while (n < 0 && errno == EINTR);
    return n > 0;
}

static int expect_paired(int fd, const char *who)
{
    unsigned char b = 0;
    if (!wait_readable(fd, 5000)) {
        fprintf(stderr, "%s: no 'paired' byte within 5 s\n", who);
        return -1;
    }
    ssize_t n = recv(fd, &b, 1, 0);
    if (n != 1 || b != 0x01) {
        fprintf(stderr, "%s: expected the byte 0x01, got %zd bytes (%02x)\n", who, n, b);
        return -1;
    }
    return 0;
}

/* The proxy closes without a single byte; ms bound. */
static int expect_closed(int fd, int ms, const char *who)
{
    unsigned char b;
    if (!wait_readable(fd, ms)) {
        fprintf(stderr, "%s: still open after %d ms\n", who, ms);
        return -1;
    }
    ssize_t n = recv(fd, &b, 1, 0);
    if (n > 0) {
        fprintf(stderr, "%s: got a byte (%02x) instead of a close\n", who, b);
        return -1;
    }
    return 0;
}

/* ---- relay: both directions through one poll loop ---- */

struct flow {
    int from, to;   /* fds */
    uint64_t total; /* bytes to send before the tail */
    uint64_t tail;  /* sent after seeing the peer's EOF */
    uint64_t sent, recvd;
    bool shut, eof;
    const unsigned char *pat;
};

static int check_bytes(struct flow *f, const unsigned char *buf, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (buf[i] != f->pat[(f->recvd + i) % PATLEN]) {
            fprintf(stderr, "%s: byte %llu differs\n", name, (unsigned long long)(f->recvd + i));
            return -1;
        }
    }
    return 0;
}

static int relay_scenario(uint64_t mib, bool early)
{
    unsigned char pair[16];
    char t0[TOKEN_TEXT_LEN + 1], t1[TOKEN_TEXT_LEN + 1];
    static unsigned char buf[256 * 1024];

    new_pair(pair);
    mint(0, pair, 60, t0);
    mint(1, pair, 60, t1);
    int a = connect_token(t0);
    struct flow f[2] = {
        {.total = mib << 20, .tail = 0, .pat = pattern[0]},    /* initiator -> target */
        {.total = mib << 20, .tail = TAIL, .pat = pattern[1]}, /* target -> initiator */
    };
    if (early) {
        /* Sent right behind the token, before the peer exists: the proxy
           must read no further than the token and keep this for the peer. */
        size_t n = 1000;
        if (write(a, pattern[0], n) != (ssize_t)n)
            return -1;
        f[0].sent = n;
    }
    int b = connect_raw_from(target_source, "QCGP", t1);
    if (expect_paired(a, "initiator") || expect_paired(b, "target"))
        return -1;
    f[0].from = a, f[0].to = b;
    f[1].from = b, f[1].to = a;
    fcntl(a, F_SETFL, O_NONBLOCK);
    fcntl(b, F_SETFL, O_NONBLOCK);

    uint64_t deadline = monotonic_ms() + 60000;
    while (!(f[0].eof && f[1].eof)) {
        if (monotonic_ms() > deadline) {
            fprintf(stderr, "relay: not done in 60 s: sent %llu/%llu, received %llu/%llu\n",
                    (unsigned long long)f[0].sent, (unsigned long long)f[1].sent,
                    (unsigned long long)f[0].recvd, (unsigned long long)f[1].recvd);
            return -1;
        }
        struct pollfd p[2] = {{.fd = a}, {.fd = b}};
        for (int d = 0; d < 2; d++) {
            struct flow *x = &f[d];
            /* The target's tail may only go once it has seen the initiator's EOF. */
            uint64_t limit = x->total + (d == 1 && f[0].eof ? x->tail : 0);
            if (!x->shut && x->sent < limit)
                p[d].events |= POLLOUT;
            if (!x->eof)
                p[1 - d].events |= POLLIN;
        }
        /* Direction d writes on f[d].from = p[d].fd and is read on p[1 - d].fd. */
        if (poll(p, 2, 1000) < 0 && errno != EINTR)
            return -1;
        for (int d = 0; d < 2; d++) {
            struct flow *x = &f[d];
            uint64_t limit = x->total + (d == 1 && f[0].eof ? x->tail : 0);
            if (!x->shut && x->sent < limit && (p[d].revents & (POLLOUT | POLLERR | POLLHUP))) {
                size_t off = (size_t)(x->sent % PATLEN);
                size_t n = PATLEN - off;
                if (n > limit - x->sent)
                    n = (size_t)(limit - x->sent);
                if (n > sizeof(buf))
                    n = sizeof(buf);
                ssize_t w = send(x->from, x->pat + off, n, MSG_NOSIGNAL);
                if (w < 0 && errno != EAGAIN) {
                    fprintf(stderr, "relay: send on direction %d: %s\n", d, strerror(errno));
                    return -1;
                }
                if (w > 0)
                    x->sent += (uint64_t)w;
            }
            /* The initiator stops writing after its data; the target after its tail. */
            if (!x->shut && ((d == 0 && x->sent == x->total) ||
                             (d == 1 && f[0].eof && x->sent == x->total + x->tail))) {
                shutdown(x->from, SHUT_WR);
                x->shut = true;
            }
            if (!x->eof && (p[1 - d].revents & (POLLIN | POLLERR | POLLHUP))) {
                ssize_t r = recv(x->to, buf, sizeof(buf), 0);
                if (r > 0) {
                    if (check_bytes(x, buf, (size_t)r,
                                    d ? "target->initiator" : "initiator->target"))
                        return -1;
                    x->recvd += (uint64_t)r;
                } else if (r == 0) {
                    x->eof = true;
                    uint64_t want = x->total + x->tail;
                    if (x->recvd != want) {
                        fprintf(stderr, "direction %d: EOF after %llu bytes, expected %llu\n", d,
                                (unsigned long long)x->recvd, (unsigned long long)want);
                        return -1;
                    }
                    if (d == 0 && f[1].recvd > f[1].total) {
                        fprintf(stderr, "the target's tail arrived before its EOF was seen\n");
                        return -1;
                    }
                } else if (errno != EAGAIN) {
                    fprintf(stderr, "relay: recv on direction %d: %s\n", d, strerror(errno));
                    return -1;
                }
            }
        }
    }
    printf("relayed %llu bytes initiator->target and %llu back (%llu after the initiator's "
           "shutdown), both EOFs seen\n",
           (unsigned long long)f[0].recvd, (unsigned long long)f[1].recvd,
           (unsigned long long)f[1].tail);
    close(a);
    close(b);
    return 0;
}

static int replay_scenario(void)
{
    unsigned char pair[16];
    char t0[TOKEN_TEXT_LEN + 1], t1[TOKEN_TEXT_LEN + 1];

    new_pair(pair);
    mint(0, pair, 60, t0);
    mint(1, pair, 60, t1);
    int a = connect_token(t0);
    int again = connect_token(t0);
    if (expect_closed(again, 5000, "replayed initiator token"))
        return -1;
    int b = connect_raw_from(target_source, "QCGP", t1);
    if (expect_paired(a, "initiator") || expect_paired(b, "target"))
        return -1;
    /* The pair still works. */
    if (write(a, "ping", 4) != 4 || !wait_readable(b, 5000))
        return -1;
    char buf[8];
    if (recv(b, buf, sizeof(buf), 0) != 4 || memcmp(buf, "ping", 4) != 0) {
        fprintf(stderr, "replay: the original pair does not relay\n");
        return -1;
    }
    /* Both sides used: a third connection with either token is a replay too. */
    int late = connect_token(t1);
    if (expect_closed(late, 5000, "replayed target token"))
        return -1;
    close(a);
    close(b);
    close(again);
    close(late);
    printf("replayed tokens refused, the original pair relays\n");
    return 0;
}

static int forged_scenario(void)
{
    unsigned char pair[16];
    char t[TOKEN_TEXT_LEN + 1], garbage[129];

    new_pair(pair);
    mint(0, pair, 60, t);
    t[TOKEN_TEXT_LEN - 1] = t[TOKEN_TEXT_LEN - 1] == 'a' ? 'b' : 'a'; /* MAC */
    int fd = connect_token(t);
    if (expect_closed(fd, 5000, "bad MAC"))
        return -1;
    close(fd);
    /* Right MAC, another key: a token from a different grid. */
    struct proxy_key real = key;
    key.bytes[0] ^= 0xff;
    mint(1, pair, 60, t);
    key = real;
    fd = connect_token(t);
    if (expect_closed(fd, 5000, "other key"))
        return -1;
    close(fd);
    memset(garbage, 'x', 128);
    garbage[128] = 0;
    fd = connect_token(garbage);
    if (expect_closed(fd, 5000, "garbage token"))
        return -1;
    close(fd);
    mint(0, pair, 60, t);
    fd = connect_raw("HTTP", t);
    if (expect_closed(fd, 5000, "bad magic"))
        return -1;
    close(fd);
    /* The refused valid token was not consumed by the bad magic: it pairs. */
    char t1[TOKEN_TEXT_LEN + 1];
    mint(1, pair, 60, t1);
    int a = connect_token(t), b = connect_token(t1);
    if (expect_paired(a, "initiator") || expect_paired(b, "target"))
        return -1;
    close(a);
    close(b);
    printf("forged, foreign, garbage and bad-magic hellos refused\n");
    return 0;
}

static int expired_scenario(int skew)
{
    unsigned char pair[16];
    char t[TOKEN_TEXT_LEN + 1];

    new_pair(pair);
    mint(0, pair, -(int64_t)skew - 5, t);
    int fd = connect_token(t);
    if (expect_closed(fd, 5000, "expired token"))
        return -1;
    close(fd);
    /* Expired, but within the skew: accepted (the other side pairs it). */
    new_pair(pair);
    mint(0, pair, -(int64_t)skew + 30, t);
    char t1[TOKEN_TEXT_LEN + 1];
    mint(1, pair, -(int64_t)skew + 30, t1);
    int a = connect_token(t), b = connect_token(t1);
    if (expect_paired(a, "initiator within skew") || expect_paired(b, "target within skew"))
        return -1;
    close(a);
    close(b);
    /* Expiring further ahead than 600 s + skew (the broker's clock ahead by
       more than the skew): refused, where the proxy could not remember it
       for its whole life; 600 s + skew ahead is still taken. */
    new_pair(pair);
    mint(0, pair, 600 + (int64_t)skew + 30, t);
    fd = connect_token(t);
    if (expect_closed(fd, 5000, "token expiring 600 s + skew + 30 s ahead"))
        return -1;
    close(fd);
    new_pair(pair);
    mint(0, pair, 600 + (int64_t)skew - 5, t);
    mint(1, pair, 600 + (int64_t)skew - 5, t1);
    a = connect_token(t);
    b = connect_token(t1);
    if (expect_paired(a, "initiator 600 s + skew ahead") ||
        expect_paired(b, "target 600 s + skew ahead"))
        return -1;
    close(a);
    close(b);
    printf("token past expiry + %d s refused, within the skew accepted; one expiring beyond "
           "600 s + skew ahead refused\n",
           skew);
    return 0;
}

static int unpaired_scenario(int seconds)
{
    unsigned char pair[16];
    char t[TOKEN_TEXT_LEN + 1];

    new_pair(pair);
    mint(1, pair, 60, t);
    uint64_t t0 = monotonic_ms();
    int fd = connect_token(t);
    if (expect_closed(fd, seconds * 1000 + 3000, "unpaired"))
        return -1;
    uint64_t took = monotonic_ms() - t0;
    close(fd);
    if (took + 300 < (uint64_t)seconds * 1000) {
        fprintf(stderr, "unpaired: closed after %llu ms, before the %d s timeout\n",
                (unsigned long long)took, seconds);
        return -1;
    }
    printf("unpaired client closed after %llu ms (pair-timeout %d s)\n", (unsigned long long)took,
           seconds);
    return 0;
}

/* Both ends see an error or EOF within 5 s once the proxy is gone. */
static int stream_scenario(void)
{
    unsigned char pair[16];
    char t0[TOKEN_TEXT_LEN + 1], t1[TOKEN_TEXT_LEN + 1];
    static unsigned char buf[65536];

    new_pair(pair);
    mint(0, pair, 60, t0);
    mint(1, pair, 60, t1);
    int fd[2] = {connect_token(t0), connect_token(t1)};
    if (expect_paired(fd[0], "initiator") || expect_paired(fd[1], "target"))
        return -1;
    fcntl(fd[0], F_SETFL, O_NONBLOCK);
    fcntl(fd[1], F_SETFL, O_NONBLOCK);
    printf("streaming\n");
    fflush(stdout);
    bool ended[2] = {false, false};
    uint64_t first_end = 0, deadline = monotonic_ms() + 30000;
    while (!(ended[0] && ended[1])) {
        uint64_t t = monotonic_ms();
        if (t > deadline || (first_end && t > first_end + 5000)) {
            fprintf(stderr, "stream: ends %s/%s after the proxy went away\n",
                    ended[0] ? "closed" : "OPEN", ended[1] ? "closed" : "OPEN");
            return -1;
        }
        struct pollfd p[2];
        for (int i = 0; i < 2; i++)
            p[i] = (struct pollfd){.fd = ended[i] ? -1 : fd[i], .events = POLLIN | POLLOUT};
        poll(p, 2, 200);
        for (int i = 0; i < 2; i++) {
            if (ended[i])
                continue;
            if (p[i].revents & POLLOUT) {
                if (send(fd[i], buf, sizeof(buf), MSG_NOSIGNAL) < 0 && errno != EAGAIN)
                    ended[i] = true;
            }
            if (p[i].revents & (POLLIN | POLLERR | POLLHUP)) {
                ssize_t r = recv(fd[i], buf, sizeof(buf), 0);
                if (r == 0 || (r < 0 && errno != EAGAIN))
                    ended[i] = true;
            }
            if (ended[i] && !first_end)
                first_end = monotonic_ms();
        }
    }
    printf("both ends saw the proxy go\n");
    return 0;
}

static int idle_scenario(void)
{
    unsigned char pair[16];
    char t0[TOKEN_TEXT_LEN + 1], t1[TOKEN_TEXT_LEN + 1];

    new_pair(pair);
    mint(0, pair, 60, t0);
    mint(1, pair, 60, t1);
    int a = connect_token(t0), b = connect_token(t1);
    if (expect_paired(a, "initiator") || expect_paired(b, "target"))
        return -1;
    printf("paired\n");
    fflush(stdout);
    if (expect_closed(a, 10000, "initiator at proxy stop") ||
        expect_closed(b, 10000, "target at proxy stop"))
        return -1;
    printf("both ends closed by the proxy's stop\n");
    return 0;
}

/* Connects both sides of a new pair; 0 and the fds when paired. */
static int try_pair(int fd[2], int ms)
{
    unsigned char pair[16];
    char t0[TOKEN_TEXT_LEN + 1], t1[TOKEN_TEXT_LEN + 1];
    unsigned char b[2] = {0, 0};

    new_pair(pair);
    mint(0, pair, 60, t0);
    mint(1, pair, 60, t1);
    fd[0] = connect_token(t0);
    fd[1] = connect_token(t1);
    for (int i = 0; i < 2; i++) {
        if (!wait_readable(fd[i], ms) || recv(fd[i], &b[i], 1, 0) != 1 || b[i] != 0x01) {
            close(fd[0]);
            close(fd[1]);
            return -1;
        }
    }
    return 0;
}

static int full_scenario(void)
{
    int p[2], q[2];
    unsigned char pair[16];
    char t[TOKEN_TEXT_LEN + 1];

    if (try_pair(p, 5000) != 0) {
        fprintf(stderr, "full: the first pair did not pair\n");
        return -1;
    }
    new_pair(pair);
    mint(0, pair, 60, t);
    int extra = connect_token(t);
    if (expect_closed(extra, 5000, "a client beyond max-pairs"))
        return -1;
    close(extra);
    close(p[0]);
    close(p[1]);
    /* The proxy frees the slot once it has seen both closes: retry, bounded. */
    for (int attempt = 0; attempt < 50; attempt++) {
        if (try_pair(q, 1000) == 0) {
            close(q[0]);
            close(q[1]);
            printf("beyond max-pairs refused; a new pair relays once the first ended\n");
            return 0;
        }
        usleep(100 * 1000);
    }
    fprintf(stderr, "full: no new pair within 50 attempts after the first ended\n");
    return -1;
}

static int crowd_scenario(int n)
{
    int *idle = calloc((size_t)n, sizeof(int)), p[2];
    char buf[8];

    if (idle == NULL)
        return -1;
    for (int i = 0; i < n; i++)
        idle[i] = connect_from("127.0.0.1");
    /* The proxy has taken them all (the last ones are accepted last). */
    usleep(200 * 1000);
    source = "127.0.0.2";
    uint64_t t0 = monotonic_ms();
    int rc = try_pair(p, 3000);
    if (rc != 0) {
        fprintf(stderr,
                "crowd: a pair from 127.0.0.2 did not pair within 3 s while %d "
                "connections from 127.0.0.1 sent nothing\n",
                n);
    } else if (write(p[0], "ping", 4) != 4 || !wait_readable(p[1], 3000) ||
               recv(p[1], buf, sizeof(buf), 0) != 4 || memcmp(buf, "ping", 4) != 0) {
        fprintf(stderr, "crowd: the pair does not relay\n");
        rc = -1;
    }
    if (rc == 0) {
        printf("a pair from another address paired in %llu ms and relays beside %d idle "
               "connections\n",
               (unsigned long long)(monotonic_ms() - t0), n);
        close(p[0]);
        close(p[1]);
    }
    for (int i = 0; i < n; i++)
        close(idle[i]);
    free(idle);
    return rc;
}

static int slowloris_scenario(int seconds)
{
    unsigned char pair[16];
    char t[TOKEN_TEXT_LEN + 1];
    unsigned char hello[4 + 128] = {0};
    size_t sent = 0;

    new_pair(pair);
    mint(0, pair, 60, t);
    memcpy(hello, "QCGP", 4);
    memcpy(hello + 4, t, TOKEN_TEXT_LEN);
    int fd = connect_from(source);
    uint64_t t0 = monotonic_ms(), limit = (uint64_t)seconds * 1000 + 1500;
    for (;;) {
        if (wait_readable(fd, 500)) {
            unsigned char b;
            if (recv(fd, &b, 1, 0) > 0) {
                fprintf(stderr, "slowloris: got a byte instead of a close\n");
                return -1;
            }
            break;
        }
        if (sent < sizeof(hello) && send(fd, hello + sent, 1, MSG_NOSIGNAL) == 1)
            sent++;
        if (monotonic_ms() - t0 > limit) {
            fprintf(stderr, "slowloris: still open after %llu ms (%zu bytes sent)\n",
                    (unsigned long long)(monotonic_ms() - t0), sent);
            return -1;
        }
    }
    uint64_t took = monotonic_ms() - t0;
    close(fd);
    if (took + 500 < (uint64_t)seconds * 1000) {
        fprintf(stderr, "slowloris: cut after %llu ms, before the %d s\n", (unsigned long long)took,
                seconds);
        return -1;
    }
    printf("a hello of one byte every 500 ms cut after %llu ms (%zu of %zu bytes sent)\n",
           (unsigned long long)took, sent, sizeof(hello));
    return 0;
}

static int paused_scenario(int seconds)
{
    unsigned char pair[16];
    char t0[TOKEN_TEXT_LEN + 1], t1[TOKEN_TEXT_LEN + 1];
    unsigned char hello[4 + 128] = {0};

    new_pair(pair);
    mint(0, pair, 60, t0);
    mint(1, pair, 60, t1);
    memcpy(hello, "QCGP", 4);
    memcpy(hello + 4, t0, TOKEN_TEXT_LEN);
    int fd0 = connect_from(source);
    printf("connected\n");
    fflush(stdout);
    struct timespec second = {1, 0};
    nanosleep(&second, NULL);
    if (send(fd0, hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello)) {
        perror("paused: send hello");
        return -1;
    }
    int fd1 = connect_token(t1);
    /* The proxy runs again S + 2 s after "connected" at the latest. */
    if (!wait_readable(fd0, (seconds + 10) * 1000)) {
        fprintf(stderr, "paused: no answer within %d s\n", seconds + 10);
        return -1;
    }
    int rc = expect_paired(fd0, "paused: initiator") || expect_paired(fd1, "paused: target");
    close(fd0);
    close(fd1);
    if (rc == 0)
        printf("a token sent while the proxy was stopped past its hello timeout: paired\n");
    return rc ? -1 : 0;
}

static int tokenflood_scenario(int n)
{
    int p[2], paired = 0;

    for (int i = 0; i < n; i++) {
        if (try_pair(p, 1000) == 0) {
            paired++;
            close(p[0]);
            close(p[1]);
        }
    }
    printf("%d of %d pairs of one flood taken\n", paired, n);
    return paired > 0 ? 0 : -1;
}

static int storm_scenario(int n)
{
    unsigned char pair[16];
    char t[2][TOKEN_TEXT_LEN + 1], first[2][TOKEN_TEXT_LEN + 1];
    uint64_t start = monotonic_ms();

    for (int i = 0; i < n; i++) {
        unsigned char b[2] = {0, 0};
        int fd[2];

        new_pair(pair);
        mint(0, pair, 60, t[0]);
        mint(1, pair, 60, t[1]);
        if (i == 0)
            memcpy(first, t, sizeof(first));
        fd[0] = connect_token(t[0]);
        fd[1] = connect_token(t[1]);
        for (int k = 0; k < 2; k++) {
            if (!wait_readable(fd[k], 5000) || recv(fd[k], &b[k], 1, 0) != 1 || b[k] != 0x01) {
                fprintf(stderr, "storm: pair %d of %d was not paired (side %d)\n", i + 1, n, k);
                return -1;
            }
        }
        /* Reset, not closed: tens of thousands of TIME_WAIT sockets from
           one address would make each connect search for a free port. */
        for (int k = 0; k < 2; k++) {
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            setsockopt(fd[k], SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
            close(fd[k]);
        }
    }
    uint64_t took = monotonic_ms() - start;
    /* Both tokens of the first pair, long after: still single use. */
    for (int k = 0; k < 2; k++) {
        int fd = connect_token(first[k]);
        if (expect_closed(fd, 5000,
                          k ? "the first pair's target token again"
                            : "the first pair's initiator token again"))
            return -1;
        close(fd);
    }
    printf("%d of %d pairs of one job paired in %llu ms; the first pair's tokens refused again\n",
           n, n, (unsigned long long)took);
    return 0;
}

static int load_key(const char *path)
{
    char err[256];
    if (proxy_key_load(path, &key, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return 0;
}

/* The initiator's end is closed within seconds once the target's leg
   acknowledges nothing (the test drops its packets after our line). */
static int stall_scenario(int seconds)
{
    unsigned char pair[16];
    char t0[TOKEN_TEXT_LEN + 1], t1[TOKEN_TEXT_LEN + 1];
    static unsigned char buf[65536];
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);

    new_pair(pair);
    mint(0, pair, 60, t0);
    mint(1, pair, 60, t1);
    int fd[2] = {connect_token(t0), connect_token(t1)};
    if (expect_paired(fd[0], "initiator") || expect_paired(fd[1], "target") ||
        getsockname(fd[1], (struct sockaddr *)&sa, &len) < 0)
        return -1;
    fcntl(fd[0], F_SETFL, O_NONBLOCK);
    fcntl(fd[1], F_SETFL, O_NONBLOCK);
    printf("streaming target-port %d\n", ntohs(sa.sin_port));
    fflush(stdout);
    uint64_t t0_ms = monotonic_ms(), deadline = t0_ms + (uint64_t)seconds * 1000;
    for (;;) {
        if (monotonic_ms() > deadline) {
            fprintf(stderr, "stall: the initiator's end still open after %d s\n", seconds);
            return -1;
        }
        struct pollfd p[2];
        for (int i = 0; i < 2; i++)
            p[i] = (struct pollfd){.fd = fd[i], .events = POLLIN | POLLOUT};
        poll(p, 2, 200);
        for (int i = 0; i < 2; i++) {
            bool gone = false;
            if ((p[i].revents & POLLOUT) && send(fd[i], buf, sizeof(buf), MSG_NOSIGNAL) < 0 &&
                errno != EAGAIN)
                gone = true;
            if (p[i].revents & (POLLIN | POLLERR | POLLHUP)) {
                ssize_t r = recv(fd[i], buf, sizeof(buf), 0);
                gone |= r == 0 || (r < 0 && errno != EAGAIN);
            }
            if (gone && i == 0) {
                printf("the initiator's end closed %llu ms after the drop began\n",
                       (unsigned long long)(monotonic_ms() - t0_ms));
                return 0;
            }
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: proxy-client PORT KEYFILE SCENARIO [ARG]\n");
        return 2;
    }
    port = atoi(argv[1]);
    if (load_key(argv[2]) != 0)
        return 2;
    const char *s = argv[3];
    int arg = argc > 4 ? atoi(argv[4]) : 0;
    if (getenv("PROXY_CLIENT_SOURCE") != NULL)
        source = getenv("PROXY_CLIENT_SOURCE");
    target_source = getenv("PROXY_CLIENT_TARGET_SOURCE");
    if (target_source == NULL)
        target_source = source;
    for (int d = 0; d < 2; d++) {
        pattern[d] = malloc(PATLEN);
        if (pattern[d] == NULL || RAND_bytes(pattern[d], PATLEN) != 1)
            return 2;
    }
    int rc;
    if (strcmp(s, "relay") == 0)
        rc = relay_scenario(arg > 0 ? (uint64_t)arg : 32, false);
    else if (strcmp(s, "early") == 0)
        rc = relay_scenario(1, true);
    else if (strcmp(s, "replay") == 0)
        rc = replay_scenario();
    else if (strcmp(s, "forged") == 0)
        rc = forged_scenario();
    else if (strcmp(s, "expired") == 0)
        rc = expired_scenario(arg);
    else if (strcmp(s, "unpaired") == 0)
        rc = unpaired_scenario(arg);
    else if (strcmp(s, "stream") == 0)
        rc = stream_scenario();
    else if (strcmp(s, "paused") == 0)
        rc = paused_scenario(arg);
    else if (strcmp(s, "stall") == 0)
        rc = stall_scenario(arg);
    else if (strcmp(s, "idle") == 0)
        rc = idle_scenario();
    else if (strcmp(s, "full") == 0)
        rc = full_scenario();
    else if (strcmp(s, "crowd") == 0)
        rc = crowd_scenario(arg);
    else if (strcmp(s, "slowloris") == 0)
        rc = slowloris_scenario(arg);
    else if (strcmp(s, "tokenflood") == 0)
        rc = tokenflood_scenario(arg);
    else if (strcmp(s, "storm") == 0)
        rc = storm_scenario(arg);
    else {
        fprintf(stderr, "unknown scenario %s\n", s);
        return 2;
    }
    free(pattern[0]);
    free(pattern[1]);
    if (rc != 0)
        fprintf(stderr, "proxy-client %s: FAILED\n", s);
    return rc == 0 ? 0 : 1;
}
