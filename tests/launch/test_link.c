/* launch-link: the launch connection's framing over libuv on loopback TCP:
 * frames arrive whole; a paused link still notices that its peer closed
 * (the TCP state, checked every second); a closing link whose peer never
 * reads is closed anyway after LINK_CLOSE_MS, so that it cannot keep an
 * agent's loop alive. */
#include <arpa/inet.h>
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
#include "link.h"

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

static const struct link_ops ops = {on_frame, on_closed, NULL};

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
    struct link *l = link_new(&loop, b, &ops, &seen);
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
    struct link *l = link_new(&loop, b, &ops, &seen);
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

int main(void)
{
    test_frames_and_paused_close();
    test_close_bounded();
    return check_result("launch-link");
}
