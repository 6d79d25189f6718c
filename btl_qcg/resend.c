/* The resend buffer: every data frame stays in its endpoint's send queue
   until the peer acknowledges it, so that after a broken channel the peer
   gets, on the next one, exactly the frames it had not received.
 *
 * Frames up to btl_qcg_copy_max (all, by default) are copied (the PML's
 * descriptor completes at once, as it did when it was written); larger ones,
 * and any frame once the copies reach btl_qcg_resend_buffer, are kept as they
 * are and complete when acked (they point into the user's buffer; the PML
 * waits, which is the back-pressure: nothing is dropped).  Such frames carry
 * ACK_ME so that the peer acks at once, as does a copy each quarter of the
 * buffer.
 *
 * The numbering and the acks are core/resendq's (the launch connection's
 * too); what is btl_qcg's: the copies, and unsent (where writing resumes).
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
        ep->sq.bytes + size > limit || (copy = btl_qcg_frag_alloc_exact(payload)) == NULL) {
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
    /* The copies count against btl_qcg_resend_buffer (sq.bytes), the
       PML's own frames do not. */
    resendq_push(&ep->sq, &frag->rq, frag->copied);
    frag->hdr.type = BTL_QCG_DATA;
    frag->hdr.seq = htonl((uint32_t)frag->rq.seq);
    if (ep->unsent == NULL)
        ep->unsent = frag;
}

/* resendq's release: a frame leaves the queue, the oldest first. */
static void frame_left(struct resendq_item *it, void *arg)
{
    struct btl_qcg_endpoint *ep = arg;
    struct btl_qcg_frag *frag = btl_qcg_frag_of(it);

    /* unsent too: acknowledged (the peer's RESUME) before it was written
       again on the new channel, or given up. */
    if (ep->unsent == frag)
        ep->unsent = btl_qcg_queue_first(ep);
    if (ep->sq_status == BTL_QCG_DISCARD)
        btl_qcg_frag_release(ep->module, frag);
    else
        btl_qcg_defer_completion(ep->module, frag, ep->sq_status);
}

void btl_qcg_queue_init(struct btl_qcg_endpoint *ep)
{
    resendq_init(&ep->sq, frame_left, ep);
    ep->unsent = NULL;
    ep->sq_status = OPAL_SUCCESS;
}

void btl_qcg_queue_clear(struct btl_qcg_endpoint *ep, int status)
{
    ep->sq_status = status;
    resendq_clear(&ep->sq);
    ep->sq_status = OPAL_SUCCESS;
}

int btl_qcg_ack_received(struct btl_qcg_endpoint *ep, uint32_t ack)
{
    uint64_t count = resendq_widen(&ep->sq, ack);

    /* An ack not beyond the last one is nothing new (the launch link calls
       one that goes back a protocol error; btl_qcg always took it). */
    if (count <= ep->sq.acked)
        return 0;
    return resendq_ack(&ep->sq, count);
}

void btl_qcg_rewind(struct btl_qcg_endpoint *ep)
{
    for (struct btl_qcg_frag *f = btl_qcg_queue_first(ep); f != NULL; f = btl_qcg_frag_next(f))
        f->sent = 0;
    ep->unsent = btl_qcg_queue_first(ep);
    ep->ctl_pending = false;
    ep->ctl_sent = 0;
    ep->resumed = false;
}
