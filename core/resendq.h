/* A resend queue: what was sent on a connection that may break, kept until
   the peer acknowledges it, so that the next connection carries exactly what
   the peer had not received, in order, once.

   Items are numbered 1, 2, ... in the order they are pushed; the peer
   acknowledges cumulatively (the count it has received).  The caller embeds
   a struct resendq_item in what it keeps (a frame, a fragment) and says how
   many bytes it holds; the queue calls release() for each item once it is
   acknowledged, or when the queue is cleared.  No allocation here.

   Used by the launch connection (launch/link.c) for its frames and by
   btl_qcg (resend.c) for its fragments. */
#ifndef QCG_CORE_RESENDQ_H
#define QCG_CORE_RESENDQ_H

#include <stddef.h>
#include <stdint.h>

struct resendq_item {
    struct resendq_item *next;
    uint64_t seq;
    size_t size;
};

struct resendq {
    struct resendq_item *head, *tail;
    uint64_t sent;  /* the last number given */
    uint64_t acked; /* the peer's cumulative count */
    size_t bytes;   /* the sizes of the items held */
    void (*release)(struct resendq_item *it, void *arg);
    void *arg;
};

void resendq_init(struct resendq *q, void (*release)(struct resendq_item *it, void *arg),
                  void *arg);
/* Appends it (size bytes); its number. */
uint64_t resendq_push(struct resendq *q, struct resendq_item *it, size_t size);
/* The peer has received `count` items: those are released.  0, or -1 (and
   nothing changed) when count goes back or beyond what was sent: the peer
   is not following the protocol. */
int resendq_ack(struct resendq *q, uint64_t count);
/* A count the wire carries in 32 bits, widened against what was acked (the
   queue moves by far less than 2^31 between acks). */
uint64_t resendq_widen(const struct resendq *q, uint32_t count32);
/* The oldest item not acknowledged (follow ->next), NULL if none. */
static inline struct resendq_item *resendq_first(const struct resendq *q)
{
    return q->head;
}
/* Releases every item (the connection is given up). */
void resendq_clear(struct resendq *q);

#endif
