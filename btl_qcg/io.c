/* A channel's bytes: the plain socket, or an encrypted connection's
   libqcgconn session (see btl_qcg.h).  Frames are written in batches of
   iovecs; for the session a batch is gathered once into the staging buffer
   and leaves as TLS records of up to 16 KiB, so that a frame header and its
   payload share a record instead of making one each.  A staged batch is
   never changed before it is sent: OpenSSL wants a write it could not finish
   repeated with the same bytes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "btl_qcg.h"

/* A staged batch at most: four records. */
#define STAGE_MAX (64 * 1024)

int btl_qcg_io_drain(struct btl_qcg_endpoint *ep)
{
    if (ep->tls == NULL)
        return 0;
    while (ep->tls_out_off < ep->tls_out_len) {
        long n =
            qcg_tls_send(ep->tls, ep->tls_out + ep->tls_out_off, ep->tls_out_len - ep->tls_out_off);

        if (n < 0)
            return -1;
        ep->tls_out_off += (size_t)n;
    }
    ep->tls_out_off = ep->tls_out_len = 0;
    /* Taken by the session, maybe not sent yet. */
    return qcg_tls_flush(ep->tls);
}

bool btl_qcg_io_staged(const struct btl_qcg_endpoint *ep)
{
    return ep->tls_out_off < ep->tls_out_len || qcg_tls_unsent(ep->tls) > 0;
}

ssize_t btl_qcg_io_writev(struct btl_qcg_endpoint *ep, const struct iovec *iov, size_t n)
{
    struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = n};
    size_t staged = 0;

    if (ep->tls == NULL)
        return sendmsg(ep->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (btl_qcg_io_drain(ep) < 0)
        return -1;
    if (ep->tls_out == NULL && (ep->tls_out = malloc(STAGE_MAX)) == NULL) {
        errno = ENOMEM;
        return -1;
    }
    for (size_t i = 0; i < n && staged < STAGE_MAX; i++) {
        size_t take = iov[i].iov_len < STAGE_MAX - staged ? iov[i].iov_len : STAGE_MAX - staged;

        memcpy(ep->tls_out + staged, iov[i].iov_base, take);
        staged += take;
    }
    ep->tls_out_len = staged;
    /* Staged bytes are written: what the session cannot take now goes on
       the next EPOLLOUT (flush drains first). */
    if (btl_qcg_io_drain(ep) < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        return -1;
    return (ssize_t)staged;
}

ssize_t btl_qcg_io_recv(struct btl_qcg_endpoint *ep, void *buf, size_t len)
{
    return qcg_conn_recv(ep->fd, ep->tls, buf, len);
}

bool btl_qcg_io_pending(const struct btl_qcg_endpoint *ep)
{
    return ep->tls != NULL && qcg_tls_pending(ep->tls) > 0;
}

void btl_qcg_io_end(struct btl_qcg_endpoint *ep)
{
    if (ep->tls != NULL && btl_qcg_io_drain(ep) == 0)
        (void)qcg_tls_shutdown(ep->tls);
}

void btl_qcg_io_free(struct btl_qcg_endpoint *ep)
{
    qcg_tls_free(ep->tls);
    ep->tls = NULL;
    free(ep->tls_out);
    ep->tls_out = NULL;
    ep->tls_out_len = ep->tls_out_off = 0;
}
