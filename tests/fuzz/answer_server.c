/* See answer_server.h. */
#include "answer_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#define SERVERS_MAX 4
#define REQUEST_MAX (256 * 1024)
/* A client that stops sending mid-request: the harness's bug, not a hang. */
#define IO_TIMEOUT_S 5

struct answer_server {
    SSL_CTX *ctx;
    int lfd, port;
    pthread_t thread;
    pthread_mutex_t lock; /* guards answer, size, count */
    uint8_t *answer;
    size_t size;
    struct {
        char *op;   /* "<qcg:publish" */
        char *text; /* the whole HTTP answer */
    } ops[ANSWER_SERVER_OPS];
    int nops;
    unsigned long count;
    volatile int stop;
};

static struct answer_server *servers[SERVERS_MAX];
static int nservers;

/* The request's headers and body (into buf, NUL-terminated), then nothing
   more: the client waits for the answer after it. */
static int read_request(SSL *ssl, char *buf)
{
    size_t used = 0, want = 0;
    char *end = NULL;

    while (end == NULL || used < want) {
        if (used == REQUEST_MAX)
            return -1;
        int n = SSL_read(ssl, buf + used, (int)(REQUEST_MAX - used));
        if (n <= 0)
            return -1;
        used += (size_t)n;
        buf[used] = '\0';
        if (end == NULL && (end = strstr(buf, "\r\n\r\n")) != NULL) {
            const char *cl = strcasestr(buf, "\r\nContent-Length:");
            want = (size_t)(end + 4 - buf);
            if (cl != NULL && cl < end)
                want += strtoul(cl + 17, NULL, 10);
        }
    }
    return 0;
}

static void set_timeout(int fd, int seconds)
{
    struct timeval tv = {.tv_sec = seconds};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static void serve_one(struct answer_server *s, int fd)
{
    static char request[REQUEST_MAX + 1];
    SSL *ssl = SSL_new(s->ctx);

    set_timeout(fd, IO_TIMEOUT_S);
    if (ssl == NULL || SSL_set_fd(ssl, fd) != 1)
        abort();
    if (SSL_accept(ssl) == 1 && read_request(ssl, request) == 0) {
        const char *fixed = NULL;
        pthread_mutex_lock(&s->lock);
        for (int i = 0; i < s->nops && fixed == NULL; i++) {
            const char *at = strstr(request, s->ops[i].op);
            size_t n = strlen(s->ops[i].op);
            if (at != NULL && (at[n] == '>' || at[n] == ' '))
                fixed = s->ops[i].text;
        }
        if (fixed != NULL)
            SSL_write(ssl, fixed, (int)strlen(fixed));
        else if (s->size > 0)
            SSL_write(ssl, s->answer, (int)s->size);
        s->count++;
        pthread_mutex_unlock(&s->lock);
        SSL_shutdown(ssl);
    }
    SSL_free(ssl);
    close(fd);
    ERR_clear_error();
}

static void *run(void *arg)
{
    struct answer_server *s = arg;

    while (!s->stop) {
        struct pollfd p = {.fd = s->lfd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0)
            continue;
        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            serve_one(s, fd);
    }
    return NULL;
}

static void stop_all(void)
{
    for (int i = 0; i < nservers; i++) {
        struct answer_server *s = servers[i];
        s->stop = 1;
        pthread_join(s->thread, NULL);
        close(s->lfd);
        SSL_CTX_free(s->ctx);
        pthread_mutex_destroy(&s->lock);
        for (int j = 0; j < s->nops; j++) {
            free(s->ops[j].op);
            free(s->ops[j].text);
        }
        free(s->answer);
        free(s);
    }
}

struct answer_server *answer_server_start(const char *ca, const char *pem)
{
    struct answer_server *s = calloc(1, sizeof(*s));
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);

    if (s == NULL || nservers == SERVERS_MAX)
        abort();
    s->ctx = SSL_CTX_new(TLS_server_method());
    if (s->ctx == NULL || SSL_CTX_load_verify_locations(s->ctx, ca, NULL) != 1 ||
        SSL_CTX_use_certificate_chain_file(s->ctx, pem) != 1 ||
        SSL_CTX_use_PrivateKey_file(s->ctx, pem, SSL_FILETYPE_PEM) != 1) {
        ERR_print_errors_fp(stderr);
        abort();
    }
    SSL_CTX_set_verify(s->ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    /* A client resuming its session (the daemons' clients do) is served. */
    static const unsigned char sid[] = "qcg-fuzz";
    SSL_CTX_set_session_id_context(s->ctx, sid, sizeof(sid) - 1);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(s->lfd, 16) < 0 || getsockname(s->lfd, (struct sockaddr *)&sa, &len) < 0)
        abort();
    s->port = ntohs(sa.sin_port);
    pthread_mutex_init(&s->lock, NULL);
    if (pthread_create(&s->thread, NULL, run, s) != 0)
        abort();
    if (nservers == 0)
        atexit(stop_all);
    servers[nservers++] = s;
    return s;
}

int answer_server_port(const struct answer_server *s)
{
    return s->port;
}

void answer_server_set(struct answer_server *s, const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size > 0 ? size : 1);

    if (copy == NULL)
        abort();
    memcpy(copy, data, size);
    pthread_mutex_lock(&s->lock);
    free(s->answer);
    s->answer = copy;
    s->size = size;
    pthread_mutex_unlock(&s->lock);
}

unsigned long answer_server_count(struct answer_server *s)
{
    unsigned long n;

    pthread_mutex_lock(&s->lock);
    n = s->count;
    pthread_mutex_unlock(&s->lock);
    return n;
}

void answer_server_set_op(struct answer_server *s, const char *op, const char *body)
{
    static const char head[] =
        "HTTP/1.1 200 OK\r\nContent-Type: text/xml; charset=utf-8\r\n\r\n"
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<SOAP-ENV:Envelope xmlns:SOAP-ENV=\"http://schemas.xmlsoap.org/soap/envelope/\" "
        "xmlns:qcg=\"urn:qcg-connect:1\"><SOAP-ENV:Body>";
    static const char tail[] = "</SOAP-ENV:Body></SOAP-ENV:Envelope>";
    char *tag, *text;

    if (s->nops == ANSWER_SERVER_OPS || asprintf(&tag, "<qcg:%s", op) < 0)
        abort();
    if (asprintf(&text, "%s%s%s", head, body, tail) < 0)
        abort();
    pthread_mutex_lock(&s->lock);
    s->ops[s->nops].op = tag;
    s->ops[s->nops].text = text;
    s->nops++;
    pthread_mutex_unlock(&s->lock);
}
