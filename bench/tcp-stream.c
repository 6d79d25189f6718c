/*
 * tcp-stream: single-stream throughput and 8-byte round-trip latency over one
 * TCP connection, directly or through a relay (qcg-proxy with a token, or
 * socat), for bench/proxy-relay.sh.
 *
 *   tcp-stream --listen PORT [--count N]          serve N connections (default 1)
 *   tcp-stream --connect HOST:PORT [--proxy-token T] --serve
 *                                                 connect out, then serve one test
 *   tcp-stream --connect HOST:PORT [--proxy-token T] --seconds S
 *                                                 send for S s; prints Gb/s
 *   tcp-stream --connect HOST:PORT [--proxy-token T] --pingpong N
 *                                                 N 8-byte round trips; prints the
 *                                                 median and p99 in µs
 *   tcp-stream --connect HOST:PORT --hold TOKENFILE
 *                                                 both sides of every pair in
 *                                                 TOKENFILE ("T0 T1" lines, from
 *                                                 proxy-token) through the proxy;
 *                                                 prints "held N pairs" once all
 *                                                 are paired, then holds them
 *                                                 idle until stdin closes
 *
 * The driving side sends one byte first: 'S' (stream: the server counts bytes
 * until EOF and answers the count as 8 bytes) or 'P' (ping-pong: the server
 * echoes 8-byte messages until EOF).  --proxy-token sends "QCGP" + the token
 * NUL-padded to 128 bytes and waits for the proxy's 0x01.  A connect is retried
 * for up to --retry-ms (default 5000): a socat two-listener relay opens its
 * second port only after the first connection.  Output: one line,
 * "gbps X" or "rtt_us median X p99 Y".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF (1 << 20)

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "tcp-stream: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void dief(const char *what)
{
    fprintf(stderr, "tcp-stream: %s\n", what);
    exit(1);
}

static int read_full(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, (const char *)buf + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        done += (size_t)w;
    }
    return 0;
}

static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int dial(const char *hostport, int retry_ms)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (colon == NULL || (size_t)(colon - hostport) >= sizeof(host))
        dief("--connect wants HOST:PORT");
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0)
        dief("cannot resolve the address");
    uint64_t end = now_ns() + (uint64_t)retry_ms * 1000000ull;
    for (;;) {
        int fd = socket(res->ai_family, SOCK_STREAM, 0);
        if (fd < 0)
            die("socket");
        if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
            freeaddrinfo(res);
            nodelay(fd);
            return fd;
        }
        close(fd);
        if (now_ns() > end)
            die("connect");
        usleep(20000);
    }
}

static void proxy_hello(int fd, const char *token)
{
    unsigned char hello[4 + 128] = {'Q', 'C', 'G', 'P'};
    unsigned char b;
    if (strlen(token) > 128)
        dief("token longer than 128 characters");
    memcpy(hello + 4, token, strlen(token));
    if (write_full(fd, hello, sizeof(hello)) < 0)
        die("sending the token");
    if (read_full(fd, &b, 1) < 0 || b != 0x01)
        dief("the proxy did not pair us (no 0x01)");
}

static void serve(int fd)
{
    static char buf[BUF];
    char mode;
    if (read_full(fd, &mode, 1) < 0)
        return;
    if (mode == 'S') {
        uint64_t total = 0;
        for (;;) {
            ssize_t r = read(fd, buf, sizeof(buf));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            total += (uint64_t)r;
        }
        unsigned char out[8];
        for (int i = 0; i < 8; i++)
            out[i] = (unsigned char)(total >> (56 - 8 * i));
        write_full(fd, out, sizeof(out));
    } else if (mode == 'P') {
        char msg[8];
        while (read_full(fd, msg, sizeof(msg)) == 0)
            if (write_full(fd, msg, sizeof(msg)) < 0)
                break;
    }
}

static void stream(int fd, double seconds)
{
    static char buf[BUF];
    memset(buf, 0x5a, sizeof(buf));
    if (write_full(fd, "S", 1) < 0)
        die("write");
    uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9), sent = 0;
    while (now_ns() < end) {
        ssize_t w = write(fd, buf, sizeof(buf));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write");
        sent += (uint64_t)w;
    }
    shutdown(fd, SHUT_WR);
    unsigned char in[8];
    if (read_full(fd, in, sizeof(in)) < 0)
        dief("no byte count from the server");
    uint64_t done = now_ns(), total = 0;
    for (int i = 0; i < 8; i++)
        total = total << 8 | in[i];
    if (total != sent) {
        fprintf(stderr, "tcp-stream: sent %llu bytes, the server counted %llu\n",
                (unsigned long long)sent, (unsigned long long)total);
        exit(1);
    }
    printf("gbps %.3f bytes %llu seconds %.3f\n", (double)total * 8 / ((double)(done - start)),
           (unsigned long long)total, (double)(done - start) / 1e9);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void pingpong(int fd, int n)
{
    uint64_t *rtt = calloc((size_t)n, sizeof(*rtt));
    char msg[8] = "pingpong", back[8];
    if (rtt == NULL)
        dief("out of memory");
    if (write_full(fd, "P", 1) < 0)
        die("write");
    for (int i = 0; i < n; i++) {
        uint64_t t = now_ns();
        if (write_full(fd, msg, 8) < 0 || read_full(fd, back, 8) < 0)
            dief("ping-pong connection lost");
        rtt[i] = now_ns() - t;
    }
    shutdown(fd, SHUT_WR);
    qsort(rtt, (size_t)n, sizeof(*rtt), cmp_u64);
    printf("rtt_us median %.1f p99 %.1f\n", (double)rtt[n / 2] / 1000,
           (double)rtt[(size_t)n * 99 / 100] / 1000);
    free(rtt);
}

/* Idle pairs for the memory measurement: connect all, then wait. */
static void hold(const char *hostport, const char *path, int retry_ms)
{
    char t0[200], t1[200];
    int n = 0, cap = 0, *fds = NULL;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        die(path);
    while (fscanf(f, "%199s %199s", t0, t1) == 2) {
        if (n + 2 > cap) {
            cap = cap ? 2 * cap : 256;
            fds = realloc(fds, (size_t)cap * sizeof(*fds));
            if (fds == NULL)
                dief("out of memory");
        }
        /* Both hellos first: each side's 0x01 needs the other's token. */
        const char *tok[2] = {t0, t1};
        for (int i = 0; i < 2; i++) {
            unsigned char hello[4 + 128] = {'Q', 'C', 'G', 'P'};
            memcpy(hello + 4, tok[i], strnlen(tok[i], 128));
            fds[n + i] = dial(hostport, retry_ms);
            if (write_full(fds[n + i], hello, sizeof(hello)) < 0)
                die("sending a token");
        }
        n += 2;
    }
    fclose(f);
    for (int i = 0; i < n; i++) {
        unsigned char b;
        if (read_full(fds[i], &b, 1) < 0 || b != 0x01)
            dief("a held connection was not paired");
    }
    printf("held %d pairs\n", n / 2);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    for (int i = 0; i < n; i++)
        close(fds[i]);
    free(fds);
}

int main(int argc, char **argv)
{
    const char *connect_to = NULL, *token = NULL, *hold_file = NULL;
    int listen_port = 0, count = 1, do_serve = 0, pings = 0, retry_ms = 5000;
    double seconds = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--serve") == 0) {
            do_serve = 1;
            continue;
        }
        if (v == NULL) {
            fprintf(stderr, "tcp-stream: %s needs a value (see the comment in tcp-stream.c)\n", a);
            return 2;
        }
        i++;
        if (strcmp(a, "--listen") == 0)
            listen_port = atoi(v);
        else if (strcmp(a, "--count") == 0)
            count = atoi(v);
        else if (strcmp(a, "--connect") == 0)
            connect_to = v;
        else if (strcmp(a, "--proxy-token") == 0)
            token = v;
        else if (strcmp(a, "--seconds") == 0)
            seconds = atof(v);
        else if (strcmp(a, "--pingpong") == 0)
            pings = atoi(v);
        else if (strcmp(a, "--hold") == 0)
            hold_file = v;
        else if (strcmp(a, "--retry-ms") == 0)
            retry_ms = atoi(v);
        else {
            fprintf(stderr, "tcp-stream: unknown option %s\n", a);
            return 2;
        }
    }
    if (listen_port > 0) {
        struct sockaddr_in6 sin = {.sin6_family = AF_INET6,
                                   .sin6_port = htons((uint16_t)listen_port),
                                   .sin6_addr = in6addr_any};
        int one = 1, zero = 0, lfd = socket(AF_INET6, SOCK_STREAM, 0);
        if (lfd < 0)
            die("socket");
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
        if (bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(lfd, 16) < 0)
            die("listen");
        fprintf(stderr, "listening on %d\n", listen_port);
        for (int i = 0; i < count; i++) {
            int fd = accept(lfd, NULL, NULL);
            if (fd < 0)
                die("accept");
            nodelay(fd);
            serve(fd);
            close(fd);
        }
        close(lfd);
        return 0;
    }
    if (connect_to == NULL) {
        fprintf(stderr, "tcp-stream: --listen or --connect (see the comment in tcp-stream.c)\n");
        return 2;
    }
    if (hold_file) {
        hold(connect_to, hold_file, retry_ms);
        return 0;
    }
    int fd = dial(connect_to, retry_ms);
    if (token)
        proxy_hello(fd, token);
    if (do_serve)
        serve(fd);
    else if (seconds > 0)
        stream(fd, seconds);
    else if (pings > 0)
        pingpong(fd, pings);
    else
        dief("--serve, --seconds or --pingpong");
    close(fd);
    return 0;
}
