/* Checks of the local protocol (localproto.h): every received header and
   payload passes here before anything is copied or used. */
#include <string.h>

#include "localproto.h"
#include "qcgconn.h"

const size_t local_payload_size[LOCAL_TYPE_COUNT] = {
    [LOCAL_HELLO] = sizeof(struct local_hello),
    [LOCAL_HELLO_OK] = sizeof(struct local_hello_ok),
    [LOCAL_PUBLISH] = sizeof(struct local_publish),
    [LOCAL_WITHDRAW] = 0,
    [LOCAL_LOOKUP] = sizeof(struct local_lookup),
    [LOCAL_PLAN] = sizeof(struct local_plan),
    [LOCAL_OK] = 0,
    [LOCAL_ERROR] = sizeof(struct local_error),
    [LOCAL_INCOMING] = sizeof(struct local_incoming),
    [LOCAL_STATUS] = 0,
    [LOCAL_STATUS_OK] = sizeof(struct local_status),
    [LOCAL_REPORT] = sizeof(struct local_report),
};

int local_header_check(const struct local_header *h)
{
    if (h == NULL || h->magic != LOCAL_MAGIC)
        return QCG_EPROTO;
    if (h->type == 0 || h->type >= LOCAL_TYPE_COUNT)
        return QCG_EPROTO;
    if (h->reserved != 0)
        return QCG_EPROTO;
    if (h->length != local_payload_size[h->type])
        return QCG_EPROTO;
    return 0;
}

/* A fixed-size string field is valid when its array holds a NUL. */
static int terminated(const char *s, size_t size)
{
    return memchr(s, '\0', size) != NULL;
}

#define STR_OK(p, field) terminated((p)->field, sizeof((p)->field))

int local_payload_check(uint16_t type, const void *payload)
{
    if (type == 0 || type >= LOCAL_TYPE_COUNT)
        return QCG_EPROTO;
    if (local_payload_size[type] == 0)
        return 0;
    if (payload == NULL)
        return QCG_EPROTO;

    switch (type) {
    case LOCAL_HELLO: {
        const struct local_hello *p = payload;
        if (p->version != LOCAL_VERSION || !STR_OK(p, job) || !STR_OK(p, secret))
            return QCG_EPROTO;
        return 0;
    }
    case LOCAL_HELLO_OK: {
        const struct local_hello_ok *p = payload;
        if (!STR_OK(p, cluster) || !STR_OK(p, node) || !STR_OK(p, address))
            return QCG_EPROTO;
        return 0;
    }
    case LOCAL_PLAN: {
        const struct local_plan *p = payload;
        if (!STR_OK(p, cluster) || !STR_OK(p, node) || !STR_OK(p, address) ||
            !STR_OK(p, token))
            return QCG_EPROTO;
        return 0;
    }
    case LOCAL_ERROR: {
        const struct local_error *p = payload;
        return STR_OK(p, message) ? 0 : QCG_EPROTO;
    }
    case LOCAL_INCOMING: {
        const struct local_incoming *p = payload;
        if (!STR_OK(p, token) || p->role > LOCAL_ROLE_HELLO)
            return QCG_EPROTO;
        return 0;
    }
    case LOCAL_STATUS_OK: {
        const struct local_status *p = payload;
        if (!STR_OK(p, cluster) || !STR_OK(p, node) || !STR_OK(p, frontend))
            return QCG_EPROTO;
        return 0;
    }
    case LOCAL_REPORT: {
        const struct local_report *p = payload;
        if (!STR_OK(p, why) || p->ok > 1)
            return QCG_EPROTO;
        return 0;
    }
    default:
        /* PUBLISH, LOOKUP: integers only. */
        return 0;
    }
}
