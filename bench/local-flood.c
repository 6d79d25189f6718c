/*
 * local-flood: the review's fifth attack (issue 32), a second uid on a node
 * hammering the node's helper over its local socket, and the legitimate
 * rank beside it (bench/helper-uid.sh runs both, each as its own uid).
 *
 *   local-flood attack [--lookups] --socket PATH [--conns N] [--depth D] [--idle N]
 *       N connections (HELLO as ranks 0..N-1 of a job of the attacker's own),
 *       each keeping D requests in flight without end: PUBLISH, LOOKUP of
 *       another of its ranks, WITHDRAW, in turn (--lookups: LOOKUPs only,
 *       of ranks the requests mode published); and IDLE connections that
 *       send half a header and nothing more.  A connection the helper closes
 *       or refuses is made again at once.  Runs until stdin closes, then
 *       prints one line: "seconds S requests R lookups L replies A errors E
 *       refused F held H" (F: connections refused or cut, made again).
 *   local-flood victim --socket PATH [--count N] [--timeout-ms MS]
 *       ranks 0 and 1 of a job of this uid: rank 0 listens and accepts in a
 *       thread, rank 1 connects to it N times in a row (each a LOOKUP through
 *       the helper, the connect and the handshake).  Prints one line:
 *       "ok K of N p50_us X p99_us Y max_us Z".
 *
 * A benchmark, not a test: it asserts nothing about time.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "bounded_io.h"
#include "lmsg.h"
#include "qcgconn.h"
#include "samples.h"

#define CONNS_MAX 4096
#define SECRET "f100d0123456789abcdef0123456789abcdef0123456789abcdef0123456789a"

/* A non-blocking connection to the helper, or -1. */
static int dial(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

struct conn {
    int fd;
    int rank;
    bool ready; /* HELLO answered */
    unsigned inflight, next;
    uint16_t low, high; /* the node's ports, from HELLO_OK */
    struct lmsg_reader r;
};

static struct {
    unsigned long requests, lookups, replies, errors, refused;
} count;

static void conn_open(struct conn *c, const char *path, const char *job)
{
    struct local_hello h = {.version = LOCAL_VERSION, .rank = c->rank};
    lmsg_reader_init(&c->r);
    c->ready = false;
    c->inflight = 0;
    c->fd = dial(path);
    snprintf(h.job, sizeof(h.job), "%s", job);
    snprintf(h.secret, sizeof(h.secret), "%s", SECRET);
    if (c->fd >= 0 && lmsg_send(c->fd, LOCAL_HELLO, 1, &h, now_us() + 1000000) != 0) {
        close(c->fd);
        c->fd = -1;
    }
}

static void conn_close(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    lmsg_reader_reset(&c->r);
    c->fd = -1;
}

static bool lookups_only; /* --lookups: every request a LOOKUP */

/* Keeps `depth` requests in flight: PUBLISH, LOOKUP, WITHDRAW in turn. */
static void conn_fill(struct conn *c, unsigned depth, int conns)
{
    while (c->fd >= 0 && c->ready && c->inflight < depth) {
        unsigned kind = lookups_only ? (c->next++, 1u) : c->next++ % 3;
        int rc;
        if (kind == 0) {
            struct local_publish p = {
                .port = (uint16_t)(c->low + (unsigned)c->rank % (c->high - c->low + 1u))};
            rc = lmsg_send(c->fd, LOCAL_PUBLISH, c->next, &p, now_us() + 100000);
        } else if (kind == 1) {
            struct local_lookup l = {.to_rank = (c->rank + 1) % conns, .timeout_ms = 1000};
            rc = lmsg_send(c->fd, LOCAL_LOOKUP, c->next, &l, now_us() + 100000);
            count.lookups += rc == 0;
        } else {
            rc = lmsg_send(c->fd, LOCAL_WITHDRAW, c->next, NULL, now_us() + 100000);
        }
        if (rc != 0) {
            conn_close(c);
            return;
        }
        c->inflight++;
        count.requests++;
    }
}

static int attack(const char *path, int conns, unsigned depth, int idle)
{
    static struct conn c[CONNS_MAX];
    static struct pollfd p[2 * CONNS_MAX + 1];
    static int idle_fd[CONNS_MAX];
    char job[32];
    snprintf(job, sizeof(job), "flood-%d", (int)getuid());
    for (int i = 0; i < conns; i++) {
        c[i].rank = i;
        conn_open(&c[i], path, job);
    }
    for (int i = 0; i < idle; i++)
        idle_fd[i] = -1;
    fprintf(stderr, "ready\n");
    uint64_t t0 = now_us();
    for (;;) {
        /* Idle ones: half a header, then silence; made again when cut. */
        for (int i = 0; i < idle; i++) {
            if (idle_fd[i] < 0 && (idle_fd[i] = dial(path)) >= 0 &&
                write(idle_fd[i], "QCGL", 4) < 0) {
                close(idle_fd[i]);
                idle_fd[i] = -1;
            }
        }
        p[0] = (struct pollfd){.fd = STDIN_FILENO, .events = POLLIN};
        for (int i = 0; i < conns; i++) {
            if (c[i].fd < 0) {
                count.refused++;
                conn_open(&c[i], path, job);
            }
            conn_fill(&c[i], depth, conns);
            p[i + 1] = (struct pollfd){.fd = c[i].fd, .events = POLLIN};
        }
        for (int i = 0; i < idle; i++)
            p[conns + 1 + i] = (struct pollfd){.fd = idle_fd[i], .events = POLLIN};
        if (poll(p, (nfds_t)(conns + idle) + 1, 100) < 0 && errno != EINTR)
            return 1;
        if (p[0].revents)
            break;
        /* An idle one the helper answered (a refusal) or cut: made again. */
        for (int i = 0; i < idle; i++) {
            if (idle_fd[i] >= 0 && p[conns + 1 + i].revents) {
                close(idle_fd[i]);
                idle_fd[i] = -1;
                count.refused++;
            }
        }
        for (int i = 0; i < conns; i++) {
            if (c[i].fd < 0 || !(p[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            int rc;
            while ((rc = lmsg_read(c[i].fd, &c[i].r)) == 1) {
                if (c[i].r.hdr.type == LOCAL_HELLO_OK) {
                    c[i].ready = true;
                    c[i].low = c[i].r.payload.hello_ok.port_low;
                    c[i].high = c[i].r.payload.hello_ok.port_high;
                } else if (c[i].inflight > 0) {
                    c[i].inflight--;
                    count.replies++;
                    count.errors += c[i].r.hdr.type == LOCAL_ERROR;
                }
                lmsg_reader_reset(&c[i].r);
            }
            if (rc < 0)
                conn_close(&c[i]);
        }
    }
    int held = 0;
    for (int i = 0; i < idle; i++)
        held += idle_fd[i] >= 0;
    for (int i = 0; i < conns; i++)
        held += c[i].fd >= 0 && c[i].ready;
    printf("seconds %.1f requests %lu lookups %lu replies %lu errors %lu refused %lu held %d\n",
           (double)(now_us() - t0) / 1e6, count.requests, count.lookups, count.replies,
           count.errors, count.refused, held);
    return 0;
}

static atomic_int stop;

static void *accept_loop(void *arg)
{
    qcg_ctx *ctx = arg;
    struct pollfd p = {.fd = qcg_accept_pollfd(ctx), .events = POLLIN};
    while (!atomic_load(&stop)) {
        if (poll(&p, 1, 100) <= 0)
            continue;
        struct qcg_conn_info info;
        int fd = qcg_accept(ctx, &info);
        if (fd >= 0)
            close(fd);
    }
    return NULL;
}

static int victim(const char *path, int count_n, int timeout_ms)
{
    char job[32];
    qcg_ctx *rank0 = NULL, *rank1 = NULL;
    pthread_t th;
    snprintf(job, sizeof(job), "legit-%d", (int)getpid());
    struct qcg_options o0 = {.job = job, .rank = 0, .secret = SECRET, .helper_socket = path};
    struct qcg_options o1 = o0;
    o1.rank = 1;
    if (qcg_open(&rank0, &o0) != 0 || qcg_listen(rank0) != 0 || qcg_open(&rank1, &o1) != 0) {
        fprintf(stderr, "local-flood: no ranks: %s\n",
                qcg_last_error(rank1 != NULL ? rank1 : rank0));
        return 1;
    }
    if (pthread_create(&th, NULL, accept_loop, rank0) != 0)
        return 1;
    uint64_t *took = calloc((size_t)count_n, sizeof(*took));
    int ok = 0;
    for (int i = 0; i < count_n && took != NULL; i++) {
        struct qcg_conn_info info;
        uint64_t t0 = now_us();
        int fd = qcg_connect(rank1, 0, timeout_ms, &info);
        if (fd >= 0) {
            took[ok++] = now_us() - t0;
            close(fd);
        } else {
            fprintf(stderr, "local-flood: connect %d: %s\n", i, qcg_last_error(rank1));
        }
    }
    samples_sort(took, (size_t)ok);
    printf("ok %d of %d p50_us %llu p99_us %llu max_us %llu\n", ok, count_n,
           (unsigned long long)samples_percentile(took, (size_t)ok, 50),
           (unsigned long long)samples_percentile(took, (size_t)ok, 99),
           (unsigned long long)samples_percentile(took, (size_t)ok, 100));
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    qcg_close(rank1);
    qcg_close(rank0);
    free(took);
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int conns = 200, idle = 0, count_n = 100, timeout_ms = 10000;
    unsigned depth = 8;
    struct rlimit rl;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--lookups") == 0) {
            lookups_only = true;
            memmove(&argv[i], &argv[i + 1], (size_t)(argc - i) * sizeof(*argv));
            argc--;
        }
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--socket") == 0)
            path = argv[i + 1];
        else if (strcmp(argv[i], "--conns") == 0)
            conns = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--depth") == 0)
            depth = (unsigned)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--idle") == 0)
            idle = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--count") == 0)
            count_n = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--timeout-ms") == 0)
            timeout_ms = atoi(argv[i + 1]);
    }
    if (argc < 2 || path == NULL || conns < 1 || conns > CONNS_MAX || idle < 0 ||
        idle > CONNS_MAX || depth < 1 || count_n < 1 || timeout_ms < 1) {
        fprintf(stderr, "usage: local-flood attack|victim --socket PATH [options]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN); /* the helper cuts connections we write to */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (strcmp(argv[1], "attack") == 0)
        return attack(path, conns, depth, idle);
    if (strcmp(argv[1], "victim") == 0)
        return victim(path, count_n, timeout_ms);
    fprintf(stderr, "usage: local-flood attack|victim --socket PATH [options]\n");
    return 2;
}
