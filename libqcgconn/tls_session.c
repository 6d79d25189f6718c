/* qcg_tls_*: I/O on an encrypted connection, with send(2)/recv(2)'s
   contract; qcg_conn_*: the same for callers that hold a socket and maybe
   a session.  See qcgconn.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>

#include "internal.h"
#include "tls_bio.h"
#include "tls_session.h"

struct qcg_tls *tls_session_new(SSL *ssl, unsigned encryption, bool unfinished)
{
    struct qcg_tls *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return NULL;
    t->ssl = ssl;
    t->encryption = encryption;
    t->unfinished = unfinished;
    if (unfinished)
        t->finish_by_us = now_us() + ACCEPT_HANDSHAKE_TIMEOUT_MS * 1000u;
    return t;
}

unsigned tls_session_encryption(SSL *ssl)
{
    unsigned encryption = QCG_CONN_TLS;

    if (BIO_get_ktls_send(SSL_get_wbio(ssl)))
        encryption |= QCG_CONN_KTLS_SEND;
    if (BIO_get_ktls_recv(SSL_get_rbio(ssl)))
        encryption |= QCG_CONN_KTLS_RECV;
    return encryption;
}

/* SSL_get_error needs an empty error queue before each call; emptying one
   that is empty already cost a third of an 8-byte record's CPU. */
static void clear_errors(void)
{
    if (ERR_peek_error() != 0)
        ERR_clear_error();
}

/* errno for a failed SSL_*_ex call; -1. */
static long io_failed(struct qcg_tls *t, int r, const char *what)
{
    int err = SSL_get_error(t->ssl, r), saved = errno;
    unsigned long e = ERR_peek_error();

    switch (err) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        ERR_clear_error();
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_SYSCALL:
        ERR_clear_error();
        if (saved != 0) {
            snprintf(t->err, sizeof(t->err), "%s: %s", what, strerror(saved));
            errno = saved;
            return -1;
        }
        snprintf(t->err, sizeof(t->err), "%s: the stream ended inside a record", what);
        errno = EPROTO;
        return -1;
    default:
        /* A record that does not authenticate, a truncated stream, a
           message we never allow (tickets, key updates). */
        snprintf(t->err, sizeof(t->err), "%s: %s", what,
                 e != 0 && ERR_reason_error_string(e) != NULL ? ERR_reason_error_string(e)
                                                              : "TLS protocol error");
        ERR_clear_error();
        errno = EPROTO;
        return -1;
    }
}

/* Whether fd blocks (the caller's choice: qcg_connect returns it so). */
static bool blocking(int fd)
{
    int flags = fcntl(fd, F_GETFL);

    return flags >= 0 && (flags & O_NONBLOCK) == 0;
}

/* An unfinished session (tls_session.h): takes the client's Finished,
   reading no further (read-ahead is off until then).  Unless block, only if
   it is in already (a send never waits for it); with block (a recv or a
   shutdown on a blocking socket), waits for it until finish_by_us.
   1 finished, 0 not yet (errno EAGAIN), -1 failed (errno, t->err;
   ETIMEDOUT past finish_by_us). */
static int finish(struct qcg_tls *t, bool block)
{
    BIO *rbio = SSL_get_rbio(t->ssl);
    int fd = SSL_get_fd(t->ssl);

    for (;;) {
        uint64_t now;
        int r, err;

        tls_bio_dontwait(rbio, true);
        r = SSL_do_handshake(t->ssl);
        tls_bio_dontwait(rbio, false);
        if (r == 1) {
            t->unfinished = false;
            SSL_set_read_ahead(t->ssl, 1);
            t->encryption = tls_session_encryption(t->ssl);
            return 1;
        }
        err = SSL_get_error(t->ssl, r);
        if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE)
            return (int)io_failed(t, r, "TLS handshake");
        ERR_clear_error();
        now = now_us();
        if (now >= t->finish_by_us) {
            snprintf(t->err, sizeof(t->err),
                     "the peer did not finish the TLS handshake within %d ms",
                     ACCEPT_HANDSHAKE_TIMEOUT_MS);
            errno = ETIMEDOUT;
            return -1;
        }
        if (!block) {
            errno = EAGAIN;
            return 0;
        }
        {
            struct pollfd p = {.fd = fd, .events = err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT};

            if (poll(&p, 1, (int)((t->finish_by_us - now) / 1000u) + 1) < 0 && errno != EINTR) {
                snprintf(t->err, sizeof(t->err), "TLS handshake: poll: %s", strerror(errno));
                return -1;
            }
        }
    }
}

/* Makes our close_notify, or writes it again once held: 0, or -1 with
   errno.  Once it is out, a second SSL_shutdown would wait for the peer's:
   never called then. */
static int bye(struct qcg_tls *t)
{
    int r = SSL_shutdown(t->ssl);

    /* Kept, not read from SSL_want_write: a read in between resets that. */
    t->bye_held = r < 0 && SSL_get_error(t->ssl, r) == SSL_ERROR_WANT_WRITE;
    /* 0: sent, the peer's not seen yet: that is all we want. */
    if (r < 0)
        return (int)io_failed(t, r, "TLS shutdown");
    return 0;
}

/* Sends what the session gathered: 0, or -1 with errno. */
static int bio_flush(struct qcg_tls *t)
{
    BIO *w = SSL_get_wbio(t->ssl);

    errno = 0;
    if (BIO_flush(w) > 0)
        return 0;
    if (BIO_should_retry(w))
        errno = EAGAIN;
    else if (errno == 0)
        errno = EIO;
    if (errno != EAGAIN)
        snprintf(t->err, sizeof(t->err), "TLS send: %s", strerror(errno));
    return -1;
}

/* ... and a close_notify held behind it. */
static int flush(struct qcg_tls *t)
{
    if (bio_flush(t) < 0)
        return -1;
    if (!t->bye_held)
        return 0;
    if (bye(t) < 0)
        return -1;
    return bio_flush(t);
}

/* Before the client's Finished: 0.5-RTT data (SSL_write_ex would wait for
   it).  OpenSSL's handshake buffer then sits in front of our BIO, out of
   qcg_tls_flush's reach, and is freed with whatever it holds when the
   Finished is taken; so records go in only while our BIO is empty, at most
   EARLY_MAX bytes a call: records that fit our BIO whole, which takes them
   all and keeps what the socket does not. */
#define EARLY_MAX (3 * 16384)

static long send_early(struct qcg_tls *t, const void *buf, size_t len)
{
    size_t n = 0;
    int r;

    if (flush(t) < 0)
        return -1;
    errno = 0;
    r = SSL_write_early_data(t->ssl, buf, len < EARLY_MAX ? len : EARLY_MAX, &n);
    if (r != 1)
        return io_failed(t, r, "TLS send");
    if (flush(t) < 0 && errno != EAGAIN)
        return -1;
    return (long)n;
}

/* Records (16 KiB each) gather in the session's BIO and leave in one
   send(2) per 64 KiB, the rest at the end. */
QCG_EXPORT long qcg_tls_send(qcg_tls *t, const void *buf, size_t len)
{
    size_t total = 0;
    int r = 1;

    if (t == NULL) {
        errno = EINVAL;
        return -1;
    }
    if (len == 0)
        return 0;
    clear_errors();
    if (t->unfinished && finish(t, false) < 0)
        return -1;
    if (t->unfinished)
        return send_early(t, buf, len);
    while (total < len) {
        size_t n = 0;

        errno = 0;
        r = SSL_write_ex(t->ssl, (const char *)buf + total, len - total, &n);
        if (r != 1)
            break;
        total += n;
    }
    if (total == 0)
        return io_failed(t, r, "TLS send");
    clear_errors();
    /* Taken: what the socket cannot take now waits for qcg_tls_flush. */
    if (flush(t) < 0 && errno != EAGAIN)
        return -1;
    return (long)total;
}

QCG_EXPORT int qcg_tls_flush(qcg_tls *t)
{
    if (t == NULL) {
        errno = EINVAL;
        return -1;
    }
    return flush(t);
}

/* qcg_tls_recv on an unfinished session: the Finished first, then what
   the socket holds now.  The Finished alone makes the socket readable, and
   a caller that polled would block in its read for data that may never
   come: on a blocking socket that is -1 with EINTR (call again, as after a
   signal), on a non-blocking one EAGAIN. */
static long recv_finished(struct qcg_tls *t, void *buf, size_t len)
{
    BIO *rbio = SSL_get_rbio(t->ssl);
    bool block = blocking(SSL_get_fd(t->ssl));
    size_t n = 0;
    int r = finish(t, block);

    t->starved = r == 0;
    if (r <= 0)
        return -1;
    tls_bio_dontwait(rbio, true);
    errno = 0;
    r = SSL_read_ex(t->ssl, buf, len, &n);
    tls_bio_dontwait(rbio, false);
    if (r == 1)
        return (long)n;
    if (SSL_get_error(t->ssl, r) == SSL_ERROR_ZERO_RETURN)
        return 0;
    (void)io_failed(t, r, "TLS receive");
    if (errno != EAGAIN)
        return -1;
    t->starved = true;
    errno = block ? EINTR : EAGAIN;
    return -1;
}

QCG_EXPORT long qcg_tls_recv(qcg_tls *t, void *buf, size_t len)
{
    size_t n = 0;
    int r;

    if (t == NULL) {
        errno = EINVAL;
        return -1;
    }
    clear_errors();
    if (t->unfinished)
        return recv_finished(t, buf, len);
    errno = 0;
    r = SSL_read_ex(t->ssl, buf, len, &n);
    t->starved = r != 1 && SSL_get_error(t->ssl, r) == SSL_ERROR_WANT_READ;
    if (r == 1)
        return (long)n;
    if (SSL_get_error(t->ssl, r) == SSL_ERROR_ZERO_RETURN)
        return 0;
    return io_failed(t, r, "TLS receive");
}

QCG_EXPORT size_t qcg_tls_pending(const qcg_tls *t)
{
    int n;

    if (t == NULL)
        return 0;
    n = SSL_pending(t->ssl);
    if (n > 0)
        return (size_t)n;
    /* Records read ahead but not decrypted yet count as one byte; part of
       one, after a read that wanted more, as none: the socket will say. */
    return t->starved ? 0 : (size_t)SSL_has_pending(t->ssl);
}

QCG_EXPORT size_t qcg_tls_unsent(const qcg_tls *t)
{
    if (t == NULL)
        return 0;
    /* Our BIO's backlog (before the Finished too: SSL_get_wbio skips the
       handshake buffer, which send_early leaves empty); a held close_notify
       counts as one byte. */
    return BIO_ctrl_wpending(SSL_get_wbio(t->ssl)) + (t->bye_held ? 1 : 0);
}

QCG_EXPORT int qcg_tls_shutdown(qcg_tls *t)
{
    if (t == NULL) {
        errno = EINVAL;
        return -1;
    }
    ERR_clear_error();
    /* No close_notify before the client's Finished (OpenSSL refuses). */
    if (t->unfinished && finish(t, blocking(SSL_get_fd(t->ssl))) != 1) {
        if (t->err[0] == '\0')
            snprintf(t->err, sizeof(t->err),
                     "TLS shutdown: the peer has not finished the handshake");
        return -1;
    }
    if ((SSL_get_shutdown(t->ssl) & SSL_SENT_SHUTDOWN) == 0 && bye(t) < 0)
        return -1;
    return flush(t);
}

QCG_EXPORT const char *qcg_tls_error(const qcg_tls *t)
{
    return t == NULL ? "" : t->err;
}

QCG_EXPORT void qcg_tls_free(qcg_tls *t)
{
    if (t == NULL)
        return;
    SSL_free(t->ssl);
    free(t);
}

/* Every caller holding a socket and maybe a session wrote this choice. */
QCG_EXPORT long qcg_conn_send(int fd, qcg_tls *tls, const void *buf, size_t len)
{
    if (tls != NULL)
        return qcg_tls_send(tls, buf, len);
    return (long)send(fd, buf, len, MSG_NOSIGNAL);
}

QCG_EXPORT long qcg_conn_recv(int fd, qcg_tls *tls, void *buf, size_t len)
{
    if (tls != NULL)
        return qcg_tls_recv(tls, buf, len);
    return (long)recv(fd, buf, len, 0);
}

QCG_EXPORT const char *qcg_conn_strerror(const qcg_tls *tls, int err)
{
    /* EPROTO from a session: what in the TLS stream was wrong. */
    if (tls != NULL && err == EPROTO && qcg_tls_error(tls)[0] != '\0')
        return qcg_tls_error(tls);
    return strerror(err);
}

QCG_EXPORT const char *qcg_encryption_name(unsigned encryption)
{
    if ((encryption & QCG_CONN_TLS) == 0)
        return "plain";
    if ((encryption & (QCG_CONN_KTLS_SEND | QCG_CONN_KTLS_RECV)) ==
        (QCG_CONN_KTLS_SEND | QCG_CONN_KTLS_RECV))
        return "tls-kernel";
    if (encryption & QCG_CONN_KTLS_SEND)
        return "tls-kernel-send";
    return "tls-user";
}

QCG_EXPORT int qcg_encrypt_parse(const char *mode)
{
    if (mode == NULL)
        return QCG_EINVAL;
    if (strcmp(mode, "inter-site") == 0)
        return QCG_ENCRYPT_INTER_SITE;
    if (strcmp(mode, "always") == 0)
        return QCG_ENCRYPT_ALWAYS;
    if (strcmp(mode, "never") == 0)
        return QCG_ENCRYPT_NEVER;
    return QCG_EINVAL;
}
