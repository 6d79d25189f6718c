/* Sending and receiving a descriptor with a message over a Unix stream socket
   (SCM_RIGHTS).  Used by qcg-helper to hand connected sockets to processes,
   and by libqcgconn to receive them. */
#ifndef QCG_FDPASS_H
#define QCG_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

/* Sends up to len bytes of buf on sock with the descriptor fd (-1 = none)
   attached to the first byte; MSG_NOSIGNAL, retried on EINTR.  Returns the
   bytes sent (short on a non-blocking socket: send the rest without the fd),
   or -1 with errno set. */
ssize_t fdpass_send(int sock, const void *buf, size_t len, int fd);

/* Receives up to len bytes and at most one descriptor into *fd (-1 if none,
   close-on-exec set).  Extra descriptors are closed.  Truncated control data
   (MSG_CTRUNC) closes whatever arrived and fails with errno EPROTO.  Returns
   the bytes read (0 at EOF), or -1 with errno set (EAGAIN on an empty
   non-blocking socket). */
ssize_t fdpass_recv(int sock, void *buf, size_t len, int *fd);

#endif
