/*
 * listener-flood: the legitimate side of bench/listener-flood.sh.  A rank
 * (libqcgconn, against the tests' fake helper) listens and accepts in a
 * thread of its own; a peer of the job connects to it from 127.0.0.2 and
 * runs the handshake, COUNT times one after the other, while
 * bench/slow-clients floods the rank's port from other addresses.
 *
 *   listener-flood [--count N] [--timeout-ms MS]
 *
 * Prints "port P" once listening, then waits for a line on stdin (the
 * flood is in place), runs the connects and prints one line:
 *   "ok K of N p50_us X p99_us Y"
 * (latency of the successful ones: TCP connect to the end of the peer's
 * handshake; a failure is one not done within --timeout-ms, default 10000).
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fake_helper.h"
#include "handshake_blocking.h"
#include "qcgconn.h"
#include "samples.h"

#define SECRET "5ec2e70123456789abcdef0123456789abcdef0123456789abcdef0123456789"
#define PORT_LOW 18960
#define PORT_HIGH 18969

static atomic_int stop;

static void *accept_loop(void *arg)
{
    qcg_ctx *ctx = arg;

    while (!atomic_load(&stop)) {
        struct pollfd p = {.fd = qcg_accept_pollfd(ctx), .events = POLLIN};
        int fd;

        if (poll(&p, 1, 50) != 1)
            continue;
        while ((fd = qcg_accept(ctx, NULL)) >= 0)
            close(fd);
    }
    return NULL;
}

/* One peer's connection and handshake from 127.0.0.2; its time in us, or 0. */
static uint64_t one_connect(uint16_t port, int timeout_ms)
{
    struct sockaddr_in src = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000002u)};
    struct sockaddr_in dst = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct hs_self self = {.job = "flood", .rank = 1, .secret = SECRET, .cluster = "c1"};
    uint64_t t0 = now_us(), deadline = t0 + (uint64_t)timeout_ms * 1000u;
    char why[256];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int rc = -1;

    if (fd >= 0 && bind(fd, (struct sockaddr *)&src, sizeof(src)) == 0 &&
        (connect(fd, (struct sockaddr *)&dst, sizeof(dst)) == 0 || errno == EINPROGRESS)) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int left = timeout_ms;
        if (poll(&p, 1, left) == 1 && (p.revents & POLLOUT) && !(p.revents & (POLLERR | POLLHUP)))
            rc = hs_initiate(fd, &self, 0, deadline, why, sizeof(why));
    }
    if (fd >= 0)
        close(fd);
    return rc == 0 ? now_us() - t0 : 0;
}

int main(int argc, char **argv)
{
    int count = 20, timeout_ms = 10000;
    char sock_path[108], line[64];
    struct qcg_contact me;
    struct rlimit rl;
    qcg_ctx *ctx = NULL;
    pthread_t th;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--count") == 0)
            count = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--timeout-ms") == 0)
            timeout_ms = atoi(argv[i + 1]);
    }
    if (count < 1 || count > 100000 || timeout_ms < 1) {
        fprintf(stderr, "usage: listener-flood [--count N] [--timeout-ms MS]\n");
        return 2;
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    snprintf(sock_path, sizeof(sock_path), "%s/qcg-listener-flood-%d.sock",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    struct fake_helper *fh = fake_helper_new(sock_path, PORT_LOW, PORT_HIGH);
    struct qcg_options o = {
        .job = "flood", .rank = 0, .secret = SECRET, .helper_socket = sock_path};
    if (fh == NULL || qcg_open(&ctx, &o) != 0 || qcg_listen(ctx) != 0 ||
        qcg_local_contact(ctx, &me) != 0) {
        fprintf(stderr, "listener-flood: no rank: %s\n", qcg_last_error(ctx));
        return 1;
    }
    printf("port %u\n", me.port);
    fflush(stdout);
    if (pthread_create(&th, NULL, accept_loop, ctx) != 0)
        return 1;
    if (fgets(line, sizeof(line), stdin) == NULL)
        return 1;

    uint64_t *took = calloc((size_t)count, sizeof(*took));
    int ok = 0;
    for (int i = 0; i < count && took != NULL; i++) {
        uint64_t us = one_connect(me.port, timeout_ms);
        if (us > 0)
            took[ok++] = us;
    }
    samples_sort(took, (size_t)ok);
    printf("ok %d of %d p50_us %llu p99_us %llu\n", ok, count,
           (unsigned long long)samples_percentile(took, (size_t)ok, 50),
           (unsigned long long)samples_percentile(took, (size_t)ok, 99));
    fflush(stdout);
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    qcg_close(ctx);
    fake_helper_free(fh);
    free(took);
    return 0;
}
