/* The blocking handshake of the tests' peers; see handshake_blocking.h. */
#include "handshake_blocking.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "tls_psk.h"

/* Runs t to its end; 0 or an error (err filled). */
static int run(struct tls_hs *t, bool claim, uint64_t deadline_us, struct hs_hello *peer,
               qcg_tls **session, char *err, size_t errlen)
{
    qcg_tls *s = NULL;
    unsigned enc;

    for (;;) {
        int rc = tls_hs_step(t);

        if (peer != NULL && rc != TLS_WANT_READ && rc != TLS_WANT_WRITE)
            *peer = *tls_hs_peer(t);
        if (rc == TLS_CLAIM) {
            tls_hs_claim(t, claim, true);
            continue;
        }
        if (rc == TLS_DONE)
            break;
        if (rc < 0) {
            snprintf(err, errlen, "handshake: %s", tls_hs_why(t));
            tls_hs_free(t);
            return rc;
        }
        if (now_us() >= deadline_us) {
            snprintf(err, errlen, "handshake: timed out");
            tls_hs_free(t);
            return QCG_ETIMEDOUT;
        }
        {
            struct pollfd q = {.fd = tls_hs_fd(t),
                               .events = rc == TLS_WANT_READ ? POLLIN : POLLOUT};

            (void)poll(&q, 1, (int)((deadline_us - now_us()) / 1000u) + 1);
        }
    }
    if (tls_hs_take(t, &s, &enc) < 0) {
        snprintf(err, errlen, "handshake: out of memory");
        return QCG_ENOMEM;
    }
    if (session != NULL)
        *session = s;
    else
        qcg_tls_free(s);
    return 0;
}

void hs_tls_self(const struct hs_self *self, struct tls_self *ts, uint8_t psk[TLS_PSK_SIZE])
{
    ts->job = self->job;
    ts->rank = self->rank;
    ts->cluster = self->cluster;
    ts->policy = self->policy;
    ts->psk = psk;
    ts->ssl_ctx = tls_ctx_new();
    if (ts->ssl_ctx == NULL || tls_psk_derive(psk, self->secret, self->job) < 0)
        memset(psk, 0, TLS_PSK_SIZE);
}

int hs_initiate_ex(int fd, const struct hs_self *self, int32_t to_rank, const char *token,
                   bool encrypt, uint64_t deadline_us, qcg_tls **session, char *err, size_t errlen)
{
    uint8_t psk[TLS_PSK_SIZE];
    struct tls_self ts;
    struct tls_hs *t;
    int rc;

    if (session != NULL)
        *session = NULL;
    hs_tls_self(self, &ts, psk);
    if (set_nonblocking(fd, true) < 0 ||
        (t = tls_hs_client(&ts, fd, to_rank, token, 0, encrypt, err, errlen)) == NULL) {
        SSL_CTX_free(ts.ssl_ctx);
        return QCG_ESYS;
    }
    rc = run(t, false, deadline_us, NULL, session, err, errlen);
    SSL_CTX_free(ts.ssl_ctx);
    return rc;
}

int hs_initiate(int fd, const struct hs_self *self, int32_t to_rank, uint64_t deadline_us,
                char *err, size_t errlen)
{
    return hs_initiate_ex(fd, self, to_rank, NULL, false, deadline_us, NULL, err, errlen);
}

int hs_respond_ex(int fd, const struct hs_self *self, bool claim, uint64_t deadline_us,
                  struct hs_hello *peer, qcg_tls **session, char *err, size_t errlen)
{
    uint8_t psk[TLS_PSK_SIZE];
    struct tls_self ts;
    struct tls_hs *t;
    int rc;

    if (session != NULL)
        *session = NULL;
    memset(peer, 0, sizeof(*peer));
    hs_tls_self(self, &ts, psk);
    if (set_nonblocking(fd, true) < 0 || (t = tls_hs_server(&ts, fd, -1, err, errlen)) == NULL) {
        SSL_CTX_free(ts.ssl_ctx);
        return QCG_ESYS;
    }
    rc = run(t, claim, deadline_us, peer, session, err, errlen);
    SSL_CTX_free(ts.ssl_ctx);
    return rc;
}

int hs_respond(int fd, const struct hs_self *self, uint64_t deadline_us, struct hs_hello *peer,
               char *err, size_t errlen)
{
    return hs_respond_ex(fd, self, true, deadline_us, peer, NULL, err, errlen);
}

int hs_step_until(struct tls_hs *t, int limit_ms)
{
    uint64_t end = now_us() + (uint64_t)limit_ms * 1000u;

    for (;;) {
        int rc = tls_hs_step(t);
        struct pollfd q = {.fd = tls_hs_fd(t), .events = rc == TLS_WANT_READ ? POLLIN : POLLOUT};

        if ((rc != TLS_WANT_READ && rc != TLS_WANT_WRITE) || now_us() >= end)
            return rc;
        (void)poll(&q, 1, 50);
    }
}

struct tls_hs *hs_serve(int fd, const struct hs_self *self, struct tls_self *ts,
                        uint8_t psk[TLS_PSK_SIZE], int *rc)
{
    char why[256];
    struct tls_hs *t;

    hs_tls_self(self, ts, psk);
    if ((t = tls_hs_server(ts, fd, -1, why, sizeof(why))) == NULL)
        return NULL;
    *rc = hs_step_until(t, 2000);
    if (*rc == TLS_CLAIM) {
        tls_hs_claim(t, true, true);
        *rc = hs_step_until(t, 200);
    }
    return t;
}

struct tls_hs *hs_reversed_hello(int sp[2], const struct hs_self *self, int32_t to_rank,
                                 const char *token, int offer, struct tls_self *cs,
                                 uint8_t psk[TLS_PSK_SIZE])
{
    struct tls_hs *c;
    char why[256];

    hs_tls_self(self, cs, psk);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) < 0)
        return NULL;
    c = tls_hs_client(cs, sp[0], to_rank, token, QCG_TECH_REVERSED, offer, why, sizeof(why));
    if (c != NULL && tls_hs_step(c) == TLS_WANT_READ)
        return c;
    tls_hs_free(c);
    close(sp[0]);
    close(sp[1]);
    return NULL;
}
