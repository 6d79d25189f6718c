/*
 * traverse_driver: drives helper/traverse.c in network namespaces for
 * traverse-ns.sh.  The out-of-band channel is a FIFO on the shared file
 * system: one line per SYN, in hex.
 *
 *   listen ADDR PORT [--send F --recv F] [--count N] [--timeout S] [--silent]
 *       a plain listener: accepts N connections; with files, sends F and
 *       writes what it receives to the other, both at once; --silent: sends
 *       nothing (not even a FIN) before the client closed.
 *   connect ADDR PORT [--send F --recv F] [--count N] [--timeout S]
 *           [--watch QUEUE --chan FIFO]
 *       a plain connect(); with --watch, traverse_watch_syn first and the
 *       captured SYN written to the FIFO.  Prints "connected ... in X ms".
 *   target NODE --queue Q --chan FIFO --pub ADDR --port P [--count N]
 *          [--timeout S] [--published]
 *       reads SYNs from the FIFO and traverse_inject()s them (the public port
 *       is the SYN's source port: a port-preserving NAT).  --published: the
 *       technique as published, the SYN injected and nothing else.
 *
 * Addresses of either family (IPv6 ones traverse over IPv6); connect's own
 * address for its engine is the one the kernel picks towards ADDR.
 * Exit status 0 when every step succeeded, 1 otherwise, 2 on bad usage.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hex.h"
#include "log.h"
#include "rawpkt.h"
#include "traverse.h"

#define LINE_MAX_HEX (2 * TRAVERSE_PACKET_MAX + 64)
#define CHUNK 65536

struct opts {
    const char *mode, *addr, *send, *recv, *chan;
    struct rawpkt_addr ip, pub;
    unsigned port, count, timeout_s, queue, published, watch, silent;
};

/* addr:port as a socket address; its length. */
static socklen_t sockaddr_of(const struct rawpkt_addr *a, unsigned port,
                             struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (a->family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_addr = a->u.v6;
        s6->sin6_port = htons((uint16_t)port);
        return sizeof(*s6);
    }
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    s4->sin_family = AF_INET;
    s4->sin_addr = a->u.v4;
    s4->sin_port = htons((uint16_t)port);
    return sizeof(*s4);
}

/* A socket address's port, and its address as text in buf (46 bytes). */
static unsigned port_of(const struct sockaddr_storage *ss, char *buf)
{
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, buf, RAWPKT_ADDR_TEXT);
        return ntohs(s6->sin6_port);
    }
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
    inet_ntop(AF_INET, &s4->sin_addr, buf, RAWPKT_ADDR_TEXT);
    return ntohs(s4->sin_port);
}

/* The address the kernel sends from towards `to` (a UDP connect sends
   nothing). */
static int source_towards(const struct rawpkt_addr *to, struct rawpkt_addr *out)
{
    struct sockaddr_storage ss, me;
    socklen_t len = sockaddr_of(to, 9, &ss), ml = sizeof(me);
    int fd = socket(to->family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    char text[RAWPKT_ADDR_TEXT];

    if (fd < 0 || connect(fd, (struct sockaddr *)&ss, len) < 0 ||
        getsockname(fd, (struct sockaddr *)&me, &ml) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    port_of(&me, text);
    return rawpkt_addr_parse(text, out);
}

static uint64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* Sends `send` and writes what arrives to `recv`, both at once, until EOF
   both ways or the deadline. */
static int transfer(int fd, const char *send_path, const char *recv_path, uint64_t deadline)
{
    int in = open(send_path, O_RDONLY | O_CLOEXEC);
    int out = open(recv_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    static char sbuf[CHUNK], rbuf[CHUNK];
    size_t slen = 0, soff = 0;
    int sending = 1, receiving = 1, rc = -1;
    unsigned long long sent = 0, got = 0;

    if (in < 0 || out < 0) {
        perror("transfer: open");
        goto done;
    }
    while (sending || receiving) {
        struct pollfd p = {.fd = fd,
                           .events = (short)((receiving ? POLLIN : 0) | (sending ? POLLOUT : 0))};
        uint64_t now = now_us();

        if (now >= deadline) {
            fprintf(stderr, "transfer: timed out (sent %llu, received %llu)\n", sent, got);
            goto done;
        }
        if (poll(&p, 1, (int)((deadline - now) / 1000) + 1) < 0 && errno != EINTR)
            goto done;
        if (sending && (p.revents & (POLLOUT | POLLERR | POLLHUP))) {
            if (soff == slen) {
                ssize_t n = read(in, sbuf, sizeof(sbuf));

                if (n < 0)
                    goto done;
                slen = (size_t)n;
                soff = 0;
                if (n == 0) {
                    shutdown(fd, SHUT_WR);
                    sending = 0;
                }
            }
            if (soff < slen) {
                ssize_t n = send(fd, sbuf + soff, slen - soff, MSG_NOSIGNAL | MSG_DONTWAIT);

                if (n < 0 && errno != EAGAIN && errno != EINTR) {
                    perror("transfer: send");
                    goto done;
                }
                if (n > 0) {
                    soff += (size_t)n;
                    sent += (unsigned long long)n;
                }
            }
        }
        if (receiving && (p.revents & (POLLIN | POLLERR | POLLHUP))) {
            ssize_t n = recv(fd, rbuf, sizeof(rbuf), MSG_DONTWAIT);

            if (n < 0 && errno != EAGAIN && errno != EINTR) {
                perror("transfer: recv");
                goto done;
            }
            if (n == 0)
                receiving = 0;
            if (n > 0) {
                if (write(out, rbuf, (size_t)n) != n)
                    goto done;
                got += (unsigned long long)n;
            }
        }
    }
    printf("transfer: sent %llu received %llu bytes\n", sent, got);
    rc = 0;
done:
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return rc;
}

static int run_listen(const struct opts *o)
{
    struct sockaddr_storage sa;
    socklen_t salen = sockaddr_of(&o->ip, o->port, &sa);
    int one = 1, fd = socket(o->ip.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    uint64_t deadline = now_us() + (uint64_t)o->timeout_s * 1000000;

    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, salen) < 0 || listen(fd, 16) < 0) {
        perror("listen");
        return 1;
    }
    printf("listening on %s port %u\n", o->addr, o->port);
    fflush(stdout);
    for (unsigned i = 0; i < o->count; i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        struct sockaddr_storage from;
        socklen_t fl = sizeof(from);
        char text[RAWPKT_ADDR_TEXT];
        uint64_t now = now_us();

        if (now >= deadline || poll(&p, 1, (int)((deadline - now) / 1000) + 1) <= 0) {
            fprintf(stderr, "listen: no connection %u within %u s\n", i + 1, o->timeout_s);
            return 1;
        }
        int c = accept4(fd, (struct sockaddr *)&from, &fl, SOCK_CLOEXEC);
        if (c < 0) {
            perror("accept");
            return 1;
        }
        unsigned fport = port_of(&from, text);
        printf("accepted %u from %s port %u\n", i + 1, text, fport);
        fflush(stdout);
        if (o->send != NULL && transfer(c, o->send, o->recv, deadline) < 0)
            return 1;
        /* --silent: a server that waits for the client to speak (here: to
           close) before sending anything, not even a FIN. */
        if (o->silent) {
            struct pollfd w = {.fd = c, .events = POLLIN};
            char byte;

            now = now_us();
            if (now >= deadline || poll(&w, 1, (int)((deadline - now) / 1000) + 1) <= 0 ||
                recv(c, &byte, 1, 0) != 0) {
                fprintf(stderr, "listen: connection %u: no EOF from the client\n", i + 1);
                return 1;
            }
        }
        close(c);
    }
    close(fd);
    return 0;
}

/* connect mode state: one connection at a time. */
struct conn {
    const struct opts *o;
    uv_loop_t *loop;
    struct traverse *t;
    int fd, status, synfd;
    uint64_t t0;
    unsigned done;
    uv_poll_t *poll; /* one per connection: a poll handle is bound to its fd */
    uv_timer_t timer;
};

static void on_syn(void *arg, int status, const uint8_t *pkt, size_t len, const char *why)
{
    struct conn *c = arg;
    char line[LINE_MAX_HEX];

    if (status < 0) {
        fprintf(stderr, "watch: %s\n", why);
        return;
    }
    hex_encode(pkt, len, line);
    printf("syn %s (%.1f ms after connect)\n", line, (double)(now_us() - c->t0) / 1000.0);
    fflush(stdout);
    strcat(line, "\n");
    /* A line below PIPE_BUF is written whole or not at all. */
    int fd = open(c->o->chan, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || write(fd, line, strlen(line)) != (ssize_t)strlen(line))
        fprintf(stderr, "channel %s: %s\n", c->o->chan, strerror(errno));
    if (fd >= 0)
        close(fd);
}

/* Waits (bounded) until the engine removed its per-connection rules by
   itself, then closes it (the close would sweep them anyway). */
struct drain {
    struct traverse *t;
    uv_timer_t timer;
    uint64_t t0;
    unsigned ticks;
};

static void on_drain_closed(uv_handle_t *h)
{
    free(h->data);
}

static void on_drain_tick(uv_timer_t *h)
{
    struct drain *d = h->data;
    unsigned left = traverse_rules(d->t);

    if (left != 0 && ++d->ticks < 300)
        return;
    if (left == 0)
        printf("rules removed by the engine %.0f ms after the last step\n",
               (double)(now_us() - d->t0) / 1000.0);
    else
        printf("rules still installed after 3 s: %u\n", left);
    traverse_close(d->t);
    uv_timer_stop(h);
    uv_close((uv_handle_t *)h, on_drain_closed);
}

static void drain_then_close(uv_loop_t *loop, struct traverse *t)
{
    struct drain *d = calloc(1, sizeof(*d));

    if (d == NULL) {
        traverse_close(t);
        return;
    }
    d->t = t;
    d->t0 = now_us();
    uv_timer_init(loop, &d->timer);
    d->timer.data = d;
    uv_timer_start(&d->timer, on_drain_tick, 0, 10);
}

static void start_connect(struct conn *c);

static void on_poll_closed(uv_handle_t *h)
{
    free(h);
}

static void next_or_stop(struct conn *c)
{
    if (c->poll != NULL) {
        uv_close((uv_handle_t *)c->poll, on_poll_closed);
        c->poll = NULL;
    }
    uv_timer_stop(&c->timer);
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    if (++c->done < c->o->count && c->status == 0) {
        start_connect(c);
        return;
    }
    uv_close((uv_handle_t *)&c->timer, NULL);
    if (c->t != NULL)
        drain_then_close(c->loop, c->t);
}

static void on_connect_timeout(uv_timer_t *h)
{
    struct conn *c = h->data;

    printf("connect %u failed: timed out after %u s\n", c->done + 1, c->o->timeout_s);
    c->status = 1;
    next_or_stop(c);
}

static void on_writable(uv_poll_t *h, int status, int events)
{
    struct conn *c = h->data;
    int err = 0;
    socklen_t el = sizeof(err);
    struct sockaddr_storage me;
    socklen_t ml = sizeof(me);
    char text[RAWPKT_ADDR_TEXT];

    (void)events;
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (status < 0 || err != 0) {
        printf("connect %u failed: %s\n", c->done + 1, strerror(err ? err : EIO));
        c->status = 1;
        next_or_stop(c);
        return;
    }
    getsockname(c->fd, (struct sockaddr *)&me, &ml);
    printf("connected %u from port %u in %.3f ms\n", c->done + 1, port_of(&me, text),
           (double)(now_us() - c->t0) / 1000.0);
    fflush(stdout);
    if (c->o->send != NULL) {
        int fl = fcntl(c->fd, F_GETFL);

        fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
        if (transfer(c->fd, c->o->send, c->o->recv,
                     now_us() + (uint64_t)c->o->timeout_s * 1000000) < 0)
            c->status = 1;
    }
    next_or_stop(c);
}

static void start_connect(struct conn *c)
{
    struct sockaddr_storage sa;
    socklen_t salen = sockaddr_of(&c->o->ip, c->o->port, &sa);
    char why[256];

    if (c->t != NULL &&
        traverse_watch_syn(c->t, c->o->ip, (uint16_t)c->o->port, c->o->timeout_s * 1000, on_syn, c,
                           why, sizeof(why)) < 0) {
        fprintf(stderr, "watch: %s\n", why);
        c->status = 1;
        next_or_stop(c);
        return;
    }
    c->fd = socket(c->o->ip.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    c->t0 = now_us();
    if (connect(c->fd, (struct sockaddr *)&sa, salen) < 0 && errno != EINPROGRESS) {
        printf("connect %u failed: %s\n", c->done + 1, strerror(errno));
        c->status = 1;
        next_or_stop(c);
        return;
    }
    c->poll = calloc(1, sizeof(*c->poll));
    uv_poll_init(c->loop, c->poll, c->fd);
    c->poll->data = c;
    uv_poll_start(c->poll, UV_WRITABLE, on_writable);
    uv_timer_start(&c->timer, on_connect_timeout, (uint64_t)c->o->timeout_s * 1000, 0);
}

static int run_connect(const struct opts *o)
{
    uv_loop_t loop;
    struct conn c = {.o = o, .loop = &loop, .fd = -1};
    char err[256];

    uv_loop_init(&loop);
    if (o->watch) {
        struct traverse_config cfg = {.queue_num = (uint16_t)o->queue};
        struct rawpkt_addr me;

        if (source_towards(&o->ip, &me) < 0) {
            fprintf(stderr, "no route to %s\n", o->addr);
            uv_loop_close(&loop);
            return 1;
        }
        if (me.family == AF_INET6)
            cfg.node6 = me;
        else
            cfg.node = me;
        c.t = traverse_new(&loop, &cfg, err, sizeof(err));
        if (c.t == NULL) {
            fprintf(stderr, "traverse_new: %s\n", err);
            uv_run(&loop, UV_RUN_DEFAULT);
            uv_loop_close(&loop);
            return 1;
        }
    }
    uv_timer_init(&loop, &c.timer);
    c.timer.data = &c;
    start_connect(&c);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (c.t != NULL) {
        printf("rules left: %u\n", traverse_rules(c.t));
        traverse_free(c.t);
    }
    uv_loop_close(&loop);
    return c.status;
}

/* target mode state. */
struct target {
    const struct opts *o;
    uv_loop_t *loop;
    struct traverse *t;
    int raw, fifo, status;
    unsigned lines, finished, pending;
    char buf[4 * LINE_MAX_HEX];
    size_t have;
    uv_poll_t poll;
    uv_timer_t timer;
};

static void target_stop(struct target *g)
{
    if (uv_is_closing((uv_handle_t *)&g->poll))
        return;
    uv_close((uv_handle_t *)&g->poll, NULL);
    uv_close((uv_handle_t *)&g->timer, NULL);
    if (g->t != NULL)
        drain_then_close(g->loop, g->t);
}

struct injected {
    struct target *g;
    unsigned n;
    uint64_t t0;
};

static void on_done(void *arg, int status, const char *why)
{
    struct injected *in = arg;
    struct target *g = in->g;

    if (status == 0)
        printf("inject %u: handshake completed in %.3f ms\n", in->n,
               (double)(now_us() - in->t0) / 1000.0);
    else {
        printf("inject %u: failed: %s\n", in->n, why);
        g->status = 1;
    }
    fflush(stdout);
    free(in);
    g->pending--;
    if (++g->finished >= g->o->count && g->pending == 0)
        target_stop(g);
}

static int unhex(const char *s, uint8_t *out, size_t max)
{
    size_t n = strlen(s);

    if (n % 2 != 0 || n / 2 > max || hex_decode(s, n / 2, out, true) < 0)
        return -1;
    return (int)(n / 2);
}

/* The technique as published: the SYN rewritten and injected, nothing else. */
static int inject_published(struct target *g, const uint8_t *pkt, size_t len, char *why,
                            size_t whylen)
{
    uint8_t copy[TRAVERSE_PACKET_MAX];
    struct rawpkt_tcp s;
    struct sockaddr_storage to;
    socklen_t tolen = sockaddr_of(&g->o->ip, 0, &to);

    if (rawpkt_parse(pkt, len, &s, why, whylen) < 0 ||
        rawpkt_check_syn(&s, &g->o->ip, (uint16_t)g->o->port, why, whylen) < 0)
        return -1;
    memcpy(copy, pkt, s.total);
    rawpkt_set_source(copy, s.total, &g->o->pub, s.sport);
    if (sendto(g->raw, copy, s.total, 0, (struct sockaddr *)&to, tolen) < 0) {
        snprintf(why, whylen, "sendto: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static void handle_line(struct target *g, char *line)
{
    uint8_t pkt[TRAVERSE_PACKET_MAX];
    struct rawpkt_tcp s;
    char why[256];
    unsigned n = ++g->lines;
    int len = unhex(line, pkt, sizeof(pkt));
    uint16_t sport = 0;

    if (len < 0) {
        printf("line %u: refused: not hex, or longer than %d bytes\n", n, TRAVERSE_PACKET_MAX);
        g->finished++;
        return;
    }
    /* The public port: the SYN's own source port (port-preserving NAT). */
    if (rawpkt_parse(pkt, (size_t)len, &s, why, sizeof(why)) == 0)
        sport = s.sport;
    if (g->o->published) {
        if (inject_published(g, pkt, (size_t)len, why, sizeof(why)) < 0)
            printf("line %u: refused: %s\n", n, why);
        else
            printf("line %u: injected (as published)\n", n);
        g->finished++;
        return;
    }
    struct injected *in = calloc(1, sizeof(*in));
    if (in == NULL)
        return;
    in->g = g;
    in->n = n;
    in->t0 = now_us();
    g->pending++;
    if (traverse_inject(g->t, pkt, (size_t)len, g->o->pub, sport, (uint16_t)g->o->port,
                        g->o->timeout_s * 1000, on_done, in, why, sizeof(why)) < 0) {
        printf("line %u: refused: %s\n", n, why);
        g->pending--;
        g->finished++;
        free(in);
        return;
    }
    printf("line %u: injected, rules now %u\n", n, traverse_rules(g->t));
    fflush(stdout);
}

static void on_fifo(uv_poll_t *h, int status, int events)
{
    struct target *g = h->data;
    ssize_t n;
    char *nl;

    (void)status;
    (void)events;
    n = read(g->fifo, g->buf + g->have, sizeof(g->buf) - 1 - g->have);
    if (n <= 0)
        return;
    g->have += (size_t)n;
    g->buf[g->have] = '\0';
    while ((nl = strchr(g->buf, '\n')) != NULL) {
        *nl = '\0';
        handle_line(g, g->buf);
        memmove(g->buf, nl + 1, g->have - (size_t)(nl + 1 - g->buf) + 1);
        g->have -= (size_t)(nl + 1 - g->buf);
    }
    if (g->have == sizeof(g->buf) - 1) {
        printf("line %u: refused: too long\n", ++g->lines);
        g->have = 0;
        g->finished++;
    }
    fflush(stdout);
    if (g->finished >= g->o->count && g->pending == 0)
        target_stop(g);
}

static void on_target_timeout(uv_timer_t *h)
{
    struct target *g = h->data;

    printf("target: timed out after %u s (%u lines, %u finished)\n", g->o->timeout_s, g->lines,
           g->finished);
    g->status = 1;
    target_stop(g);
}

static int run_target(const struct opts *o)
{
    uv_loop_t loop;
    struct target g = {.o = o, .loop = &loop, .raw = -1};
    char err[256];

    uv_loop_init(&loop);
    /* O_RDWR: never blocks, and the FIFO never reads EOF between writers. */
    g.fifo = open(o->chan, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (g.fifo < 0) {
        perror(o->chan);
        uv_loop_close(&loop);
        return 1;
    }
    if (o->published) {
        g.raw = socket(o->ip.family, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
        if (g.raw < 0) {
            perror("raw socket");
            close(g.fifo);
            uv_loop_close(&loop);
            return 1;
        }
    } else {
        struct traverse_config cfg = {.queue_num = (uint16_t)o->queue};

        if (o->ip.family == AF_INET6)
            cfg.node6 = o->ip;
        else
            cfg.node = o->ip;

        g.t = traverse_new(&loop, &cfg, err, sizeof(err));
        if (g.t == NULL) {
            fprintf(stderr, "traverse_new: %s\n", err);
            close(g.fifo);
            uv_run(&loop, UV_RUN_DEFAULT);
            uv_loop_close(&loop);
            return 1;
        }
    }
    uv_poll_init(&loop, &g.poll, g.fifo);
    g.poll.data = &g;
    uv_poll_start(&g.poll, UV_READABLE, on_fifo);
    uv_timer_init(&loop, &g.timer);
    g.timer.data = &g;
    uv_timer_start(&g.timer, on_target_timeout, (uint64_t)o->timeout_s * 1000, 0);
    printf("target ready\n");
    fflush(stdout);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (g.t != NULL) {
        printf("rules left: %u\n", traverse_rules(g.t));
        traverse_free(g.t);
    }
    if (g.raw >= 0)
        close(g.raw);
    close(g.fifo);
    uv_loop_close(&loop);
    return g.status;
}

static void usage(void)
{
    fprintf(stderr, "usage: traverse_driver listen|connect|target ADDR [PORT] [options]; "
                    "see the top of traverse_driver.c\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"send", required_argument, NULL, 's'},
        {"recv", required_argument, NULL, 'r'},
        {"count", required_argument, NULL, 'n'},
        {"timeout", required_argument, NULL, 't'},
        {"watch", required_argument, NULL, 'w'},
        {"chan", required_argument, NULL, 'c'},
        {"queue", required_argument, NULL, 'q'},
        {"pub", required_argument, NULL, 'p'},
        {"port", required_argument, NULL, 'P'},
        {"published", no_argument, NULL, 'X'},
        {"debug", no_argument, NULL, 'd'},
        {"silent", no_argument, NULL, 'S'},
        {NULL, 0, NULL, 0},
    };
    struct opts o = {.count = 1, .timeout_s = 10};
    enum log_level level = LOG_LEVEL_INFO;
    int c;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3)
        usage();
    o.mode = argv[1];
    o.addr = argv[2];
    if (rawpkt_addr_parse(o.addr, &o.ip) < 0)
        usage();
    optind = 3;
    if (strcmp(o.mode, "target") != 0) {
        if (argc < 4)
            usage();
        o.port = (unsigned)atoi(argv[3]);
        optind = 4;
    }
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 's':
            o.send = optarg;
            break;
        case 'r':
            o.recv = optarg;
            break;
        case 'n':
            o.count = (unsigned)atoi(optarg);
            break;
        case 't':
            o.timeout_s = (unsigned)atoi(optarg);
            break;
        case 'w':
            o.watch = 1;
            o.queue = (unsigned)atoi(optarg);
            break;
        case 'q':
            o.queue = (unsigned)atoi(optarg);
            break;
        case 'c':
            o.chan = optarg;
            break;
        case 'p':
            if (rawpkt_addr_parse(optarg, &o.pub) < 0)
                usage();
            break;
        case 'P':
            o.port = (unsigned)atoi(optarg);
            break;
        case 'X':
            o.published = 1;
            break;
        case 'S':
            o.silent = 1;
            break;
        case 'd':
            level = LOG_LEVEL_DEBUG;
            break;
        default:
            usage();
        }
    }
    if ((o.send == NULL) != (o.recv == NULL) || o.count == 0 || o.timeout_s == 0)
        usage();
    log_init("traverse-driver", level, false);
    if (strcmp(o.mode, "listen") == 0)
        return run_listen(&o);
    if (strcmp(o.mode, "connect") == 0) {
        if (o.watch && o.chan == NULL)
            usage();
        return run_connect(&o);
    }
    if (strcmp(o.mode, "target") == 0) {
        if (o.chan == NULL || o.port == 0 || o.pub.family != o.ip.family)
            usage();
        return run_target(&o);
    }
    usage();
}
