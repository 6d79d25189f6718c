/* The metrics endpoint; see metrics_server.h. */
#include "metrics_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "address.h"
#include "crl.h"
#include "engine.h"
#include "identity.h"
#include "log.h"
#include "metrics_http.h"
#include "soap_server.h"
#include "sockaddr_text.h"
#include "tls_reload.h"

#ifndef QCG_VERSION
#define QCG_VERSION "unknown"
#endif

#define ALLOW_MAX 32
#define ACCEPTS_PER_RUN 16

struct conn {
    struct engine_conn ec; /* first: the engine frees it */
    struct metrics_server *s;
    SSL *ssl; /* with metrics-tls; NULL: plain HTTP */
    bool handshaken;
    char addr[80]; /* ADDR:PORT, for its refusal lines */
    char in[METRICS_REQUEST_MAX];
    size_t in_len;
    struct metrics_buf out;
    size_t out_off;
};

struct metrics_server {
    struct metrics_server_config cfg;
    char daemon[32];
    int port;
    struct addr_range allow[ALLOW_MAX];
    int nallow; /* -1: anyone */
    struct engine *engine;
    SSL_CTX *ctx; /* with metrics-tls */
    atomic_ullong shed;
    unsigned long long scrapes, refused_address, refused_full, refused_allow, bad_requests,
        timeouts, refused_tls, refused_role;
    double started;
    pthread_t thread;
};

/* "ADDR:PORT" or "[V6]:PORT" into ss. */
static int parse_listen(const char *text, struct sockaddr_storage *ss, socklen_t *len,
                        bool *loopback, char *err, size_t errlen)
{
    char host[HOSTPORT_MAX], why[200];
    int port;
    if (hostport_parse(text, true, host, sizeof(host), &port, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "not ADDR:PORT: %s (e.g. 127.0.0.1:9701 or [::1]:9701)", why);
        return -1;
    }
    *len = address_sockaddr(host, (uint16_t)port, ss);
    if (ss->ss_family == AF_INET)
        *loopback = (ntohl(((struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    else
        *loopback = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)ss)->sin6_addr);
    return 0;
}

static int parse_allow(struct metrics_server *s, const char *text, char *err, size_t errlen)
{
    char copy[1024], why[128];
    if (strlen(text) >= sizeof(copy)) {
        snprintf(err, errlen, "metrics-allow: longer than %zu characters", sizeof(copy) - 1);
        return -1;
    }
    snprintf(copy, sizeof(copy), "%s", text);
    s->nallow = 0;
    char *save = NULL;
    for (char *t = strtok_r(copy, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
        if (s->nallow == ALLOW_MAX) {
            snprintf(err, errlen, "metrics-allow: more than %d ranges", ALLOW_MAX);
            return -1;
        }
        if (addr_range_parse(t, &s->allow[s->nallow], why, sizeof(why)) != 0) {
            snprintf(err, errlen, "metrics-allow: %s: %s", t, why);
            return -1;
        }
        s->nallow++;
    }
    if (s->nallow == 0) {
        snprintf(err, errlen, "metrics-allow: no address given");
        return -1;
    }
    return 0;
}

static bool allowed(const struct metrics_server *s, const struct sockaddr_storage *ss,
                    socklen_t len)
{
    char host[64];
    int port;
    if (s->nallow < 0)
        return true;
    if (sockaddr_host(ss, len, host, sizeof(host), &port) < 0)
        return false;
    for (int i = 0; i < s->nallow; i++)
        if (addr_range_contains(&s->allow[i], host))
            return true;
    return false;
}

static void conn_close(struct conn *c)
{
    if (c->ec.closing)
        return;
    if (c->ssl != NULL) {
        if (c->handshaken)
            SSL_shutdown(c->ssl); /* one try: the socket does not block */
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
    metrics_buf_free(&c->out);
    engine_conn_close(&c->ec); /* its socket, its count under its source */
}

static void refuse(struct metrics_server *s, unsigned long long *counter, const char *addr,
                   const char *why)
{
    (*counter)++;
    engine_refused_log(s->engine, addr, why);
}

/* The engine's admission, before its own: metrics-allow. */
static bool admit(void *arg, const struct sockaddr_storage *ss, socklen_t len)
{
    struct metrics_server *s = arg;
    char addr[80];
    if (allowed(s, ss, len))
        return true;
    sockaddr_text(ss, len, addr, sizeof(addr));
    refuse(s, &s->refused_allow, addr, "metrics: not in metrics-allow");
    return false;
}

static void refused(void *arg, enum engine_refusal why, const struct sockaddr_storage *ss,
                    socklen_t len, const char *source)
{
    struct metrics_server *s = arg;
    char addr[80];
    (void)source;
    sockaddr_text(ss, len, addr, sizeof(addr));
    if (why == ENGINE_REFUSED_ADDRESS)
        refuse(s, &s->refused_address, addr, "metrics: connections-per-address limit reached");
    else
        refuse(s, &s->refused_full, addr, "metrics: connection limit reached");
}

static void conn_io(struct engine_watch *w, int status, int events);
static void conn_deadline(struct engine_conn *ec);

static void accepted(void *arg, int fd, const struct sockaddr_storage *ss, socklen_t len,
                     const char *source)
{
    struct metrics_server *s = arg;
    struct conn *c = calloc(1, sizeof(*c));
    SSL *ssl = NULL;
    if (c == NULL ||
        (s->ctx != NULL && ((ssl = SSL_new(s->ctx)) == NULL || SSL_set_fd(ssl, fd) != 1))) {
        SSL_free(ssl);
        free(c);
        close(fd);
        return;
    }
    c->s = s;
    c->ssl = ssl;
    c->ec.w.owner = c;
    c->ec.w.on_io = conn_io;
    c->ec.on_deadline = conn_deadline;
    sockaddr_text(ss, len, c->addr, sizeof(c->addr));
    /* Watched for reading, timeout_ms to send the request (first_ms). */
    if (engine_conn_open(s->engine, &c->ec, fd, source) < 0) {
        SSL_free(ssl);
        free(c);
        close(fd);
        return;
    }
    if (ssl != NULL)
        SSL_set_accept_state(ssl);
}

static void process_families(struct metrics_server *s, struct metrics_buf *b)
{
    struct rusage ru;
    metrics_family(b, "qcg_build_info", "gauge", "the running version (always 1)");
    metrics_sample(b, "qcg_build_info", 1, "daemon", s->daemon, "version", QCG_VERSION, NULL);
    metrics_family(b, "process_start_time_seconds", "gauge", "start time, unix seconds");
    metrics_sample(b, "process_start_time_seconds", s->started, NULL);
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        metrics_family(b, "process_cpu_seconds_total", "counter", "user and system CPU time");
        metrics_sample(b, "process_cpu_seconds_total",
                       (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6,
                       NULL);
    }
    metrics_family(b, "qcg_metrics_scrapes_total", "counter", "answers to GET /metrics");
    metrics_sample(b, "qcg_metrics_scrapes_total", (double)s->scrapes, NULL);
    metrics_family(b, "qcg_metrics_refused_total", "counter",
                   "connections and requests the metrics endpoint refused, by reason");
    const struct {
        const char *reason;
        unsigned long long n;
    } refused[] = {
        {"not_allowed", s->refused_allow},
        {"per_address", s->refused_address},
        {"full", s->refused_full + atomic_load(&s->shed)},
        {"bad_request", s->bad_requests},
        {"timeout", s->timeouts},
        {"tls", s->refused_tls},
        {"not_monitor", s->refused_role},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        metrics_sample(b, "qcg_metrics_refused_total", (double)refused[i].n, "reason",
                       refused[i].reason, NULL);
}

/* recv/send over the connection, TLS or not: > 0 bytes, 0 closed, -1 with
   errno EAGAIN when the TLS layer waits for the socket. */
static ssize_t conn_recv(struct conn *c, void *buf, size_t len)
{
    if (c->ssl == NULL)
        return recv(c->ec.w.fd, buf, len, 0);
    int n = SSL_read(c->ssl, buf, (int)len);
    if (n > 0)
        return n;
    int e = SSL_get_error(c->ssl, n);
    ERR_clear_error();
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        errno = EAGAIN;
        return -1;
    }
    return e == SSL_ERROR_ZERO_RETURN ? 0 : -1;
}

static ssize_t conn_send(struct conn *c, const void *buf, size_t len)
{
    if (c->ssl == NULL)
        return send(c->ec.w.fd, buf, len, MSG_NOSIGNAL);
    int n = SSL_write(c->ssl, buf, (int)len);
    if (n > 0)
        return n;
    int e = SSL_get_error(c->ssl, n);
    ERR_clear_error();
    errno = e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? EAGAIN : EPIPE;
    return -1;
}

/* A verified client certificate of the grid is not enough: only the
   monitor role reads metrics (a helper's key is on every compute node). */
static bool is_monitor(SSL *ssl)
{
    X509 *peer = SSL_get0_peer_certificate(ssl);
    X509_NAME *subject = peer != NULL ? X509_get_subject_name(peer) : NULL;
    int i =
        subject != NULL ? X509_NAME_get_index_by_NID(subject, NID_organizationalUnitName, -1) : -1;
    if (i < 0 || X509_NAME_get_index_by_NID(subject, NID_organizationalUnitName, i) >= 0)
        return false;
    const ASN1_STRING *ou = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i));
    return ou != NULL && ASN1_STRING_length(ou) == (int)strlen(METRICS_TLS_ROLE) &&
           memcmp(ASN1_STRING_get0_data(ou), METRICS_TLS_ROLE, strlen(METRICS_TLS_ROLE)) == 0;
}

/* The TLS handshake, step by step as the socket allows; then the request. */
static void on_handshake(struct metrics_server *s, struct conn *c)
{
    int r = SSL_do_handshake(c->ssl);
    if (r != 1) {
        int e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            ERR_clear_error();
            if (engine_watch_want(&c->ec.w, e == SSL_ERROR_WANT_READ ? UV_READABLE : UV_WRITABLE) !=
                0)
                conn_close(c);
            return;
        }
        char why[160];
        long v = SSL_get_verify_result(c->ssl);
        if (v != X509_V_OK)
            snprintf(why, sizeof(why), "metrics: TLS handshake refused: %s",
                     X509_verify_cert_error_string(v));
        else
            snprintf(why, sizeof(why), "metrics: TLS handshake failed: %s",
                     ERR_peek_last_error() ? ERR_reason_error_string(ERR_peek_last_error())
                                           : "connection closed");
        ERR_clear_error();
        refuse(s, &s->refused_tls, c->ec.source, why);
        conn_close(c);
        return;
    }
    if (!is_monitor(c->ssl)) {
        refuse(s, &s->refused_role, c->ec.source,
               "metrics: the client certificate's role is not " METRICS_TLS_ROLE);
        conn_close(c);
        return;
    }
    c->handshaken = true;
    if (engine_watch_want(&c->ec.w, UV_READABLE) != 0)
        conn_close(c);
}

/* Puts the whole answer into c->out and waits for the socket to take it. */
static void answer(struct metrics_server *s, struct conn *c, int status, const char *why, bool head)
{
    struct metrics_buf body = {0};
    if (status == 200) {
        s->cfg.render(s->cfg.arg, &body);
        process_families(s, &body);
        if (body.failed) {
            metrics_buf_free(&body);
            status = 500;
            why = "out of memory";
        }
    }
    if (status != 200) {
        char line[160];
        snprintf(line, sizeof(line), "%d %s: %s\n", status, metrics_status_text(status), why);
        metrics_buf_free(&body);
        body.p = strdup(line);
        body.len = body.p ? strlen(line) : 0;
    }
    char hdr[256];
    int n = snprintf(hdr, sizeof(hdr),
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, metrics_status_text(status),
                     status == 200 ? METRICS_CONTENT_TYPE : "text/plain; charset=utf-8", body.len);
    metrics_buf_free(&c->out);
    c->out.p = malloc((size_t)n + body.len + 1);
    if (c->out.p != NULL) {
        memcpy(c->out.p, hdr, (size_t)n);
        if (!head && body.len > 0)
            memcpy(c->out.p + n, body.p, body.len);
        c->out.len = (size_t)n + (head ? 0 : body.len);
    }
    metrics_buf_free(&body);
    c->out_off = 0;
    engine_conn_deadline(&c->ec, (uint64_t)s->cfg.timeout_ms);
    if (c->out.p == NULL || engine_watch_want(&c->ec.w, UV_WRITABLE) != 0)
        conn_close(c);
}

static void on_readable(struct metrics_server *s, struct conn *c)
{
    ssize_t r = conn_recv(c, c->in + c->in_len, sizeof(c->in) - c->in_len);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (r <= 0) {
        conn_close(c);
        return;
    }
    c->in_len += (size_t)r;
    bool head;
    const char *why;
    int st = metrics_request_parse(c->in, c->in_len, &head, &why);
    if (st == METRICS_HTTP_MORE)
        return;
    if (st != 0) {
        char line[128];
        snprintf(line, sizeof(line), "metrics: %d, %s", st, why);
        refuse(s, &s->bad_requests, c->addr, line);
        answer(s, c, st, why, false);
        return;
    }
    s->scrapes++;
    answer(s, c, 200, "", head);
}

static void on_writable(struct conn *c)
{
    ssize_t w = conn_send(c, c->out.p + c->out_off, c->out.len - c->out_off);
    if (w < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (w <= 0) {
        conn_close(c);
        return;
    }
    c->out_off += (size_t)w;
    if (c->out_off == c->out.len) {
        shutdown(c->ec.w.fd, SHUT_WR);
        conn_close(c);
    }
}

static void conn_io(struct engine_watch *w, int status, int events)
{
    struct conn *c = w->owner;
    struct metrics_server *s = c->s;
    (void)events;
    if (c->ec.closing)
        return;
    /* An error on the socket: what it does to the handshake is counted
       there; a plain read or write has nothing left to say. */
    if (c->ssl != NULL && !c->handshaken)
        on_handshake(s, c);
    else if (status >= 0 && c->out.p != NULL)
        on_writable(c);
    else if (status >= 0)
        on_readable(s, c);
    if (status < 0)
        conn_close(c);
}

/* No request in time, or the answer not read: the engine's deadline. */
static void conn_deadline(struct engine_conn *ec)
{
    struct conn *c = (struct conn *)ec;
    refuse(c->s, &c->s->timeouts, ec->source, "metrics: cut, no request or answer read in time");
    conn_close(c);
}

static void *serve(void *arg)
{
    struct metrics_server *s = arg;
    struct engine_conn *ec;
    engine_run(s->engine);
    while ((ec = engine_oldest(s->engine)) != NULL)
        conn_close((struct conn *)ec);
    return NULL;
}

static const struct engine_ops metrics_ops = {
    .admit = admit, .refused = refused, .accepted = accepted,
    /* No .cut: when full, a newcomer is refused; no .tick: an idle
       endpoint sleeps until an event or a deadline. */
};

static void server_free(struct metrics_server *s)
{
    engine_free(s->engine); /* the connections' memory too */
    SSL_CTX_free(s->ctx);
    free(s);
}

/* The server context of metrics-tls: the daemon's certificate set (reloaded
   on SIGHUP with its others, tls_reload.h) and CRL, TLS 1.3, client
   certificates required (clientAuth), no session resumption. */
static int tls_context(struct metrics_server *s, const struct tls_files *tls, char *err,
                       size_t errlen)
{
    char why[256];
    if (tls->ca == NULL || tls->certkey == NULL) {
        snprintf(err, errlen, "metrics-tls needs the daemon's ca and cert");
        return -1;
    }
    /* A helper's certificate is a TLS client's: a scraper would refuse it
       at every scrape, so say it now. */
    FILE *f = fopen(tls->certkey, "r");
    X509 *own = f != NULL ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
    if (f != NULL)
        fclose(f);
    int usage = own != NULL ? identity_cert_usage(own, true, why, sizeof(why)) : -1;
    X509_free(own);
    ERR_clear_error();
    if (usage != 0) {
        snprintf(err, errlen, "metrics-tls: %s: %s; use metrics-allow here", tls->certkey,
                 own != NULL ? why : "no certificate to read");
        return -1;
    }
    s->ctx = SSL_CTX_new(TLS_server_method());
    if (s->ctx == NULL || SSL_CTX_set_min_proto_version(s->ctx, TLS1_3_VERSION) != 1 ||
        SSL_CTX_set_purpose(s->ctx, X509_PURPOSE_SSL_CLIENT) != 1) {
        snprintf(err, errlen, "metrics-tls: cannot make a TLS context");
        return -1;
    }
    SSL_CTX_set_verify(s->ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    if (crl_attach(s->ctx, tls->crl, tls->ca, why, sizeof(why)) != 0 ||
        tls_reload_attach(s->ctx, tls, true, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "metrics-tls: %s", why);
        return -1;
    }
    return 0;
}

struct metrics_server *metrics_server_start(const struct metrics_server_config *cfg, char *err,
                                            size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t len;
    bool loopback;
    if (parse_listen(cfg->listen, &ss, &len, &loopback, err, errlen) != 0)
        return NULL;
    if (!loopback && cfg->allow == NULL && cfg->tls == NULL) {
        snprintf(err, errlen,
                 "not a loopback address, and no metrics-allow or metrics-tls: say which "
                 "addresses or certificates may scrape");
        return NULL;
    }
    struct metrics_server *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    s->nallow = -1;
    snprintf(s->daemon, sizeof(s->daemon), "%s", cfg->daemon ? cfg->daemon : "");
    if (s->cfg.max_connections <= 0)
        s->cfg.max_connections = 32;
    if (s->cfg.per_address <= 0)
        s->cfg.per_address = 4;
    if (s->cfg.timeout_ms <= 0)
        s->cfg.timeout_ms = 5000;
    s->started = (double)time(NULL);
    if (cfg->allow != NULL && parse_allow(s, cfg->allow, err, errlen) != 0) {
        server_free(s);
        return NULL;
    }
    if (cfg->tls != NULL && tls_context(s, cfg->tls, err, errlen) != 0) {
        server_free(s);
        return NULL;
    }
    int one = 1;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 64) != 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", cfg->listen, strerror(errno));
        if (fd >= 0)
            close(fd);
        server_free(s);
        return NULL;
    }
    len = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &len);
    char host[64], why[200];
    sockaddr_host(&ss, len, host, sizeof(host), &s->port);
    struct engine_config ec = {
        .listen_fd = fd,
        .listen_fd2 = -1,
        .accepts_per_run = ACCEPTS_PER_RUN,
        .conns_max = (unsigned)s->cfg.max_connections,
        .per_address = (unsigned)s->cfg.per_address,
        .first_ms = (unsigned)s->cfg.timeout_ms,
        .shed = &s->shed,
        .ops = &metrics_ops,
        .arg = s,
    };
    s->engine = engine_new(&ec, why, sizeof(why)); /* closes fd on failure */
    if (s->engine == NULL) {
        snprintf(err, errlen, "cannot start: %s", why);
        server_free(s);
        return NULL;
    }
    int rc = pthread_create(&s->thread, NULL, serve, s);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start: %s", strerror(rc));
        server_free(s);
        return NULL;
    }
    /* Its CPU time can be told apart (bench/metrics-scrape.sh). */
    pthread_setname_np(s->thread, "qcg-metrics");
    return s;
}

int metrics_server_port(const struct metrics_server *s)
{
    return s->port;
}

void metrics_server_stop(struct metrics_server *s)
{
    if (s == NULL)
        return;
    engine_stop(s->engine); /* async-signal-safe */
    pthread_join(s->thread, NULL);
    server_free(s);
}

int metrics_start_if(const char *program, const struct metrics_server_config *cfg,
                     struct metrics_server **out, char *err, size_t errlen)
{
    char why[256];
    *out = NULL;
    if (cfg->listen == NULL || cfg->listen[0] == '\0')
        return 0;
    *out = metrics_server_start(cfg, why, sizeof(why));
    if (*out == NULL) {
        snprintf(err, errlen, "%s: metrics-listen %s: %s", program, cfg->listen, why);
        return -1;
    }
    log_info("metrics on %s://%s/metrics%s%s%s", cfg->tls ? "https" : "http", cfg->listen,
             cfg->tls ? " for certificates of role " METRICS_TLS_ROLE : "",
             cfg->allow ? " from " : "", cfg->allow ? cfg->allow : "");
    return 0;
}
