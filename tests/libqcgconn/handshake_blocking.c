/* The blocking handshake of the tests' peers; see handshake_blocking.h. */
#include "handshake_blocking.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <unistd.h>

#include "internal.h"

static int io_error(int rc, const char *what, char *err, size_t errlen)
{
    switch (rc) {
    case QCG_ETIMEDOUT:
        snprintf(err, errlen, "handshake: timed out %s", what);
        break;
    case QCG_EPEER:
        snprintf(err, errlen, "handshake: the peer hung up %s", what);
        break;
    default:
        snprintf(err, errlen, "handshake: %s: %m", what);
        break;
    }
    return rc;
}

int hs_initiate(int fd, const struct hs_self *self, int32_t to_rank, uint64_t deadline_us,
                char *err, size_t errlen)
{
    uint8_t hello[HS_HELLO_SIZE], answer[HS_ACCEPT_SIZE];
    struct hs_hello h;
    const char *why = "";
    int rc;

    if (hs_hello_build(hello, &h, self, to_rank, NULL) < 0) {
        snprintf(err, errlen, "handshake: cannot build the hello");
        return QCG_ESYS;
    }
    if ((rc = write_full(fd, hello, sizeof(hello), deadline_us)) < 0)
        return io_error(rc, "sending the hello", err, errlen);
    if ((rc = read_full(fd, answer, sizeof(answer), deadline_us)) < 0)
        return io_error(rc, "waiting for the answer", err, errlen);
    if ((rc = hs_accept_check(answer, &h, self->secret, &why)) < 0) {
        snprintf(err, errlen, "handshake: %s", why);
        return rc;
    }
    return 0;
}

int hs_respond(int fd, const struct hs_self *self, uint64_t deadline_us, struct hs_hello *peer,
               char *err, size_t errlen)
{
    uint8_t hello[HS_HELLO_SIZE], answer[HS_ACCEPT_SIZE];
    enum hs_status st;
    int rc;

    if ((rc = read_full(fd, hello, sizeof(hello), deadline_us)) < 0)
        return io_error(rc, "waiting for the hello", err, errlen);
    st = hs_hello_check(hello, self, peer);
    if (st == HS_OK && self->nonce_seen != NULL && self->nonce_seen(self->nonce_arg, peer->nonce))
        st = HS_REPLAY;
    hs_accept_build(answer, st, peer, self->secret);
    /* The refusal is best effort: the connection is closed anyway. */
    rc = write_full(fd, answer, sizeof(answer), deadline_us);
    if (st != HS_OK) {
        snprintf(err, errlen, "handshake: refused a hello (from rank %d): %s", peer->from_rank,
                 hs_status_name(st));
        return st == HS_DENIED ? QCG_EDENIED : QCG_EPROTO;
    }
    if (rc < 0)
        return io_error(rc, "sending the answer", err, errlen);
    return 0;
}
