/* A socket BIO without SIGPIPE, that gathers records; see tls_bio.h.
   OpenSSL's own socket BIO writes with write(2): a peer gone would kill a
   process that never asked for signals; and it writes each record (16 KiB
   at most) with a system call of its own, which made encrypted throughput a
   third of plain on loopback.  Here records gather in a buffer sent when
   full and on BIO_flush (OpenSSL flushes each handshake flight, qcg_tls_send
   and qcg_tls_flush each call).  Control calls (the descriptor, kernel TLS)
   go to an inner socket BIO on the same descriptor. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "tls_bio.h"

/* Four full records. */
#define OUT_CAP (4 * (16384 + 256))

struct nosig {
    BIO *inner;
    int fd;
    /* The inner BIO's kernel TLS state, asked for several times a record:
       kept here, renewed when OpenSSL sets it. */
    bool ktls_send, ktls_recv;
    bool dontwait;      /* reads never block (tls_bio_dontwait) */
    unsigned char *out; /* OUT_CAP, allocated on the first write */
    size_t len, off;    /* gathered, of them sent */
};

static BIO_METHOD *method;
static pthread_once_t method_once = PTHREAD_ONCE_INIT;

static int again(int err)
{
    return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

/* Sends what is gathered: 1, or -1 (errno; the retry flag when EAGAIN). */
static int out_flush(BIO *b, struct nosig *st)
{
    while (st->off < st->len) {
        ssize_t n = send(st->fd, st->out + st->off, st->len - st->off, MSG_NOSIGNAL);

        if (n < 0) {
            if (again(errno))
                BIO_set_retry_write(b);
            return -1;
        }
        st->off += (size_t)n;
    }
    st->off = st->len = 0;
    return 1;
}

static int nosig_write(BIO *b, const char *buf, int len)
{
    struct nosig *st = BIO_get_data(b);

    BIO_clear_retry_flags(b);
    if (st->ktls_send) {
        int r = BIO_write(st->inner, buf, len);

        if (r <= 0 && BIO_should_retry(st->inner))
            BIO_set_retry_write(b);
        return r;
    }
    if (st->out == NULL && (st->out = malloc(OUT_CAP)) == NULL)
        return -1;
    if (st->len + (size_t)len > OUT_CAP && out_flush(b, st) < 0)
        return -1;
    if ((size_t)len > OUT_CAP) {
        ssize_t n = send(st->fd, buf, (size_t)len, MSG_NOSIGNAL);

        if (n < 0 && again(errno))
            BIO_set_retry_write(b);
        return (int)n;
    }
    memcpy(st->out + st->len, buf, (size_t)len);
    st->len += (size_t)len;
    return len;
}

static int nosig_read(BIO *b, char *buf, int len)
{
    struct nosig *st = BIO_get_data(b);
    ssize_t n;

    BIO_clear_retry_flags(b);
    if (st->ktls_recv) {
        int r = BIO_read(st->inner, buf, len);

        if (r <= 0 && BIO_should_retry(st->inner))
            BIO_set_retry_read(b);
        return r;
    }
    n = recv(st->fd, buf, (size_t)len, st->dontwait ? MSG_DONTWAIT : 0);
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
    struct nosig *st = BIO_get_data(b);
    long r;

    switch (cmd) {
    case BIO_CTRL_GET_KTLS_SEND:
        return st->ktls_send;
    case BIO_CTRL_GET_KTLS_RECV:
        return st->ktls_recv;
    case BIO_CTRL_FLUSH:
        BIO_clear_retry_flags(b);
        return out_flush(b, st);
    case BIO_CTRL_WPENDING:
        return (long)(st->len - st->off);
    case BIO_CTRL_EOF:
        return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
    default:
        r = BIO_ctrl(st->inner, cmd, num, ptr);
        /* 72-75: OpenSSL's internal kernel TLS controls (bio.h). */
        if (cmd >= 72 && cmd <= 75) {
            st->ktls_send = BIO_get_ktls_send(st->inner);
            st->ktls_recv = BIO_get_ktls_recv(st->inner);
        }
        return r;
    }
}

static int nosig_destroy(BIO *b)
{
    struct nosig *st = BIO_get_data(b);

    if (st != NULL) {
        BIO_free(st->inner);
        free(st->out);
        free(st);
    }
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
    struct nosig *st;
    BIO *b;

    if (pthread_once(&method_once, method_init) != 0 || method == NULL)
        return NULL;
    st = calloc(1, sizeof(*st));
    b = BIO_new(method);
    if (st == NULL || b == NULL || (st->inner = BIO_new_socket(fd, BIO_NOCLOSE)) == NULL) {
        free(st);
        BIO_free(b);
        return NULL;
    }
    st->fd = fd;
    BIO_set_data(b, st);
    BIO_set_init(b, 1);
    return b;
}

void tls_bio_dontwait(BIO *b, bool on)
{
    struct nosig *st = BIO_get_data(b);

    st->dontwait = on;
}
