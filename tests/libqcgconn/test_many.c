/* qcg-test-many: one context starts `count` non-blocking connects at once to
 * `count` listening contexts of the same process, all driven by one thread
 * (as an MPI progress loop would), and checks that every connection completes
 * and reaches the right rank.
 *
 *   qcg-test-many HELPER_SOCKET JOB SECRET COUNT FIRST_RANK TIMEOUT_MS
 *
 * Listeners are ranks FIRST_RANK .. FIRST_RANK+COUNT-1; the connecting
 * context is FIRST_RANK+COUNT.  Exit 0 when all connected. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qcgconn.h"

#define MAX_COUNT 64

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static qcg_ctx *open_rank(const char *sock, const char *job, const char *secret, int rank)
{
    struct qcg_options o = {.job = job, .rank = rank, .secret = secret, .helper_socket = sock};
    qcg_ctx *ctx;
    int rc = qcg_open(&ctx, &o);

    if (rc < 0) {
        fprintf(stderr, "open rank %d: %s: %s\n", rank, qcg_strerror(rc), qcg_last_error(NULL));
        exit(1);
    }
    return ctx;
}

int main(int argc, char **argv)
{
    qcg_ctx *listener[MAX_COUNT], *me;
    qcg_connect_op *op[MAX_COUNT];
    int out[MAX_COUNT], in[MAX_COUNT], n, first, timeout_ms, connected = 0, accepted = 0;
    uint64_t deadline, max_setup = 0;

    if (argc != 7) {
        fprintf(stderr, "usage: qcg-test-many SOCKET JOB SECRET COUNT FIRST_RANK TIMEOUT_MS\n");
        return 2;
    }
    n = atoi(argv[4]);
    first = atoi(argv[5]);
    timeout_ms = atoi(argv[6]);
    if (n <= 0 || n > MAX_COUNT || first < 0 || timeout_ms <= 0) {
        fprintf(stderr, "qcg-test-many: bad arguments\n");
        return 2;
    }
    for (int i = 0; i < n; i++) {
        int rc;

        listener[i] = open_rank(argv[1], argv[2], argv[3], first + i);
        if ((rc = qcg_listen(listener[i])) < 0) {
            fprintf(stderr, "listen rank %d: %s: %s\n", first + i, qcg_strerror(rc),
                    qcg_last_error(listener[i]));
            return 1;
        }
        in[i] = out[i] = -1;
    }
    me = open_rank(argv[1], argv[2], argv[3], first + n);
    for (int i = 0; i < n; i++) {
        int rc = qcg_connect_start(me, first + i, timeout_ms, &op[i]);

        if (rc < 0) {
            fprintf(stderr, "connect_start rank %d: %s: %s\n", first + i, qcg_strerror(rc),
                    qcg_last_error(me));
            return 1;
        }
    }

    /* One loop drives every connect and every accept; bounded by the ops'
       deadline plus a margin. */
    deadline = now_ms() + (uint64_t)timeout_ms + 3000;
    while ((connected < n || accepted < n) && now_ms() < deadline) {
        struct pollfd p[2 * MAX_COUNT];
        int k = 0;

        for (int i = 0; i < n; i++) {
            p[k++] =
                (struct pollfd){.fd = op[i] ? qcg_connect_pollfd(op[i]) : -1, .events = POLLIN};
            p[k++] = (struct pollfd){.fd = in[i] < 0 ? qcg_accept_pollfd(listener[i]) : -1,
                                     .events = POLLIN};
        }
        if (poll(p, (nfds_t)k, 200) < 0 && errno != EINTR)
            return 1;
        for (int i = 0; i < n; i++) {
            struct qcg_conn_info info;

            if (op[i] != NULL && p[2 * i].revents) {
                int fd = qcg_connect_finish(op[i], &info);

                if (fd >= 0) {
                    out[i] = fd;
                    connected++;
                    if (info.setup_us > max_setup)
                        max_setup = info.setup_us;
                    if (info.peer_rank != first + i || info.technique != QCG_TECH_DIRECT) {
                        fprintf(stderr, "connect %d: wrong info\n", i);
                        return 1;
                    }
                } else if (fd != QCG_EAGAIN) {
                    fprintf(stderr, "connect to rank %d: %s: %s\n", first + i, qcg_strerror(fd),
                            qcg_last_error(me));
                    return 1;
                }
                if (fd != QCG_EAGAIN) {
                    qcg_connect_free(op[i]);
                    op[i] = NULL;
                }
            }
            if (in[i] < 0 && p[2 * i + 1].revents) {
                int fd = qcg_accept(listener[i], &info);

                if (fd >= 0) {
                    in[i] = fd;
                    accepted++;
                    if (info.peer_rank != first + n) {
                        fprintf(stderr, "accept %d: from rank %d\n", i, info.peer_rank);
                        return 1;
                    }
                } else if (fd != QCG_EAGAIN) {
                    fprintf(stderr, "accept rank %d: %s: %s\n", first + i, qcg_strerror(fd),
                            qcg_last_error(listener[i]));
                    return 1;
                }
            }
        }
    }
    if (connected < n || accepted < n) {
        fprintf(stderr, "qcg-test-many: %d/%d connected, %d/%d accepted in time\n", connected, n,
                accepted, n);
        return 1;
    }
    /* Each connection reaches the rank it was made for. */
    for (int i = 0; i < n; i++) {
        uint32_t v = htonl((uint32_t)i), got = 0;

        if (write(out[i], &v, 4) != 4 || read(in[i], &got, 4) != 4 || ntohl(got) != (uint32_t)i) {
            fprintf(stderr, "connection %d: data went astray\n", i);
            return 1;
        }
        close(out[i]);
        close(in[i]);
    }
    for (int i = 0; i < n; i++)
        qcg_close(listener[i]);
    qcg_close(me);
    printf("qcg-test-many: %d/%d connections, max setup %llu us\n", n, n,
           (unsigned long long)max_setup);
    return 0;
}
