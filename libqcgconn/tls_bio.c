/* A socket BIO without SIGPIPE; see tls_bio.h.  OpenSSL's own socket BIO
   writes with write(2): a peer gone would kill a process that never asked
   for signals.  Control calls (the descriptor, kernel TLS) go to an inner
   socket BIO on the same descriptor. */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>

#include "tls_bio.h"

static BIO_METHOD *method;
static pthread_once_t method_once = PTHREAD_ONCE_INIT;

static int sock_fd(BIO *inner)
{
    int fd = -1;

    BIO_get_fd(inner, &fd);
    return fd;
}

static int again(int err)
{
    return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

static int nosig_write(BIO *b, const char *buf, int len)
{
    BIO *inner = BIO_get_data(b);
    ssize_t n;

    BIO_clear_retry_flags(b);
    if (BIO_get_ktls_send(inner)) {
        int r = BIO_write(inner, buf, len);

        if (r <= 0 && BIO_should_retry(inner))
            BIO_set_retry_write(b);
        return r;
    }
    n = send(sock_fd(inner), buf, (size_t)len, MSG_NOSIGNAL);
    if (n < 0 && again(errno))
        BIO_set_retry_write(b);
    return (int)n;
}

static int nosig_read(BIO *b, char *buf, int len)
{
    BIO *inner = BIO_get_data(b);
    ssize_t n;

    BIO_clear_retry_flags(b);
    if (BIO_get_ktls_recv(inner)) {
        int r = BIO_read(inner, buf, len);

        if (r <= 0 && BIO_should_retry(inner))
            BIO_set_retry_read(b);
        return r;
    }
    n = recv(sock_fd(inner), buf, (size_t)len, 0);
    if (n < 0 && again(errno))
        BIO_set_retry_read(b);
    if (n == 0)
        BIO_set_flags(b, BIO_FLAGS_IN_EOF);
    return (int)n;
}

static int nosig_puts(BIO *b, const char *s)
{
    return nosig_write(b, s, (int)strlen(s));
}

static long nosig_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    BIO *inner = BIO_get_data(b);

    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_CTRL_EOF:
        return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
    default:
        return inner != NULL ? BIO_ctrl(inner, cmd, num, ptr) : 0;
    }
}

static int nosig_destroy(BIO *b)
{
    BIO_free(BIO_get_data(b));
    BIO_set_data(b, NULL);
    return 1;
}

static void method_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                                 "qcg socket");

    if (m == NULL || BIO_meth_set_write(m, nosig_write) != 1 ||
        BIO_meth_set_read(m, nosig_read) != 1 || BIO_meth_set_puts(m, nosig_puts) != 1 ||
        BIO_meth_set_ctrl(m, nosig_ctrl) != 1 || BIO_meth_set_destroy(m, nosig_destroy) != 1) {
        BIO_meth_free(m);
        return;
    }
    method = m;
}

BIO *tls_bio_new(int fd)
{
    BIO *b, *inner;

    if (pthread_once(&method_once, method_init) != 0 || method == NULL)
        return NULL;
    inner = BIO_new_socket(fd, BIO_NOCLOSE);
    b = BIO_new(method);
    if (inner == NULL || b == NULL) {
        BIO_free(inner);
        BIO_free(b);
        return NULL;
    }
    BIO_set_data(b, inner);
    BIO_set_init(b, 1);
    return b;
}
