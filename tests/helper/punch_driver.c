/*
 * punch-driver: the two ends of helper-punch-ns (punch-ns.sh).
 *
 *   punch-driver broker ADDR:PORT KEYHEX RUN COUNT PRESERVING0 PRESERVING1
 *       the reflector, expecting pairs 0..COUNT-1 of run RUN (side 0 and 1
 *       declared port-preserving or not: 0/1); prints "ready", runs until
 *       SIGTERM/SIGINT, then prints its counters.
 *   punch-driver punch REFLECTOR PORT KEYHEX RUN FIRST COUNT SIDE LOCAL LOW HIGH TIMEOUT_MS BYTES
 *       punches pairs FIRST..FIRST+COUNT-1 one after the other (the reflector's
 *       pairing keeps the two drivers in step); on each connection sends BYTES
 *       and reads the peer's BYTES at the same time, then prints one line:
 *       "ok <pair> setup_ms=N local=P own=A:P peer=A:P sent=SHA recv=SHA" (IPv6:
 *       [A]:P) or
 *       "fail <pair> setup_ms=N why=...".  Exit 0 when every punch worked.
 *   punch-driver connect ADDR PORT COUNT [LOCAL-ADDR LOCAL-PORT]
 *       COUNT plain TCP connects (from LOCAL-ADDR:LOCAL-PORT if given), each
 *       closed by us first, so it leaves a TIME_WAIT on our side; prints each
 *       connect time in microseconds.
 *
 * Tokens are minted here with the key (what the broker does for real).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "address.h"
#include "hex.h"
#include "log.h"
#include "punch.h"
#include "reflector.h"

#define IO_TIMEOUT_MS 20000

static int parse_key(const char *hex, struct proxy_key *key)
{
    if (strlen(hex) != 2 * sizeof(key->bytes))
        return -1;
    return hex_decode(hex, sizeof(key->bytes), key->bytes, true);
}

static void pair_id(unsigned run, unsigned index, unsigned char pair[TOKEN_PAIR_LEN])
{
    memset(pair, 0, TOKEN_PAIR_LEN);
    for (int i = 0; i < 4; i++) {
        pair[i] = (unsigned char)(run >> (24 - 8 * i));
        pair[4 + i] = (unsigned char)(index >> (24 - 8 * i));
    }
}

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static int run_broker(char **argv)
{
    struct proxy_key key;
    struct reflector_side sides[2];
    char err[200];
    unsigned run = (unsigned)strtoul(argv[2], NULL, 10), count = (unsigned)atoi(argv[3]);

    if (parse_key(argv[1], &key) < 0) {
        fprintf(stderr, "bad key\n");
        return 2;
    }
    memset(sides, 0, sizeof(sides));
    snprintf(sides[0].cluster, sizeof(sides[0].cluster), "site0");
    snprintf(sides[0].node, sizeof(sides[0].node), "node0");
    sides[0].preserving = atoi(argv[4]) != 0;
    snprintf(sides[1].cluster, sizeof(sides[1].cluster), "site1");
    snprintf(sides[1].node, sizeof(sides[1].node), "node1");
    sides[1].preserving = atoi(argv[5]) != 0;
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    struct reflector *r = reflector_start(argv[0], &key, NULL, NULL, err, sizeof(err));
    if (r == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    for (unsigned i = 0; i < count; i++) {
        unsigned char pair[TOKEN_PAIR_LEN];
        pair_id(run, i, pair);
        reflector_expect(r, pair, sides, (uint64_t)time(NULL) + 600);
    }
    printf("ready\n");
    fflush(stdout);
    /* Bounded: the script stops us; an hour at most otherwise. */
    for (int i = 0; i < 36000 && !stopping; i++)
        usleep(100 * 1000);
    struct reflector_counters c;
    reflector_counters(r, &c);
    reflector_stop(r);
    printf("counters: punches %llu paired %llu failed %llu refused %llu misdeclared %llu\n",
           (unsigned long long)c.punches, (unsigned long long)c.paired,
           (unsigned long long)c.punch_failed, (unsigned long long)c.refused,
           (unsigned long long)c.misdeclared);
    return 0;
}

struct outcome {
    int done;
    struct punch_result r;
    struct timespec t0, t1; /* finer than setup_ms, for the measurements */
};

static void on_result(void *arg, const struct punch_result *r)
{
    struct outcome *o = arg;
    clock_gettime(CLOCK_MONOTONIC, &o->t1);
    o->done = 1;
    o->r = *r;
}

/* Sends `bytes` of a stream seeded by side while reading the peer's to EOF. */
static int exchange(int fd, int side, size_t bytes, char sent_hex[65], char recv_hex[65])
{
    EVP_MD_CTX *sctx = EVP_MD_CTX_new(), *rctx = EVP_MD_CTX_new();
    unsigned char out[16384], in[65536], md[32];
    size_t sent = 0, pos = 0, got_out = 0;
    unsigned long long x = 0x9e3779b97f4a7c15ULL * (unsigned)(side + 1);
    int eof = 0, rc = -1;

    EVP_DigestInit_ex(sctx, EVP_sha256(), NULL);
    EVP_DigestInit_ex(rctx, EVP_sha256(), NULL);
    if (bytes == 0)
        shutdown(fd, SHUT_WR);
    for (int spins = 0; spins < 1000000; spins++) {
        if (sent == bytes && eof) {
            rc = 0;
            break;
        }
        if (sent < bytes && pos == got_out) {
            got_out = bytes - sent < sizeof(out) ? bytes - sent : sizeof(out);
            for (size_t i = 0; i < got_out; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                out[i] = (unsigned char)x;
            }
            EVP_DigestUpdate(sctx, out, got_out);
            pos = 0;
        }
        struct pollfd p = {.fd = fd, .events = (short)(POLLIN | (sent < bytes ? POLLOUT : 0))};
        if (poll(&p, 1, IO_TIMEOUT_MS) <= 0)
            break;
        if (p.revents & POLLIN) {
            ssize_t n = recv(fd, in, sizeof(in), 0);
            if (n == 0)
                eof = 1;
            else if (n > 0)
                EVP_DigestUpdate(rctx, in, (size_t)n);
            else if (errno != EAGAIN)
                break;
        }
        if (sent < bytes && (p.revents & POLLOUT)) {
            ssize_t n = send(fd, out + pos, got_out - pos, MSG_NOSIGNAL);
            if (n > 0) {
                pos += (size_t)n;
                sent += (size_t)n;
                if (sent == bytes)
                    shutdown(fd, SHUT_WR);
            } else if (errno != EAGAIN) {
                break;
            }
        }
        if ((p.revents & (POLLERR | POLLHUP)) && !(p.revents & POLLIN))
            break;
    }
    EVP_DigestFinal_ex(sctx, md, NULL);
    hex_encode(md, 32, sent_hex);
    EVP_DigestFinal_ex(rctx, md, NULL);
    hex_encode(md, 32, recv_hex);
    EVP_MD_CTX_free(sctx);
    EVP_MD_CTX_free(rctx);
    return rc;
}

static int run_punch(char **argv)
{
    struct proxy_key key;
    struct punch_params p;
    uv_loop_t loop;
    int failures = 0;

    memset(&p, 0, sizeof(p));
    snprintf(p.reflector_addr, sizeof(p.reflector_addr), "%s", argv[0]);
    p.reflector_port = (uint16_t)atoi(argv[1]);
    unsigned run = (unsigned)strtoul(argv[3], NULL, 10);
    unsigned first = (unsigned)atoi(argv[4]), count = (unsigned)atoi(argv[5]);
    int side = atoi(argv[6]);
    if (parse_key(argv[2], &key) < 0 || address_family(argv[7]) == 0) {
        fprintf(stderr, "bad key or local address\n");
        return 2;
    }
    snprintf(p.local, sizeof(p.local), "%s", argv[7]);
    p.port_low = (uint16_t)atoi(argv[8]);
    p.port_high = (uint16_t)atoi(argv[9]);
    p.timeout_ms = (unsigned)atoi(argv[10]);
    size_t bytes = (size_t)strtoull(argv[11], NULL, 10);
    uv_loop_init(&loop);
    for (unsigned i = first; i < first + count; i++) {
        unsigned char pair[TOKEN_PAIR_LEN];
        struct outcome o = {0};
        char why[256];

        pair_id(run, i, pair);
        token_issue(&key, pair, side, (uint64_t)time(NULL) + 600, p.token, sizeof(p.token));
        clock_gettime(CLOCK_MONOTONIC, &o.t0);
        if (punch_start(&loop, &p, on_result, &o, why, sizeof(why)) == NULL) {
            log_warnx("punch %u not started: %s", i, why);
            printf("fail %u setup_ms=0 why=%s\n", i, why);
            failures++;
            continue;
        }
        for (int k = 0; k < 100000 && !o.done; k++)
            uv_run(&loop, UV_RUN_ONCE);
        uv_run(&loop, UV_RUN_NOWAIT); /* the punch's handles close */
        if (o.r.status != 0) {
            printf("fail %u setup_ms=%u why=%s\n", i, o.r.setup_ms, o.r.why);
            failures++;
            fflush(stdout);
            continue;
        }
        /* What the process that gets the socket sees first: no error left
           behind by the punch (an ICMP in the error queue keeps POLLERR up). */
        struct pollfd pf = {.fd = o.r.fd, .events = POLLOUT};
        if (poll(&pf, 1, 0) == 1 && (pf.revents & POLLERR)) {
            printf("fail %u setup_ms=%u why=the socket came with POLLERR\n", i, o.r.setup_ms);
            close(o.r.fd);
            failures++;
            fflush(stdout);
            continue;
        }
        char sent[65], recvd[65];
        int rc = exchange(o.r.fd, side, bytes, sent, recvd);
        close(o.r.fd);
        long us = (o.t1.tv_sec - o.t0.tv_sec) * 1000000L + (o.t1.tv_nsec - o.t0.tv_nsec) / 1000;
        printf("%s %u setup_ms=%u setup_us=%ld local=%u own=%s peer=%s sent=%s recv=%s\n",
               rc == 0 ? "ok" : "fail", i, o.r.setup_ms, us, o.r.local_port, o.r.own_text,
               o.r.peer_text, sent, recvd);
        fflush(stdout);
        failures += rc != 0;
    }
    uv_run(&loop, UV_RUN_NOWAIT);
    uv_loop_close(&loop);
    return failures ? 1 : 0;
}

static int run_connect(int argc, char **argv)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
    struct sockaddr_in me = {.sin_family = AF_INET};
    int count = atoi(argv[2]), one = 1;

    if (inet_pton(AF_INET, argv[0], &sa.sin_addr) != 1)
        return 2;
    if (argc == 5) {
        if (inet_pton(AF_INET, argv[3], &me.sin_addr) != 1)
            return 2;
        me.sin_port = htons((uint16_t)atoi(argv[4]));
    }
    for (int i = 0; i < count && i < 1000; i++) {
        struct timespec t0, t1;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (argc == 5) {
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
            if (bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0) {
                printf("fail bind: %s\n", strerror(errno));
                close(fd);
                return 1;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        close(fd);
        if (rc < 0) {
            printf("fail %s\n", strerror(errno));
            return 1;
        }
        printf("connect_us=%ld\n",
               (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000);
    }
    return 0;
}

int main(int argc, char **argv)
{
    log_init("punch-driver", getenv("VERBOSE") ? LOG_LEVEL_DEBUG : LOG_LEVEL_WARN, false);
    if (argc == 8 && strcmp(argv[1], "broker") == 0)
        return run_broker(argv + 2);
    if (argc == 14 && strcmp(argv[1], "punch") == 0)
        return run_punch(argv + 2);
    if ((argc == 5 || argc == 7) && strcmp(argv[1], "connect") == 0)
        return run_connect(argc - 2, argv + 2);
    fprintf(stderr, "usage: see the comment at the top of punch_driver.c\n");
    return 2;
}
