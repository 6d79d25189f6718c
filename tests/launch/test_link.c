/* launch-link: the launch connection's framing over libuv on loopback TCP:
 * frames arrive whole; a paused link still notices that its peer closed
 * (the TCP state, checked every second); a closing link whose peer never
 * reads is closed anyway after LINK_CLOSE_MS, so that it cannot keep an
 * agent's loop alive; a session link whose connection is cut (twice, with
 * frames sent both ways while it is down) goes on over a new connection
 * (RESUME / RESUMED) and each side gets every frame once, in order; a
 * link over a reversed connection closed before its peer's TLS Finished
 * still ends with a close_notify. */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "fixtures.h"
#include "handshake_blocking.h"
#include "link.h"
#include "tls_psk.h"

struct seen {
    int frames;
    uint32_t last_len;
    int closed;
    char why[160];
};

static void on_frame(struct link *l, const struct wire_header *h, const uint8_t *payload)
{
    struct seen *s = link_data(l);

    (void)payload;
    s->frames++;
    s->last_len = h->len;
}

static void on_closed(struct link *l, const char *why)
{
    struct seen *s = link_data(l);

    s->closed = 1;
    snprintf(s->why, sizeof(s->why), "%s", why);
}

static const struct link_ops ops = {on_frame, on_closed, NULL, NULL, NULL};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void on_deadline(uv_timer_t *t)
{
    uv_stop(t->loop);
}

/* Runs the loop until cond() or secs; the seconds it took. */
static double run_until(uv_loop_t *loop, int (*cond)(void *), void *arg, double secs)
{
    uv_timer_t t;
    double t0 = now_s();

    uv_timer_init(loop, &t);
    while (!cond(arg) && now_s() - t0 < secs) {
        uv_timer_start(&t, on_deadline, 50, 0);
        uv_run(loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return now_s() - t0;
}

static int is_closed(void *arg)
{
    return ((struct seen *)arg)->closed;
}

static int has_frame(void *arg)
{
    return ((struct seen *)arg)->frames > 0;
}

static void test_frames_and_paused_close(void)
{
    uv_loop_t loop;
    struct seen seen = {0};
    uint8_t hdr[WIRE_HEADER], body[1000];
    int a, b;

    uv_loop_init(&loop);
    tcp_pair(&a, &b);
    struct link *l = link_new(&loop, b, NULL, &ops, &seen);
    CHECK(l != NULL);
    /* A frame written in two pieces arrives once, whole. */
    memset(body, 'x', sizeof(body));
    wire_header_put(hdr, WIRE_OUT, 0, sizeof(body));
    CHECK(write(a, hdr, sizeof(hdr)) == (ssize_t)sizeof(hdr));
    CHECK(write(a, body, 10) == 10);
    run_until(&loop, has_frame, &seen, 0.3);
    CHECK(seen.frames == 0);
    CHECK(write(a, body + 10, sizeof(body) - 10) == (ssize_t)sizeof(body) - 10);
    run_until(&loop, has_frame, &seen, 2);
    CHECK(seen.frames == 1 && seen.last_len == sizeof(body));
    /* Paused, the peer's close is still seen, within the watch period. */
    link_pause(l);
    close(a);
    double took = run_until(&loop, is_closed, &seen, 5);
    CHECK(seen.closed);
    CHECK_HAS(seen.why, "closed");
    CHECK(took < 3.0);
    printf("paused link: the peer's close seen after %.2f s (%s)\n", took, seen.why);
    run_until(&loop, is_closed, &seen, 0.2);
    CHECK(uv_loop_close(&loop) == 0);
}

static int loop_idle(void *arg)
{
    return !uv_loop_alive(arg);
}

static void test_close_bounded(void)
{
    uv_loop_t loop;
    struct seen seen = {0};
    static uint8_t chunk[WIRE_DATA_MAX];
    int a, b, small = 4096;

    uv_loop_init(&loop);
    tcp_pair(&a, &b);
    /* Small buffers, a peer that never reads: the queue cannot drain. */
    setsockopt(a, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    setsockopt(b, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    struct link *l = link_new(&loop, b, NULL, &ops, &seen);
    CHECK(l != NULL);
    for (int i = 0; i < 256; i++)
        link_send(l, WIRE_OUT, 0, chunk, sizeof(chunk));
    CHECK(link_congested(l));
    link_close(l);
    double took = run_until(&loop, loop_idle, &loop, 15);
    CHECK(!uv_loop_alive(&loop));
    CHECK(took > 3.0 && took < 8.0);
    printf("closing link, peer not reading, 4 MiB queued: closed after %.2f s\n", took);
    CHECK(seen.closed == 0); /* link_close never calls closed */
    close(a);
    CHECK(uv_loop_close(&loop) == 0);
}

/* --- resuming ---------------------------------------------------------------

   L stands for the launcher (link_attach), A for the agent's session
   (link_adopt from a temporary link whose first frame is RESUME).  Frames
   carry a counter; each side checks it gets 1, 2, 3, ... */

struct side {
    struct link *link;
    uint32_t next; /* the counter expected */
    uint32_t sent; /* the last counter sent */
    int wrong;     /* frames out of order or twice */
    int broken;    /* breaks seen */
    int resumed;
    int closed;
    int cut_fd; /* a dup of this side's socket, to cut it */
};

static struct side L, A;
static uv_loop_t rloop;
static const uint8_t token[WIRE_TOKEN_LEN] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static void side_frame(struct link *l, const struct wire_header *h, const uint8_t *payload)
{
    struct side *s = link_data(l);

    if (h->type != WIRE_OUT || h->len != 4 || wire_u32_get(payload) != s->next + 1) {
        s->wrong++;
        return;
    }
    s->next++;
}

static void side_closed(struct link *l, const char *why)
{
    struct side *s = link_data(l);

    s->closed = 1;
    fprintf(stderr, "link closed: %s\n", why);
}

static void temp_frame(struct link *tl, const struct wire_header *h, const uint8_t *payload)
{
    /* The agent's new connection: RESUME names the session. */
    CHECK(h->type == WIRE_RESUME && h->len == WIRE_TOKEN_LEN + 8);
    if (h->type == WIRE_RESUME && h->len == WIRE_TOKEN_LEN + 8) {
        CHECK(link_has_token(A.link, payload));
        CHECK(link_adopt(A.link, tl, wire_u64_get(payload + WIRE_TOKEN_LEN)) == 0);
    }
    link_close(tl);
}

static const struct link_ops temp_ops = {temp_frame, side_closed, NULL, NULL, NULL};

static void launcher_broken(struct link *l, const char *why)
{
    int a, b;

    (void)why;
    L.broken++;
    tcp_pair(&a, &b);
    L.cut_fd = dup(a);
    A.cut_fd = dup(b);
    CHECK(link_attach(l, a, NULL) == 0);
    /* The agent's new connection may beat (ACK 0: its own count) before it
       has read the RESUME: the resuming launcher must not take it as an ack
       going back. */
    uint8_t ack[WIRE_HEADER + 8] = {0};
    wire_header_put(ack, WIRE_ACK, 0, 8);
    CHECK(write(b, ack, sizeof(ack)) == (ssize_t)sizeof(ack));
    CHECK(link_new(&rloop, b, NULL, &temp_ops, NULL) != NULL);
}

static void agent_broken(struct link *l, const char *why)
{
    (void)l;
    (void)why;
    A.broken++;
}

static void side_resumed(struct link *l, unsigned long resent)
{
    struct side *s = link_data(l);

    (void)resent;
    s->resumed++;
}

static const struct link_ops launcher_ops = {side_frame, side_closed, NULL, launcher_broken,
                                             side_resumed};
static const struct link_ops agent_ops = {side_frame, side_closed, NULL, agent_broken, NULL};

static void send_some(int n)
{
    uint8_t b[4];

    for (int i = 0; i < n; i++) {
        wire_u32_put(b, ++L.sent);
        CHECK(link_send(L.link, WIRE_OUT, 0, b, 4) == 0);
        wire_u32_put(b, ++A.sent);
        CHECK(link_send(A.link, WIRE_OUT, 0, b, 4) == 0);
    }
}

static int all_in(void *arg)
{
    (void)arg;
    return L.next == A.sent && A.next == L.sent && link_connected(L.link);
}

static int some_in(void *arg)
{
    (void)arg;
    return L.next > A.sent - 50 && A.next > L.sent - 50;
}

static void cut(void)
{
    /* Both ends see the connection end, as when a proxy dies. */
    shutdown(L.cut_fd, SHUT_RDWR);
    close(L.cut_fd);
    close(A.cut_fd);
}

static void test_resume(void)
{
    int a, b;

    uv_loop_init(&rloop);
    tcp_pair(&a, &b);
    L.cut_fd = dup(a);
    A.cut_fd = dup(b);
    L.link = link_new(&rloop, a, NULL, &launcher_ops, &L);
    A.link = link_new(&rloop, b, NULL, &agent_ops, &A);
    REQUIRE(L.link != NULL && A.link != NULL);
    link_set_session(L.link, token);
    link_set_session(A.link, token);
    for (int round = 0; round < 2; round++) {
        send_some(100);
        run_until(&rloop, some_in, NULL, 10);
        cut();
        /* Sent while the connection is down: kept, sent after the resume. */
        send_some(100);
        run_until(&rloop, all_in, NULL, 15);
    }
    CHECK_EQ(L.broken, 2);
    CHECK_EQ(L.resumed, 2);
    CHECK(A.broken >= 1);
    CHECK_EQ(L.wrong, 0);
    CHECK_EQ(A.wrong, 0);
    CHECK_EQ(L.next, 400u);
    CHECK_EQ(A.next, 400u);
    CHECK(!L.closed && !A.closed);
    printf("resume: 400 frames each way over 3 connections, %d out of order or twice\n",
           L.wrong + A.wrong);
    /* Acknowledged in time: nothing held for resending. */
    run_until(&rloop, loop_idle, &rloop, 2.5);
    CHECK(!link_congested(L.link) && !link_congested(A.link));
    close(L.cut_fd);
    close(A.cut_fd);
    link_close(L.link);
    link_close(A.link);
    run_until(&rloop, loop_idle, &rloop, 10);
    CHECK(uv_loop_close(&rloop) == 0);
}

/* --- a reversed connection closed at once ------------------------------------

   Its initiator (the TLS server) gets its session before the target's
   Finished, and its link may close within that round trip: the
   close_notify goes once the Finished is in (OpenSSL refuses it before),
   so that the target reads the last frame and then a clean end, not a
   stream cut short. */

struct target {
    qcg_tls *tls;
    long got; /* bytes read */
    long end; /* the read that ended: 0, or -1 (end_errno) */
    int end_errno;
    int done;
};

static int target_reads(void *arg)
{
    struct target *t = arg;
    uint8_t buf[256];

    while (!t->done) {
        long n = qcg_tls_recv(t->tls, buf, sizeof(buf));

        if (n > 0) {
            t->got += n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        t->end = n;
        t->end_errno = n < 0 ? errno : 0;
        t->done = 1;
    }
    return t->done;
}

static int never(void *arg)
{
    (void)arg;
    return 0;
}

static void test_reversed_close(void)
{
    const struct hs_self tgt = {.job = "job-link",
                                .rank = 0,
                                .secret = "5f0c3e1a9b7d2846e0a1c3b5d7f9e2c4"
                                          "a6b8d0f1e3c5a7b9d2f4e6a8c0b1d3e5f7",
                                .cluster = "a",
                                .policy = QCG_ENCRYPT_INTER_SITE};
    struct hs_self ini = tgt;
    struct tls_self cs, ss;
    uint8_t cpsk[TLS_PSK_SIZE], spsk[TLS_PSK_SIZE];
    struct target t = {0};
    struct seen seen = {0};
    struct tls_hs *c, *sv;
    qcg_tls *ssess = NULL;
    uv_loop_t loop;
    unsigned enc;
    int sp[2], rc;

    ini.rank = 1;
    ini.cluster = "b";
    uv_loop_init(&loop);
    REQUIRE((c = hs_reversed_hello(sp, &tgt, ini.rank, "0123456789abcdef", TLS_OFFER_TLS, &cs,
                                   cpsk)) != NULL);
    REQUIRE((sv = hs_serve(sp[1], &ini, &ss, spsk, &rc)) != NULL);
    REQUIRE_EQ(rc, (int)TLS_DONE);
    REQUIRE(tls_hs_take(sv, &ssess, &enc) == 0 && ssess != NULL);
    /* The initiator's link: one frame, closed at once, as far as it gets
       before the target's Finished. */
    struct link *l = link_new(&loop, sp[1], ssess, &ops, &seen);
    REQUIRE(l != NULL);
    CHECK_EQ(link_send(l, WIRE_OUT, 0, "bye", 3), 0);
    link_close(l);
    run_until(&loop, never, NULL, 0.3);
    /* The target finishes, then reads until its end. */
    REQUIRE_EQ(hs_step_until(c, 2000), (int)TLS_DONE);
    REQUIRE(tls_hs_take(c, &t.tls, &enc) == 0 && t.tls != NULL);
    run_until(&loop, target_reads, &t, 8);
    CHECK(t.done);
    CHECK_EQ(t.got, (long)WIRE_HEADER + 3);
    CHECKF(t.end == 0, "the target's last read: %ld (%s)", t.end,
           qcg_conn_strerror(t.tls, t.end_errno));
    /* Our end: the link drains to it and is gone. */
    shutdown(sp[0], SHUT_WR);
    run_until(&loop, loop_idle, &loop, 8);
    CHECK(!uv_loop_alive(&loop));
    CHECK(seen.closed == 0);
    qcg_tls_free(t.tls);
    close(sp[0]);
    SSL_CTX_free(cs.ssl_ctx);
    SSL_CTX_free(ss.ssl_ctx);
    CHECK(uv_loop_close(&loop) == 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as qcg-agent and qcg-launch */
    test_frames_and_paused_close();
    test_close_bounded();
    test_resume();
    test_reversed_close();
    return check_result("launch-link");
}
