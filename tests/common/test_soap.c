/*
 * soap_server + soap_client over loopback mutual TLS, with a throw-away grid
 * CA (certs/qcg-certs) and a second, foreign CA.  Checks what an operator
 * relies on: who may connect, who the server thinks is calling, that faults
 * carry their qcg: subcode, that bad requests are refused without taking the
 * server down, that the WSDL is served, and that a stop is prompt.
 *
 * usage: test_soap QCG_CERTS [quick|longpoll]     (exit 77: skipped)
 * Ports: 17600-17699.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "cmdqueue.h"
#include "log.h"
#include "soapH.h"
#include "soap_client.h"
#include "soap_server.h"
#include "test_soap_ops.h"

#define PORT_FIRST 17600
#define PORT_LAST 17699

static char dir[] = "/tmp/qcg-test-soap-XXXXXX";
static char logpath[300];
static const char *certs_tool;
static int next_port = PORT_FIRST;

/* Paths of the throw-away credentials. */
static char ca[300], foreign_ca[300], broker_pem[300], frontend_pem[300], helper_pem[300],
    foreign_pem[300], two_ou_pem[300], no_role_pem[300];

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
    return rc;
}

/* A leaf signed by the grid CA with a subject qcg-certs would never issue
   (a TLS client's key usage, so that the subject is what gets refused). */
static int odd_cert(const char *name, const char *subject, char *pem, size_t len)
{
    snprintf(pem, len, "%s/%s.pem", dir, name);
    return sh("cd %s && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 "
              "-out %s.key 2>/dev/null && openssl req -new -key %s.key -subj '%s' -out %s.csr "
              "&& echo 'extendedKeyUsage = clientAuth' > %s.ext "
              "&& openssl x509 -req -in %s.csr -CA grid/ca.crt -CAkey grid/ca.key -CAcreateserial "
              "-extfile %s.ext -days 1 -out %s.crt 2>/dev/null && cat %s.crt %s.key > %s.pem",
              dir, name, name, subject, name, name, name, name, name, name, name, name);
}

static int make_certs(void)
{
    const char *t = certs_tool;
    if (sh("%s --dir %s/grid init >/dev/null", t, dir) ||
        sh("%s --dir %s/grid issue broker --san 127.0.0.1 >/dev/null", t, dir) ||
        sh("%s --dir %s/grid issue frontend nata >/dev/null 2>&1", t, dir) ||
        sh("%s --dir %s/grid issue helper nata/nata1 >/dev/null 2>&1", t, dir) ||
        sh("%s --dir %s/foreign init >/dev/null", t, dir) ||
        sh("%s --dir %s/foreign issue frontend nata >/dev/null 2>&1", t, dir))
        return -1;
    snprintf(ca, sizeof(ca), "%s/grid/ca.crt", dir);
    snprintf(broker_pem, sizeof(broker_pem), "%s/grid/broker-broker.pem", dir);
    snprintf(frontend_pem, sizeof(frontend_pem), "%s/grid/frontend-nata.pem", dir);
    snprintf(helper_pem, sizeof(helper_pem), "%s/grid/helper-nata-nata1.pem", dir);
    snprintf(foreign_ca, sizeof(foreign_ca), "%s/foreign/ca.crt", dir);
    snprintf(foreign_pem, sizeof(foreign_pem), "%s/foreign/frontend-nata.pem", dir);
    if (odd_cert("two-ou", "/O=qcg-connect/OU=frontend/OU=broker/CN=nata", two_ou_pem,
                 sizeof(two_ou_pem)) ||
        odd_cert("no-role", "/O=qcg-connect/OU=admin/CN=nata", no_role_pem, sizeof(no_role_pem)))
        return -1;
    return 0;
}

/* The log (our stderr) contains text, waiting for it up to ms: server threads
   log on their own schedule. */
static int log_has(const char *text, int ms)
{
    long end = now_ms() + ms;
    char *buf = malloc(1 << 20);
    int found = 0;
    for (;;) {
        FILE *f = fopen(logpath, "r");
        size_t n = f ? fread(buf, 1, (1 << 20) - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        if (strstr(buf, text)) {
            found = 1;
            break;
        }
        if (now_ms() >= end)
            break;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    free(buf);
    if (!found)
        fprintf(stdout, "log lacks \"%s\"\n", text);
    return found;
}

struct server {
    struct soap_server *srv;
    pthread_t thread;
    int rc;
    int port;
    char url[64];
    struct test_state state;
};

static void *server_main(void *arg)
{
    struct server *s = arg;
    s->rc = soap_server_run(s->srv);
    return NULL;
}

static void close_queue(void *arg)
{
    cmdqueue_close(arg);
}

/* The handshake deadline, per-certificate bound and handshake stage size
   of the next server_start (0: the defaults). */
static int stage_ms, per_identity, stage_max;
static const char *listen_on = "127.0.0.1";

static int server_start(struct server *s, int max_connections)
{
    memset(s, 0, sizeof(*s));
    s->state.queue = cmdqueue_new(64);
    char err[512] = "";
    /* Another test may hold a port of the block: try the next ones (bounded). */
    for (; next_port <= PORT_LAST && s->srv == NULL; next_port++) {
        struct soap_server_config cfg = {
            .listen_addr = listen_on,
            .port = next_port,
            .tls = {.ca = ca, .certkey = broker_pem},
            .max_connections = max_connections,
            .handshake_ms = stage_ms,
            .max_per_identity = per_identity,
            .max_handshakes = stage_max,
            .user = &s->state,
        };
        s->srv = soap_server_new(&cfg, err, sizeof(err));
        s->port = next_port;
    }
    if (s->srv == NULL) {
        fprintf(stderr, "no server: %s\n", err);
        return -1;
    }
    CHECK(soap_server_port(s->srv) == s->port);
    snprintf(s->url, sizeof(s->url), "https://127.0.0.1:%d/", s->port);
    soap_server_on_stop(s->srv, close_queue, s->state.queue);
    pthread_create(&s->thread, NULL, server_main, s);
    return 0;
}

/* Stops the server; returns how long run() took to return. */
static long server_stop(struct server *s)
{
    long t0 = now_ms();
    soap_server_stop(s->srv);
    pthread_join(s->thread, NULL);
    long ms = now_ms() - t0;
    soap_server_free(s->srv);
    cmdqueue_free(s->state.queue);
    return ms;
}

static struct soap *client(const char *url, const char *certkey, const char *cafile)
{
    char err[512];
    struct soap_client_config cfg = {
        .url = url,
        .tls = {.ca = cafile, .certkey = certkey},
        .connect_timeout = 5,
        .io_timeout = 5,
    };
    struct soap *soap = soap_client_new(&cfg, err, sizeof(err));
    if (soap == NULL)
        fprintf(stderr, "client: %s\n", err);
    return soap;
}

struct stats {
    enum call_status status;
    char role[32], name[160], subcode[32], msg[512];
    char counters[16][32];
    unsigned long long values[16];
    int ncounters;
};

/* A counter of the last stats answer; ~0 when absent. */
static unsigned long long counter(const struct stats *st, const char *name)
{
    for (int i = 0; i < st->ncounters; i++)
        if (strcmp(st->counters[i], name) == 0)
            return st->values[i];
    return ~0ULL;
}

static void call_stats(struct soap *soap, int version, struct stats *st)
{
    struct qcg__statsResponse r;
    memset(&r, 0, sizeof(r));
    memset(st, 0, sizeof(*st));
    int rc = soap_call_qcg__stats(soap, soap_client_url(soap), NULL, version, &r);
    st->status =
        soap_call_status(soap, rc, st->subcode, sizeof(st->subcode), st->msg, sizeof(st->msg));
    if (st->status == CALL_OK) {
        snprintf(st->role, sizeof(st->role), "%s", r.role ? r.role : "");
        snprintf(st->name, sizeof(st->name), "%s", r.name ? r.name : "");
        CHECK(r.version == QCG_PROTOCOL_VERSION);
        for (int i = 0; i < r.__sizeCounter && i < 16; i++) {
            snprintf(st->counters[i], sizeof(st->counters[i]), "%s", r.counter[i].name);
            st->values[i] = r.counter[i].value;
            st->ncounters = i + 1;
        }
        CHECK(counter(st, "state_seen") == 1); /* soap_server_state works */
    }
    soap_client_reset(soap);
}

/* One stats call with a fresh client context. */
static void stats_once(const char *url, const char *certkey, const char *cafile, struct stats *st)
{
    struct soap *soap = client(url, certkey, cafile);
    if (soap == NULL) {
        memset(st, 0, sizeof(*st));
        st->status = -1;
        CHECK(soap != NULL);
        return;
    }
    call_stats(soap, QCG_PROTOCOL_VERSION, st);
    soap_client_free(soap);
}

/* A client whose connection holds a slot of the server: kept alive after an
   answer.  A finished TLS handshake alone does not say the server has given
   it one (TLS 1.3: the client is done before the server reads its Finished).
   A failed check when it is not served (NULL when no client could be made). */
static struct soap *served_client(const char *url, const char *certkey)
{
    struct soap *soap = client(url, certkey, ca);
    struct stats st = {.status = CALL_UNREACHABLE};
    if (soap != NULL)
        call_stats(soap, QCG_PROTOCOL_VERSION, &st);
    CHECK(st.status == CALL_OK);
    return soap;
}

/* A raw TLS connection, to send what the gSOAP client never would. */
struct raw {
    int fd;
    SSL_CTX *ctx;
    SSL *ssl;
};

static int raw_open(struct raw *r, int port, const char *certkey)
{
    memset(r, 0, sizeof(*r));
    r->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {5, 0};
    setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(r->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(r->fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
        perror("connect");
        return -1;
    }
    r->ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_load_verify_locations(r->ctx, ca, NULL);
    SSL_CTX_set_verify(r->ctx, SSL_VERIFY_PEER, NULL);
    if (certkey && (SSL_CTX_use_certificate_chain_file(r->ctx, certkey) != 1 ||
                    SSL_CTX_use_PrivateKey_file(r->ctx, certkey, SSL_FILETYPE_PEM) != 1)) {
        fprintf(stderr, "raw: cannot load %s\n", certkey);
        return -1;
    }
    r->ssl = SSL_new(r->ctx);
    SSL_set_fd(r->ssl, r->fd);
    if (SSL_connect(r->ssl) != 1) {
        fprintf(stderr, "raw: TLS handshake failed\n");
        return -1;
    }
    return 0;
}

static void raw_close(struct raw *r)
{
    if (r->ssl)
        SSL_free(r->ssl);
    if (r->ctx)
        SSL_CTX_free(r->ctx);
    if (r->fd > 0)
        close(r->fd);
    memset(r, 0, sizeof(*r));
}

/* 0 when everything was written; -1 when the server stopped reading. */
static int raw_write(struct raw *r, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        int n = SSL_write(r->ssl, p, len > 16384 ? 16384 : (int)len);
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reads until the server closes (requests say Connection: close) or 5 s. */
static size_t raw_read_all(struct raw *r, char *buf, size_t len)
{
    size_t got = 0;
    while (got + 1 < len) {
        int n = SSL_read(r->ssl, buf + got, (int)(len - 1 - got));
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    return got;
}

static const char envelope_head[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
    "<SOAP-ENV:Envelope xmlns:SOAP-ENV=\"http://schemas.xmlsoap.org/soap/envelope/\" "
    "xmlns:qcg=\"urn:qcg-connect:1\"><SOAP-ENV:Body><qcg:stats>";
static const char envelope_tail[] =
    "<version>2</version></qcg:stats></SOAP-ENV:Body></SOAP-ENV:Envelope>";

/* POSTs head + pad spaces + tail with extra headers; returns the response. */
static void raw_post(int port, const char *headers, const char *body_head, size_t pad,
                     const char *body_tail, int chunked, char *resp, size_t resplen)
{
    struct raw r;
    resp[0] = '\0';
    if (raw_open(&r, port, frontend_pem) < 0) {
        CHECK(!"raw connection");
        raw_close(&r);
        return;
    }
    size_t blen = strlen(body_head) + pad + strlen(body_tail);
    char *body = malloc(blen + 1);
    memcpy(body, body_head, strlen(body_head));
    memset(body + strlen(body_head), ' ', pad);
    memcpy(body + strlen(body_head) + pad, body_tail, strlen(body_tail) + 1);
    char head[1024];
    if (chunked)
        snprintf(
            head, sizeof(head),
            "POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: text/xml; charset=utf-8\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n%s\r\n",
            port, headers);
    else
        snprintf(
            head, sizeof(head),
            "POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: text/xml; charset=utf-8\r\n"
            "Content-Length: %zu\r\nConnection: close\r\n%s\r\n",
            port, blen, headers);
    int ok = raw_write(&r, head, strlen(head)) == 0;
    if (!chunked) {
        ok = ok && raw_write(&r, body, blen) == 0;
    } else {
        for (size_t off = 0; ok && off < blen; off += 65536) {
            size_t n = blen - off < 65536 ? blen - off : 65536;
            char size[32];
            snprintf(size, sizeof(size), "%zx\r\n", n);
            ok = raw_write(&r, size, strlen(size)) == 0 && raw_write(&r, body + off, n) == 0 &&
                 raw_write(&r, "\r\n", 2) == 0;
        }
        ok = ok && raw_write(&r, "0\r\n\r\n", 5) == 0;
    }
    (void)ok; /* a server that stops reading is one valid way to refuse */
    raw_read_all(&r, resp, resplen);
    free(body);
    raw_close(&r);
}

static void raw_post_bytes(int port, const char *headers, const char *body, size_t blen, char *resp,
                           size_t resplen)
{
    struct raw r;
    resp[0] = '\0';
    if (raw_open(&r, port, frontend_pem) < 0) {
        CHECK(!"raw connection");
        raw_close(&r);
        return;
    }
    char head[1024];
    snprintf(head, sizeof(head),
             "POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: text/xml; charset=utf-8\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n%s\r\n",
             port, blen, headers);
    if (raw_write(&r, head, strlen(head)) == 0)
        raw_write(&r, body, blen);
    raw_read_all(&r, resp, resplen);
    raw_close(&r);
}

/* POSTs an envelope whose body is head + fill + tail: fill is n copies of c,
   or, for n < 0, -n <publicAddress> items. */
static void raw_call(int port, const char *head, int n, char c, const char *tail, char *resp,
                     size_t resplen)
{
    static const char pre[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
        "<SOAP-ENV:Envelope xmlns:SOAP-ENV=\"http://schemas.xmlsoap.org/soap/envelope/\" "
        "xmlns:qcg=\"urn:qcg-connect:1\"><SOAP-ENV:Body>";
    static const char post[] = "</SOAP-ENV:Body></SOAP-ENV:Envelope>";
    static const char item[] = "<publicAddress>203.0.113.1</publicAddress>";
    size_t fill = n >= 0 ? (size_t)n : (size_t)-n * (sizeof(item) - 1);
    size_t len = strlen(pre) + strlen(head) + fill + strlen(tail) + strlen(post);
    char *body = malloc(len + 1), *p = body;
    p = stpcpy(p, pre);
    p = stpcpy(p, head);
    if (n >= 0) {
        memset(p, c, (size_t)n);
        p += n;
    } else {
        for (int i = 0; i < -n; i++)
            p = stpcpy(p, item);
    }
    p = stpcpy(p, tail);
    stpcpy(p, post);
    raw_post_bytes(port, "", body, len, resp, resplen);
    free(body);
}

static int is_http_200(const char *resp)
{
    return strncmp(resp, "HTTP/1.1 200", 12) == 0 || strncmp(resp, "HTTP/1.0 200", 12) == 0;
}

static void test_identities(struct server *s)
{
    struct stats st;
    stats_once(s->url, frontend_pem, ca, &st);
    CHECK(st.status == CALL_OK);
    CHECK_STR(st.role, "frontend");
    CHECK_STR(st.name, "nata");
    /* The per-connection context carries the limits of docs/design.md (gSOAP). */
    CHECK(counter(&st, "recv_timeout") == 10);
    CHECK(counter(&st, "send_timeout") == 10);
    CHECK(counter(&st, "transfer_timeout") == 30);
    CHECK(counter(&st, "recv_maxlength") == 1024 * 1024);
    CHECK(counter(&st, "maxlength") == 64 * 1024);
    CHECK(counter(&st, "maxoccurs") == 1000);
    CHECK(counter(&st, "maxlevel") == 32);
    CHECK(counter(&st, "max_keep_alive") == 10000);
    CHECK(counter(&st, "socket_flags") == MSG_NOSIGNAL);

    /* Keep-alive: several calls on one context, each seen with its caller. */
    struct soap *soap = client(s->url, helper_pem, ca);
    for (int i = 0; soap && i < 3; i++) {
        call_stats(soap, QCG_PROTOCOL_VERSION, &st);
        CHECK(st.status == CALL_OK);
        CHECK_STR(st.role, "helper");
        CHECK_STR(st.name, "nata/nata1");
    }
    soap_client_free(soap);
}

static void test_refusals(struct server *s)
{
    struct stats st;
    /* A certificate from another CA. */
    stats_once(s->url, foreign_pem, foreign_ca, &st);
    CHECK(st.status == CALL_UNREACHABLE);
    CHECK(log_has("TLS handshake failed", 3000));
    /* The client trusting only the foreign CA refuses our server too. */
    stats_once(s->url, foreign_pem, ca, &st);
    CHECK(st.status == CALL_UNREACHABLE);

    /* No client certificate at all. */
    struct soap *soap = soap_new1(SOAP_IO_KEEPALIVE | SOAP_XML_STRICT | SOAP_C_UTFSTRING);
    soap->connect_timeout = soap->recv_timeout = soap->send_timeout = 5;
    CHECK(soap_ssl_client_context(
              soap, SOAP_SSL_DEFAULT | SOAP_SSL_NO_DEFAULT_CA_PATH | SOAP_TLSv1_2 | SOAP_TLSv1_3,
              NULL, NULL, ca, NULL, NULL) == SOAP_OK);
    struct qcg__statsResponse r;
    int rc = soap_call_qcg__stats(soap, s->url, NULL, QCG_PROTOCOL_VERSION, &r);
    char sub[32], msg[256];
    CHECK(soap_call_status(soap, rc, sub, sizeof(sub), msg, sizeof(msg)) == CALL_UNREACHABLE);
    soap_destroy(soap);
    soap_end(soap);
    soap_free(soap);

    /* Signed by the grid CA, but the subject breaks the rules. */
    stats_once(s->url, two_ou_pem, ca, &st);
    CHECK(st.status == CALL_UNREACHABLE);
    CHECK(log_has("certificate subject has more than one OU", 3000));
    stats_once(s->url, no_role_pem, ca, &st);
    CHECK(st.status == CALL_UNREACHABLE);
    CHECK(log_has("certificate OU \"admin\" is not a qcg role", 3000));
    CHECK(log_has("refused: the certificate does not name a qcg role and name", 3000));

    /* The server's certificate names 127.0.0.1, not "localhost": the client
       must refuse to talk to it under another name. */
    char url[64];
    snprintf(url, sizeof(url), "https://localhost:%d/", s->port);
    stats_once(url, frontend_pem, ca, &st);
    CHECK(st.status == CALL_UNREACHABLE);

    /* Nobody listening. */
    snprintf(url, sizeof(url), "https://127.0.0.1:%d/", PORT_LAST);
    stats_once(url, frontend_pem, ca, &st);
    CHECK(st.status == CALL_UNREACHABLE);
    CHECK(st.msg[0] != '\0');

    /* After all that, the server still serves a good client. */
    stats_once(s->url, frontend_pem, ca, &st);
    CHECK(st.status == CALL_OK);
}

static void test_faults(struct server *s)
{
    struct soap *soap = client(s->url, frontend_pem, ca);
    if (soap == NULL)
        return;
    struct stats st;
    call_stats(soap, 99, &st);
    CHECK(st.status == CALL_FAULT);
    CHECK_STR(st.subcode, "version");
    CHECK_HAS(st.msg, "protocol version mismatch: server speaks 2, client speaks 99");

    struct qcg__lookupResponse lr;
    int rc = soap_call_qcg__lookup(soap, s->url, NULL, QCG_PROTOCOL_VERSION, "job", "secret", 0, 1,
                                   NULL, NULL, &lr);
    CHECK(soap_call_status(soap, rc, st.subcode, sizeof(st.subcode), st.msg, sizeof(st.msg)) ==
          CALL_FAULT);
    CHECK_STR(st.subcode, "invalid");
    CHECK_STR(st.msg, "not served by the test server");
    /* A refusal is not an operation the server lacks... */
    CHECK(!soap_call_unknown_op(CALL_FAULT, st.subcode, st.msg));
    soap_client_reset(soap);

    /* ...and the fault of a server without the operation is (the caller
       then falls back to single lookups). */
    struct qcg__lookupAsk ask = {.job = "job", .verifier = "secret", .fromRank = 0, .toRank = 1};
    struct qcg__lookupAsks asks = {.__sizeAsk = 1, .ask = &ask};
    struct qcg__lookupsResponse lsr;
    rc = soap_call_qcg__lookups(soap, s->url, NULL, QCG_PROTOCOL_VERSION, &asks, &lsr);
    enum call_status cs =
        soap_call_status(soap, rc, st.subcode, sizeof(st.subcode), st.msg, sizeof(st.msg));
    CHECK(cs == CALL_FAULT);
    CHECK_HAS(st.msg, "not implemented");
    CHECK(soap_call_unknown_op(cs, st.subcode, st.msg));
    CHECK(!soap_call_unknown_op(CALL_UNREACHABLE, "", st.msg));
    soap_client_reset(soap);

    /* The connection is still usable after faults. */
    call_stats(soap, QCG_PROTOCOL_VERSION, &st);
    CHECK(st.status == CALL_OK);
    soap_client_free(soap);
}

static void test_bad_requests(struct server *s)
{
    static char resp[1 << 16];
    struct stats st;

    /* The raw path works: a well-formed request by hand is answered. */
    raw_post(s->port, "", envelope_head, 0, envelope_tail, 0, resp, sizeof(resp));
    CHECK(is_http_200(resp));
    CHECK_HAS(resp, "<role>frontend</role>");

    /* Malformed XML: a fault, and the next client is served. */
    raw_post(s->port, "", envelope_head, 0, "<version>1</verson></qcg:stats></SOAP-ENV:Body>", 0,
             resp, sizeof(resp));
    CHECK(!is_http_200(resp));
    CHECK_HAS(resp, "SOAP-ENV:Fault");
    stats_once(s->url, frontend_pem, ca, &st);
    CHECK(st.status == CALL_OK);

    /* Under the 1 MB limit passes, over it is refused (by length, chunked). */
    raw_post(s->port, "", envelope_head, 900 * 1024, envelope_tail, 0, resp, sizeof(resp));
    CHECK(is_http_200(resp));
    raw_post(s->port, "", envelope_head, 2 * 1024 * 1024, envelope_tail, 0, resp, sizeof(resp));
    CHECK(!is_http_200(resp));
    raw_post(s->port, "", envelope_head, 2 * 1024 * 1024, envelope_tail, 1, resp, sizeof(resp));
    CHECK(!is_http_200(resp));
    stats_once(s->url, frontend_pem, ca, &st);
    CHECK(st.status == CALL_OK);

    CHECK(log_has("request larger than 1048576 bytes refused", 3000));

    /* A string over 64 KB, an array over 1000 items: refused while parsing
       (the test server's lookup and registerCluster would answer "not served"). */
    raw_call(s->port, "<qcg:lookup><version>2</version><job>", 1000, 'j',
             "</job><verifier>s</verifier><fromRank>0</fromRank><toRank>1</toRank></qcg:lookup>",
             resp, sizeof(resp));
    CHECK_HAS(resp, "not served by the test server");
    raw_call(s->port, "<qcg:lookup><version>2</version><job>", 100 * 1024, 'j',
             "</job><verifier>s</verifier><fromRank>0</fromRank><toRank>1</toRank></qcg:lookup>",
             resp, sizeof(resp));
    CHECK(!is_http_200(resp));
    CHECK(strstr(resp, "not served by the test server") == NULL);
    raw_call(s->port,
             "<qcg:registerCluster><version>2</version><cluster><name>nata</name><kind>nat</kind>",
             -10, 0, "<portLow>0</portLow><portHigh>0</portHigh></cluster></qcg:registerCluster>",
             resp, sizeof(resp));
    CHECK_HAS(resp, "not served by the test server");
    raw_call(s->port,
             "<qcg:registerCluster><version>2</version><cluster><name>nata</name><kind>nat</kind>",
             -2000, 0, "<portLow>0</portLow><portHigh>0</portHigh></cluster></qcg:registerCluster>",
             resp, sizeof(resp));
    CHECK(!is_http_200(resp));
    CHECK(strstr(resp, "not served by the test server") == NULL);

    /* A compressed request is refused before anything is inflated.  The body
       is a real gzip of a good request, so only the refusal stops it. */
    char plain[300], gz[300];
    snprintf(plain, sizeof(plain), "%s/req.xml", dir);
    snprintf(gz, sizeof(gz), "%s/req.xml.gz", dir);
    FILE *f = fopen(plain, "w");
    fprintf(f, "%s%s", envelope_head, envelope_tail);
    fclose(f);
    if (sh("gzip -c %s > %s", plain, gz) == 0) {
        char body[4096];
        f = fopen(gz, "r");
        size_t n = fread(body, 1, sizeof(body), f);
        fclose(f);
        raw_post_bytes(s->port, "Content-Encoding: gzip\r\n", body, n, resp, sizeof(resp));
        CHECK(!is_http_200(resp));
        CHECK(log_has("refused a request with Content-Encoding \"gzip\"", 3000));
    }
    stats_once(s->url, frontend_pem, ca, &st);
    CHECK(st.status == CALL_OK);
}

static void test_wsdl(struct server *s)
{
    static char resp[1 << 17];
    struct raw r;
    if (raw_open(&r, s->port, helper_pem) < 0) {
        CHECK(!"raw connection");
        raw_close(&r);
        return;
    }
    const char req[] = "GET /?wsdl HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    raw_write(&r, req, sizeof(req) - 1);
    raw_read_all(&r, resp, sizeof(resp));
    raw_close(&r);
    CHECK(is_http_200(resp));
    CHECK_HAS(resp, "Content-Type: text/xml");
    CHECK_HAS(resp, "definitions");
    CHECK_HAS(resp, "urn:qcg-connect:1");
    CHECK_HAS(resp, "\"stats\"");
    CHECK_HAS(resp, "\"poll\"");

    if (raw_open(&r, s->port, helper_pem) == 0) {
        const char other[] = "GET /etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        raw_write(&r, other, sizeof(other) - 1);
        raw_read_all(&r, resp, sizeof(resp));
        CHECK(!is_http_200(resp));
    }
    raw_close(&r);
}

static void test_pool(struct server *s)
{
    char err[512];
    struct soap_client_config cfg = {
        .url = s->url,
        .tls = {.ca = ca, .certkey = helper_pem},
        .connect_timeout = 5,
        .io_timeout = 5,
    };
    struct soap_pool *pool = soap_pool_new(&cfg, 2, err, sizeof(err));
    CHECK(pool != NULL);
    if (pool == NULL)
        return;
    CHECK_STR(soap_pool_url(pool), s->url);
    struct soap *a = soap_pool_get(pool), *b = soap_pool_get(pool);
    CHECK(a && b && a != b);
    struct stats st;
    call_stats(a, QCG_PROTOCOL_VERSION, &st);
    CHECK(st.status == CALL_OK);
    call_stats(b, QCG_PROTOCOL_VERSION, &st);
    CHECK(st.status == CALL_OK);
    soap_pool_put(pool, a, 0);
    soap_pool_put(pool, b, 1); /* broken: reconnects next time */
    for (int i = 0; i < 4; i++) {
        struct soap *c = soap_pool_get(pool);
        call_stats(c, QCG_PROTOCOL_VERSION, &st);
        CHECK(st.status == CALL_OK);
        CHECK_STR(st.name, "nata/nata1");
        soap_pool_put(pool, c, i % 2);
    }
    soap_pool_free(pool);

    /* Bad files are start-up errors with a reason. */
    cfg.tls.certkey = "/nonexistent.pem";
    CHECK(soap_pool_new(&cfg, 2, err, sizeof(err)) == NULL);
    CHECK_HAS(err, "/nonexistent.pem");
    cfg.tls.certkey = helper_pem;
    cfg.url = "http://127.0.0.1:1/";
    CHECK(soap_pool_new(&cfg, 2, err, sizeof(err)) == NULL);
    CHECK_HAS(err, "https://");
}

struct caller {
    const char *url;
    struct stats st;
    volatile int done;
};

static void *caller_main(void *arg)
{
    struct caller *c = arg;
    stats_once(c->url, frontend_pem, ca, &c->st);
    c->done = 1;
    return NULL;
}

/* With max_connections 2 and two connections open, a third waits until one
   ends, then is served. */
static void test_connection_cap(void)
{
    struct server s;
    if (server_start(&s, 2) < 0) {
        CHECK(!"second server");
        return;
    }
    struct soap *a = served_client(s.url, frontend_pem), *b = served_client(s.url, frontend_pem);
    struct caller c = {.url = s.url};
    pthread_t t;
    pthread_create(&t, NULL, caller_main, &c);
    CHECK(log_has("2 connections served: frontend nata waits for a slot", 3000));
    /* The third is not served while both are open (this second passing
       without an answer is what is checked, not a wait for an event)... */
    long end = now_ms() + 1000;
    while (!c.done && now_ms() < end) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    CHECK(!c.done);
    /* ...and is once one of them closes. */
    soap_client_free(a);
    pthread_join(t, NULL);
    CHECK(c.st.status == CALL_OK);
    soap_client_free(b);
    long ms = server_stop(&s);
    CHECK(ms < 3000);
}

/* A TCP connection to port from the local address `from`; -1 on failure. */
static int tcp_from(const char *from, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in src = {.sin_family = AF_INET};
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, from, &src.sin_addr);
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&src, sizeof(src)) < 0 ||
        (connect(fd, (struct sockaddr *)&dst, sizeof(dst)) < 0 && errno != EINPROGRESS)) {
        perror("tcp_from");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Whether the server has closed fd (EOF or reset), without waiting. */
static bool closed_by_server(int fd)
{
    char byte;
    ssize_t n = recv(fd, &byte, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

#define IDLE_CONNS 40
#define STAGE_DEADLINE_MS 3000

/* How many of n connections the server has closed. */
static int closed_count(const int *fds, int n)
{
    int closed = 0;
    for (int i = 0; i < n; i++)
        closed += fds[i] >= 0 && closed_by_server(fds[i]);
    return closed;
}

/* Idle and slow clients cannot stop the server from accepting (issue 16):
   with 2 slots, 40 idle TCP connections from 127.0.0.2 get 16 places in the
   handshake stage and the others are closed at once; a frontend is served
   meanwhile; the stage's connections are cut at the handshake deadline, one
   dripping a TLS record a byte at a time included. */
static void test_handshake_stage(void)
{
    struct server s;
    stage_ms = STAGE_DEADLINE_MS;
    int rc = server_start(&s, 2);
    stage_ms = 0;
    if (rc < 0) {
        CHECK(!"stage server");
        return;
    }
    int idle[IDLE_CONNS];
    int opened = 0;
    for (int i = 0; i < IDLE_CONNS; i++)
        opened += (idle[i] = tcp_from("127.0.0.2", s.port)) >= 0;
    CHECK(opened == IDLE_CONNS);
    int slow = tcp_from("127.0.0.3", s.port);
    /* A ClientHello's record header announcing 512 bytes, then its body. */
    static unsigned char drip[5 + 512] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc};
    CHECK(slow >= 0 && send(slow, drip, 1, MSG_NOSIGNAL) == 1);
    CHECK(log_has("TLS handshakes in progress from 127.0.0.2", 2000));
    /* Waits for the refusals, not a fixed time: a loaded server may take a
       while to accept all 40; the deadline is long enough that the staged
       ones are still open when the count is taken. */
    int closed = 0;
    WAIT_UNTIL((closed = closed_count(idle, IDLE_CONNS)) >=
                   IDLE_CONNS - SOAP_SERVER_HANDSHAKES_PER_ADDRESS,
               STAGE_DEADLINE_MS - 500, "the connections beyond the per-address bound closed");
    printf("handshake stage: %d of %d idle connections from one address closed at once\n", closed,
           IDLE_CONNS);
    CHECK(closed == IDLE_CONNS - SOAP_SERVER_HANDSHAKES_PER_ADDRESS);

    long t0 = now_ms();
    struct stats st;
    stats_once(s.url, frontend_pem, ca, &st);
    long took = now_ms() - t0;
    printf("handshake stage: a frontend served in %ld ms among idle clients\n", took);
    CHECK(st.status == CALL_OK); /* main: blocked behind the idle ones past its 5 s timeout */
    /* The refusals are counted (issue 32: in no counter before). */
    CHECK_EQ(counter(&st, "handshakes_refused_address"),
             IDLE_CONNS - SOAP_SERVER_HANDSHAKES_PER_ADDRESS);

    /* The dripping client keeps sending a byte every 200 ms of a record
       that would take 100 s: cut at the deadline means cut while it still
       sends (a deadline that each byte renewed would never come). */
    size_t sent = 1;
    bool all_closed = false;
    for (long end = now_ms() + STAGE_DEADLINE_MS + 4000; !all_closed && now_ms() < end;) {
        if (sent < sizeof(drip) && send(slow, &drip[sent], 1, MSG_NOSIGNAL) == 1)
            sent++;
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
        all_closed = closed_by_server(slow) && closed_count(idle, IDLE_CONNS) == IDLE_CONNS;
    }
    CHECK(all_closed); /* idle and dripping clients cut at the handshake deadline */
    CHECK(log_has("TLS handshake not done within 3000 ms", 3000));
    stats_once(s.url, frontend_pem, ca, &st);
    CHECKF(counter(&st, "handshakes_expired") == SOAP_SERVER_HANDSHAKES_PER_ADDRESS + 1,
           "handshakes_expired %llu", counter(&st, "handshakes_expired"));
    for (int i = 0; i < IDLE_CONNS; i++)
        if (idle[i] >= 0)
            close(idle[i]);
    close(slow);
    server_stop(&s);
}

#define STAGE_MAX 4
#define STAGE_MS 3000

/* A server of 8 slots whose stage holds `max` for `ms` each. */
static int stage_server_start(struct server *s, int ms, int max)
{
    stage_ms = ms;
    stage_max = max;
    int rc = server_start(s, 8);
    stage_ms = stage_max = 0;
    return rc;
}

/* A full handshake stage does not keep a new client out (issue 16: an
   attacker with more addresses than the stage has slots / per-address
   bound).  Stage of 4: 4 idle connections from 127.0.0.2 fill it (a fifth
   is refused), yet a frontend from 127.0.0.1 is served: the oldest of
   127.0.0.2, the address holding the most, gives way.  Then 4 from 4
   addresses fill it (a fifth is refused again); once they have waited a
   fifth of the deadline, the oldest gives way to the frontend. */
static void test_stage_full(void)
{
    struct server s;
    if (stage_server_start(&s, STAGE_MS, STAGE_MAX) < 0) {
        CHECK(!"stage-full server");
        return;
    }
    int idle[STAGE_MAX + 1];
    for (int i = 0; i < STAGE_MAX + 1; i++)
        idle[i] = tcp_from("127.0.0.2", s.port);
    WAIT_UNTIL(closed_by_server(idle[STAGE_MAX]), 2000, "the fifth connection refused");
    CHECK(log_has("refused: 4 TLS handshakes in progress", 2000));
    struct stats st;
    stats_once(s.url, frontend_pem, ca, &st);
    CHECK(st.status == CALL_OK); /* main: refused, the stage being full */
    CHECK(log_has("cut: 4 TLS handshakes in progress, 4 from 127.0.0.2", 2000));
    WAIT_UNTIL(closed_by_server(idle[0]), 2000, "the oldest of 127.0.0.2 cut");
    for (int i = 0; i < STAGE_MAX + 1; i++)
        if (idle[i] >= 0)
            close(idle[i]);

    /* Wait for the stage to empty: a new connection from 127.0.0.2 then
       stays (it would be refused while the old ones are staged). */
    char from[32];
    int probe = -1;
    for (long end = now_ms() + 2000; now_ms() < end;) {
        probe = tcp_from("127.0.0.2", s.port);
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
        if (!closed_by_server(probe))
            break;
        close(probe);
        probe = -1;
    }
    CHECK(probe >= 0);
    int many[STAGE_MAX];
    for (int i = 0; i < STAGE_MAX - 1; i++) {
        snprintf(from, sizeof(from), "127.0.0.%d", 3 + i);
        many[i] = tcp_from(from, s.port);
    }
    many[STAGE_MAX - 1] = probe;
    int extra = tcp_from("127.0.0.9", s.port);
    WAIT_UNTIL(closed_by_server(extra), 2000, "a connection beyond the stage refused");
    struct timespec wait = {0, (STAGE_MS / 5 + 200) * 1000000L};
    nanosleep(&wait, NULL);
    stats_once(s.url, frontend_pem, ca, &st);
    CHECK(st.status == CALL_OK); /* main: refused */
    CHECK(log_has("cut: 4 TLS handshakes in progress, 1 from 127.0.0.2", 2000));
    /* At least: a probe may find the stage still full, or cut an old one. */
    CHECK(counter(&st, "handshakes_cut") >= 2 && counter(&st, "handshakes_cut") != ~0ULL);
    CHECK(counter(&st, "handshakes_refused_full") >= 2 &&
          counter(&st, "handshakes_refused_full") != ~0ULL);
    for (int i = 0; i < STAGE_MAX; i++)
        if (many[i] >= 0)
            close(many[i]);
    close(extra);
    server_stop(&s);
}

/* A client from an address a client was authenticated from is never kept
   out by strangers (issue 32): a stage of 4 filled by 4 idle connections
   from 4 addresses (none gives way for 6 s, a fifth of the deadline) turns
   a new address away, yet a frontend from 127.0.0.1, known since its first
   call, is served at once: the oldest stranger gives way. */
static void test_stage_known(void)
{
    struct server s;
    if (stage_server_start(&s, 30000, STAGE_MAX) < 0) {
        CHECK(!"stage-known server");
        return;
    }
    struct stats st;
    stats_once(s.url, frontend_pem, ca, &st);
    CHECK(st.status == CALL_OK); /* 127.0.0.1 is known from now on */
    int idle[STAGE_MAX];
    char from[32];
    for (int i = 0; i < STAGE_MAX; i++) {
        snprintf(from, sizeof(from), "127.0.0.%d", 20 + i);
        idle[i] = tcp_from(from, s.port);
    }
    int extra = tcp_from("127.0.0.30", s.port);
    WAIT_UNTIL(closed_by_server(extra), 2000, "a stranger beyond the stage refused");
    stats_once(s.url, frontend_pem, ca, &st);
    CHECKF(st.status == CALL_OK, "a known address is served while strangers fill the stage");
    CHECK(log_has("cut: 4 TLS handshakes in progress, 1 from 127.0.0.20", 2000));
    WAIT_UNTIL(closed_by_server(idle[0]), 2000, "the oldest stranger cut");
    for (int i = 0; i < STAGE_MAX; i++)
        if (idle[i] >= 0)
            close(idle[i]);
    close(extra);
    server_stop(&s);
}

/* A known address's handshake in progress never gives way to a stranger
   (issue 32): a frontend's handshake over a slow link, or on a loaded
   broker, may take more than the fifth of the deadline after which the
   oldest gives way.  Stage of 4: a connection from the known 127.0.0.1
   that sends nothing (such a handshake), then 3 strangers; once all have
   waited a fifth of the deadline, a fourth stranger takes the place of the
   oldest stranger, not of the known handshake (main: the known one). */
static void test_stage_known_kept(void)
{
    struct server s;
    if (stage_server_start(&s, STAGE_MS, STAGE_MAX) < 0) {
        CHECK(!"stage-known-kept server");
        return;
    }
    struct stats st;
    stats_once(s.url, frontend_pem, ca, &st);
    CHECK(st.status == CALL_OK); /* 127.0.0.1 is known from now on */
    int known = tcp_from("127.0.0.1", s.port);
    int idle[STAGE_MAX - 1];
    char from[32];
    for (int i = 0; i < STAGE_MAX - 1; i++) {
        snprintf(from, sizeof(from), "127.0.0.%d", 40 + i);
        idle[i] = tcp_from(from, s.port);
    }
    struct timespec wait = {0, (STAGE_MS / 5 + 200) * 1000000L};
    nanosleep(&wait, NULL);
    int stranger = tcp_from("127.0.0.50", s.port);
    CHECK(log_has("cut: 4 TLS handshakes in progress, 1 from 127.0.0.40", 2000));
    WAIT_UNTIL(closed_by_server(idle[0]), 2000, "the oldest stranger cut");
    CHECKF(!closed_by_server(known), "the known address's handshake kept for a stranger");
    CHECK(!closed_by_server(stranger));
    close(known);
    for (int i = 0; i < STAGE_MAX - 1; i++)
        if (idle[i] >= 0)
            close(idle[i]);
    close(stranger);
    server_stop(&s);
}

/* Addresses the daemon names as known count before any client there logged
   in (issue 32: after a restart under attack, a registered frontend or a
   node of the cluster): stage of 4 full of strangers; a client from the
   named 127.0.0.1, never authenticated, is served, and an idle connection
   from the named range 127.0.1.0/24 takes a stranger's place too (main: no
   address is known until a client there logs in, so both are refused). */
static void test_stage_named_known(void)
{
    struct server s;
    if (stage_server_start(&s, 30000, STAGE_MAX) < 0) {
        CHECK(!"stage-named-known server");
        return;
    }
    char why[160] = "";
    CHECK(soap_server_know(s.srv, "127.0.0.1", why, sizeof(why)) == 0);
    CHECK(soap_server_know(s.srv, "127.0.1.0/24", why, sizeof(why)) == 0);
    CHECK(soap_server_know(s.srv, "127.0.1.0/24", why, sizeof(why)) == 0); /* held once */
    CHECK(soap_server_know(s.srv, "0.0.0.0/0", why, sizeof(why)) < 0);
    CHECK(strstr(why, "wider than /8") != NULL);
    CHECK(soap_server_know(s.srv, "not-an-address", why, sizeof(why)) < 0);
    int idle[STAGE_MAX];
    char from[32];
    for (int i = 0; i < STAGE_MAX; i++) {
        snprintf(from, sizeof(from), "127.0.0.%d", 60 + i);
        idle[i] = tcp_from(from, s.port);
    }
    int extra = tcp_from("127.0.0.70", s.port);
    WAIT_UNTIL(closed_by_server(extra), 2000, "a stranger beyond the stage refused");
    struct stats st;
    stats_once(s.url, frontend_pem, ca, &st);
    CHECKF(st.status == CALL_OK, "a named address is served while strangers fill the stage");
    CHECK(log_has("cut: 4 TLS handshakes in progress, 1 from 127.0.0.60", 2000));
    int refill = tcp_from("127.0.0.64", s.port); /* the stage full again */
    WAIT_UNTIL(closed_count(idle, STAGE_MAX) == 1, 2000, "the first stranger cut");
    int ranged = tcp_from("127.0.1.9", s.port);
    CHECK(log_has("cut: 4 TLS handshakes in progress, 1 from 127.0.0.61", 2000));
    WAIT_UNTIL(closed_by_server(idle[1]), 2000, "a stranger cut for the named range");
    CHECKF(!closed_by_server(ranged), "a connection from a named range kept in the stage");
    for (int i = 0; i < STAGE_MAX; i++)
        if (idle[i] >= 0)
            close(idle[i]);
    close(extra);
    close(refill);
    close(ranged);
    server_stop(&s);
}

/* The known prefixes are bounded: one more than the bound is refused. */
static void test_know_bounded(void)
{
    struct server s;
    if (stage_server_start(&s, 30000, STAGE_MAX) < 0) {
        CHECK(!"know-bounded server");
        return;
    }
    char range[40], why[160] = "";
    int taken = 0;
    for (int i = 0; i < SOAP_SERVER_KNOWN_PREFIXES_MAX; i++) {
        snprintf(range, sizeof(range), "198.18.%d.0/24", i);
        taken += soap_server_know(s.srv, range, why, sizeof(why)) == 0;
    }
    CHECK(taken == SOAP_SERVER_KNOWN_PREFIXES_MAX);
    CHECK(soap_server_know(s.srv, "198.19.0.0/24", why, sizeof(why)) < 0);
    CHECKF(strstr(why, "known ranges already") != NULL, "%s", why);
    /* Single addresses are held apart, by group, as authenticated ones. */
    CHECK(soap_server_know(s.srv, "198.19.0.1", why, sizeof(why)) == 0);
    server_stop(&s);
}

/* One certificate cannot take every slot: beyond its bound its connections
   are closed while others' are served. */
static void test_identity_cap(void)
{
    struct server s;
    per_identity = 1;
    int rc = server_start(&s, 8);
    per_identity = 0;
    if (rc < 0) {
        CHECK(!"identity cap server");
        return;
    }
    struct soap *held = served_client(s.url, frontend_pem);
    struct stats st;
    stats_once(s.url, frontend_pem, ca, &st);
    CHECK(st.status == CALL_UNREACHABLE);
    CHECK(log_has("refused: frontend nata holds 1 connections already", 3000));
    stats_once(s.url, helper_pem, ca, &st);
    CHECK(st.status == CALL_OK);
    soap_client_free(held);
    server_stop(&s);
}

/* A stop is prompt even with an idle keep-alive connection open. */
static void test_stop(struct server *s)
{
    struct soap *idle = served_client(s->url, frontend_pem);
    long ms = server_stop(s);
    if (ms >= 3000)
        fprintf(stderr, "stop took %ld ms\n", ms);
    CHECK(ms < 3000);
    CHECK(s->rc == 0);
    soap_client_free(idle);
}

struct poller {
    const char *url;
    int wait;
    uint64_t ack;
    int rc;
    enum call_status status;
    int n;
    char kind[16];
    uint64_t seq;
    long ms;
};

static void *poll_main(void *arg)
{
    struct poller *p = arg;
    struct soap *soap = client(p->url, frontend_pem, ca);
    if (soap == NULL)
        return NULL;
    soap_client_set_wait(soap, p->wait);
    struct qcg__pollResponse r;
    memset(&r, 0, sizeof(r));
    long t0 = now_ms();
    p->rc = soap_call_qcg__poll(soap, p->url, NULL, QCG_PROTOCOL_VERSION, 7, p->ack, p->wait, &r);
    p->ms = now_ms() - t0;
    char sub[32], msg[256];
    p->status = soap_call_status(soap, p->rc, sub, sizeof(sub), msg, sizeof(msg));
    if (p->status != CALL_OK)
        fprintf(stderr, "poll: %s\n", msg);
    p->n = p->status == CALL_OK ? r.__sizeCommand : -1;
    if (p->n > 0) {
        snprintf(p->kind, sizeof(p->kind), "%s", r.command[0].kind);
        p->seq = r.command[0].seq;
    }
    soap_client_free(soap);
    return NULL;
}

/* A long-poll outlasts every 10 s I/O timeout on both sides, a command ends it
   at once, and a stop during a poll is prompt (the on_stop hook). */
static void test_longpoll(void)
{
    struct server s;
    if (server_start(&s, 8) < 0)
        return;
    struct poller p = {.url = s.url, .wait = 12};
    poll_main(&p);
    CHECK(p.status == CALL_OK);
    CHECK(p.n == 0);
    CHECK(p.ms >= 11500 && p.ms < 16000);

    struct poller q = {.url = s.url, .wait = 20};
    pthread_t t;
    int polls = atomic_load(&s.state.polls);
    pthread_create(&t, NULL, poll_main, &q);
    struct command cmd;
    memset(&cmd, 0, sizeof(cmd));
    snprintf(cmd.kind, sizeof(cmd.kind), "flush");
    /* The command wakes a poll that waits for it. */
    WAIT_UNTIL(atomic_load(&s.state.polls) > polls, 5000, "the poll to reach the server");
    uint64_t seq = cmdqueue_push(s.state.queue, &cmd);
    pthread_join(t, NULL);
    CHECK(q.status == CALL_OK && q.n == 1 && q.seq == seq);
    CHECK_STR(q.kind, "flush");
    CHECK(q.ms < 5000);

    struct poller z = {.url = s.url, .wait = 20, .ack = seq};
    polls = atomic_load(&s.state.polls);
    pthread_create(&t, NULL, poll_main, &z);
    WAIT_UNTIL(atomic_load(&s.state.polls) > polls, 5000, "the poll to reach the server");
    long ms = server_stop(&s);
    pthread_join(t, NULL);
    CHECK(ms < 5000);
    CHECK(z.ms < 8000);
}

/* IPv6 sources count per /64 (issue 32: one /64 gave an attacker as many
   addresses as it wanted): 40 idle connections from 40 addresses of one
   /64 get 16 places, the others are closed at once.  Needs root: a network
   namespace of its own where the /64 is local (its addresses bound with
   IP_FREEBIND); skipped otherwise.  Last: the process stays in that namespace. */
static void test_ipv6_group(void)
{
    if (geteuid() != 0 || unshare(CLONE_NEWNET) != 0) {
        printf("handshake stage per /64: skipped (needs root for a network namespace)\n");
        return;
    }
    if (sh("ip link set lo up && ip -6 route add local 2001:db8:1::/64 dev lo") != 0) {
        CHECK(!"a local /64 in the namespace");
        return;
    }
    struct server s;
    stage_ms = STAGE_DEADLINE_MS;
    listen_on = "::";
    int rc = server_start(&s, 2);
    stage_ms = 0;
    listen_on = "127.0.0.1";
    if (rc < 0) {
        CHECK(!"ipv6 server");
        return;
    }
    int idle[IDLE_CONNS];
    for (int i = 0; i < IDLE_CONNS; i++) {
        struct sockaddr_in6 src = {.sin6_family = AF_INET6}, dst = {.sin6_family = AF_INET6};
        char from[64];
        snprintf(from, sizeof(from), "2001:db8:1::%x:%x", 0x100 + i, (i * 7919) & 0xffff);
        inet_pton(AF_INET6, from, &src.sin6_addr);
        inet_pton(AF_INET6, "2001:db8:1::1", &dst.sin6_addr);
        dst.sin6_port = htons((uint16_t)s.port);
        idle[i] = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK, 0);
        int one = 1; /* an address of the local /64, not one of lo's */
        if (idle[i] < 0 || setsockopt(idle[i], IPPROTO_IP, IP_FREEBIND, &one, sizeof(one)) < 0 ||
            bind(idle[i], (struct sockaddr *)&src, sizeof(src)) < 0 ||
            (connect(idle[i], (struct sockaddr *)&dst, sizeof(dst)) < 0 && errno != EINPROGRESS)) {
            perror("ipv6 client");
            CHECK(!"an IPv6 client");
        }
    }
    int closed = 0;
    WAIT_UNTIL((closed = closed_count(idle, IDLE_CONNS)) >=
                   IDLE_CONNS - SOAP_SERVER_HANDSHAKES_PER_ADDRESS,
               STAGE_DEADLINE_MS - 500, "the connections beyond the /64's bound closed");
    printf("handshake stage: %d of %d idle connections from one /64 closed at once\n", closed,
           IDLE_CONNS);
    CHECK(closed == IDLE_CONNS - SOAP_SERVER_HANDSHAKES_PER_ADDRESS);
    CHECK(log_has("TLS handshakes in progress from 2001:db8:1::/64", 2000));
    for (int i = 0; i < IDLE_CONNS; i++)
        if (idle[i] >= 0)
            close(idle[i]);
    server_stop(&s);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s QCG_CERTS [quick|longpoll]\n", argv[0]);
        return 2;
    }
    certs_tool = argv[1];
    const char *which = argc > 2 ? argv[2] : "quick";
    if (access(certs_tool, X_OK) < 0) {
        fprintf(stderr, "%s: not available: skipped\n", certs_tool);
        return 77;
    }
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    if (make_certs() < 0) {
        fprintf(stderr, "could not make the test certificates\n");
        sh("rm -rf %s", dir);
        return 1;
    }
    /* stderr (the server's log) goes to a file the checks can read. */
    snprintf(logpath, sizeof(logpath), "%s/log", dir);
    fflush(stderr);
    int saved = dup(2);
    int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(fd, 2);
    close(fd);
    log_init("test", LOG_LEVEL_DEBUG, false);
    signal(SIGPIPE, SIG_IGN);

    if (strcmp(which, "longpoll") == 0) {
        test_longpoll();
    } else {
        struct server s;
        if (server_start(&s, 8) == 0) {
            test_identities(&s);
            test_refusals(&s);
            test_faults(&s);
            test_bad_requests(&s);
            test_wsdl(&s);
            test_pool(&s);
            test_stop(&s);
        } else {
            CHECK(!"server start");
        }
        test_connection_cap();
        test_handshake_stage();
        test_stage_full();
        test_stage_known();
        test_stage_known_kept();
        test_stage_named_known();
        test_know_bounded();
        test_identity_cap();
        test_ipv6_group();
    }

    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    if (check_failures || getenv("QCG_TEST_VERBOSE")) {
        fprintf(stderr, "---- server log ----\n");
        sh("cat %s >&2", logpath);
        /* Again after the log: a long log is cut in the middle by CI. */
        sh("grep '^FAIL' %s >&2", logpath);
    }
    sh("rm -rf %s", dir);
    return check_result(which);
}
