/* qcg-cat: netcat over libqcgconn.
 *
 *   qcg-cat [options] listen          accept one connection, copy it to stdout
 *   qcg-cat [options] connect PEER    copy stdin to rank PEER
 *
 * Options may come before or after the subcommand. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "address.h"
#include "number.h"
#include "qcgconn.h"

#define COPY_BUF (256 * 1024)

struct cat_opts {
    struct qcg_options q;
    int timeout_s; /* 0 = forever */
    bool json;
    const char *command;
    const char *peer;
};

static void usage(FILE *f)
{
    fprintf(f, "usage: qcg-cat [options] listen\n"
               "       qcg-cat [options] connect PEER\n"
               "\n"
               "listen: publish this rank, accept one connection, copy it to stdout.\n"
               "connect: connect to rank PEER, copy stdin to it, wait until it closes.\n"
               "\n"
               "options (before or after the subcommand):\n"
               "  --job ID        job id (default $QCG_JOB)\n"
               "  --rank N        this process's rank (default $QCG_RANK)\n"
               "  (the job secret comes from $QCG_JOB_SECRET only, never a command line)\n"
               "  --helper PATH   helper socket (default $QCG_HELPER_SOCKET or "
               "/run/qcg/helper.sock)\n"
               "  --timeout SEC   connect / wait-for-connection timeout (default 30, 0 = forever)\n"
               "  --encrypt MODE  inter-site (default: encrypted when the peer is in another\n"
               "                  cluster), always or never (plain unless the peer asks); every\n"
               "                  connection is authenticated by the job secret either way\n"
               "  --json          progress lines on stderr as JSON objects\n"
               "  --help          this text\n"
               "  --version       print the version and exit\n"
               "\n"
               "exit status: 0 done, 1 failure (open, connect, copy), 2 usage error.\n");
}

static int parse_int(const char *s, int min, int *out)
{
    long v;
    if (number_parse(s, min, INT_MAX, &v) < 0)
        return -1;
    *out = (int)v;
    return 0;
}

/* 0 = run, 1 = --help or --version shown, -1 = usage error (message printed). */
static int parse_args(int argc, char **argv, struct cat_opts *o)
{
    static const char *const with_value[] = {"--job", "--rank", "--helper", "--timeout",
                                             "--encrypt"};

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = NULL;
        char name[32];
        size_t nlen;

        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            if (o->command == NULL) {
                o->command = arg;
            } else if (o->peer == NULL && strcmp(o->command, "connect") == 0) {
                o->peer = arg;
            } else {
                fprintf(stderr, "qcg-cat: unexpected argument '%s'\n", arg);
                return -1;
            }
            continue;
        }
        if (strcmp(arg, "--help") == 0) {
            usage(stdout);
            return 1;
        }
        if (strcmp(arg, "--version") == 0) {
            printf("qcg-cat %s\n", QCG_VERSION);
            return 1;
        }
        if (strcmp(arg, "--json") == 0) {
            o->json = true;
            continue;
        }
        nlen = strcspn(arg, "=");
        if (nlen >= sizeof(name)) {
            fprintf(stderr, "qcg-cat: unknown option '%s'\n", arg);
            return -1;
        }
        memcpy(name, arg, nlen);
        name[nlen] = '\0';
        if (strcmp(name, "--secret") == 0) {
            /* Every user of the host reads a command line (ps). */
            fprintf(stderr, "qcg-cat: the job secret is never given on a command line: "
                            "export QCG_JOB_SECRET\n");
            return -1;
        }
        bool known = false;
        for (size_t k = 0; k < sizeof(with_value) / sizeof(with_value[0]); k++)
            known = known || strcmp(name, with_value[k]) == 0;
        if (!known) {
            fprintf(stderr, "qcg-cat: unknown option '%s' (see --help)\n", arg);
            return -1;
        }
        if (arg[nlen] == '=') {
            val = arg + nlen + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            fprintf(stderr, "qcg-cat: option %s needs a value\n", name);
            return -1;
        }
        if (strcmp(name, "--job") == 0) {
            o->q.job = val;
        } else if (strcmp(name, "--helper") == 0) {
            o->q.helper_socket = val;
        } else if (strcmp(name, "--encrypt") == 0) {
            o->q.encrypt = qcg_encrypt_parse(val);
            if (o->q.encrypt < 0) {
                fprintf(stderr, "qcg-cat: --encrypt: want inter-site, always or never, not '%s'\n",
                        val);
                return -1;
            }
        } else if (strcmp(name, "--rank") == 0) {
            if (parse_int(val, 0, &o->q.rank) < 0) {
                fprintf(stderr, "qcg-cat: --rank: want a number >= 0, not '%s'\n", val);
                return -1;
            }
        } else if (parse_int(val, 0, &o->timeout_s) < 0) {
            fprintf(stderr, "qcg-cat: --timeout: want seconds >= 0, not '%s'\n", val);
            return -1;
        }
    }
    if (o->command == NULL) {
        usage(stderr);
        return -1;
    }
    if (strcmp(o->command, "listen") != 0 && strcmp(o->command, "connect") != 0) {
        fprintf(stderr, "qcg-cat: unknown command '%s' (listen or connect)\n", o->command);
        return -1;
    }
    if (strcmp(o->command, "connect") == 0 && o->peer == NULL) {
        fprintf(stderr, "qcg-cat: connect needs the peer's rank\n");
        return -1;
    }
    return 0;
}

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ms left before deadline (0 = none: -1 for poll). */
static int left_ms(uint64_t deadline)
{
    uint64_t now;

    if (deadline == 0)
        return -1;
    now = now_ms();
    if (now >= deadline)
        return 0;
    return deadline - now > INT_MAX ? INT_MAX : (int)(deadline - now);
}

/* The connection: its socket, and its session when encrypted (all data
   through it then). */
struct conn {
    int fd;
    qcg_tls *tls;
};

static ssize_t conn_read(const struct conn *c, char *buf, size_t len)
{
    /* Not qcg_conn_recv: stdin and stdout are connections here too. */
    return c->tls != NULL ? qcg_tls_recv(c->tls, buf, len) : read(c->fd, buf, len);
}

/* Why the connection's last call failed (errno set by it). */
static const char *conn_error(const struct conn *c)
{
    return qcg_conn_strerror(c->tls, errno);
}

/* Ends our direction: the session's close_notify first when encrypted. */
static void conn_end(const struct conn *c)
{
    if (c->tls != NULL)
        (void)qcg_tls_shutdown(c->tls);
    shutdown(c->fd, SHUT_WR);
}

static void conn_close(struct conn *c)
{
    qcg_tls_free(c->tls);
    c->tls = NULL;
    close(c->fd);
}

static int write_all(const struct conn *c, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = c->tls != NULL ? qcg_tls_send(c->tls, buf, len) : write(c->fd, buf, len);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Copies the connection to `to` until EOF; bytes copied, or -1 (errno;
 *which says whether reading or writing failed). */
static long long copy(const struct conn *from, const struct conn *to, char *buf, const char **which)
{
    long long total = 0;

    for (;;) {
        ssize_t n = conn_read(from, buf, COPY_BUF);

        if (n == 0)
            return total;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            *which = "read";
            return -1;
        }
        if (write_all(to, buf, (size_t)n) < 0) {
            *which = "write";
            return -1;
        }
        total += n;
    }
}

/* connect: copies stdin to the connection while watching the connection, so
   that a peer (or a relay) that goes away is noticed at once, not at the
   next write.  Whatever the peer sends meanwhile goes to stdout.  Bytes
   sent, or -1 with the error printed. */
static long long send_stdin(const struct conn *c, int peer, char *buf)
{
    struct pollfd p[2] = {{.fd = STDIN_FILENO, .events = POLLIN}, {.fd = c->fd, .events = POLLIN}};
    const struct conn out = {.fd = STDOUT_FILENO};
    long long total = 0;

    for (;;) {
        ssize_t n;

        /* Decrypted bytes waiting in the session: poll does not see them. */
        if (qcg_tls_pending(c->tls) > 0) {
            p[1].revents = POLLIN;
            p[0].revents = 0;
        } else if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "qcg-cat: poll: %s\n", strerror(errno));
            return -1;
        }
        if (p[1].revents != 0) {
            n = conn_read(c, buf, COPY_BUF);
            if (n > 0) {
                if (write_all(&out, buf, (size_t)n) < 0) {
                    fprintf(stderr, "qcg-cat: write: %s\n", strerror(errno));
                    return -1;
                }
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            if (n == 0)
                fprintf(stderr,
                        "qcg-cat: connect to rank %d: the connection was closed after "
                        "%lld bytes were sent, before the end of the input\n",
                        peer, total);
            else
                fprintf(stderr,
                        "qcg-cat: connect to rank %d: the connection broke after %lld "
                        "bytes: %s\n",
                        peer, total, conn_error(c));
            return -1;
        }
        if (p[0].revents == 0)
            continue;
        n = read(STDIN_FILENO, buf, COPY_BUF);
        if (n == 0)
            return total;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "qcg-cat: read: %s\n", strerror(errno));
            return -1;
        }
        if (write_all(c, buf, (size_t)n) < 0) {
            fprintf(stderr,
                    "qcg-cat: connect to rank %d: the connection broke after %lld "
                    "bytes: %s\n",
                    peer, total, conn_error(c));
            return -1;
        }
        total += n;
    }
}

/* Says so when a failure was this node's want of descriptors, not the
   peer's or the grid's doing (err: qcg_last_errno). */
static void short_of_fds(int err)
{
    if (err == EMFILE || err == ENFILE)
        fprintf(stderr, "qcg-cat: this %s is out of file descriptors (%s): raise ulimit -n\n",
                err == EMFILE ? "process" : "node", strerror(err));
}

/* The far end of fd as "[2001:db8::1]:7700" or "198.51.100.7:7700" (an
   IPv4 peer of a dual-stack listener as IPv4); "" when unknown. */
static void peer_text(int fd, char *out, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char host[INET6_ADDRSTRLEN], canon[INET6_ADDRSTRLEN];
    const void *a;
    uint16_t port;

    out[0] = '\0';
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0)
        return;
    if (ss.ss_family == AF_INET) {
        a = &((struct sockaddr_in *)&ss)->sin_addr;
        port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
        port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    } else {
        return;
    }
    if (inet_ntop(ss.ss_family, a, host, sizeof(host)) == NULL ||
        address_canonical(host, canon, sizeof(canon)) < 0)
        return;
    hostport_format(canon, port, out, len);
}

static void report(const struct cat_opts *o, const char *event, const struct qcg_conn_info *info,
                   long long bytes, const char *where)
{
    const char *tech = qcg_technique_name(info->technique);
    const char *enc = qcg_encryption_name(info->encryption);

    if (o->json)
        fprintf(stderr,
                "{\"event\":\"%s\",\"peer\":%d,\"technique\":\"%s\",\"setup_us\":%llu,"
                "\"bytes\":%lld,\"encryption\":\"%s\",\"address\":\"%s\"}\n",
                event, info->peer_rank, tech, (unsigned long long)info->setup_us, bytes, enc,
                where);
    else if (bytes < 0)
        fprintf(stderr, "qcg-cat: %s rank %d (%s, %s, setup %llu us)\n", event, info->peer_rank,
                tech, enc, (unsigned long long)info->setup_us);
    else
        fprintf(stderr, "qcg-cat: %s rank %d (%s, %s, setup %llu us): %lld bytes\n", event,
                info->peer_rank, tech, enc, (unsigned long long)info->setup_us, bytes);
}

static int do_listen(const struct cat_opts *o, qcg_ctx *ctx, char *buf)
{
    struct qcg_contact me;
    struct qcg_conn_info info = {0};
    uint64_t deadline = o->timeout_s ? now_ms() + (uint64_t)o->timeout_s * 1000u : 0;
    const struct conn out = {.fd = STDOUT_FILENO};
    struct conn c;
    const char *which = "";
    long long bytes;
    int rc, fd = -1;

    rc = qcg_listen(ctx);
    if (rc < 0) {
        fprintf(stderr, "qcg-cat: listen: %s: %s\n", qcg_strerror(rc), qcg_last_error(ctx));
        short_of_fds(qcg_last_errno(ctx));
        return 1;
    }
    if (qcg_local_contact(ctx, &me) == 0) {
        if (o->json)
            fprintf(stderr,
                    "{\"event\":\"listening\",\"rank\":%d,\"cluster\":\"%s\",\"node\":\"%s\","
                    "\"address\":\"%s\",\"port\":%u}\n",
                    o->q.rank, me.cluster, me.node, me.address, me.port);
        else
            fprintf(stderr, "qcg-cat: rank %d listening on %s port %u (cluster %s, node %s)\n",
                    o->q.rank, me.address, me.port, me.cluster, me.node);
    }

    /* Bounded by --timeout (unless 0); refused peers only restart the wait. */
    while (fd < 0) {
        struct pollfd p = {.fd = qcg_accept_pollfd(ctx), .events = POLLIN};
        int ms = left_ms(deadline), n;

        if (ms == 0) {
            fprintf(stderr, "qcg-cat: listen: %s: no connection within %d s\n",
                    qcg_strerror(QCG_ETIMEDOUT), o->timeout_s);
            return 1;
        }
        n = poll(&p, 1, ms);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "qcg-cat: poll: %s\n", strerror(errno));
            return 1;
        }
        if (n <= 0)
            continue;
        fd = qcg_accept(ctx, &info);
        if (fd == QCG_EAGAIN) {
            if (qcg_last_error(ctx)[0] != '\0' && !o->json)
                fprintf(stderr, "qcg-cat: %s\n", qcg_last_error(ctx));
            fd = -1;
            continue;
        }
        if (fd < 0) {
            fprintf(stderr, "qcg-cat: accept: %s: %s\n", qcg_strerror(fd), qcg_last_error(ctx));
            short_of_fds(qcg_last_errno(ctx));
            return 1;
        }
    }
    char where[HOSTPORT_MAX];
    peer_text(fd, where, sizeof(where));
    report(o, "accepted", &info, -1, where);
    c = (struct conn){.fd = fd, .tls = info.tls};
    bytes = copy(&c, &out, buf, &which);
    if (bytes < 0) {
        fprintf(stderr, "qcg-cat: listen: connection from rank %d: %s: %s\n", info.peer_rank, which,
                strcmp(which, "read") == 0 ? conn_error(&c) : strerror(errno));
        conn_close(&c);
        return 1;
    }
    /* The sender reads to our end: an orderly one (close_notify). */
    conn_end(&c);
    conn_close(&c);
    report(o, "done", &info, bytes, where);
    return 0;
}

static int do_connect(const struct cat_opts *o, qcg_ctx *ctx, char *buf)
{
    struct qcg_conn_info info = {0};
    const struct conn out = {.fd = STDOUT_FILENO};
    struct conn c;
    int peer, fd, timeout_ms;
    const char *which = "";
    long long bytes, back;

    if (parse_int(o->peer, 0, &peer) < 0) {
        fprintf(stderr, "qcg-cat: connect: the peer's rank must be a number >= 0, not '%s'\n",
                o->peer);
        return 2;
    }
    timeout_ms = o->timeout_s == 0 || o->timeout_s > INT_MAX / 1000 ? INT_MAX : o->timeout_s * 1000;
    fd = qcg_connect(ctx, peer, timeout_ms, &info);
    if (fd < 0) {
        fprintf(stderr, "qcg-cat: connect to rank %d: %s: %s\n", peer, qcg_strerror(fd),
                qcg_last_error(ctx));
        short_of_fds(qcg_last_errno(ctx));
        return 1;
    }
    char where[HOSTPORT_MAX];
    peer_text(fd, where, sizeof(where));
    if (!o->json)
        report(o, "connected to", &info, -1, where);
    c = (struct conn){.fd = fd, .tls = info.tls};
    bytes = send_stdin(&c, peer, buf);
    if (bytes < 0) {
        conn_close(&c);
        return 1;
    }
    /* The peer closes once it has read everything: that is our receipt. */
    conn_end(&c);
    back = copy(&c, &out, buf, &which);
    if (back < 0) {
        fprintf(stderr, "qcg-cat: connect to rank %d: %s: %s\n", peer, which,
                strcmp(which, "read") == 0 ? conn_error(&c) : strerror(errno));
        conn_close(&c);
        return 1;
    }
    conn_close(&c);
    report(o, "sent", &info, bytes, where);
    return 0;
}

int main(int argc, char **argv)
{
    struct cat_opts o = {.q = {.rank = -1, .encrypt = QCG_ENCRYPT_INTER_SITE}, .timeout_s = 30};
    qcg_ctx *ctx = NULL;
    char *buf;
    int rc;

    rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    signal(SIGPIPE, SIG_IGN);

    rc = qcg_open(&ctx, &o.q);
    if (rc < 0) {
        fprintf(stderr, "qcg-cat: open: %s: %s\n", qcg_strerror(rc), qcg_last_error(NULL));
        short_of_fds(qcg_last_errno(NULL));
        return 1;
    }
    if (o.q.rank < 0 && getenv("QCG_RANK") != NULL &&
        parse_int(getenv("QCG_RANK"), 0, &o.q.rank) < 0) {
        fprintf(stderr, "qcg-cat: QCG_RANK: want a number >= 0, not '%s'\n", getenv("QCG_RANK"));
        qcg_close(ctx);
        return 2;
    }
    buf = malloc(COPY_BUF);
    if (buf == NULL) {
        fprintf(stderr, "qcg-cat: out of memory\n");
        qcg_close(ctx);
        return 1;
    }
    if (strcmp(o.command, "listen") == 0)
        rc = do_listen(&o, ctx, buf);
    else
        rc = do_connect(&o, ctx, buf);
    free(buf);
    qcg_close(ctx);
    return rc;
}
