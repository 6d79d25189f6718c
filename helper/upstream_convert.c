/* The frontend's answers in the local protocol's terms: plans, the site
   picture, the techniques tried. */
#include <stdio.h>
#include <string.h>

#include "address.h"
#include "proto.h"
#include "qcgconn.h"
#include "upstream_internal.h"

const char *upstream_attempt_name(uint32_t t, bool punch6)
{
    return t == TECH_PUNCH6 && !punch6 ? technique_name(TECH_HOLEPUNCH) : attempt_name((int)t);
}

void upstream_tried_text(uint32_t tried_mask, bool punch6, char *out, size_t outlen)
{
    size_t used = 0;

    if (outlen > 0)
        out[0] = '\0';
    /* Said as plain holepunch, the IPv6 punch needs saying once only. */
    if (!punch6 && (tried_mask & (1u << TECH_HOLEPUNCH)))
        tried_mask &= ~(1u << TECH_PUNCH6);
    for (int t = TECH_DIRECT; t <= TECH_PUNCH6; t++) {
        if (!(tried_mask & (1u << t)))
            continue;
        int n = snprintf(out + used, outlen - used, "%s%s", used ? "," : "",
                         upstream_attempt_name((uint32_t)t, punch6));
        if (n < 0 || (size_t)n >= outlen - used)
            return;
        used += (size_t)n;
    }
}

int copy_field(char *dst, size_t size, const char *src)
{
    if (src == NULL) {
        dst[0] = '\0';
        return 0;
    }
    if (strlen(src) >= size)
        return -1;
    memcpy(dst, src, strlen(src) + 1);
    return 0;
}

static uint32_t local_technique(enum technique t)
{
    switch (t) {
    case TECH_DIRECT:
        return QCG_TECH_DIRECT;
    case TECH_REVERSED:
        return QCG_TECH_REVERSED;
    case TECH_TRAVERSING:
        return QCG_TECH_TRAVERSING;
    case TECH_HOLEPUNCH:
        return QCG_TECH_HOLEPUNCH;
    case TECH_PROXY:
        return QCG_TECH_PROXY;
    default:
        return QCG_TECH_NONE;
    }
}

int upstream_plan(const struct qcg__plan *p, int32_t to_rank, struct local_plan *out, char *msg,
                  size_t msglen)
{
    memset(out, 0, sizeof(*out));
    if (p->status == NULL) {
        snprintf(msg, msglen, "lookup: the frontend sent a plan without a status");
        return QCG_EUPSTREAM;
    }
    if (strcmp(p->status, "notfound") == 0) {
        snprintf(msg, msglen, "rank %d is not published (yet)", to_rank);
        return QCG_ENOTFOUND;
    }
    if (strcmp(p->status, "unavailable") == 0) {
        snprintf(msg, msglen, "rank %d needs technique %s: %s", to_rank,
                 p->technique != NULL ? p->technique : "(unnamed)",
                 p->reason != NULL ? p->reason : "no reason given");
        return QCG_ETECHNIQUE;
    }
    if (strcmp(p->status, "ok") != 0) {
        snprintf(msg, msglen, "lookup: the frontend sent an unknown plan status");
        return QCG_EUPSTREAM;
    }
    int t = p->technique != NULL ? technique_parse(p->technique) : -1;
    if (t <= (int)TECH_NONE) {
        snprintf(msg, msglen, "lookup: the frontend sent an unknown technique");
        return QCG_EUPSTREAM;
    }
    if (copy_field(out->cluster, sizeof(out->cluster), p->cluster) < 0 ||
        copy_field(out->node, sizeof(out->node), p->node) < 0 ||
        copy_field(out->address, sizeof(out->address), p->address) < 0 ||
        copy_field(out->token, sizeof(out->token), p->token) < 0 ||
        copy_field(out->fallback_address, sizeof(out->fallback_address), p->fallbackAddress) < 0 ||
        p->port < 0 || p->port > 65535 ||
        (t == TECH_DIRECT && (p->port == 0 || out->address[0] == '\0')) ||
        (out->fallback_address[0] != '\0' &&
         (t != TECH_DIRECT || address_family(out->fallback_address) != AF_INET))) {
        snprintf(msg, msglen, "lookup: the frontend sent a malformed %s plan", p->technique);
        memset(out, 0, sizeof(*out));
        return QCG_EUPSTREAM;
    }
    out->technique = local_technique((enum technique)t);
    out->port = (uint16_t)p->port;
    return 0;
}

/* "address:port" of a service endpoint into out ("" for none); -1 when it
   does not fit or is malformed. */
static int endpoint_text(const struct qcg__endpoint *e, char *out, size_t outlen)
{
    out[0] = '\0';
    if (e == NULL)
        return 0;
    if (e->address == NULL || e->address[0] == '\0' || e->port < 1 || e->port > 65535)
        return -1;
    int n = hostport_format(e->address, e->port, out, outlen);
    return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

static int cluster_copy(const struct qcg__cluster *in, struct local_cluster *out)
{
    memset(out, 0, sizeof(*out));
    if (copy_field(out->name, sizeof(out->name), in->name) < 0 ||
        copy_field(out->kind, sizeof(out->kind), in->kind) < 0 || in->portLow < 0 ||
        in->portLow > 65535 || in->portHigh < 0 || in->portHigh > 65535)
        return -1;
    for (int i = 0; i < in->__sizePublicAddress && i < LOCAL_PUBLIC_MAX; i++) {
        if (in->publicAddress == NULL ||
            copy_field(out->public_address[i], sizeof(out->public_address[i]),
                       in->publicAddress[i]) < 0)
            return -1;
    }
    out->open_low = (uint16_t)in->portLow;
    out->open_high = (uint16_t)in->portHigh;
    return 0;
}

/* The grid's part of the answer (the helper adds the node's own). */
int site_copy(const struct qcg__siteInfoResponse *r, struct local_site *out)
{
    if (cluster_copy(&r->cluster, &out->cluster) < 0 ||
        copy_field(out->broker, sizeof(out->broker), r->broker) < 0 ||
        copy_field(out->frontend_seen_from, sizeof(out->frontend_seen_from), r->frontendSeenFrom) <
            0 ||
        endpoint_text(r->reflector, out->reflector, sizeof(out->reflector)) < 0 ||
        endpoint_text(r->reflector6, out->reflector6, sizeof(out->reflector6)) < 0 ||
        r->__sizeProxy < 0 || r->__sizePeer < 0 || (r->__sizeProxy > 0 && r->proxy == NULL) ||
        (r->__sizePeer > 0 && r->peer == NULL))
        return -1;
    for (int i = 0; i < r->__sizeProxy && i < LOCAL_PROXIES_MAX; i++) {
        if (endpoint_text(&r->proxy[i], out->proxy[i], sizeof(out->proxy[i])) < 0)
            return -1;
        out->proxies++;
    }
    for (int i = 0; i < r->__sizePeer && i < LOCAL_CLUSTERS_MAX; i++) {
        if (cluster_copy(&r->peer[i], &out->peer[i]) < 0)
            return -1;
        out->clusters++;
    }
    out->clusters_total = (uint32_t)r->__sizePeer;
    return 0;
}
