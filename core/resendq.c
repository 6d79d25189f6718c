/* The resend queue (resendq.h). */
#include "resendq.h"

#include <string.h>

void resendq_init(struct resendq *q, void (*release)(struct resendq_item *it, void *arg), void *arg)
{
    memset(q, 0, sizeof(*q));
    q->release = release;
    q->arg = arg;
}

uint64_t resendq_push(struct resendq *q, struct resendq_item *it, size_t size)
{
    it->next = NULL;
    it->seq = ++q->sent;
    it->size = size;
    if (q->tail != NULL)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    q->bytes += size;
    return it->seq;
}

static struct resendq_item *pop(struct resendq *q)
{
    struct resendq_item *it = q->head;

    q->head = it->next;
    if (q->head == NULL)
        q->tail = NULL;
    q->bytes -= it->size;
    it->next = NULL;
    return it;
}

int resendq_ack(struct resendq *q, uint64_t count)
{
    if (count < q->acked || count > q->sent)
        return -1;
    q->acked = count;
    while (q->head != NULL && q->head->seq <= count)
        q->release(pop(q), q->arg);
    return 0;
}

uint64_t resendq_widen(const struct resendq *q, uint32_t count32)
{
    return q->acked + (uint64_t)(int64_t)(int32_t)(count32 - (uint32_t)q->acked);
}

void resendq_clear(struct resendq *q)
{
    while (q->head != NULL)
        q->release(pop(q), q->arg);
}
