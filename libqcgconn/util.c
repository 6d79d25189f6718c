/* Socket options and randomness used throughout the library. */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <openssl/rand.h>

#include "internal.h"

int conn_set_options(int fd, bool keepalive)
{
    int one = 1;

    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
        return -1;
    if (keepalive) {
        /* Well under NAT and firewall idle timeouts, so idle links live; a
           probe after 20 s of silence also makes a NAT that forgot the
           connection map it again for an end that only receives, and a dead
           path is noticed in 40 s (was 60 + 6 x 10).  It costs an idle
           connection a probe and its answer per 20 s (1000 of them: 100
           packets/s).  No TCP_USER_TIMEOUT: it also aborts a connection
           whose reader pauses longer (a zero window); btl_qcg notices a
           silent path itself (btl_qcg_stall_timeout). */
        int idle = 20, intvl = 5, cnt = 4;

        if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) < 0 ||
            setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) < 0 ||
            setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) < 0 ||
            setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) < 0)
            return -1;
    }
    return 0;
}

int random_bytes(void *buf, size_t len)
{
    return RAND_bytes(buf, (int)len) == 1 ? 0 : -1;
}
