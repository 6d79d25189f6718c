/*
 * Connection setup time through qcg-connect versus a plain TCP connect on the
 * same path.  Two roles, run on two nodes of the lab:
 *
 *   connect-time serve   --job J --first R --count N
 *       opens N contexts (ranks R..R+N-1), publishes them, and accepts and
 *       drains connections on all of them until killed.
 *   connect-time measure --job J --rank S --first R --count N
 *       for each target rank: a cold connect (the first lookup of that rank
 *       from this cluster: frontend miss, broker asked), a cached connect (the
 *       same rank again: answered by the frontend), and a plain TCP connect to
 *       the address the first one reached.  Prints medians and ratios, or one
 *       JSON object with --json.
 *
 * A benchmark, not a test: it asserts nothing about time.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bounded_io.h"
#include "qcgconn.h"
#include "samples.h"

#define MAX_COUNT 256

static qcg_ctx *open_rank(const char *job, int rank)
{
    struct qcg_options o = {.job = job, .rank = rank};
    qcg_ctx *ctx = NULL;
    int rc = qcg_open(&ctx, &o);
    if (rc == 0)
        rc = qcg_listen(ctx);
    if (rc != 0) {
        /* With ctx NULL, qcg_last_error tells why qcg_open failed. */
        fprintf(stderr, "connect-time: rank %d: %s: %s\n", rank, qcg_strerror(rc),
                qcg_last_error(ctx));
        exit(1);
    }
    return ctx;
}

/* Accepts on every context; each accepted connection is read until EOF so the
   client can close first.  Runs until killed. */
static int serve(const char *job, int first, int count)
{
    static qcg_ctx *ctx[MAX_COUNT];
    static struct pollfd pfd[MAX_COUNT];
    for (int i = 0; i < count; i++) {
        ctx[i] = open_rank(job, first + i);
        pfd[i] = (struct pollfd){.fd = qcg_accept_pollfd(ctx[i]), .events = POLLIN};
    }
    fprintf(stderr, "connect-time: serving ranks %d..%d\n", first, first + count - 1);
    for (;;) {
        if (poll(pfd, (nfds_t)count, -1) < 0 && errno != EINTR)
            return 1;
        for (int i = 0; i < count; i++) {
            if (!(pfd[i].revents & POLLIN))
                continue;
            int fd;
            while ((fd = qcg_accept(ctx[i], NULL)) >= 0)
                close(fd); /* the client only measures the setup */
        }
    }
}

static int plain_connect_us(const struct sockaddr_storage *to, socklen_t len, uint64_t *us)
{
    int fd = socket(to->ss_family, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    uint64_t t0 = now_us();
    int rc = connect(fd, (const struct sockaddr *)to, len);
    *us = now_us() - t0;
    close(fd);
    return rc;
}

static int measure(const char *job, int rank, int first, int count, int json)
{
    static uint64_t cold[MAX_COUNT], cached[MAX_COUNT], plain[MAX_COUNT];
    qcg_ctx *ctx = open_rank(job, rank);
    for (int i = 0; i < count; i++) {
        struct qcg_conn_info info;
        struct sockaddr_storage peer;
        socklen_t plen = sizeof(peer);
        int fd = qcg_connect(ctx, first + i, 30000, &info);
        if (fd < 0) {
            fprintf(stderr, "connect-time: rank %d: %s: %s\n", first + i, qcg_strerror(fd),
                    qcg_last_error(ctx));
            return 1;
        }
        cold[i] = info.setup_us;
        getpeername(fd, (struct sockaddr *)&peer, &plen);
        close(fd);
        fd = qcg_connect(ctx, first + i, 30000, &info);
        if (fd < 0) {
            fprintf(stderr, "connect-time: rank %d again: %s\n", first + i, qcg_strerror(fd));
            return 1;
        }
        cached[i] = info.setup_us;
        close(fd);
        if (plain_connect_us(&peer, plen, &plain[i]) < 0) {
            perror("connect-time: plain connect");
            return 1;
        }
    }
    uint64_t mc = samples_median(cold, (size_t)count), mh = samples_median(cached, (size_t)count),
             mp = samples_median(plain, (size_t)count);
    if (json)
        printf("{\"samples\": %d, \"cold_us\": %llu, \"cached_us\": %llu, \"plain_tcp_us\": %llu,"
               " \"cold_over_plain\": %.2f, \"cached_over_plain\": %.2f}\n",
               count, (unsigned long long)mc, (unsigned long long)mh, (unsigned long long)mp,
               (double)mc / (double)mp, (double)mh / (double)mp);
    else
        printf("medians of %d: cold lookup %.2f ms, cached lookup %.2f ms, plain TCP connect "
               "%.2f ms (cold %.2fx, cached %.2fx plain)\n",
               count, mc / 1000.0, mh / 1000.0, mp / 1000.0, (double)mc / (double)mp,
               (double)mh / (double)mp);
    qcg_close(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    const char *job = NULL;
    int rank = -1, first = -1, count = 20, json = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: connect-time serve|measure --job J [--rank S] --first R "
                        "[--count N] [--json]\n");
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (i + 1 < argc && strcmp(argv[i], "--job") == 0)
            job = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--rank") == 0)
            rank = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--first") == 0)
            first = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--count") == 0)
            count = atoi(argv[++i]);
        else {
            fprintf(stderr, "connect-time: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!job || first < 0 || count < 1 || count > MAX_COUNT) {
        fprintf(stderr, "connect-time: --job, --first and a --count in 1..%d are needed\n",
                MAX_COUNT);
        return 2;
    }
    if (strcmp(argv[1], "serve") == 0)
        return serve(job, first, count);
    if (strcmp(argv[1], "measure") == 0 && rank >= 0)
        return measure(job, rank, first, count, json);
    fprintf(stderr, "connect-time: say serve, or measure with --rank\n");
    return 2;
}
