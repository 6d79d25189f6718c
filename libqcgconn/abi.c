/* What keeps libqcgconn.so.0 compatible (README.md, "ABI"): the library's
   version, and public structs that cross the ABI with their size.  Callers
   built against 0.1's qcgconn.h call the plain entry points below with 0.1's
   structs; callers built since call the _sized ones, the header's macros
   passing the size of the struct they know. */
#include <stddef.h>
#include <string.h>

#include "internal.h"

QCG_EXPORT unsigned qcg_version(void)
{
    return QCG_VERSION_HEX;
}

QCG_EXPORT const char *qcg_version_string(void)
{
    return QCG_VERSION_STRING;
}

int struct_in(void *dst, size_t dst_size, const void *src, size_t src_size, size_t oldest)
{
    const unsigned char *bytes = src;

    if (src_size < oldest)
        return -1;
    /* A newer caller's fields that we do not know must be left zero: their
       "as before". */
    for (size_t i = dst_size; i < src_size; i++) {
        if (bytes[i] != 0)
            return -1;
    }
    memset(dst, 0, dst_size);
    memcpy(dst, src, src_size < dst_size ? src_size : dst_size);
    return 0;
}

void struct_out(void *dst, size_t dst_size, const void *src, size_t src_size)
{
    if (dst == NULL)
        return;
    memcpy(dst, src, src_size < dst_size ? src_size : dst_size);
    if (dst_size > src_size)
        memset((unsigned char *)dst + src_size, 0, dst_size - src_size);
}

void conn_info_out(struct qcg_conn_info *info, size_t info_size, int32_t peer_rank,
                   uint32_t technique, uint64_t start_us, unsigned encryption,
                   struct qcg_tls *session)
{
    struct qcg_conn_info out;

    memset(&out, 0, sizeof(out));
    out.peer_rank = peer_rank;
    out.technique = technique <= QCG_TECH_PROXY ? (enum qcg_technique)technique : QCG_TECH_NONE;
    out.setup_us = now_us() - start_us;
    out.encryption = encryption;
    out.tls = session;
    struct_out(info, info_size, &out, sizeof(out));
}

/* 0.1's entry points.  The parentheses keep the header's macros of the same
   names away. */
QCG_EXPORT int(qcg_open)(qcg_ctx **ctx, const struct qcg_options *opts)
{
    return qcg_open_sized(ctx, opts, OPTIONS_SIZE_0_1);
}

QCG_EXPORT int(qcg_connect)(qcg_ctx *ctx, int rank, int timeout_ms, struct qcg_conn_info *info)
{
    return qcg_connect_sized(ctx, rank, timeout_ms, info, CONN_INFO_SIZE_0_1);
}

QCG_EXPORT int(qcg_connect_finish)(qcg_connect_op *op, struct qcg_conn_info *info)
{
    return qcg_connect_finish_sized(op, info, CONN_INFO_SIZE_0_1);
}

QCG_EXPORT int(qcg_accept)(qcg_ctx *ctx, struct qcg_conn_info *info)
{
    return qcg_accept_sized(ctx, info, CONN_INFO_SIZE_0_1);
}

QCG_EXPORT int(qcg_local_contact)(const qcg_ctx *ctx, struct qcg_contact *contact)
{
    return qcg_local_contact_sized(ctx, contact, CONTACT_SIZE_0_1);
}
