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
    uint64_t seq;                   /* set by cmdqueue_push */
    char kind[16];                  /* "invalidate", "flush", "connect-back", "proxy-connect",
                                       "punch", "inject", "probe-listen" */
    char job[QCG_JOB_MAX];
    int rank;
    char node[QCG_NAME_MAX];
    char address[QCG_ADDR_MAX];
    int port;
    char token[QCG_TOKEN_MAX];
    int peer_rank;                  /* connect-back, proxy-connect, punch, inject: the initiator */
    char packet[QCG_PACKET_HEX_MAX]; /* inject: the initiator's SYN, hex */
    int seconds;                    /* probe-listen: the endpoint's life; token = job secret */
};

struct cmdqueue;

/* capacity: unacknowledged commands held at most.  When a push finds the queue
   full, everything unacknowledged is dropped and replaced by one "flush"
   command (the downstream forgets all it cached) and a warning is logged. */
struct cmdqueue *cmdqueue_new(size_t capacity);
void cmdqueue_free(struct cmdqueue *q);

/* Appends a copy of cmd with the next sequence number; returns that number. */
uint64_t cmdqueue_push(struct cmdqueue *q, const struct command *cmd);

/* Forgets commands with seq <= ack, then waits up to wait_ms for commands with
   seq > ack and copies up to max of them into out.  Returns how many (0 on
   timeout or when the queue is closed). */
int cmdqueue_wait(struct cmdqueue *q, uint64_t ack, int wait_ms, struct command *out, int max);

/* Wakes every waiter and makes later waits return at once (shutdown). */
void cmdqueue_close(struct cmdqueue *q);
size_t cmdqueue_pending(struct cmdqueue *q);

#endif
