/*
 * The queue behind a long-poll: commands for one downstream service (a
 * frontend at the broker, a helper at the frontend), numbered, kept until
 * acknowledged, so a poll that times out or a connection that drops loses
 * nothing.  Thread-safe; waiters block on a condition variable.
 */
#ifndef QCG_CMDQUEUE_H
#define QCG_CMDQUEUE_H

#include <stddef.h>
#include <stdint.h>
#include "proto.h"

struct command {
    uint64_t seq;  /* set by cmdqueue_push */
    char kind[16]; /* "invalidate", "flush", "connect-back", "proxy-connect",
                      "punch", "inject", "probe-listen" */
    char job[QCG_JOB_MAX];
    int rank;
    char node[QCG_NAME_MAX];
    char address[QCG_ADDR_MAX];
    int port;
    char token[QCG_TOKEN_MAX];
    int peer_rank;                   /* connect-back, proxy-connect, punch, inject: the initiator */
    char packet[QCG_PACKET_HEX_MAX]; /* inject: the initiator's SYN, hex */
    int seconds;                     /* probe-listen: the endpoint's life; token = job secret */
};

struct cmdqueue;

/* capacity: unacknowledged commands held at most.  Orders (every kind but
   "invalidate" and "flush") are never dropped to make room: when a push finds
   the queue full, the invalidations and flushes it holds are replaced by one
   "flush" at its end (the downstream forgets all it cached).  Orders take at
   most capacity - 1 slots, so that an invalidation always finds room; one
   job's orders take at most its share (cmdqueue_set_job_share). */
struct cmdqueue *cmdqueue_new(size_t capacity);
void cmdqueue_free(struct cmdqueue *q);

/* Orders of one job held at once (default: three quarters of the capacity),
   so that one job's storm leaves room for the others' orders. */
void cmdqueue_set_job_share(struct cmdqueue *q, size_t max);

/* Appends a copy of cmd with the next sequence number; returns that number.
   An order that finds no room is refused: 0, errno EDQUOT when its job holds
   its share, ENOSPC when orders fill the queue.  Invalidations are never
   refused (a flush may stand for them). */
uint64_t cmdqueue_push(struct cmdqueue *q, const struct command *cmd);

/* Forgets commands with seq <= ack, then waits up to wait_ms for commands with
   seq > ack and copies up to max of them into out.  Returns how many (0 on
   timeout or when the queue is closed). */
int cmdqueue_wait(struct cmdqueue *q, uint64_t ack, int wait_ms, struct command *out, int max);

/* Wakes every waiter and makes later waits return at once (shutdown). */
void cmdqueue_close(struct cmdqueue *q);
size_t cmdqueue_pending(struct cmdqueue *q);

#endif
