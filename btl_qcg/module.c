/* The module: the BTL function table (add/del procs, descriptors, send,
   finalize). */
#include "btl_qcg.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "opal/class/opal_bitmap.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/mca/btl/base/base.h"
#include "opal/mca/hwloc/hwloc-internal.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/proc.h"

static bool is_shm(const char *name)
{
    return strcmp(name, "vader") == 0 || strcmp(name, "sm") == 0 || strcmp(name, "smcuda") == 0;
}

/* Whether a shared-memory BTL (which should carry same-node peers) runs, or
   (net) another network BTL: btl_tcp, a fabric's. */
static bool btl_runs(bool net)
{
    mca_btl_base_selected_module_t *sm;

    OPAL_LIST_FOREACH(sm, &mca_btl_base_modules_initialized, mca_btl_base_selected_module_t)
    {
        const char *name = sm->btl_component->btl_version.mca_component_name;

        if (net ? !is_shm(name) && strcmp(name, "self") != 0 && strcmp(name, "qcg") != 0
                : is_shm(name))
            return true;
    }
    return false;
}

static bool carry_local(struct btl_qcg_module *m)
{
    int mode = mca_btl_qcg_component.local_peers;

    if (mode >= 0)
        return mode > 0;
    if (m->shm_btl < 0)
        m->shm_btl = btl_runs(false);
    return !m->shm_btl;
}

/* Whether we carry a peer: always, unless it is in our own cluster and the
   user leaves those to the cluster's own network (btl_qcg_cluster_peers 0,
   or -1 when another network BTL runs).  A peer whose cluster the modex does
   not give is carried. */
static bool carry_peer(struct btl_qcg_module *m, struct opal_proc_t *proc)
{
    int mode = mca_btl_qcg_component.cluster_peers, rc;
    char *cluster = NULL;
    bool same;

    if (mode > 0 || m->cluster[0] == '\0')
        return true;
    if (mode < 0) {
        if (m->net_btl < 0)
            m->net_btl = btl_runs(true);
        if (!m->net_btl)
            return true;
    }
    BTL_QCG_MODEX_RECV_STRING(rc, BTL_QCG_MODEX_CLUSTER, &proc->proc_name, &cluster);
    same = rc == OPAL_SUCCESS && cluster != NULL && strcmp(cluster, m->cluster) == 0;
    free(cluster);
    return !same;
}

static int qcg_add_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                         struct opal_proc_t **procs, struct mca_btl_base_endpoint_t **endpoints,
                         struct opal_bitmap_t *reachable)
{
    struct btl_qcg_module *m = (struct btl_qcg_module *)btl;
    int rc = OPAL_SUCCESS;

    btl_qcg_lock(m);
    for (size_t i = 0; i < nprocs; i++) {
        struct opal_proc_t *proc = procs[i];
        struct btl_qcg_endpoint *ep;

        /* Only our own job: peers of a spawned job have their own secret. */
        if (proc->proc_name.jobid != m->jobid || proc->proc_name.vpid == m->vpid)
            continue;
        if ((OPAL_PROC_ON_LOCAL_NODE(proc->proc_flags) && !carry_local(m)) || !carry_peer(m, proc))
            continue;
        if (endpoints[i] != NULL)
            continue;
        /* The endpoint may exist already: the peer connected to us first. */
        ep = btl_qcg_endpoint_get(m, proc->proc_name.vpid);
        if (ep == NULL) {
            rc = OPAL_ERR_OUT_OF_RESOURCE;
            break;
        }
        ep->proc = proc;
        endpoints[i] = (struct mca_btl_base_endpoint_t *)ep;
        if (reachable != NULL)
            opal_bitmap_set_bit(reachable, (int)i);
    }
    btl_qcg_unlock(m);
    return rc;
}

static int qcg_del_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                         struct opal_proc_t **procs, struct mca_btl_base_endpoint_t **endpoints)
{
    struct btl_qcg_module *m = (struct btl_qcg_module *)btl;

    (void)procs;
    /* The channel stays until finalize: the PML may still answer a peer it
       forgot; only the name goes. */
    btl_qcg_lock(m);
    for (size_t i = 0; i < nprocs; i++) {
        struct btl_qcg_endpoint *ep = (struct btl_qcg_endpoint *)endpoints[i];

        if (ep != NULL)
            ep->proc = NULL;
    }
    btl_qcg_unlock(m);
    return OPAL_SUCCESS;
}

static int qcg_finalize(struct mca_btl_base_module_t *btl)
{
    struct btl_qcg_module *m = (struct btl_qcg_module *)btl;

    if (btl_qcg_active == m) {
        opal_progress_unregister(btl_qcg_progress);
        btl_qcg_active = NULL;
    }
    for (size_t i = 0; i < m->neps; i++)
        btl_qcg_endpoint_free(m->eps[i]);
    free(m->eps);
    free(m->cq);
    if (m->ctx != NULL)
        qcg_close(m->ctx);
    if (m->epfd >= 0)
        close(m->epfd);
    btl_qcg_frag_pools_free(m);
    OBJ_DESTRUCT(&m->progress_lock);
    OBJ_DESTRUCT(&m->lock);
    OBJ_DESTRUCT(&m->pool_lock);
    free(m);
    return OPAL_SUCCESS;
}

/* The largest frame payload we build. */
static size_t max_payload(const mca_btl_base_module_t *btl)
{
    return btl->btl_max_send_size > btl->btl_eager_limit ? btl->btl_max_send_size
                                                         : btl->btl_eager_limit;
}

static mca_btl_base_descriptor_t *qcg_alloc(struct mca_btl_base_module_t *btl,
                                            struct mca_btl_base_endpoint_t *endpoint, uint8_t order,
                                            size_t size, uint32_t flags)
{
    struct btl_qcg_module *m = (struct btl_qcg_module *)btl;
    struct btl_qcg_frag *frag;

    (void)order;
    if (size > max_payload(btl))
        return NULL;
    frag = btl_qcg_frag_alloc(m, size);
    if (frag == NULL)
        return NULL;
    frag->endpoint = (struct btl_qcg_endpoint *)endpoint;
    frag->segments[0].seg_len = size;
    frag->base.des_segment_count = 1;
    frag->base.des_flags = flags;
    return &frag->base;
}

static int qcg_free(struct mca_btl_base_module_t *btl, mca_btl_base_descriptor_t *des)
{
    btl_qcg_frag_release((struct btl_qcg_module *)btl, (struct btl_qcg_frag *)des);
    return OPAL_SUCCESS;
}

static mca_btl_base_descriptor_t *qcg_prepare_src(struct mca_btl_base_module_t *btl,
                                                  struct mca_btl_base_endpoint_t *endpoint,
                                                  struct opal_convertor_t *convertor, uint8_t order,
                                                  size_t reserve, size_t *size, uint32_t flags)
{
    struct btl_qcg_module *m = (struct btl_qcg_module *)btl;
    bool packed = opal_convertor_need_buffers(convertor);
    struct btl_qcg_frag *frag;
    struct iovec iov;
    uint32_t iov_count = 1;
    size_t max_data = *size;
    size_t limit = max_payload(btl);

    (void)order;
    if (reserve > limit)
        return NULL;
    if (max_data > limit - reserve)
        max_data = limit - reserve;
    frag = btl_qcg_frag_alloc(m, reserve + (packed ? max_data : 0));
    if (frag == NULL)
        return NULL;
    frag->endpoint = (struct btl_qcg_endpoint *)endpoint;
    frag->base.des_flags = flags;
    frag->segments[0].seg_len = reserve;
    frag->base.des_segment_count = 1;
    if (packed) {
        iov.iov_base = frag->data + reserve;
        iov.iov_len = max_data;
        if (opal_convertor_pack(convertor, &iov, &iov_count, &max_data) < 0) {
            btl_qcg_frag_release(m, frag);
            return NULL;
        }
        frag->segments[0].seg_len = reserve + max_data;
    } else if (max_data > 0) {
        /* Contiguous: send from the user's buffer (the pack only points at it
           and advances the convertor). */
        iov.iov_base = NULL;
        iov.iov_len = max_data;
        if (opal_convertor_pack(convertor, &iov, &iov_count, &max_data) < 0) {
            btl_qcg_frag_release(m, frag);
            return NULL;
        }
        frag->segments[1].seg_addr.pval = iov.iov_base;
        frag->segments[1].seg_len = max_data;
        frag->base.des_segment_count = 2;
    }
    *size = max_data;
    return &frag->base;
}

static int qcg_send(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
                    struct mca_btl_base_descriptor_t *des, mca_btl_base_tag_t tag)
{
    struct btl_qcg_frag *frag = (struct btl_qcg_frag *)des;
    size_t payload = 0;

    (void)btl;
    for (size_t i = 0; i < des->des_segment_count; i++)
        payload += des->des_segments[i].seg_len;
    if (payload > BTL_QCG_FRAME_MAX)
        return OPAL_ERR_BAD_PARAM;
    frag->endpoint = (struct btl_qcg_endpoint *)endpoint;
    memset(&frag->hdr, 0, sizeof(frag->hdr));
    frag->hdr.length = htonl((uint32_t)payload);
    frag->hdr.tag = tag;
    frag->total = (BTL_QCG_HDR_SIZE + payload + 7) & ~(size_t)7;
    frag->sent = 0;
    frag->next = NULL;
    return btl_qcg_endpoint_send(frag->endpoint, frag);
}

static int qcg_register_error(struct mca_btl_base_module_t *btl,
                              mca_btl_base_module_error_cb_fn_t cbfunc)
{
    ((struct btl_qcg_module *)btl)->error_cb = cbfunc;
    return OPAL_SUCCESS;
}

mca_btl_base_module_t btl_qcg_module_template = {
    .btl_component = &mca_btl_qcg_component.super,
    .btl_add_procs = qcg_add_procs,
    .btl_del_procs = qcg_del_procs,
    .btl_finalize = qcg_finalize,
    .btl_alloc = qcg_alloc,
    .btl_free = qcg_free,
    .btl_prepare_src = qcg_prepare_src,
    .btl_send = qcg_send,
    .btl_dump = mca_btl_base_dump,
    .btl_register_error = qcg_register_error,
};

struct btl_qcg_module *btl_qcg_module_new(qcg_ctx *ctx, uint32_t jobid, uint32_t vpid)
{
    struct btl_qcg_module *m = calloc(1, sizeof(*m));
    size_t small, big;

    if (m == NULL)
        return NULL;
    m->super = btl_qcg_module_template;
    m->ctx = ctx;
    m->jobid = jobid;
    m->vpid = vpid;
    m->shm_btl = -1;
    m->net_btl = -1;
    m->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (m->epfd < 0) {
        m->ctx = NULL;
        free(m);
        return NULL;
    }
    m->w_accept.kind = WATCH_ACCEPT;
    if (btl_qcg_watch(m, EPOLL_CTL_ADD, qcg_accept_pollfd(ctx), EPOLLIN, &m->w_accept) < 0) {
        close(m->epfd);
        m->ctx = NULL;
        free(m);
        return NULL;
    }
    /* Two caches of descriptors: control/eager messages and full fragments. */
    small = m->super.btl_eager_limit < 4096 ? 4096 : m->super.btl_eager_limit;
    big = max_payload(&m->super);
    m->pool_size[0] = small < big ? small : big;
    m->pool_size[1] = big;
    OBJ_CONSTRUCT(&m->progress_lock, opal_mutex_t);
    OBJ_CONSTRUCT(&m->lock, opal_mutex_t);
    OBJ_CONSTRUCT(&m->pool_lock, opal_mutex_t);
    return m;
}
