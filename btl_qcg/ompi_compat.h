/*
 * Every difference between the Open MPI releases btl_qcg is built against
 * (4.1: Debian 12, BTL API 3.1; 5.0: Debian 13, BTL API 3.3), in one place.
 * The rest of the BTL is written once, against the names defined here; no
 * other file tests OPAL_MAJOR_VERSION.  Included first by btl_qcg.h (it has
 * to come before any Open MPI header: see the threads below).
 * btl_qcg/README.md, "Open MPI 4.1 and 5.0", says what changed and why.
 */
#ifndef BTL_QCG_OMPI_COMPAT_H
#define BTL_QCG_OMPI_COMPAT_H

#include "opal_config.h"

#include <string.h>

#if OPAL_MAJOR_VERSION >= 5

/* opal_config.h names the threads component's headers, which Debian 13's
   libopenmpi-dev does not install; every BTL needs them (btl.h includes
   mutex.h).  Where they are missing, ours (ompi5_threads.h) stands in. */
#if !__has_include(MCA_threads_mutex_base_include_HEADER)
#undef MCA_threads_base_include_HEADER
#undef MCA_threads_mutex_base_include_HEADER
#undef MCA_threads_tsd_base_include_HEADER
#define MCA_threads_base_include_HEADER "ompi5_threads.h"
#define MCA_threads_mutex_base_include_HEADER "ompi5_threads.h"
#define MCA_threads_tsd_base_include_HEADER "ompi5_threads.h"
#endif

#include "opal/mca/btl/btl.h"
#include "opal/mca/pmix/pmix-internal.h"
#include "opal/mca/threads/mutex.h"

/* The modex is PMIx's own API (scope and type constants).  A peer's value
   is asked of the node's PMIx server when not in the process already
   (IMMEDIATE: the fence does not bring every peer's data here, and
   OPTIONAL would look no further than the process's own cache, which for
   most peers is empty), without waiting for a value never posted. */
#define BTL_QCG_MODEX_GLOBAL PMIX_GLOBAL
#define BTL_QCG_MODEX_STRING PMIX_STRING
#define BTL_QCG_MODEX_RECV_STRING(rc, key, name, valuep)                                           \
    OPAL_MODEX_RECV_VALUE_IMMEDIATE(rc, key, name, valuep, PMIX_STRING)
/* The key under which the runtime posts each process's host name. */
#define BTL_QCG_MODEX_HOSTNAME PMIX_HOSTNAME

/* Receive: the callback gets one receive descriptor (tag, segments, the
   registration's cbdata, the endpoint). */
static inline void btl_qcg_deliver(mca_btl_base_module_t *btl,
                                   struct mca_btl_base_endpoint_t *endpoint, mca_btl_base_tag_t tag,
                                   const mca_btl_base_segment_t *seg)
{
    const mca_btl_active_message_callback_t *reg = &mca_btl_base_active_message_trigger[tag];
    mca_btl_base_receive_descriptor_t desc = {
        .endpoint = endpoint,
        .des_segments = seg,
        .des_segment_count = 1,
        .tag = tag,
        .cbdata = reg->cbdata,
    };

    reg->cbfunc(btl, &desc);
}

#else /* Open MPI 4.1 */

#include "opal/mca/btl/btl.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/threads/mutex.h"

/* The modex goes through the opal_pmix framework (opal_value_t types); the
   fence brought every peer's values (OPTIONAL: not found is no error). */
#define BTL_QCG_MODEX_GLOBAL OPAL_PMIX_GLOBAL
#define BTL_QCG_MODEX_STRING OPAL_STRING
#define BTL_QCG_MODEX_RECV_STRING(rc, key, name, valuep)                                           \
    OPAL_MODEX_RECV_VALUE_OPTIONAL(rc, key, name, valuep, OPAL_STRING)
#define BTL_QCG_MODEX_HOSTNAME OPAL_PMIX_HOSTNAME

/* Receive: the callback gets the tag, a descriptor with the segments and
   the registration's cbdata. */
static inline void btl_qcg_deliver(mca_btl_base_module_t *btl,
                                   struct mca_btl_base_endpoint_t *endpoint, mca_btl_base_tag_t tag,
                                   const mca_btl_base_segment_t *seg)
{
    const mca_btl_active_message_callback_t *reg = &mca_btl_base_active_message_trigger[tag];
    mca_btl_base_descriptor_t desc;

    (void)endpoint;
    memset(&desc, 0, sizeof(desc));
    desc.des_segments = (mca_btl_base_segment_t *)seg;
    desc.des_segment_count = 1;
    reg->cbfunc(btl, tag, &desc, reg->cbdata);
}

#endif

/* Whether the structures we share with the running libopen-pal have the
   size we were compiled with (its classes know theirs): NULL when they do,
   else the first that differs.  It catches headers of another build than
   the library's, or ompi5_threads.h standing in for another threads
   component than the library's.  (A module built for the other release does not get
   here: it does not even load, e.g. 4.1's needs the symbol opal_pmix, which
   5.0's libopen-pal lacks.) */
static inline const char *btl_qcg_abi_mismatch(void)
{
    if (opal_mutex_t_class.cls_sizeof != sizeof(opal_mutex_t))
        return "opal_mutex_t";
    if (mca_btl_base_descriptor_t_class.cls_sizeof != sizeof(mca_btl_base_descriptor_t))
        return "mca_btl_base_descriptor_t";
    return NULL;
}

#endif
