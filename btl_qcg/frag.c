/* Send descriptors: two small caches (control/eager size, full fragments)
   so that a message costs no malloc, and the iovec of a frame. */
#include "btl_qcg.h"

#include <stdlib.h>
#include <string.h>

/* Descriptors kept per cache; more are freed. */
#define POOL_KEEP 64

static const unsigned char zeros[8];

static void frag_reset(struct btl_qcg_frag *frag)
{
    frag->base.des_segments = frag->segments;
    frag->base.des_segment_count = 1;
    frag->base.des_cbfunc = NULL;
    frag->base.des_cbdata = NULL;
    frag->base.des_context = NULL;
    frag->base.des_flags = 0;
    frag->base.order = MCA_BTL_NO_ORDER;
    frag->segments[0].seg_addr.pval = frag->data;
    frag->segments[0].seg_len = 0;
    frag->segments[1].seg_addr.pval = NULL;
    frag->segments[1].seg_len = 0;
    frag->endpoint = NULL;
    frag->next = NULL;
    frag->total = 0;
    frag->sent = 0;
    frag->rq = (struct resendq_item){0};
    frag->copied = 0;
}

/* The pools have their own lock: the PML allocates and frees descriptors
   from any thread, also while another holds the state lock. */
static struct btl_qcg_frag *pool_take(struct btl_qcg_module *m, int pool)
{
    struct btl_qcg_frag *frag;

    OPAL_THREAD_LOCK(&m->pool_lock);
    frag = m->pool[pool];
    if (frag != NULL) {
        m->pool[pool] = frag->next;
        m->pool_count[pool]--;
    }
    OPAL_THREAD_UNLOCK(&m->pool_lock);
    return frag;
}

static bool pool_put(struct btl_qcg_module *m, struct btl_qcg_frag *frag)
{
    int pool = frag->pool;
    bool kept = false;

    OPAL_THREAD_LOCK(&m->pool_lock);
    if (m->pool_count[pool] < POOL_KEEP) {
        frag->next = m->pool[pool];
        m->pool[pool] = frag;
        m->pool_count[pool]++;
        kept = true;
    }
    OPAL_THREAD_UNLOCK(&m->pool_lock);
    return kept;
}

struct btl_qcg_frag *btl_qcg_frag_alloc(struct btl_qcg_module *m, size_t size)
{
    struct btl_qcg_frag *frag;
    int pool = -1;
    size_t capacity = size;

    for (int i = 0; i < BTL_QCG_POOLS; i++) {
        if (size <= m->pool_size[i]) {
            pool = i;
            capacity = m->pool_size[i];
            break;
        }
    }
    frag = pool >= 0 ? pool_take(m, pool) : NULL;
    if (frag == NULL) {
        frag = malloc(sizeof(*frag) + capacity);
        if (frag == NULL)
            return NULL;
        OBJ_CONSTRUCT(&frag->base, mca_btl_base_descriptor_t);
        frag->capacity = capacity;
        frag->pool = pool;
    }
    frag_reset(frag);
    return frag;
}

void btl_qcg_frag_release(struct btl_qcg_module *m, struct btl_qcg_frag *frag)
{
    if (frag->pool >= 0 && pool_put(m, frag))
        return;
    OBJ_DESTRUCT(&frag->base);
    free(frag);
}

void btl_qcg_frag_pools_free(struct btl_qcg_module *m)
{
    for (int i = 0; i < BTL_QCG_POOLS; i++) {
        while (m->pool[i] != NULL) {
            struct btl_qcg_frag *frag = m->pool[i];

            m->pool[i] = frag->next;
            OBJ_DESTRUCT(&frag->base);
            free(frag);
        }
        m->pool_count[i] = 0;
    }
}

/* The unsent rest of the frame as at most max iovecs: header, segments,
   padding.  Returns how many were filled. */
size_t btl_qcg_frag_iov(const struct btl_qcg_frag *frag, struct iovec *iov, size_t max)
{
    struct iovec parts[4];
    size_t nparts = 0, payload = 0, skip = frag->sent, n = 0;

    parts[nparts++] = (struct iovec){(void *)&frag->hdr, BTL_QCG_HDR_SIZE};
    for (size_t i = 0; i < frag->base.des_segment_count && i < 2; i++) {
        size_t len = frag->segments[i].seg_len;

        if (len > 0)
            parts[nparts++] = (struct iovec){frag->segments[i].seg_addr.pval, len};
        payload += len;
    }
    if (frag->total > BTL_QCG_HDR_SIZE + payload)
        parts[nparts++] = (struct iovec){(void *)zeros, frag->total - BTL_QCG_HDR_SIZE - payload};
    for (size_t i = 0; i < nparts && n < max; i++) {
        if (skip >= parts[i].iov_len) {
            skip -= parts[i].iov_len;
            continue;
        }
        iov[n].iov_base = (unsigned char *)parts[i].iov_base + skip;
        iov[n].iov_len = parts[i].iov_len - skip;
        skip = 0;
        n++;
    }
    return n;
}

struct btl_qcg_frag *btl_qcg_frag_alloc_exact(size_t size)
{
    struct btl_qcg_frag *frag = malloc(sizeof(*frag) + size);

    if (frag == NULL)
        return NULL;
    OBJ_CONSTRUCT(&frag->base, mca_btl_base_descriptor_t);
    frag->capacity = size;
    frag->pool = -1;
    frag_reset(frag);
    return frag;
}
