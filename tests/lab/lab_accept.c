/* qcg-lab-accept: one rank that accepts several connections in turn, for lab
 * tests that need a listener to outlive one connection (qcg-cat takes one).
 *
 *   qcg-lab-accept COUNT TIMEOUT_S
 *
 * Job, rank, secret and helper socket come from the environment (QCG_JOB,
 * QCG_RANK, QCG_JOB_SECRET, QCG_HELPER_SOCKET).  Prints "listening PORT" once
 * published, then per connection "accepted PEER TECHNIQUE BYTES" after reading
 * it to EOF, on stdout (flushed).  Exit 0 after COUNT connections, 1 on an
 * error or when TIMEOUT_S pass first. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qcgconn.h"

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads fd (through tls when encrypted) to EOF; bytes read or -1. */
static long long drain(int fd, qcg_tls *tls)
{
    char buf[65536];
    long long total = 0;

    for (;;) {
        ssize_t n = qcg_conn_recv(fd, tls, buf, sizeof(buf));

        if (n == 0)
            return total;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        total += n;
    }
}

int main(int argc, char **argv)
{
    /* Like qcg-cat: connections between clusters come encrypted. */
    struct qcg_options opts = {.rank = -1, .encrypt = QCG_ENCRYPT_INTER_SITE};
    struct qcg_contact me;
    qcg_ctx *ctx;
    long long deadline;
    int count, timeout_s, done = 0, rc;

    if (argc != 3 || (count = atoi(argv[1])) <= 0 || (timeout_s = atoi(argv[2])) <= 0) {
        fprintf(stderr, "usage: qcg-lab-accept COUNT TIMEOUT_S (job, rank, secret from QCG_*)\n");
        return 2;
    }
    rc = qcg_open(&ctx, &opts);
    if (rc < 0) {
        fprintf(stderr, "qcg-lab-accept: open: %s: %s\n", qcg_strerror(rc), qcg_last_error(NULL));
        return 1;
    }
    rc = qcg_listen(ctx);
    if (rc < 0 || qcg_local_contact(ctx, &me) < 0) {
        fprintf(stderr, "qcg-lab-accept: listen: %s: %s\n", qcg_strerror(rc), qcg_last_error(ctx));
        qcg_close(ctx);
        return 1;
    }
    printf("listening %u\n", me.port);
    fflush(stdout);
    deadline = now_ms() + (long long)timeout_s * 1000;
    while (done < count) {
        struct pollfd p = {.fd = qcg_accept_pollfd(ctx), .events = POLLIN};
        struct qcg_conn_info info;
        long long left = deadline - now_ms(), bytes;
        int fd;

        if (left <= 0) {
            fprintf(stderr, "qcg-lab-accept: %d of %d connections within %d s\n", done, count,
                    timeout_s);
            break;
        }
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        fd = qcg_accept(ctx, &info);
        if (fd == QCG_EAGAIN)
            continue;
        if (fd < 0) {
            fprintf(stderr, "qcg-lab-accept: accept: %s: %s\n", qcg_strerror(fd),
                    qcg_last_error(ctx));
            break;
        }
        bytes = drain(fd, info.tls);
        /* The sender reads to our orderly end. */
        if (info.tls != NULL)
            (void)qcg_tls_shutdown(info.tls);
        qcg_tls_free(info.tls);
        close(fd);
        printf("accepted %d %s %lld\n", info.peer_rank, qcg_technique_name(info.technique), bytes);
        fflush(stdout);
        done++;
    }
    qcg_close(ctx);
    return done == count ? 0 : 1;
}
