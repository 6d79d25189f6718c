/*
 * broker-reflector: the reflector on 127.0.0.1:18410 with short waits, driven
 * by blocking clients.  MAP, PUNCH pairing, every token refusal, the missing
 * peer, the misdeclared port-preserving side, malformed, overlong and slow
 * requests, DIAL open/refused, the connection cap, running out of file
 * descriptors, the expected table's bound and a stop with a client waiting.  Ports 18410-18412.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "line_answer.h"
#include "log.h"
#include "monotonic.h"
#include "reflector.h"

#define PORT 18410
#define DIAL_OPEN_PORT 18411
#define DIAL_CLOSED_PORT 18412
#define WAIT_MS 300 /* the tuned read and pair waits */

static struct proxy_key key, other_key;
static atomic_int observed;

static void on_observe(void *arg, const struct reflector_observation *o)
{
    (void)arg;
    (void)o;
    atomic_fetch_add(&observed, 1);
}

static void send_text(int fd, const char *text)
{
    size_t n = strlen(text);
    if (send(fd, text, n, MSG_NOSIGNAL) != (ssize_t)n)
        fprintf(stderr, "send: %s\n", strerror(errno));
}

static void ask(const char *line, char *out, size_t outlen)
{
    int fd = line_client(PORT, NULL, NULL);
    send_text(fd, line);
    line_answer(fd, out, outlen);
    close(fd);
}

/* From /proc/net/tcp, peer_port 0: the connections waiting in the
   reflector's backlog (its listener's rx_queue); else whether it has
   accepted the one from peer_port (a descriptor: an inode).  -1 if
   unreadable. */
static int tcp_seen(int peer_port)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    char line[512];
    int n = 0;

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned port, peer, state, queued;
        unsigned long inode;

        if (sscanf(line, " %*d: %*x:%x %*x:%x %x %*x:%x %*x:%*x %*x %*u %*u %lu", &port, &peer,
                   &state, &queued, &inode) != 5 ||
            port != PORT)
            continue;
        if (peer_port == 0 && state == 0x0A /* LISTEN */)
            n += (int)queued;
        else if (peer_port != 0 && (int)peer == peer_port && inode != 0)
            n++;
    }
    fclose(f);
    return n;
}

/* Descriptors of this process, the reflector's and ours. */
static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = -3; /* ".", ".." and the directory's own */

    if (d == NULL)
        return -1;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

/* open_fds() once the reflector had started: it holds no connection, and
   none waits to be accepted, when the count is back to it (and the test
   holds nothing more).  /proc/net/tcp alone does not tell: a socket whose
   peer's FIN came after ours is listed in TIME_WAIT, without its inode,
   before the reflector has closed its descriptor. */
static int fds_idle;

static bool reflector_idle(void)
{
    return open_fds() == fds_idle && tcp_seen(0) == 0;
}

/* PUNCH requests the reflector has taken so far. */
static uint64_t punches(struct reflector *r)
{
    struct reflector_counters c;

    reflector_counters(r, &c);
    return c.punches;
}

static void make_pair(unsigned char pair[TOKEN_PAIR_LEN], unsigned char tag)
{
    memset(pair, 0, TOKEN_PAIR_LEN);
    pair[0] = tag;
    pair[1] = (unsigned char)(monotonic_ms() & 0xff);
}

static void expect(struct reflector *r, const unsigned char pair[TOKEN_PAIR_LEN], bool preserving0)
{
    struct reflector_side sides[2];
    memset(sides, 0, sizeof(sides));
    snprintf(sides[0].cluster, sizeof(sides[0].cluster), "nata");
    snprintf(sides[0].node, sizeof(sides[0].node), "nata1");
    sides[0].preserving = preserving0;
    snprintf(sides[1].cluster, sizeof(sides[1].cluster), "natb");
    snprintf(sides[1].node, sizeof(sides[1].node), "natb1");
    CHECKF(reflector_expect(r, pair, sides, (uint64_t)time(NULL) + 60) == 0, "expect");
}

static void punch_line(const struct proxy_key *k, const unsigned char pair[TOKEN_PAIR_LEN],
                       int side, uint64_t expiry, int port, char *out, size_t outlen)
{
    char tok[TOKEN_TEXT_LEN + 1];
    token_issue(k, pair, side, expiry, tok, sizeof(tok));
    snprintf(out, outlen, "PUNCH %s 127.0.0.1 %d\n", tok, port);
}

static void test_parser(void)
{
    struct reflector_request req;
    char why[160];
    static const char *bad[] = {"",           "HELLO",   "MAP x",       "MAP ",    " MAP",
                                "DIAL",       "DIAL 0",  "DIAL 65536",  "DIAL 01", "DIAL -1",
                                "DIAL 80 80", "DIAL 8a", "PUNCH a b c", "PUNCH",   "map",
                                "MAP\r",      "DIAL  80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECKF(reflector_parse(bad[i], strlen(bad[i]), &req, why, sizeof(why)) < 0, "'%s' parsed",
               bad[i]);
    char line[300];
    char tok[TOKEN_TEXT_LEN + 1];
    memset(tok, 'a', TOKEN_TEXT_LEN);
    tok[TOKEN_TEXT_LEN] = '\0';
    snprintf(line, sizeof(line), "PUNCH %s 999.1.1.1 5", tok);
    CHECKF(reflector_parse(line, strlen(line), &req, why, sizeof(why)) < 0, "bad address parsed");
    snprintf(line, sizeof(line), "PUNCH %s 198.18.1.11 40000", tok);
    CHECKF(reflector_parse(line, strlen(line), &req, why, sizeof(why)) == 0 &&
               req.verb == REFLECTOR_PUNCH && req.port == 40000,
           "good PUNCH: %s", why);
    snprintf(line, sizeof(line), "PUNCH %s 2001:db8::1 65535", tok);
    CHECKF(reflector_parse(line, strlen(line), &req, why, sizeof(why)) == 0, "v6 PUNCH: %s", why);
    CHECKF(reflector_parse("DIAL 65535", 10, &req, why, sizeof(why)) == 0 && req.port == 65535,
           "DIAL 65535");
    memset(line, 'M', sizeof(line));
    CHECKF(reflector_parse(line, sizeof(line), &req, why, sizeof(why)) < 0, "overlong parsed");
}

static void test_map(void)
{
    char ans[400], want[64];
    int local = 0, fd = line_client(PORT, NULL, &local);

    send_text(fd, "MAP\n");
    line_answer(fd, ans, sizeof(ans));
    close(fd);
    snprintf(want, sizeof(want), "MAPPED 127.0.0.1 %d", local);
    CHECKF(strcmp(ans, want) == 0, "MAP: '%s', want '%s'", ans, want);
}

static void test_pairing(struct reflector *r)
{
    unsigned char pair[TOKEN_PAIR_LEN];
    char la[200], lb[200], aa[400], ab[400], want[128];
    int pa = 0, pb = 0;
    uint64_t exp = (uint64_t)time(NULL) + 60;

    make_pair(pair, 1);
    expect(r, pair, false);
    int a = line_client(PORT, NULL, &pa), b = line_client(PORT, NULL, &pb);
    punch_line(&key, pair, 0, exp, pa, la, sizeof(la));
    punch_line(&key, pair, 1, exp, pb, lb, sizeof(lb));
    uint64_t taken = punches(r);
    send_text(a, la);
    WAIT_UNTIL(punches(r) > taken, 2000, "the reflector to take a's PUNCH (a then waits for b)");
    send_text(b, lb);
    line_answer(a, aa, sizeof(aa));
    line_answer(b, ab, sizeof(ab));
    close(a);
    close(b);
    snprintf(want, sizeof(want), "PEER 127.0.0.1 %d 127.0.0.1 %d", pb, pa);
    CHECKF(strcmp(aa, want) == 0, "initiator got '%s', want '%s'", aa, want);
    snprintf(want, sizeof(want), "PEER 127.0.0.1 %d 127.0.0.1 %d", pa, pb);
    CHECKF(strcmp(ab, want) == 0, "target got '%s', want '%s'", ab, want);

    /* Each token is good once. */
    ask(la, aa, sizeof(aa));
    CHECKF(strstr(aa, "FAIL") == aa && strstr(aa, "already used"), "reuse: '%s'", aa);
}

static void test_refusals(struct reflector *r)
{
    unsigned char pair[TOKEN_PAIR_LEN], stranger[TOKEN_PAIR_LEN];
    char line[300], ans[400], tok[TOKEN_TEXT_LEN + 1];
    uint64_t exp = (uint64_t)time(NULL) + 60;

    make_pair(pair, 2);
    expect(r, pair, false);
    memset(tok, 'f', TOKEN_TEXT_LEN);
    tok[TOKEN_TEXT_LEN] = '\0';
    snprintf(line, sizeof(line), "PUNCH %s 127.0.0.1 5000\n", tok);
    ask(line, ans, sizeof(ans));
    CHECKF(strncmp(ans, "FAIL", 4) == 0 && strstr(ans, "malformed"), "bad token: '%s'", ans);

    punch_line(&other_key, pair, 0, exp, 5000, line, sizeof(line));
    ask(line, ans, sizeof(ans));
    CHECKF(strncmp(ans, "FAIL", 4) == 0 && strstr(ans, "bad MAC"), "forged: '%s'", ans);

    punch_line(&key, pair, 0, (uint64_t)time(NULL) - 3600, 5000, line, sizeof(line));
    ask(line, ans, sizeof(ans));
    CHECKF(strncmp(ans, "FAIL", 4) == 0 && strstr(ans, "expired"), "expired: '%s'", ans);

    make_pair(stranger, 3);
    punch_line(&key, stranger, 0, exp, 5000, line, sizeof(line));
    ask(line, ans, sizeof(ans));
    CHECKF(strncmp(ans, "FAIL", 4) == 0 && strstr(ans, "no punch expected"), "unexpected: '%s'",
           ans);
}

/* Both PUNCHes of a pair before the broker's plan reached the reflector (its
   EXPECT crosses to another thread, or process): held, then paired once the
   plan comes, not refused. */
static void test_early(struct reflector *r)
{
    unsigned char pair[TOKEN_PAIR_LEN];
    char la[200], lb[200], aa[400], ab[400], want[128];
    int pa = 0, pb = 0;
    uint64_t exp = (uint64_t)time(NULL) + 60;

    make_pair(pair, 9);
    int a = line_client(PORT, NULL, &pa), b = line_client(PORT, NULL, &pb);
    punch_line(&key, pair, 0, exp, pa, la, sizeof(la));
    punch_line(&key, pair, 1, exp, pb, lb, sizeof(lb));
    uint64_t taken = punches(r);
    send_text(a, la);
    send_text(b, lb);
    WAIT_UNTIL(punches(r) >= taken + 2, 2000, "the reflector to take both early PUNCHes");
    expect(r, pair, false);
    line_answer(a, aa, sizeof(aa));
    line_answer(b, ab, sizeof(ab));
    close(a);
    close(b);
    snprintf(want, sizeof(want), "PEER 127.0.0.1 %d 127.0.0.1 %d", pb, pa);
    CHECKF(strcmp(aa, want) == 0, "early initiator got '%s', want '%s'", aa, want);
    snprintf(want, sizeof(want), "PEER 127.0.0.1 %d 127.0.0.1 %d", pa, pb);
    CHECKF(strcmp(ab, want) == 0, "early target got '%s', want '%s'", ab, want);
}

static void test_missing_peer(struct reflector *r)
{
    unsigned char pair[TOKEN_PAIR_LEN];
    char line[300], ans[400];
    int pa = 0;

    make_pair(pair, 4);
    expect(r, pair, false);
    int a = line_client(PORT, NULL, &pa);
    punch_line(&key, pair, 0, (uint64_t)time(NULL) + 60, pa, line, sizeof(line));
    uint64_t t0 = monotonic_ms();
    send_text(a, line);
    line_answer(a, ans, sizeof(ans));
    uint64_t took = monotonic_ms() - t0;
    close(a);
    CHECKF(strncmp(ans, "FAIL", 4) == 0 && strstr(ans, "did not come"), "alone: '%s'", ans);
    CHECKF(took >= WAIT_MS - 20 && took < WAIT_MS + 700, "alone: FAIL after %llu ms",
           (unsigned long long)took);
    printf("missing peer: FAIL after %llu ms (wait %d ms)\n", (unsigned long long)took, WAIT_MS);

    /* The other side coming later hears that its peer has given up. */
    punch_line(&key, pair, 1, (uint64_t)time(NULL) + 60, 5000, line, sizeof(line));
    ask(line, ans, sizeof(ans));
    CHECKF(strncmp(ans, "FAIL", 4) == 0 && strstr(ans, "came and is gone"), "late: '%s'", ans);
}

static void test_misdeclared(struct reflector *r)
{
    unsigned char pair[TOKEN_PAIR_LEN];
    char la[300], lb[300], aa[400], ab[400];
    int pa = 0, pb = 0;
    uint64_t exp = (uint64_t)time(NULL) + 60;
    struct reflector_counters c0, c1;

    reflector_counters(r, &c0);
    make_pair(pair, 5);
    expect(r, pair, true); /* the initiator (nata/nata1) claims to keep ports */
    int a = line_client(PORT, NULL, &pa), b = line_client(PORT, NULL, &pb);
    punch_line(&key, pair, 1, exp, pb, lb, sizeof(lb));
    punch_line(&key, pair, 0, exp, pa + 1, la, sizeof(la)); /* as a NAT that moved it */
    send_text(b, lb);
    WAIT_UNTIL(punches(r) > c0.punches, 2000, "the reflector to take b's PUNCH");
    uint64_t t0 = monotonic_ms();
    send_text(a, la);
    line_answer(a, aa, sizeof(aa));
    line_answer(b, ab, sizeof(ab));
    uint64_t took = monotonic_ms() - t0;
    close(a);
    close(b);
    reflector_counters(r, &c1);
    for (int i = 0; i < 2; i++) {
        const char *s = i ? ab : aa;
        CHECKF(strncmp(s, "FAIL", 4) == 0 && strstr(s, "misconfiguration") &&
                   strstr(s, "cluster nata node nata1"),
               "misdeclared side %d: '%s'", i, s);
    }
    char ports[64];
    snprintf(ports, sizeof(ports), "local port %d was observed as 127.0.0.1:%d", pa + 1, pa);
    CHECKF(strstr(aa, ports) != NULL, "both ports named: '%s'", aa);
    /* "misconfiguration" above says which path answered; the time only has
       to stay clear of the pair wait's FAIL on a loaded machine. */
    CHECKF(took < WAIT_MS + 700, "misdeclared answered in %llu ms", (unsigned long long)took);
    CHECKF(c1.misdeclared == c0.misdeclared + 1, "misdeclared counter");
    printf("misdeclared: FAIL to both in %llu ms\n", (unsigned long long)took);
}

static void test_bad_lines(void)
{
    char ans[400], big[400];

    static const char *bad[] = {"HELLO\n",    "MAP x\n",    "DIAL 0\n",     "DIAL 99999\n",
                                "\x01\x02\n", "MAP\nMAP\n", "PUNCH 1 2 3\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ask(bad[i], ans, sizeof(ans));
        CHECKF(strncmp(ans, "FAIL ", 5) == 0, "line %zu: '%s'", i, ans);
    }
    memset(big, 'M', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ask(big, ans, sizeof(ans));
    CHECKF(strncmp(ans, "FAIL", 4) == 0 && strstr(ans, "longer"), "overlong: '%s'", ans);

    /* A slow client (no newline) is cut off at the read timeout. */
    int fd = line_client(PORT, NULL, NULL);
    uint64_t t0 = monotonic_ms();
    send_text(fd, "MA");
    line_answer(fd, ans, sizeof(ans));
    uint64_t took = monotonic_ms() - t0;
    close(fd);
    CHECKF(strncmp(ans, "FAIL", 4) == 0 && strstr(ans, "no request line"), "slow: '%s'", ans);
    CHECKF(took >= WAIT_MS - 20 && took < WAIT_MS + 700, "slow: closed after %llu ms",
           (unsigned long long)took);
    printf("slow client: FAIL after %llu ms (read timeout %d ms)\n", (unsigned long long)took,
           WAIT_MS);
}

static void test_dial(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(DIAL_OPEN_PORT)};
    int one = 1, l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    char ans[400], want[80];

    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    CHECKF(bind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(l, 4) == 0,
           "listen on %d: %s", DIAL_OPEN_PORT, strerror(errno));
    snprintf(want, sizeof(want), "DIAL %d\n", DIAL_OPEN_PORT);
    ask(want, ans, sizeof(ans));
    snprintf(want, sizeof(want), "DIALED 127.0.0.1 %d open", DIAL_OPEN_PORT);
    CHECKF(strcmp(ans, want) == 0, "dial open: '%s'", ans);
    close(l);

    snprintf(want, sizeof(want), "DIAL %d\n", DIAL_CLOSED_PORT);
    ask(want, ans, sizeof(ans));
    snprintf(want, sizeof(want), "DIALED 127.0.0.1 %d reset", DIAL_CLOSED_PORT);
    CHECKF(strcmp(ans, want) == 0, "dial closed: '%s'", ans);
}

/* Twice the cap: the extra connections are closed, nothing crashes, and the
   reflector serves again once they are gone. */
static void test_cap(struct reflector *r, unsigned cap)
{
    int fds[64], closed = 0;
    unsigned n = 2 * cap;
    struct reflector_counters c0, c1;

    reflector_counters(r, &c0);
    for (unsigned i = 0; i < n; i++)
        fds[i] = line_client(PORT, NULL, NULL);
    for (unsigned i = 0; i < n; i++) {
        struct pollfd p = {.fd = fds[i], .events = POLLIN};
        char b;
        if (fds[i] >= 0 && poll(&p, 1, 100) == 1 && recv(fds[i], &b, 1, MSG_DONTWAIT) <= 0)
            closed++;
    }
    for (unsigned i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    reflector_counters(r, &c1);
    CHECKF(closed >= (int)cap, "%d of %u connections beyond the cap of %u closed", closed, n, cap);
    CHECKF(c1.refused >= c0.refused + cap, "refused counted");
    /* Idle ones are cut, oldest first, for the new ones (reflector.h). */
    CHECKF(c1.cut >= c0.cut + cap, "cut counted: %llu -> %llu", (unsigned long long)c0.cut,
           (unsigned long long)c1.cut);
    WAIT_UNTIL(reflector_idle(), 2000, "the reflector to close the flood's connections");
    char ans[400];
    ask("MAP\n", ans, sizeof(ans));
    CHECKF(strncmp(ans, "MAPPED ", 7) == 0, "after the flood: '%s'", ans);
}

/* Out of descriptors: each connection is taken with the spare descriptor
   and closed at once (the client hears it, the loop does not spin on a
   backlog it cannot take), and counted as refused. */
static void test_out_of_descriptors(struct reflector *r)
{
    enum { CLIENTS = 4, FILL_MAX = 256 };
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(PORT)};
    struct reflector_counters c0, c1;
    struct rlimit saved, low;
    int cl[CLIENTS], fill[FILL_MAX], nfill = 0, heard = 0;

    /* The earlier tests' connections close first (linger, read timeout):
       none may give the reflector a descriptor back meanwhile. */
    WAIT_UNTIL(reflector_idle(), 10 * WAIT_MS, "the reflector to close every connection");
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    for (int i = 0; i < CLIENTS; i++)
        cl[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
    getrlimit(RLIMIT_NOFILE, &saved);
    low = saved;
    low.rlim_cur = (rlim_t)probe + 16;
    CHECKF(probe >= 0 && setrlimit(RLIMIT_NOFILE, &low) == 0, "lower the descriptor limit");
    while (nfill < FILL_MAX && (fill[nfill] = dup(probe)) >= 0)
        nfill++;
    CHECKF(nfill < FILL_MAX && errno == EMFILE, "descriptors used up (%d more)", nfill);
    reflector_counters(r, &c0);
    uint64_t t0 = monotonic_ms();
    for (int i = 0; i < CLIENTS; i++) {
        struct pollfd p = {.fd = cl[i], .events = POLLIN};
        char b;
        if (connect(cl[i], (struct sockaddr *)&sa, sizeof(sa)) == 0 && poll(&p, 1, 2000) == 1 &&
            recv(cl[i], &b, 1, MSG_DONTWAIT) <= 0)
            heard++;
    }
    uint64_t took = monotonic_ms() - t0;
    reflector_counters(r, &c1);
    for (int i = 0; i < nfill; i++)
        close(fill[i]);
    close(probe);
    setrlimit(RLIMIT_NOFILE, &saved);
    for (int i = 0; i < CLIENTS; i++)
        close(cl[i]);
    CHECKF(heard == CLIENTS, "%d of %d clients closed at once when out of descriptors (%llu ms)",
           heard, CLIENTS, (unsigned long long)took);
    CHECKF(c1.refused >= c0.refused + CLIENTS, "refused counted: %llu -> %llu",
           (unsigned long long)c0.refused, (unsigned long long)c1.refused);
    char ans[400];
    ask("MAP\n", ans, sizeof(ans));
    CHECKF(strncmp(ans, "MAPPED ", 7) == 0, "descriptors back: '%s'", ans);
}

static void test_table_bound(struct reflector *r, unsigned max)
{
    unsigned char pair[TOKEN_PAIR_LEN];
    struct reflector_side sides[2];
    uint64_t now = (uint64_t)time(NULL);
    unsigned ok = 0;

    memset(sides, 0, sizeof(sides));
    /* Already expired entries make room; live ones do not. */
    for (unsigned i = 0; i < max; i++) {
        memset(pair, 0, sizeof(pair));
        pair[0] = 0xee;
        pair[1] = (unsigned char)i;
        pair[TOKEN_PAIR_LEN - 1] = (unsigned char)i; /* each its own job (token.h) */
        ok += reflector_expect(r, pair, sides, now - 60) == 0;
    }
    for (unsigned i = 0; i < max + 4; i++) {
        memset(pair, 0, sizeof(pair));
        pair[0] = 0xef;
        pair[1] = (unsigned char)i;
        pair[TOKEN_PAIR_LEN - 2] = 1;
        pair[TOKEN_PAIR_LEN - 1] = (unsigned char)i;
        ok += reflector_expect(r, pair, sides, now + 60) == 0;
    }
    /* Those of the earlier tests still live count too. */
    CHECKF(ok < 2 * max + 4 && ok >= max, "expected table bounded: %u accepted (max %u)", ok, max);
}

/* Stopping with a client half-way through its line: it hears why. */
static void test_stop(struct reflector *r)
{
    char ans[400];
    int local = 0, a = line_client(PORT, NULL, &local);

    send_text(a, "MAP");
    WAIT_UNTIL(tcp_seen(local) == 1, 2000, "the reflector to accept the client");
    reflector_stop(r);
    line_answer(a, ans, sizeof(ans));
    close(a);
    CHECKF(strcmp(ans, "FAIL the reflector is stopping") == 0, "stop: '%s'", ans);
}

int main(void)
{
    struct reflector_tuning t = {.read_timeout_ms = WAIT_MS,
                                 .pair_wait_ms = WAIT_MS,
                                 .dial_timeout_ms = 500,
                                 .linger_ms = 300,
                                 .conns_max = 16,
                                 .expected_max = 32,
                                 /* One cluster's share: the whole table (shares:
                                    test_reflector_limits.c). */
                                 .expected_per_cluster = 32};
    char err[200], listen[32];

    log_init("broker", getenv("VERBOSE") ? LOG_LEVEL_DEBUG : LOG_LEVEL_ERROR, false);
    for (size_t i = 0; i < sizeof(key.bytes); i++) {
        key.bytes[i] = (unsigned char)(i * 7 + 1);
        other_key.bytes[i] = (unsigned char)(i * 7 + 2);
    }
    test_parser();
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", PORT);
    CHECKF(reflector_start("nonsense", &key, NULL, NULL, err, sizeof(err)) == NULL,
           "bad listen accepted");
    struct reflector *r =
        reflector_start_tuned(listen, &key, on_observe, NULL, &t, err, sizeof(err));
    if (r == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    fds_idle = open_fds();
    CHECKF(reflector_port(r) == PORT, "port");
    test_map();
    test_pairing(r);
    test_refusals(r);
    test_early(r);
    test_missing_peer(r);
    test_misdeclared(r);
    test_bad_lines();
    test_dial();
    test_cap(r, t.conns_max);
    test_out_of_descriptors(r);
    test_table_bound(r, t.expected_max);

    struct reflector_counters c;
    reflector_counters(r, &c);
    printf("counters: maps %llu punches %llu paired %llu failed %llu dials %llu refused %llu "
           "misdeclared %llu; observed %d\n",
           (unsigned long long)c.maps, (unsigned long long)c.punches, (unsigned long long)c.paired,
           (unsigned long long)c.punch_failed, (unsigned long long)c.dials,
           (unsigned long long)c.refused, (unsigned long long)c.misdeclared,
           atomic_load(&observed));
    CHECKF(c.paired == 2 && c.maps >= 2 && c.dials == 2, "counters (two pairs: one early)");
    CHECKF(atomic_load(&observed) > 0, "observe called");
    test_stop(r);
    return check_result("broker-reflector");
}
