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
    [LOCAL_SITE] = 0,
    [LOCAL_SITE_OK] = sizeof(struct local_site),
    [LOCAL_PROBE] = sizeof(struct local_probe),
    [LOCAL_PROBE_OK] = sizeof(struct local_probe_ok),
    [LOCAL_OBSERVED] = sizeof(struct local_observed),
    [LOCAL_PUNCHING] = 0,
    [LOCAL_PUNCHING_OK] = sizeof(struct local_punching),
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

/* A terminated field that holds exactly one of the words of a NULL-ended list. */
static int one_of(const char *s, size_t size, const char *const *words)
{
    if (!terminated(s, size))
        return 0;
    for (; *words != NULL; words++) {
        if (strcmp(s, *words) == 0)
            return 1;
    }
    return 0;
}

#define WORD_OK(p, field, words) one_of((p)->field, sizeof((p)->field), words)

static const char *const kinds[] = {"open", "firewalled", "nat", "symnat", NULL};
static const char *const mappings[] = {"none", "endpoint-independent", "endpoint-dependent",
                                       "unknown", NULL};

static int cluster_ok(const struct local_cluster *c)
{
    if (!STR_OK(c, name) || !STR_OK(c, kind))
        return 0;
    for (size_t i = 0; i < LOCAL_PUBLIC_MAX; i++) {
        if (!terminated(c->public_address[i], sizeof(c->public_address[i])))
            return 0;
    }
    return 1;
}

static int site_ok(const struct local_site *p)
{
    if (!STR_OK(p, node) || !STR_OK(p, address) || !cluster_ok(&p->cluster) ||
        !STR_OK(p, frontend) || !STR_OK(p, broker) || !STR_OK(p, frontend_seen_from) ||
        !STR_OK(p, reflector) || !STR_OK(p, reflector6) || !STR_OK(p, intercept) ||
        p->proxies > LOCAL_PROXIES_MAX || p->can_intercept > 1 ||
        p->clusters > LOCAL_CLUSTERS_MAX || p->clusters > p->clusters_total || p->punch_ttl < -1 ||
        p->punch_ttl > 255 || p->punch_hops > 255 || p->punch_first_ttl > 255)
        return 0;
    for (size_t i = 0; i < LOCAL_PROXIES_MAX; i++) {
        if (!terminated(p->proxy[i], sizeof(p->proxy[i])))
            return 0;
    }
    for (size_t i = 0; i < LOCAL_CLUSTERS_MAX; i++) {
        if (!cluster_ok(&p->peer[i]))
            return 0;
    }
    return 1;
}

static int punching_ok(const struct local_punching *p)
{
    if (p->punch_ttl < -1 || p->punch_ttl > 255 || p->reserved != 0)
        return 0;
    for (size_t i = 0; i < 2; i++) {
        const struct local_punch_family *f = &p->family[i];
        if (!STR_OK(f, reflector) || !STR_OK(f, address) || !STR_OK(f, why) || f->hops < -1 ||
            f->hops > 255 || f->first_ttl > 255 || f->measured > 1)
            return 0;
    }
    return 1;
}

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
        if (p->version < LOCAL_VERSION_OLDEST || p->version > LOCAL_VERSION || !STR_OK(p, job) ||
            !STR_OK(p, secret))
            return QCG_EPROTO;
        return 0;
    }
    case LOCAL_HELLO_OK: {
        const struct local_hello_ok *p = payload;
        if (!STR_OK(p, cluster) || !STR_OK(p, node) || !STR_OK(p, address))
            return QCG_EPROTO;
        for (int i = 0; i < QCG_NODE_ADDRS - 1; i++) {
            if (!STR_OK(p, other_address[i]))
                return QCG_EPROTO;
        }
        return 0;
    }
    case LOCAL_PUBLISH: {
        const struct local_publish *p = payload;
        return (p->addresses >> QCG_NODE_ADDRS) == 0 ? 0 : QCG_EPROTO;
    }
    case LOCAL_PLAN: {
        const struct local_plan *p = payload;
        if (!STR_OK(p, cluster) || !STR_OK(p, node) || !STR_OK(p, address) || !STR_OK(p, token) ||
            !STR_OK(p, fallback_address))
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
        for (int i = 0; i < QCG_NODE_ADDRS; i++)
            if (!STR_OK(p, address[i]))
                return QCG_EPROTO;
        return 0;
    }
    case LOCAL_REPORT: {
        const struct local_report *p = payload;
        if (!STR_OK(p, why) || p->ok > 1)
            return QCG_EPROTO;
        return 0;
    }
    case LOCAL_LOOKUP: {
        const struct local_lookup *p = payload;
        return p->only <= TECH_PROXY ? 0 : QCG_EPROTO;
    }
    case LOCAL_SITE_OK:
        return site_ok(payload) ? 0 : QCG_EPROTO;
    case LOCAL_PUNCHING_OK:
        return punching_ok(payload) ? 0 : QCG_EPROTO;
    case LOCAL_PROBE: {
        const struct local_probe *p = payload;
        if (!STR_OK(p, cluster) || p->cluster[0] == '\0' || p->seconds < 1 ||
            p->seconds > LOCAL_PROBE_SECONDS_MAX)
            return QCG_EPROTO;
        return 0;
    }
    case LOCAL_PROBE_OK: {
        const struct local_probe_ok *p = payload;
        if (!STR_OK(p, job) || !STR_OK(p, secret) || !STR_OK(p, cluster) || !STR_OK(p, node) ||
            !STR_OK(p, address) || p->rank < 0 || p->seconds < 1 ||
            p->seconds > LOCAL_PROBE_SECONDS_MAX)
            return QCG_EPROTO;
        return 0;
    }
    case LOCAL_OBSERVED: {
        const struct local_observed *p = payload;
        if (!WORD_OK(p, kind, kinds) || !STR_OK(p, public_address) ||
            !WORD_OK(p, mapping, mappings) || !STR_OK(p, inbound) ||
            !observed_inbound_valid(p->inbound) || p->port_preserving < -1 ||
            p->port_preserving > 1)
            return QCG_EPROTO;
        return 0;
    }
    default:
        /* PUBLISH: integers only. */
        return 0;
    }
}
