/* libFuzzer harness for the SOAP server (common/soap_server.c) with the
   broker's real operations (broker/service.c) in this process, fed raw bytes
   over loopback TCP as any host that reaches the broker's port could send
   them: a TLS handshake of its own, or, after a real mutual-TLS handshake
   with a certificate of the grid, an HTTP request (headers, SOAP envelope).
   The certificates come from certs/qcg-certs in a directory of its own; the
   server listens on an ephemeral port of 127.0.0.1.

   Input: byte 0 % 3 picks how the rest is sent:
     0: as it is, on a plain TCP connection (the server expects TLS);
     1: inside TLS as frontend "nata";
     2: inside TLS as helper "nata/nata1".
   Then the harness half-closes and reads the answer until the server closes
   (at most READ_MS). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "broker.h"
#include "fuzz.h"
#include "log.h"
#include "soap_server.h"

#define READ_MS 3000
/* A try at a handshake waits as long as the server's own I/O timeout
   (SERVER_IO_TIMEOUT). */
#define HANDSHAKE_S 10
#define HANDSHAKE_TRIES 3

static char dir[] = "/tmp/qcg-fuzz-soap-XXXXXX";
static SSL_CTX *as_frontend, *as_helper;
static int port;
static struct broker *broker;
static struct soap_server *server;
static pthread_t server_thread;

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz-soap: could not remove %s\n", dir);
}

static SSL_CTX *client_ctx(const char *pem)
{
    char ca[96], path[128];
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    snprintf(path, sizeof(path), "%s/%s", dir, pem);
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

static void *serve(void *srv)
{
    soap_server_run(srv);
    return NULL;
}

/* At exit, before LeakSanitizer's last look: the server stopped and its
   connection threads ended (bounded by soap_server_run), so that what is
   left is a leak, not a request in flight. */
static void stop_server(void)
{
    soap_server_stop(server);
    pthread_join(server_thread, NULL);
    soap_server_free(server);
    broker_free(broker);
    SSL_CTX_free(as_frontend);
    SSL_CTX_free(as_helper);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char cmd[512], err[512], ca[96], pem[128];

    (void)argc;
    (void)argv;
    /* As qcg-broker does (daemon_signals): a peer gone mid-write is an
       error of that write, not the end of the process. */
    signal(SIGPIPE, SIG_IGN);
    if (mkdtemp(dir) == NULL)
        abort();
    atexit(remove_dir);
    snprintf(cmd, sizeof(cmd),
             "t=%s; d=%s; exec >/dev/null 2>&1; $t --dir $d init && "
             "$t --dir $d issue broker --san 127.0.0.1 && "
             "$t --dir $d issue frontend nata && $t --dir $d issue helper nata/nata1",
             QCG_CERTS_TOOL, dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "fuzz-soap: %s failed\n", QCG_CERTS_TOOL);
        abort();
    }
    /* Errors only: the server logs every refused request. */
    log_init("broker", LOG_LEVEL_ERROR, false);
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    snprintf(pem, sizeof(pem), "%s/broker-broker.pem", dir);
    broker = broker_new(1000, "broker", 600);
    struct soap_server_config sc = {.listen_addr = "127.0.0.1",
                                    .port = 0,
                                    .tls = {.ca = ca, .certkey = pem},
                                    .max_connections = 64,
                                    .user = broker};
    server = broker != NULL ? soap_server_new(&sc, err, sizeof(err)) : NULL;
    if (server == NULL) {
        fprintf(stderr, "fuzz-soap: %s\n", err);
        abort();
    }
    port = soap_server_port(server);
    as_frontend = client_ctx("frontend-nata.pem");
    as_helper = client_ctx("helper-nata-nata1.pem");
    if (pthread_create(&server_thread, NULL, serve, server) != 0)
        abort();
    atexit(stop_server);
    return 0;
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
        fprintf(stderr, "fuzz-soap: connect: %s\n", strerror(errno));
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
    fprintf(stderr, "fuzz-soap: the server did not answer %d tries of %d s\n", HANDSHAKE_TRIES,
            HANDSHAKE_S);
    abort();
}

static void plain(const uint8_t *data, size_t size)
{
    char buf[4096];
    SSL *none;
    int fd = reach_server(NULL, &none);
    long end = now_ms() + READ_MS;

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
    long end = now_ms() + READ_MS;

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
    if (size == 0)
        return 0;
    switch (data[0] % 3) {
    case 0:
        plain(data + 1, size - 1);
        break;
    case 1:
        in_tls(as_frontend, data + 1, size - 1);
        break;
    default:
        in_tls(as_helper, data + 1, size - 1);
        break;
    }
    return 0;
}
