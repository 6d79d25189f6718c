/* See soap_feed.h. */
#include "soap_feed.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "certs.h"
#include "fuzz.h"
#include "log.h"
#include "soap_server.h"

/* A try at a handshake waits as long as the server's own I/O timeout
   (SERVER_IO_TIMEOUT). */
#define HANDSHAKE_S 10
#define HANDSHAKE_TRIES 3
#define CLIENTS_MAX 4

static SSL_CTX *clients[CLIENTS_MAX];
static int nclients;
static int port;
static struct soap_server *server;
static pthread_t server_thread;
static void *server_user;
static void (*server_stopped)(void *);

static SSL_CTX *client_ctx(const char *pem)
{
    const char *ca = certs_path("ca.crt"), *path = certs_path(pem);
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

    if (ctx == NULL || SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1 ||
        SSL_CTX_use_certificate_chain_file(ctx, path) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, path, SSL_FILETYPE_PEM) != 1) {
        ERR_print_errors_fp(stderr);
        abort();
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    return ctx;
}

void soap_feed_clients(const char *const *pem)
{
    for (nclients = 0; pem[nclients] != NULL; nclients++) {
        if (nclients == CLIENTS_MAX)
            abort();
        clients[nclients] = client_ctx(pem[nclients]);
    }
}

static void *serve(void *srv)
{
    soap_server_run(srv);
    return NULL;
}

/* At exit, before LeakSanitizer's last look (bounded by soap_server_run). */
static void stop_server(void)
{
    soap_server_stop(server);
    pthread_join(server_thread, NULL);
    soap_server_free(server);
    if (server_stopped != NULL)
        server_stopped(server_user);
    for (int i = 0; i < nclients; i++)
        SSL_CTX_free(clients[i]);
}

void soap_feed_serve(const char *pem, enum served_role role, void *user,
                     void (*stopped)(void *user))
{
    char err[512];
    struct soap_server_config sc = {.listen_addr = "127.0.0.1",
                                    .port = 0,
                                    .tls = {.ca = certs_path("ca.crt"), .certkey = certs_path(pem)},
                                    .max_connections = 64,
                                    .role = role,
                                    .user = user};

    server = soap_server_new(&sc, err, sizeof(err));
    if (server == NULL) {
        fprintf(stderr, "fuzz: %s\n", err);
        abort();
    }
    server_user = user;
    server_stopped = stopped;
    port = soap_server_port(server);
    if (pthread_create(&server_thread, NULL, serve, server) != 0)
        abort();
    atexit(stop_server);
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* How long one send or receive on fd may block. */
static void set_timeout(int fd, int seconds)
{
    struct timeval tv = {.tv_sec = seconds};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* A TCP connection to the server, or -1. */
static int connect_server(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0)
        abort();
    set_timeout(fd, HANDSHAKE_S);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        fprintf(stderr, "fuzz: connect: %s\n", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* A connection to the server, inside TLS with ctx's certificate unless ctx
   is NULL, or abort: HANDSHAKE_TRIES tries of HANDSHAKE_S for the connect
   and as much for the handshake (a loaded machine may starve one), so that
   only a server that stopped serving fails the run.  *ssl is NULL without
   TLS.  Reads wait at most a second each afterwards. */
static int reach_server(SSL_CTX *ctx, SSL **ssl)
{
    *ssl = NULL;
    for (int i = 0; i < HANDSHAKE_TRIES; i++) {
        int fd = connect_server();
        if (fd < 0)
            continue;
        if (ctx != NULL) {
            *ssl = SSL_new(ctx);
            if (*ssl == NULL || SSL_set_fd(*ssl, fd) != 1)
                abort();
            if (SSL_connect(*ssl) != 1) {
                ERR_print_errors_fp(stderr);
                SSL_free(*ssl);
                *ssl = NULL;
                close(fd);
                continue;
            }
        }
        set_timeout(fd, 1);
        return fd;
    }
    fprintf(stderr, "fuzz: the server did not answer %d tries of %d s\n", HANDSHAKE_TRIES,
            HANDSHAKE_S);
    abort();
}

static void plain(const uint8_t *data, size_t size)
{
    char buf[4096];
    SSL *none;
    int fd = reach_server(NULL, &none);
    long end = now_ms() + SOAP_FEED_READ_MS;

    if (size > 0 && send(fd, data, size, MSG_NOSIGNAL) < 0) {
        close(fd);
        return;
    }
    shutdown(fd, SHUT_WR);
    while (now_ms() < end && recv(fd, buf, sizeof(buf), 0) > 0)
        ;
    close(fd);
}

static void in_tls(SSL_CTX *ctx, const uint8_t *data, size_t size)
{
    char buf[4096];
    SSL *ssl;
    int fd = reach_server(ctx, &ssl);
    long end = now_ms() + SOAP_FEED_READ_MS;

    if (size == 0 || SSL_write(ssl, data, (int)size) > 0) {
        /* close_notify: the server reads the end of the request. */
        SSL_shutdown(ssl);
        while (now_ms() < end && SSL_read(ssl, buf, sizeof(buf)) > 0)
            ;
    }
    SSL_free(ssl);
    close(fd);
    ERR_clear_error();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int how;

    if (size == 0)
        return 0;
    how = data[0] % (1 + nclients);
    if (how == 0)
        plain(data + 1, size - 1);
    else
        in_tls(clients[how - 1], data + 1, size - 1);
    return 0;
}
