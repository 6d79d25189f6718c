/* See tcp_stall.h. */
#include "tcp_stall.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

bool tcp_unacked(int fd)
{
    int queued = 0;

    return ioctl(fd, SIOCOUTQ, &queued) == 0 && queued > 0;
}

enum tcp_stall tcp_stall_check(int fd, uint64_t now_us, uint64_t timeout_us, uint64_t *since_us)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    uint64_t since, last_ack;

    if (!tcp_unacked(fd)) {
        *since_us = 0;
        return TCP_STALL_IDLE;
    }
    /* retransmits counts the RTOs of the oldest segment in flight (reset by
       an ACK that moves on): while it is 0 nothing is overdue. */
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 || ti.tcpi_unacked == 0 ||
        ti.tcpi_retransmits == 0) {
        *since_us = 0;
        return TCP_STALL_NO;
    }
    if (*since_us == 0)
        *since_us = now_us;
    last_ack = now_us - (uint64_t)ti.tcpi_last_ack_recv * 1000u;
    since = *since_us > last_ack ? *since_us : last_ack;
    return now_us - since >= timeout_us ? TCP_STALL_YES : TCP_STALL_NO;
}
