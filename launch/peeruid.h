/* Who is on the other end of a loopback TCP connection: TCP has no
   SO_PEERCRED, but the kernel's socket table (NETLINK_SOCK_DIAG) knows the
   owner of the connecting socket.  The agent takes runtime connections only
   from processes of its own user. */
#ifndef QCG_LAUNCH_PEERUID_H
#define QCG_LAUNCH_PEERUID_H

#include <sys/types.h>

/* The uid owning the peer socket of fd (an accepted IPv4 TCP connection on
   this host): 0 with *uid set, or -1 with errno (ENOENT: the peer is gone
   or not local). */
int tcp_peer_uid(int fd, uid_t *uid);

#endif
