/*
 * slow-clients: the attack side of bench/service-load.sh.  Holds IDLE TCP
 * connections that never send a byte and SLOW ones that trickle a hello one
 * byte at a time (a real TLS ClientHello, or a qcg-proxy hello), from a set
 * of source addresses (bind before connect: on loopback all of 127/8 is
 * local, so many addresses model many hosts).  A connection the server cuts
 * is renewed after --renew-ms, so the server sees the same pressure all the
 * time.  One epoll loop, non-blocking connects.
 *
 *   slow-clients --connect HOST:PORT [--idle N] [--slow M] [--hello tls|proxy]
 *                [--sources FIRST[/COUNT]] [--byte-ms MS] [--renew-ms MS]
 *
 * Runs until stdin closes (or SIGTERM/SIGINT), then prints one line:
 *   "connects N cut C failed F held_idle I held_slow S bytes B"
 * connects: connections established; cut: closed by the server (reset or
 * end of file); failed: connects refused or timed out; held_*: open at the
 * end; bytes: hello bytes sent.  Writes "ready" to stderr once every
 * connection was established once.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/ssl.h>

#define HELLO_MAX 4096
#define EVENTS 256
#define CONNECT_TIMEOUT_MS 3000 /* a SYN dropped by a full backlog: try again */

struct client {
    int fd; /* -1 while waiting to be renewed */
    bool slow, connected;
    size_t sent;     /* hello bytes sent on this connection */
    uint64_t due_ms; /* next byte (slow) or the renewal (fd == -1) */
    struct in_addr source;
};

static volatile sig_atomic_t stop;
static unsigned char hello[HELLO_MAX];
static size_t hello_len;
static unsigned long n_connects, n_cut, n_failed, n_bytes;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void dief(const char *what)
{
    fprintf(stderr, "slow-clients: %s\n", what);
    exit(1);
}

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

/* The ClientHello a TLS client would send first: OpenSSL writes it into a
   memory BIO and waits for the answer that never comes. */
static void tls_hello(void)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL *ssl = ctx ? SSL_new(ctx) : NULL;
    BIO *rbio = BIO_new(BIO_s_mem()), *wbio = BIO_new(BIO_s_mem());
    if (ssl == NULL || rbio == NULL || wbio == NULL)
        dief("cannot set up OpenSSL");
    SSL_set_bio(ssl, rbio, wbio);
    SSL_set_tlsext_host_name(ssl, "qcg-broker");
    SSL_connect(ssl);
    char *data;
    long n = BIO_get_mem_data(wbio, &data);
    if (n <= 0 || (size_t)n > sizeof(hello))
        dief("no ClientHello from OpenSSL");
    memcpy(hello, data, (size_t)n);
    hello_len = (size_t)n;
    SSL_free(ssl);
    SSL_CTX_free(ctx);
}

/* A qcg-proxy hello (proxy/relay.h): magic and a 128-byte token field. */
static void proxy_hello(void)
{
    memset(hello, 0, 132);
    memcpy(hello, "QCGP", 4);
    memset(hello + 4, 'A', 100);
    hello_len = 132;
}

static void client_close(int ep, struct client *c, uint64_t renew_at)
{
    if (c->fd >= 0) {
        epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
    c->connected = false;
    c->due_ms = renew_at;
}

static void client_open(int ep, struct client *c, const struct sockaddr_in *to, uint64_t now,
                        int renew_ms)
{
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        n_failed++;
        c->due_ms = now + (uint64_t)renew_ms;
        return;
    }
    /* The port is chosen at connect: one source address can hold more
       connections than bind() alone would give it ports. */
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_addr = c->source};
    if (bind(fd, (struct sockaddr *)&from, sizeof(from)) < 0 ||
        (connect(fd, (const struct sockaddr *)to, sizeof(*to)) < 0 && errno != EINPROGRESS)) {
        close(fd);
        n_failed++;
        c->due_ms = now + (uint64_t)renew_ms;
        return;
    }
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
        dief("epoll_ctl");
    c->fd = fd;
    c->sent = 0;
    c->connected = false;
    c->due_ms = now + CONNECT_TIMEOUT_MS;
}

static void client_event(int ep, struct client *c, uint32_t events, uint64_t now, int renew_ms)
{
    if (!c->connected) {
        int e = 0;
        socklen_t len = sizeof(e);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &len);
        if (e != 0 || (events & (EPOLLERR | EPOLLHUP))) {
            n_failed++;
            client_close(ep, c, now + (uint64_t)renew_ms);
            return;
        }
        if (!(events & EPOLLOUT))
            return;
        c->connected = true;
        n_connects++;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
        c->due_ms = c->slow ? now : UINT64_MAX;
        events &= ~(uint32_t)EPOLLOUT;
        if (!events)
            return;
    }
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        /* Whatever the server says (an alert, a refusal), it ends the hello:
           drain it and see whether the connection is gone. */
        char buf[512];
        ssize_t n;
        while ((n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
            ;
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
            (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
            n_cut++;
            client_close(ep, c, now + (uint64_t)renew_ms);
        }
    }
}

static void parse_sources(const char *spec, struct in_addr *first, int *count)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "%s", spec);
    char *slash = strchr(buf, '/');
    *count = 1;
    if (slash) {
        *slash = '\0';
        *count = atoi(slash + 1);
    }
    if (inet_pton(AF_INET, buf, first) != 1 || *count < 1)
        dief("--sources wants an IPv4 address and an optional /COUNT");
}

int main(int argc, char **argv)
{
    const char *target = NULL, *kind = "tls", *sources = "127.0.0.1";
    int idle = 0, slow = 0, byte_ms = 100, renew_ms = 100;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            fprintf(stderr, "slow-clients: %s needs a value (see the comment in slow-clients.c)\n",
                    a);
            return 2;
        }
        i++;
        if (strcmp(a, "--connect") == 0)
            target = v;
        else if (strcmp(a, "--idle") == 0)
            idle = atoi(v);
        else if (strcmp(a, "--slow") == 0)
            slow = atoi(v);
        else if (strcmp(a, "--hello") == 0)
            kind = v;
        else if (strcmp(a, "--sources") == 0)
            sources = v;
        else if (strcmp(a, "--byte-ms") == 0)
            byte_ms = atoi(v);
        else if (strcmp(a, "--renew-ms") == 0)
            renew_ms = atoi(v);
        else {
            fprintf(stderr, "slow-clients: unknown option %s\n", a);
            return 2;
        }
    }
    if (target == NULL || idle < 0 || slow < 0 || idle + slow < 1 || byte_ms < 1 || renew_ms < 0) {
        fprintf(stderr, "usage: slow-clients --connect HOST:PORT [--idle N] [--slow M] "
                        "[--hello tls|proxy] [--sources FIRST[/COUNT]] [--byte-ms MS] "
                        "[--renew-ms MS]\n");
        return 2;
    }
    if (strcmp(kind, "tls") == 0)
        tls_hello();
    else if (strcmp(kind, "proxy") == 0)
        proxy_hello();
    else
        dief("--hello is tls or proxy");

    char host[64];
    const char *colon = strrchr(target, ':');
    if (colon == NULL || (size_t)(colon - target) >= sizeof(host))
        dief("--connect wants HOST:PORT");
    memcpy(host, target, (size_t)(colon - target));
    host[colon - target] = '\0';
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &to.sin_addr) != 1)
        dief("--connect wants an IPv4 address");
    struct in_addr first;
    int nsources;
    parse_sources(sources, &first, &nsources);

    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < (rlim_t)(idle + slow + 64)) {
        rl.rlim_cur =
            rl.rlim_max < (rlim_t)(idle + slow + 64) ? rl.rlim_max : (rlim_t)(idle + slow + 64);
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPIPE, SIG_IGN);
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);

    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event sev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = NULL};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, 0, &sev) < 0)
        dief("epoll on stdin");
    int n = idle + slow;
    struct client *cs = calloc((size_t)n, sizeof(*cs));
    if (cs == NULL)
        dief("out of memory");
    uint64_t now = now_ms();
    for (int i = 0; i < n; i++) {
        cs[i].fd = -1;
        cs[i].slow = i >= idle;
        cs[i].source.s_addr = htonl(ntohl(first.s_addr) + (uint32_t)(i % nsources));
        client_open(ep, &cs[i], &to, now, renew_ms);
    }

    bool ready = false;
    struct epoll_event evs[EVENTS];
    while (!stop) {
        int got = epoll_wait(ep, evs, EVENTS, 10);
        now = now_ms();
        for (int i = 0; i < got; i++) {
            if (evs[i].data.ptr == NULL) {
                char b[64];
                if (read(0, b, sizeof(b)) == 0)
                    stop = 1;
                continue;
            }
            client_event(ep, evs[i].data.ptr, evs[i].events, now, renew_ms);
        }
        /* Renewals and trickled bytes: a linear scan every 10 ms is cheap
           beside the server's work for the same connections. */
        for (int i = 0; i < n; i++) {
            struct client *c = &cs[i];
            if (c->due_ms > now)
                continue;
            if (c->fd < 0) {
                client_open(ep, c, &to, now, renew_ms);
            } else if (!c->connected) {
                n_failed++;
                client_close(ep, c, now + (uint64_t)renew_ms);
            } else if (c->connected && c->sent < hello_len) {
                if (send(c->fd, hello + c->sent, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) {
                    c->sent++;
                    n_bytes++;
                }
                c->due_ms = c->sent < hello_len ? now + (uint64_t)byte_ms : UINT64_MAX;
            } else {
                c->due_ms = UINT64_MAX;
            }
        }
        if (!ready && n_connects >= (unsigned long)n) {
            ready = true;
            fprintf(stderr, "ready\n");
        }
    }
    int held_idle = 0, held_slow = 0;
    for (int i = 0; i < n; i++) {
        if (cs[i].fd >= 0 && cs[i].connected)
            *(cs[i].slow ? &held_slow : &held_idle) += 1;
        if (cs[i].fd >= 0)
            close(cs[i].fd);
    }
    printf("connects %lu cut %lu failed %lu held_idle %d held_slow %d bytes %lu\n", n_connects,
           n_cut, n_failed, held_idle, held_slow, n_bytes);
    free(cs);
    close(ep);
    return 0;
}
