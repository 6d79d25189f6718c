/*
 * A TCP connection whose peer's host acknowledges nothing: data in flight,
 * its oldest segment retransmitted, and no ACK of any kind (not even to a
 * window probe) for a while.  A NAT or stateful firewall on the way that
 * forgot the connection drops what comes back without a reset, so only the
 * sender's kernel knows.  The kernel's view (TCP_INFO), not the
 * application's acks: a peer whose process computes and reads nothing still
 * acks in its kernel, and answers window probes while its buffer is full,
 * so neither counts (TCP_USER_TIMEOUT would abort such a zero window too).
 * Used by btl_qcg on its channels and by qcg-proxy on both legs of a pair.
 */
#ifndef QCG_TCP_STALL_H
#define QCG_TCP_STALL_H

#include <stdbool.h>
#include <stdint.h>

enum tcp_stall {
    TCP_STALL_IDLE = -1, /* nothing written is unacknowledged */
    TCP_STALL_NO = 0,    /* in flight, acknowledged lately or not overdue */
    TCP_STALL_YES = 1,   /* nothing acknowledged for timeout_us */
};

/* Whether fd holds bytes written and not acknowledged by the peer's kernel,
   sent or not (a zero window's too: the kernel sends them later without
   us). */
bool tcp_unacked(int fd);

/* fd's state at now_us (a monotonic clock in microseconds).  *since_us (0
   at first) is the caller's per-connection memory: the first call that
   found data overdue; the stall runs from it or from the last ACK, the
   later, so that an idle connection's old last ACK does not count. */
enum tcp_stall tcp_stall_check(int fd, uint64_t now_us, uint64_t timeout_us, uint64_t *since_us);

#endif
