/*
 * tls-bench: throughput and 8-byte round trips of one libqcgconn connection,
 * encrypted or plain, for bench/tls-loopback.sh (job, rank, secret and helper
 * from QCG_*).
 *
 *   tls-bench serve COUNT                       accept COUNT connections in turn
 *   tls-bench stream PEER SECONDS ENCRYPT        send for SECONDS:
 *       "gbps X setup_us Y send_s_per_gb S recv_s_per_gb R PATH"
 *   tls-bench pingpong PEER COUNT ENCRYPT [spin] COUNT round trips: "rtt_us median X p99 Y PATH"
 *
 * ENCRYPT is qcg_options.encrypt's name (always, never).  The server runs
 * encrypt=never: it takes what the connecting side asks for.  The driving
 * side sends one byte first: 'S' (the server counts bytes until the end and
 * answers the count and the CPU time it spent receiving, 8 bytes each), 'P'
 * (it echoes 8-byte messages) or 'Q' (the same, both ends spinning on
 * non-blocking sockets as MPI ranks do in their progress loop: no wake-up in
 * the round trip, only the two ends' work).  Writes are 256 KiB (qcg-cat's buffer),
 * through qcg_tls_send when encrypted.  S and R are each end's CPU seconds
 * (user + system) per GB moved: unlike Gbit/s they do not depend on how much
 * of a shared machine's CPUs the two ends got.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "qcgconn.h"

#define BUF (256 * 1024)

struct conn {
    int fd;
    qcg_tls *tls;
    bool spin; /* non-blocking: EAGAIN means try again at once */
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds (user + system) this process has used. */
static double cpu_s(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static long c_recv(struct conn *c, void *b, size_t n)
{
    return qcg_conn_recv(c->fd, c->tls, b, n);
}

static int c_send_all(struct conn *c, const void *b, size_t n)
{
    const char *p = b;

    while (n > 0) {
        long w = qcg_conn_send(c->fd, c->tls, p, n);

        if (w < 0 && (errno == EINTR || (c->spin && errno == EAGAIN)))
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int c_recv_all(struct conn *c, void *b, size_t n)
{
    char *p = b;

    while (n > 0) {
        long r = c_recv(c, p, n);

        if (r < 0 && (errno == EINTR || (c->spin && errno == EAGAIN)))
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static void c_close(struct conn *c)
{
    if (c->tls != NULL)
        (void)qcg_tls_shutdown(c->tls);
    qcg_tls_free(c->tls);
    close(c->fd);
}

static void spin(struct conn *c)
{
    c->spin = fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) == 0;
}

static void serve_one(struct conn *c, char *buf)
{
    char mode;
    uint64_t total = 0;
    long n;

    if (c_recv_all(c, &mode, 1) < 0)
        return;
    if (mode == 'S') {
        double cpu0 = cpu_s();
        uint64_t answer[2];

        while ((n = c_recv(c, buf, BUF)) > 0)
            total += (uint64_t)n;
        answer[0] = total;
        answer[1] = (uint64_t)((cpu_s() - cpu0) * 1e6);
        (void)c_send_all(c, answer, sizeof(answer));
    } else {
        if (mode == 'Q')
            spin(c);
        while (c_recv_all(c, buf, 8) == 0 && c_send_all(c, buf, 8) == 0)
            ;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    struct qcg_options o = {.rank = -1, .encrypt = QCG_ENCRYPT_NEVER};
    struct qcg_conn_info info;
    struct conn c;
    qcg_ctx *ctx;
    char *buf = malloc(BUF);
    int rc;

    if (argc < 3 || buf == NULL) {
        fprintf(stderr, "usage: tls-bench serve COUNT | stream PEER SECONDS ENCRYPT | "
                        "pingpong PEER COUNT ENCRYPT [spin]\n");
        return 2;
    }
    if (strcmp(argv[1], "serve") != 0) {
        if (argc < 5 || argc > 6 || (o.encrypt = qcg_encrypt_parse(argv[4])) < 0 ||
            (argc == 6 && strcmp(argv[5], "spin") != 0)) {
            fprintf(stderr, "tls-bench: ENCRYPT: always or never\n");
            return 2;
        }
    }
    memset(buf, 'x', BUF);
    if ((rc = qcg_open(&ctx, &o)) < 0 || (rc = qcg_listen(ctx)) < 0) {
        fprintf(stderr, "tls-bench: %s: %s\n", qcg_strerror(rc), qcg_last_error(ctx));
        return 1;
    }
    if (strcmp(argv[1], "serve") == 0) {
        printf("listening\n");
        fflush(stdout);
        for (int left = atoi(argv[2]); left > 0;) {
            struct pollfd p = {.fd = qcg_accept_pollfd(ctx), .events = POLLIN};
            int fd;

            if (poll(&p, 1, 60000) <= 0)
                break;
            fd = qcg_accept(ctx, &info);
            if (fd < 0)
                continue;
            c = (struct conn){fd, info.tls, false};
            serve_one(&c, buf);
            c_close(&c);
            left--;
        }
        qcg_close(ctx);
        return 0;
    }
    rc = qcg_connect(ctx, atoi(argv[2]), 30000, &info);
    if (rc < 0) {
        fprintf(stderr, "tls-bench: connect: %s: %s\n", qcg_strerror(rc), qcg_last_error(ctx));
        return 1;
    }
    c = (struct conn){rc, info.tls, false};
    if (strcmp(argv[1], "stream") == 0) {
        double t0 = now_s(), cpu0 = cpu_s(), secs = atof(argv[3]), t, gb;
        uint64_t sent = 0, got[2];

        (void)c_send_all(&c, "S", 1);
        while ((t = now_s()) - t0 < secs) {
            if (c_send_all(&c, buf, BUF) < 0)
                return 1;
            sent += BUF;
        }
        if (c.tls != NULL)
            (void)qcg_tls_shutdown(c.tls);
        shutdown(c.fd, SHUT_WR);
        if (c_recv_all(&c, got, sizeof(got)) < 0 || got[0] != sent)
            return 1;
        gb = (double)sent / 1e9;
        printf("gbps %.3f setup_us %llu send_s_per_gb %.3f recv_s_per_gb %.3f %s\n",
               gb * 8 / (now_s() - t0), (unsigned long long)info.setup_us, (cpu_s() - cpu0) / gb,
               (double)got[1] / 1e6 / gb, qcg_encryption_name(info.encryption));
    } else {
        int n = atoi(argv[3]);
        double *rtt = calloc((size_t)n, sizeof(double));

        (void)c_send_all(&c, argc == 6 ? "Q" : "P", 1);
        if (argc == 6)
            spin(&c);
        for (int i = 0; i < n; i++) {
            double t0 = now_s();

            if (c_send_all(&c, buf, 8) < 0 || c_recv_all(&c, buf, 8) < 0)
                return 1;
            rtt[i] = (now_s() - t0) * 1e6;
        }
        qsort(rtt, (size_t)n, sizeof(double), cmp_double);
        printf("rtt_us median %.1f p99 %.1f %s\n", rtt[n / 2], rtt[n * 99 / 100],
               qcg_encryption_name(info.encryption));
        free(rtt);
    }
    c_close(&c);
    qcg_close(ctx);
    free(buf);
    return 0;
}
