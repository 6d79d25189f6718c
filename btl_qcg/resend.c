/* The resend buffer: every data frame stays in its endpoint's send queue
   until the peer acknowledges it, so that after a broken channel the peer
   gets, on the next one, exactly the frames it had not received.
 *
 * Frames up to btl_qcg_copy_max (all, by default) are copied (the PML's
 * descriptor completes at once, as it did when it was written); larger ones,
 * and any frame once the copies reach btl_qcg_resend_buffer, are kept as they
 * are and complete when acked (they point into the user's buffer; the PML
 * waits, which is the back-pressure: nothing is dropped).  Such frames carry ACK_ME so that the peer acks at
 * once, as does a copy each quarter of the buffer.
 */
#include "btl_qcg.h"

#include <arpa/inet.h>
#include <string.h>

struct btl_qcg_frag *btl_qcg_resend_take(struct btl_qcg_endpoint *ep, struct btl_qcg_frag *frag,
                                         bool *done)
{
    size_t limit =
        (size_t)(mca_btl_qcg_component.resend_buffer > 0 ? mca_btl_qcg_component.resend_buffer : 0);
    size_t payload = frag->total - BTL_QCG_HDR_SIZE, size = sizeof(*frag) + frag->total;
    struct btl_qcg_frag *copy;
    unsigned char *p;

    *done = false;
    /* Frames up to btl_qcg_copy_max are copied (a copy costs less than
       waiting for the ack); larger ones wait for the ack. */
    if (payload >
            (size_t)(mca_btl_qcg_component.copy_max > 0 ? mca_btl_qcg_component.copy_max : 0) ||
        ep->copied + size > limit || (copy = btl_qcg_frag_alloc_exact(payload)) == NULL) {
        frag->hdr.flags = BTL_QCG_ACK_ME;
        return frag;
    }
    /* Header, and the payload with its padding (zeros) as one segment. */
    p = copy->data;
    for (size_t i = 0; i < frag->base.des_segment_count && i < 2; i++) {
        memcpy(p, frag->segments[i].seg_addr.pval, frag->segments[i].seg_len);
        p += frag->segments[i].seg_len;
    }
    copy->hdr = frag->hdr;
    copy->total = frag->total;
    copy->segments[0].seg_len = (size_t)(p - copy->data);
    copy->base.des_flags = MCA_BTL_DES_FLAGS_BTL_OWNERSHIP;
    copy->endpoint = ep;
    copy->copied = size;
    ep->copied += size;
    ep->copied_unasked += size;
    if (ep->copied_unasked >= limit / 4) {
        copy->hdr.flags = BTL_QCG_ACK_ME;
        ep->copied_unasked = 0;
    }
    *done = true;
    return copy;
}

void btl_qcg_queue_push(struct btl_qcg_endpoint *ep, struct btl_qcg_frag *frag)
{
    frag->seq = ++ep->tx_seq;
    frag->hdr.type = BTL_QCG_DATA;
    frag->hdr.seq = htonl((uint32_t)frag->seq);
    frag->next = NULL;
    if (ep->sq_tail != NULL)
        ep->sq_tail->next = frag;
    else
        ep->sq_head = frag;
    ep->sq_tail = frag;
    if (ep->unsent == NULL)
        ep->unsent = frag;
}

struct btl_qcg_frag *btl_qcg_queue_pop(struct btl_qcg_endpoint *ep)
{
    struct btl_qcg_frag *frag = ep->sq_head;

    if (frag == NULL)
        return NULL;
    ep->sq_head = frag->next;
    if (ep->sq_head == NULL)
        ep->sq_tail = NULL;
    if (ep->unsent == frag)
        ep->unsent = frag->next;
    frag->next = NULL;
    ep->copied -= frag->copied;
    return frag;
}

int btl_qcg_ack_received(struct btl_qcg_endpoint *ep, uint32_t ack)
{
    /* The peer's count in full: ours moves by at most the queue's length,
       far below 2^31 frames. */
    uint64_t acked = ep->acked + (uint32_t)(ack - (uint32_t)ep->acked);

    if ((int32_t)(ack - (uint32_t)ep->acked) <= 0)
        return 0;
    if (acked > ep->tx_seq)
        return -1;
    ep->acked = acked;
    while (ep->sq_head != NULL && ep->sq_head->seq <= acked)
        btl_qcg_defer_completion(ep->module, btl_qcg_queue_pop(ep), OPAL_SUCCESS);
    return 0;
}

void btl_qcg_rewind(struct btl_qcg_endpoint *ep)
{
    for (struct btl_qcg_frag *f = ep->sq_head; f != NULL; f = f->next)
        f->sent = 0;
    ep->unsent = ep->sq_head;
    ep->ctl_pending = false;
    ep->ctl_sent = 0;
    ep->resumed = false;
}
