/* common_engine: the event engine of the relay and the reflector on
   loopback, as their clients meet it: an address's untrusted connections
   bounded, the oldest still sending its first message cut when every slot
   is taken, a full engine refusing when none is, the first-message deadline,
   a trusted connection kept, every connection freed at the end; a second
   listener (another address) taken alike, under the same bounds, and closed
   at the end; and the edge-triggered set: one event per change, none while
   nothing changes. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "check.h"
#include "engine.h"

#define PER_ADDRESS 2
#define CONNS_MAX 3
#define FIRST_MS 1000

struct owner {
    struct engine *e;
    atomic_int accepted, refused_address, refused_full, cut, deadlines, trusted, freed;
};

struct conn {
    struct engine_conn ec;
    struct owner *o;
};

static void conn_io(struct engine_watch *w, int status, int events)
{
    struct conn *c = w->owner;
    char b;

    (void)events;
    ssize_t n = recv(w->fd, &b, 1, 0);
    if (n == 1 && b == 'T') {
        /* What a valid token does: no longer anyone's. */
        engine_conn_first_done(&c->ec);
        engine_conn_trusted(&c->ec);
        engine_conn_deadline(&c->ec, 0);
        c->o->trusted++;
    } else if (n == 0 || status < 0 || (n < 0 && errno != EAGAIN)) {
        engine_conn_close(&c->ec);
    }
}

static void conn_deadline(struct engine_conn *ec)
{
    ((struct conn *)ec)->o->deadlines++;
    engine_conn_close(ec);
}

static void refused(void *arg, enum engine_refusal why, const struct sockaddr_storage *ss,
                    socklen_t len, const char *source)
{
    struct owner *o = arg;
    (void)ss;
    (void)len;
    (void)source;
    if (why == ENGINE_REFUSED_ADDRESS)
        o->refused_address++;
    else
        o->refused_full++;
}

static void cut(void *arg, struct engine_conn *oldest)
{
    ((struct owner *)arg)->cut++;
    engine_conn_close(oldest);
}

static void accepted(void *arg, int fd, const struct sockaddr_storage *ss, socklen_t len,
                     const char *source)
{
    struct owner *o = arg;
    struct conn *c = calloc(1, sizeof(*c));
    (void)ss;
    (void)len;
    if (c == NULL) {
        close(fd);
        return;
    }
    c->o = o;
    c->ec.w.owner = c;
    c->ec.w.on_io = conn_io;
    c->ec.on_deadline = conn_deadline;
    if (engine_conn_open(o->e, &c->ec, fd, source) < 0) {
        close(fd);
        free(c);
        return;
    }
    o->accepted++;
}

static void freed(void *arg, struct engine_conn *ec)
{
    ((struct owner *)arg)->freed++;
    free(ec);
}

static const struct engine_ops ops = {
    .refused = refused, .cut = cut, .accepted = accepted, .freed = freed};

/* The edge-triggered set: how many times input was reported. */
static atomic_int edge_inputs;

static void edge_events(struct engine_edge *x, uint32_t events)
{
    (void)x;
    if (events & EPOLLIN)
        edge_inputs++;
}

static void *run(void *arg)
{
    engine_run(arg);
    return NULL;
}

/* A client from source address 127.0.0.SRC to 127.0.0.DST. */
static int client_to(int src, int dst, int port)
{
    struct sockaddr_in from = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
    struct timeval tv = {.tv_sec = 5};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    from.sin_addr.s_addr = htonl(0x7f000000u | (unsigned)src);
    to.sin_addr.s_addr = htonl(0x7f000000u | (unsigned)dst);
    to.sin_port = htons((uint16_t)port);
    REQUIRE(fd >= 0);
    REQUIRE(bind(fd, (struct sockaddr *)&from, sizeof(from)) == 0);
    REQUIRE(connect(fd, (struct sockaddr *)&to, sizeof(to)) == 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* ... to the first listener, 127.0.0.1. */
static int client(int src, int port)
{
    return client_to(src, 1, port);
}

/* A listener on 127.0.0.DST, its port in *port. */
static int listener(int dst, int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t salen = sizeof(sa);

    sa.sin_addr.s_addr = htonl(0x7f000000u | (unsigned)dst);
    REQUIRE(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 64) == 0);
    REQUIRE(getsockname(fd, (struct sockaddr *)&sa, &salen) == 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

/* A connection refused (nobody listens there now). */
static bool refused_at(int dst, int port)
{
    struct sockaddr_in to = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    to.sin_addr.s_addr = htonl(0x7f000000u | (unsigned)dst);
    to.sin_port = htons((uint16_t)port);
    REQUIRE(fd >= 0);
    bool refused = connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0 && errno == ECONNREFUSED;
    close(fd);
    return refused;
}

/* The engine closed it: EOF or a reset, within 5 s. */
static bool closed_by_engine(int fd)
{
    char b;
    ssize_t n;
    /* EINTR: a loop's io_uring teardown (tests/broker/line_answer.h). */
    while ((n = recv(fd, &b, 1, 0)) < 0 && errno == EINTR)
        ;
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

int main(void)
{
    static struct owner o;
    char err[200];
    pthread_t tid;

    int port, port2;
    int lfd = listener(1, &port), lfd2 = listener(2, &port2);
    struct engine_config cfg = {.listen_fd = lfd,
                                .listen_fd2 = lfd2,
                                .accepts_per_run = 16,
                                .conns_max = CONNS_MAX,
                                .per_address = PER_ADDRESS,
                                .first_ms = FIRST_MS,
                                .ops = &ops,
                                .arg = &o};
    o.e = engine_new(&cfg, err, sizeof(err));
    REQUIRE(o.e != NULL);
    /* Added before the loop runs (its thread owns the engine after). */
    int sp[2];
    struct engine_edge edge = {.on_events = edge_events};
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) == 0);
    REQUIRE(engine_edge_add(o.e, sp[0], &edge) == 0);
    REQUIRE(pthread_create(&tid, NULL, run, o.e) == 0);

    /* Unread input is reported once per arrival, not on every turn. */
    REQUIRE(send(sp[1], "x", 1, 0) == 1);
    WAIT_UNTIL(edge_inputs == 1, 5000, "the first byte reported");
    int a0 = client(9, port); /* turns of the loop with the byte unread */
    WAIT_UNTIL(o.accepted == 1, 5000, "a0 taken");
    CHECK_EQ(edge_inputs, 1);
    REQUIRE(send(sp[1], "y", 1, 0) == 1);
    WAIT_UNTIL(edge_inputs == 2, 5000, "the second byte reported");
    close(a0);
    WAIT_UNTIL(o.freed == 1, 5000, "a0 gone");
    o.accepted = 0;
    o.freed = 0;

    /* One address: PER_ADDRESS untrusted connections, the next one closed;
       the second listener's count under the same bound. */
    int a1 = client(1, port), a2 = client_to(1, 2, port2);
    WAIT_UNTIL(o.accepted == 2, 5000, "two connections from 127.0.0.1 taken, one on each listener");
    int a3 = client(1, port);
    CHECK(closed_by_engine(a3));
    CHECK_EQ(o.refused_address, 1);
    close(a3);

    /* A trusted one no longer counts: its address may open another. */
    REQUIRE(send(a1, "T", 1, 0) == 1);
    WAIT_UNTIL(o.trusted == 1, 5000, "a1 trusted");
    int a4 = client(1, port);
    WAIT_UNTIL(o.accepted == 3, 5000, "a4 taken beside the trusted a1");
    CHECK_EQ(o.refused_address, 1);

    /* Every slot taken: the oldest still in its first message (a2, not the
       trusted a1) makes room for another address's connection. */
    int b1 = client(2, port);
    CHECK(closed_by_engine(a2));
    WAIT_UNTIL(o.accepted == 4, 5000, "b1 taken after the cut");
    CHECK_EQ(o.cut, 1);
    CHECK_EQ(o.deadlines, 0); /* a2 was cut, not timed out */

    /* Nothing sent within FIRST_MS: a4 and b1 are closed; a1 stays. */
    CHECK(closed_by_engine(a4));
    CHECK(closed_by_engine(b1));
    WAIT_UNTIL(o.deadlines == 2, 5000, "both deadlines");

    /* All slots trusted: nothing to cut, the newcomer is refused. */
    int t2 = client(3, port), t3 = client(4, port);
    WAIT_UNTIL(o.accepted == 6, 5000, "two more taken");
    REQUIRE(send(t2, "T", 1, 0) == 1 && send(t3, "T", 1, 0) == 1);
    WAIT_UNTIL(o.trusted == 3, 5000, "three trusted");
    int full = client(5, port);
    CHECK(closed_by_engine(full));
    CHECK_EQ(o.refused_full, 1);
    CHECK_EQ(o.cut, 1);

    /* Stop: the owner closes what is left; every connection is freed. */
    engine_stop(o.e);
    REQUIRE(pthread_join(tid, NULL) == 0);
    CHECK_EQ(engine_conns(o.e), 3);
    struct engine_conn *ec;
    while ((ec = engine_oldest(o.e)) != NULL)
        engine_conn_close(ec);
    engine_free(o.e);
    CHECK_EQ(o.freed, o.accepted);
    CHECK(refused_at(1, port));
    CHECK(refused_at(2, port2));
    CHECK(closed_by_engine(a1));
    close(sp[0]);
    close(sp[1]);
    int fds[] = {a1, a2, a4, b1, t2, t3, full};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        close(fds[i]);
    return check_result("common_engine");
}
