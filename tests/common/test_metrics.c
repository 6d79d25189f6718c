/* common_metrics: the metrics endpoint as Prometheus and a hostile client
   see it, on loopback: GET /metrics answers the exposition format; bad, huge
   and slow requests get their status or are cut without holding up others;
   the per-address and total caps (a newcomer refused, nobody cut for it); metrics-allow; a
   non-loopback address without metrics-allow refuses to start; the request parser's answers. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

#include "check.h"
#include "metrics_http.h"
#include "metrics_server.h"
#include "metrics_text.h"

static void render(void *arg, struct metrics_buf *b)
{
    (void)arg;
    struct metrics_histogram h = {0};
    metrics_observe(&h, 0.003);
    metrics_observe(&h, 2);
    metrics_family(b, "qcg_test_lookups_total", "counter", "lookups \\ answered\nhere");
    metrics_sample(b, "qcg_test_lookups_total", 42, "cluster", "a\"b\\c\nd", NULL);
    metrics_family(b, "qcg_test_setup_seconds", "histogram", "setup");
    const char *l[] = {"technique", "direct"};
    metrics_histogram_write(b, "qcg_test_setup_seconds", &h, l, 1);
}

/* A connection from 127.0.0.FROM (each its own source address). */
static int dial_from(int port, int from)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct sockaddr_in src = {.sin_family = AF_INET,
                              .sin_addr.s_addr = htonl(0x7f000000u | (uint32_t)from)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    REQUIRE(fd >= 0 && bind(fd, (struct sockaddr *)&src, sizeof(src)) == 0);
    REQUIRE(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static int dial(int port)
{
    return dial_from(port, 1);
}

/* Everything the server sends until it closes (or 5 s pass). */
static size_t read_all(int fd, char *out, size_t cap)
{
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap &&
           ((r = recv(fd, out + n, cap - 1 - n, 0)) > 0 || (r < 0 && errno == EINTR)))
        n += r > 0 ? (size_t)r : 0; /* EINTR: a loop's io_uring teardown */
    out[n] = '\0';
    return n;
}

static void request(int port, const char *req, size_t len, char *out, size_t cap)
{
    int fd = dial(port);
    CHECK(send(fd, req, len, MSG_NOSIGNAL) == (ssize_t)len);
    read_all(fd, out, cap);
    close(fd);
}

/* Whether the server closed fd (without an answer) within 2 s. */
static bool closed_by_server(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char c;
    return poll(&p, 1, 2000) == 1 && recv(fd, &c, 1, 0) <= 0;
}

static void parser(void)
{
    bool head;
    const char *why;
    const char *ok = "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n";
    CHECK_EQ(metrics_request_parse(ok, strlen(ok), &head, &why), 0);
    CHECK(!head);
    CHECK_EQ(metrics_request_parse("HEAD /metrics?x=1 HTTP/1.0\n\n", 28, &head, &why), 0);
    CHECK(head);
    CHECK_EQ(metrics_request_parse(ok, 20, &head, &why), METRICS_HTTP_MORE);
    CHECK_EQ(metrics_request_parse("POST /metrics HTTP/1.1\r\n\r\n", 26, &head, &why), 405);
    CHECK_EQ(metrics_request_parse("GET / HTTP/1.1\r\n\r\n", 18, &head, &why), 404);
    CHECK_EQ(metrics_request_parse("GET /metricsx HTTP/1.1\r\n\r\n", 26, &head, &why), 404);
    CHECK_EQ(metrics_request_parse("GET /metrics HTTP/2.0\r\n\r\n", 25, &head, &why), 505);
    CHECK_EQ(metrics_request_parse("GET /metrics\r\n\r\n", 16, &head, &why), 400);
    CHECK_EQ(metrics_request_parse("GET /metrics HTTP/1.1\r\nNoColon\r\n\r\n", 34, &head, &why),
             400);
    CHECK_EQ(metrics_request_parse("GET /me\0rics HTTP/1.1\r\n\r\n", 25, &head, &why), 400);
    CHECK(why[0] != '\0');
    static char big[METRICS_REQUEST_MAX + 10];
    memset(big, 'a', sizeof(big));
    CHECK_EQ(metrics_request_parse(big, sizeof(big), &head, &why), 431);
}

int main(void)
{
    static char buf[65536];
    char err[256];

    parser();

    struct metrics_server_config cfg = {.listen = "127.0.0.1:0",
                                        .daemon = "test",
                                        .render = render,
                                        .per_address = 2,
                                        .max_connections = 8,
                                        .timeout_ms = 500};
    struct metrics_server *s = metrics_server_start(&cfg, err, sizeof(err));
    REQUIRE(s != NULL);
    int port = metrics_server_port(s);

    const char *get = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    request(port, get, strlen(get), buf, sizeof(buf));
    CHECK_HAS(buf, "HTTP/1.1 200 OK\r\n");
    CHECK_HAS(buf, "Content-Type: text/plain; version=0.0.4");
    CHECK_HAS(buf, "# HELP qcg_test_lookups_total lookups \\\\ answered\\nhere\n");
    CHECK_HAS(buf, "# TYPE qcg_test_lookups_total counter\n");
    CHECK_HAS(buf, "qcg_test_lookups_total{cluster=\"a\\\"b\\\\c\\nd\"} 42\n");
    CHECK_HAS(buf, "qcg_test_setup_seconds_bucket{technique=\"direct\",le=\"0.0025\"} 0\n");
    CHECK_HAS(buf, "qcg_test_setup_seconds_bucket{technique=\"direct\",le=\"0.005\"} 1\n");
    CHECK_HAS(buf, "qcg_test_setup_seconds_bucket{technique=\"direct\",le=\"+Inf\"} 2\n");
    CHECK_HAS(buf, "qcg_test_setup_seconds_count{technique=\"direct\"} 2\n");
    CHECK_HAS(buf, "qcg_build_info{daemon=\"test\",version=\"");
    CHECK_HAS(buf, "qcg_metrics_scrapes_total 1\n");
    /* Content-Length is the body's. */
    const char *body = strstr(buf, "\r\n\r\n");
    const char *cl = strstr(buf, "Content-Length: ");
    REQUIRE(body != NULL && cl != NULL);
    CHECK_EQ(strtoul(cl + 16, NULL, 10), strlen(body + 4));

    request(port, "PUT /metrics HTTP/1.1\r\n\r\n", 25, buf, sizeof(buf));
    CHECK_HAS(buf, "HTTP/1.1 405 Method Not Allowed");
    request(port, "GET /secret HTTP/1.1\r\n\r\n", 24, buf, sizeof(buf));
    CHECK_HAS(buf, "HTTP/1.1 404 Not Found");
    static char huge[METRICS_REQUEST_MAX]; /* no more: unread bytes would reset the answer */
    memcpy(huge, "GET /metrics HTTP/1.1\r\nX: ", 26);
    memset(huge + 26, 'x', sizeof(huge) - 26);
    request(port, huge, sizeof(huge), buf, sizeof(buf));
    CHECK_HAS(buf, "HTTP/1.1 431 ");

    /* Two slow clients hold this address' share: a third is closed at once;
       after the deadline cuts them, a request is answered again. */
    int slow1 = dial(port), slow2 = dial(port);
    CHECK(send(slow1, "GET /met", 8, 0) == 8);
    int third = dial(port);
    CHECK(closed_by_server(third));
    close(third);
    CHECK(closed_by_server(slow1));
    CHECK(closed_by_server(slow2));
    close(slow1);
    close(slow2);
    request(port, get, strlen(get), buf, sizeof(buf));
    CHECK_HAS(buf, "HTTP/1.1 200 OK");
    CHECK_HAS(buf, "qcg_metrics_refused_total{reason=\"per_address\"} 1\n");
    CHECK_HAS(buf, "qcg_metrics_refused_total{reason=\"timeout\"} 2\n");
    CHECK_HAS(buf, "qcg_metrics_refused_total{reason=\"bad_request\"} 3\n");

    /* All 8 taken by slow clients of 4 addresses: a newcomer is refused,
       none of them is cut for it before its deadline. */
    int held[8];
    for (int i = 0; i < 8; i++)
        held[i] = dial_from(port, 2 + i / 2);
    /* Taken in the order they came: the ninth after the eight. */
    int ninth = dial_from(port, 6);
    CHECK(closed_by_server(ninth));
    close(ninth);
    struct pollfd p = {.fd = held[0], .events = POLLIN};
    CHECK(poll(&p, 1, 0) == 0); /* the oldest is still open */
    for (int i = 0; i < 8; i++) {
        CHECK(closed_by_server(held[i]));
        close(held[i]);
    }
    request(port, get, strlen(get), buf, sizeof(buf));
    CHECK_HAS(buf, "qcg_metrics_refused_total{reason=\"full\"} 1\n");
    CHECK_HAS(buf, "qcg_metrics_refused_total{reason=\"timeout\"} 10\n");
    metrics_server_stop(s);

    /* metrics-allow without loopback in it: closed unanswered. */
    cfg.allow = "198.51.100.0/24, 2001:db8::/32";
    s = metrics_server_start(&cfg, err, sizeof(err));
    REQUIRE(s != NULL);
    int fd = dial(metrics_server_port(s));
    send(fd, get, strlen(get), MSG_NOSIGNAL);
    CHECK(closed_by_server(fd));
    close(fd);
    metrics_server_stop(s);

    /* Misconfiguration: refused at start with the reason. */
    cfg.allow = NULL;
    cfg.listen = "198.51.100.1:9701";
    CHECK(metrics_server_start(&cfg, err, sizeof(err)) == NULL);
    CHECK_HAS(err, "metrics-allow");
    cfg.listen = "localhost:9701";
    CHECK(metrics_server_start(&cfg, err, sizeof(err)) == NULL);
    CHECK_HAS(err, "is not an IP address");
    cfg.listen = "127.0.0.1";
    CHECK(metrics_server_start(&cfg, err, sizeof(err)) == NULL);
    cfg.listen = "127.0.0.1:0";
    cfg.allow = "198.51.100.0/33";
    CHECK(metrics_server_start(&cfg, err, sizeof(err)) == NULL);
    CHECK_HAS(err, "metrics-allow");
    cfg.listen = "[::1]:0";
    cfg.allow = NULL;
    s = metrics_server_start(&cfg, err, sizeof(err));
    CHECKF(s != NULL, "%s", err);
    metrics_server_stop(s);
    return check_result("common_metrics");
}
