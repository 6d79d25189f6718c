/* SOAP calls from the helper to its frontend: the registration/poll thread and
   the blocking request calls made by worker threads. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "soapH.h"

#include "cmdqueue.h"
#include "daemon.h"
#include "handshake.h"
#include "identity.h"
#include "log.h"
#include "proto.h"
#include "qcgconn.h"
#include "upstream.h"

#define BACKOFF_BASE_MS 200
#define BACKOFF_MAX_MS 10000

struct upstream {
    const struct helper_config *cfg;
    struct contacts *cs;
    int can_intercept;
    struct soap_client_config scc;
    struct soap_pool *pool;          /* for the workers' requests */
    struct soap *soap;               /* the registration thread's own */
    pthread_t thread;
    int started;
    volatile sig_atomic_t stop;

    upstream_order_fn on_order;
    void *order_arg;
    uint64_t orders_epoch;           /* thread only: orders done so far in this epoch */
    uint64_t orders_seq;

    pthread_mutex_t lock;            /* guards the fields below */
    SOAP_SOCKET fd;                  /* the thread's connection, for upstream_stop */
    int connected;
    uint64_t epoch;
};

struct call_args {
    const struct contact *c;
    int32_t to_rank;
    uint32_t tried_mask;
    struct local_plan *plan;
    const char *token, *packet;        /* traverse */
    const struct local_report *report; /* report */
    uint32_t only;                     /* lookup: one technique (enum qcg_technique) */
    struct local_site *site;           /* siteInfo */
    const struct local_probe *probe;   /* probe */
    struct local_probe_ok *probe_ok;
    const struct local_observed *observed;
};

typedef int (*call_fn)(struct upstream *u, struct soap *soap, const struct call_args *a,
                       enum call_status *st, char *msg, size_t msglen);

/*
 * Every upstream connection goes through gSOAP's open/close hooks, installed
 * as a plugin on each context:
 *  - the frontend's certificate must name our own cluster: the job secrets we
 *    relay go to nobody else, even another service of the same grid CA;
 *  - a long-poll blocks in recv for up to UPSTREAM_POLL_WAIT seconds, so the
 *    thread's socket is tracked and shut down from upstream_stop; the lock
 *    makes sure the descriptor is never one gSOAP already closed (and the
 *    kernel may have reused).
 */
static const char plugin_id[] = "qcg-helper-upstream";

struct hooks {
    struct upstream *u;
    SOAP_SOCKET (*next_open)(struct soap *, const char *, const char *, int);
    int (*next_closesocket)(struct soap *, SOAP_SOCKET);
};

static int plugin_copy(struct soap *soap, struct soap_plugin *dst, struct soap_plugin *src)
{
    struct hooks *h = malloc(sizeof(*h));

    (void)soap;
    if (h == NULL)
        return SOAP_EOM;
    *h = *(struct hooks *)src->data;
    *dst = *src;
    dst->data = h;
    return SOAP_OK;
}

static void plugin_delete(struct soap *soap, struct soap_plugin *p)
{
    (void)soap;
    free(p->data);
}

static SOAP_SOCKET hook_open(struct soap *soap, const char *endpoint, const char *host, int port);
static int hook_closesocket(struct soap *soap, SOAP_SOCKET fd);

static int plugin_init(struct soap *soap, struct soap_plugin *p, void *arg)
{
    struct hooks *h = malloc(sizeof(*h));

    if (h == NULL)
        return SOAP_EOM;
    h->u = arg;
    h->next_open = soap->fopen;
    h->next_closesocket = soap->fclosesocket;
    soap->fopen = hook_open;
    soap->fclosesocket = hook_closesocket;
    p->id = plugin_id;
    p->data = h;
    p->fcopy = plugin_copy;
    p->fdelete = plugin_delete;
    return SOAP_OK;
}

/* Installs the hooks on a context once; -1 when out of memory. */
static int hook(struct upstream *u, struct soap *soap)
{
    if (soap_lookup_plugin(soap, plugin_id) != NULL)
        return 0;
    return soap_register_plugin_arg(soap, plugin_init, u) == SOAP_OK ? 0 : -1;
}

/* 0 when the TLS peer is the frontend of our cluster; -1 with the reason. */
static int check_frontend(struct upstream *u, struct soap *soap, char *why, size_t whylen)
{
    struct identity id;

    if (soap->ssl == NULL || identity_from_ssl(soap->ssl, &id) < 0) {
        snprintf(why, whylen, "the peer presented no qcg-connect certificate");
        return -1;
    }
    if (id.role != QCG_ROLE_FRONTEND || strcmp(id.cluster, u->cfg->cluster) != 0) {
        snprintf(why, whylen, "the peer is %s %s, not the frontend of cluster %s",
                 role_name(id.role), id.name, u->cfg->cluster);
        return -1;
    }
    return 0;
}

static SOAP_SOCKET hook_open(struct soap *soap, const char *endpoint, const char *host, int port)
{
    struct hooks *h = soap_lookup_plugin(soap, plugin_id);
    struct upstream *u = h->u;
    SOAP_SOCKET fd = h->next_open(soap, endpoint, host, port);
    char why[256];

    if (!soap_valid_socket(fd))
        return fd;
    if (check_frontend(u, soap, why, sizeof(why)) < 0) {
        /* Nothing was sent yet: close (TLS and socket) and fail the call. */
        soap->socket = fd;
        soap->fclose(soap);
        soap->socket = SOAP_INVALID_SOCKET;
        soap->keep_alive = 0;
        /* gSOAP keeps the pointer: the text must live in its memory. */
        soap_set_receiver_error(soap, soap_strdup(soap, why), NULL, SOAP_SSL_ERROR);
        return SOAP_INVALID_SOCKET;
    }
    if (soap == u->soap) {
        pthread_mutex_lock(&u->lock);
        u->fd = fd;
        if (u->stop)
            shutdown(fd, SHUT_RDWR);
        pthread_mutex_unlock(&u->lock);
    }
    return fd;
}

static int hook_closesocket(struct soap *soap, SOAP_SOCKET fd)
{
    struct hooks *h = soap_lookup_plugin(soap, plugin_id);
    struct upstream *u = h->u;

    if (soap == u->soap) {
        pthread_mutex_lock(&u->lock);
        if (u->fd == fd)
            u->fd = SOAP_INVALID_SOCKET;
        pthread_mutex_unlock(&u->lock);
    }
    return h->next_closesocket(soap, fd);
}

struct upstream *upstream_new(const struct helper_config *cfg, struct contacts *cs,
                              int can_intercept, char *err, size_t errlen)
{
    struct upstream *u = calloc(1, sizeof(*u));

    if (u == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    u->cfg = cfg;
    u->cs = cs;
    u->can_intercept = can_intercept;
    u->fd = SOAP_INVALID_SOCKET;
    pthread_mutex_init(&u->lock, NULL);
    u->scc.url = cfg->frontend;
    u->scc.tls.ca = cfg->ca;
    u->scc.tls.certkey = cfg->cert;
    u->scc.connect_timeout = UPSTREAM_CONNECT_TIMEOUT;
    u->scc.io_timeout = UPSTREAM_IO_TIMEOUT;

    /* A kept-alive connection per pool thread: a call never waits for one. */
    u->pool = soap_pool_new(&u->scc, cfg->threads, err, errlen);
    if (u->pool == NULL)
        goto fail;
    u->soap = soap_client_new(&u->scc, err, errlen);
    if (u->soap == NULL)
        goto fail;
    if (hook(u, u->soap) < 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    return u;
fail:
    upstream_free(u);
    return NULL;
}

const char *upstream_url(const struct upstream *u)
{
    return u->cfg->frontend;
}

void upstream_state(struct upstream *u, int *connected, uint64_t *epoch)
{
    pthread_mutex_lock(&u->lock);
    *connected = u->connected;
    *epoch = u->epoch;
    pthread_mutex_unlock(&u->lock);
}

static void set_state(struct upstream *u, int connected, uint64_t epoch)
{
    pthread_mutex_lock(&u->lock);
    u->connected = connected;
    if (connected)
        u->epoch = epoch;
    pthread_mutex_unlock(&u->lock);
}

int upstream_error(enum call_status st, const char *subcode)
{
    static const struct {
        const char *subcode;
        int code;
    } faults[] = {
        {"busy", QCG_EBUSY},       {"denied", QCG_EDENIED},  {"notfound", QCG_ENOTFOUND},
        {"invalid", QCG_EINVAL},   {"version", QCG_EPROTO},  {"unavailable", QCG_EUPSTREAM},
    };

    if (st == CALL_OK)
        return 0;
    if (st == CALL_FAULT && subcode != NULL) {
        for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
            if (strcmp(subcode, faults[i].subcode) == 0)
                return faults[i].code;
        }
    }
    return QCG_EUPSTREAM;
}

/* Classifies a finished call; fills msg and returns the QCG_E* code.  With
   frontend_said, a qcg:unavailable fault (the frontend is there, the broker
   behind it is not) says so rather than "refused". */
static int finish_call(struct upstream *u, struct soap *soap, int rc, const char *op,
                       int frontend_said, enum call_status *st, char *msg, size_t msglen)
{
    char subcode[32] = "", text[LOCAL_MESSAGE_MAX] = "";

    *st = soap_call_status(soap, rc, subcode, sizeof(subcode), text, sizeof(text));
    if (*st == CALL_OK)
        return 0;
    if (*st == CALL_UNREACHABLE)
        snprintf(msg, msglen, "%s: frontend %s unreachable: %s", op, u->cfg->frontend, text);
    else if (frontend_said && strcmp(subcode, "unavailable") == 0)
        snprintf(msg, msglen, "%s: frontend %s reached, but it says: %s", op, u->cfg->frontend,
                 text[0] ? text : "the broker is unavailable");
    else
        snprintf(msg, msglen, "%s refused: %s%s%s", op, subcode[0] ? subcode : "fault",
                 text[0] ? ": " : "", text);
    return upstream_error(*st, subcode);
}

static int finish(struct upstream *u, struct soap *soap, int rc, const char *op,
                  enum call_status *st, char *msg, size_t msglen)
{
    return finish_call(u, soap, rc, op, 0, st, msg, msglen);
}

static int call_publish(struct upstream *u, struct soap *soap, const struct call_args *a,
                        enum call_status *st, char *msg, size_t msglen)
{
    struct contact c = *a->c;
    struct qcg__contact con = {
        .job = c.job,
        .secret = c.secret,
        .rank = c.rank,
        .cluster = u->cfg->cluster,
        .node = u->cfg->node,
        .address = u->cfg->address,
        .port = c.port,
    };
    struct qcg__ackResponse resp;

    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__publish(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION, &con,
                                    &resp);
    rc = finish(u, soap, rc, "publish", st, msg, msglen);
    explicit_bzero(&c, sizeof(c));
    return rc;
}

static int call_withdraw(struct upstream *u, struct soap *soap, const struct call_args *a,
                         enum call_status *st, char *msg, size_t msglen)
{
    struct contact c = *a->c;
    struct qcg__ackResponse resp;

    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__withdraw(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION, c.job,
                                     c.secret, c.rank, u->cfg->node, &resp);
    rc = finish(u, soap, rc, "withdraw", st, msg, msglen);
    explicit_bzero(&c, sizeof(c));
    return rc;
}

static int call_lookup(struct upstream *u, struct soap *soap, const struct call_args *a,
                       enum call_status *st, char *msg, size_t msglen)
{
    struct contact c = *a->c;
    struct qcg__lookupResponse resp;
    char tried[128];
    const char *only =
        a->only != QCG_TECH_NONE ? technique_name((enum technique)a->only) : NULL;

    memset(&resp, 0, sizeof(resp));
    upstream_tried_text(a->tried_mask, tried, sizeof(tried));
    int rc = soap_call_qcg__lookup(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION, c.job,
                                   c.secret, c.rank, a->to_rank, tried[0] ? tried : NULL,
                                   (char *)only, &resp);
    rc = finish(u, soap, rc, "lookup", st, msg, msglen);
    if (rc == 0)
        rc = upstream_plan(&resp.plan, a->to_rank, a->plan, msg, msglen);
    /* One technique asked for: the broker's reason is the whole answer
       (qcg-probe prints it as the technique's "why"). */
    if (rc == QCG_ETECHNIQUE && only != NULL)
        snprintf(msg, msglen, "%s",
                 resp.plan.reason != NULL ? resp.plan.reason : "no reason given");
    explicit_bzero(&c, sizeof(c));
    return rc;
}

static int call_traverse(struct upstream *u, struct soap *soap, const struct call_args *a,
                         enum call_status *st, char *msg, size_t msglen)
{
    struct qcg__ackResponse resp;

    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__traverse(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION,
                                     (char *)a->token, (char *)a->packet, &resp);
    return finish(u, soap, rc, "traverse", st, msg, msglen);
}

static int call_report(struct upstream *u, struct soap *soap, const struct call_args *a,
                       enum call_status *st, char *msg, size_t msglen)
{
    struct contact c = *a->c;
    const struct local_report *r = a->report;
    struct qcg__ackResponse resp;

    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__report(
        soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION, c.job, c.secret, c.rank, r->to_rank,
        (char *)technique_name((enum technique)r->technique), r->ok ? 1 : 0,
        r->setup_ms > INT32_MAX ? INT32_MAX : (int)r->setup_ms,
        r->why[0] != '\0' ? (char *)r->why : NULL, &resp);
    rc = finish(u, soap, rc, "report", st, msg, msglen);
    explicit_bzero(&c, sizeof(c));
    return rc;
}

static int pool_call(struct upstream *u, call_fn fn, const struct call_args *a, char *msg,
                     size_t msglen)
{
    for (int attempt = 0;; attempt++) {
        struct soap *soap = soap_pool_get(u->pool);
        int reused = soap_valid_socket(soap->socket);
        enum call_status st;

        if (hook(u, soap) < 0) {
            soap_pool_put(u->pool, soap, 0);
            snprintf(msg, msglen, "out of memory");
            return QCG_ENOMEM;
        }
        int rc = fn(u, soap, a, &st, msg, msglen);

        soap_client_reset(soap);
        soap_pool_put(u->pool, soap, st == CALL_UNREACHABLE);
        /* A kept-alive connection that the frontend dropped (it restarted)
           fails once; a fresh connection tells whether it is really down. */
        if (st == CALL_UNREACHABLE && reused && attempt == 0)
            continue;
        return rc;
    }
}

int upstream_publish(struct upstream *u, const struct contact *c, char *msg, size_t msglen)
{
    struct call_args a = {.c = c};

    return pool_call(u, call_publish, &a, msg, msglen);
}

int upstream_withdraw(struct upstream *u, const struct contact *c, char *msg, size_t msglen)
{
    struct call_args a = {.c = c};

    return pool_call(u, call_withdraw, &a, msg, msglen);
}

int upstream_lookup(struct upstream *u, const struct contact *from, int32_t to_rank,
                    uint32_t tried_mask, uint32_t only, struct local_plan *plan, char *msg,
                    size_t msglen)
{
    struct call_args a = {
        .c = from, .to_rank = to_rank, .tried_mask = tried_mask, .only = only, .plan = plan};

    return pool_call(u, call_lookup, &a, msg, msglen);
}

int upstream_traverse(struct upstream *u, const char *token, const char *packet_hex, char *msg,
                      size_t msglen)
{
    struct call_args a = {.token = token, .packet = packet_hex};

    return pool_call(u, call_traverse, &a, msg, msglen);
}

int upstream_report(struct upstream *u, const struct contact *from, const struct local_report *r,
                    char *msg, size_t msglen)
{
    struct call_args a = {.c = from, .report = r};

    return pool_call(u, call_report, &a, msg, msglen);
}

void upstream_tried_text(uint32_t tried_mask, char *out, size_t outlen)
{
    size_t used = 0;

    if (outlen > 0)
        out[0] = '\0';
    for (int t = TECH_DIRECT; t <= TECH_PROXY; t++) {
        if (!(tried_mask & (1u << t)))
            continue;
        int n = snprintf(out + used, outlen - used, "%s%s", used ? "," : "",
                         technique_name((enum technique)t));
        if (n < 0 || (size_t)n >= outlen - used)
            return;
        used += (size_t)n;
    }
}

void upstream_set_can_intercept(struct upstream *u, int can_intercept)
{
    u->can_intercept = can_intercept;
}

void upstream_on_order(struct upstream *u, upstream_order_fn fn, void *arg)
{
    u->on_order = fn;
    u->order_arg = arg;
}

/* An inject order's packet: lowercase hex of a SYN that fits our engine. */
static int packet_hex_ok(const char *p)
{
    size_t n = strlen(p);

    if (n < 2 * 40 || n > 2 * QCG_PACKET_MAX || n % 2 != 0)
        return 0;
    return strspn(p, "0123456789abcdef") == n;
}

/* probe-listen: a probe job's rank and secret on this node, for a while. */
static int probe_order_check(const struct command *c, const char *node, char *why,
                             size_t whylen)
{
    if (strcmp(c->node, node) != 0)
        snprintf(why, whylen, "meant for node '%s', this is %s", c->node, node);
    else if (!job_valid(c->job) || c->rank < 0)
        snprintf(why, whylen, "malformed job id or rank");
    else if (strncmp(c->job, QCG_PROBE_JOB_PREFIX, QCG_PROBE_JOB_PREFIX_LEN) != 0)
        snprintf(why, whylen, "job '%s' is not a probe job (probe-...)", c->job);
    else if (!secret_valid(c->token) || strlen(c->token) >= LOCAL_SECRET_MAX)
        snprintf(why, whylen, "the job secret is missing or malformed");
    else if (c->seconds < 1)
        snprintf(why, whylen, "seconds %d: not a life", c->seconds);
    else
        return 0;
    return -1;
}

int upstream_order_check(const struct command *c, const char *node, char *why, size_t whylen)
{
    unsigned char addr[sizeof(struct in6_addr)];
    int back = strcmp(c->kind, "connect-back") == 0;
    int inject = strcmp(c->kind, "inject") == 0;
    size_t tlen = strlen(c->token);

    if (strcmp(c->kind, "probe-listen") == 0)
        return probe_order_check(c, node, why, whylen);
    if (!back && !inject && strcmp(c->kind, "proxy-connect") != 0 &&
        strcmp(c->kind, "punch") != 0)
        snprintf(why, whylen, "unknown order \"%s\"", c->kind);
    else if (strcmp(c->node, node) != 0)
        snprintf(why, whylen, "meant for node '%s', this is %s", c->node, node);
    else if (!job_valid(c->job) || c->rank < 0 || c->peer_rank < 0)
        snprintf(why, whylen, "malformed job id or rank");
    else if (inet_pton(AF_INET, c->address, addr) != 1 &&
             (inject || inet_pton(AF_INET6, c->address, addr) != 1))
        snprintf(why, whylen, "address '%s' is not an IP%s address", c->address,
                 inject ? "v4" : "");
    else if (c->port < 1 || c->port > 65535)
        snprintf(why, whylen, "port %d outside 1-65535", c->port);
    /* The token goes into the process's hello (connect-back) or the proxy's
       preamble or the reflector's line: all have fixed fields. */
    else if (tlen == 0 || tlen >= (back ? (size_t)HS_TOKEN_MAX : (size_t)LOCAL_TOKEN_MAX))
        snprintf(why, whylen, "token missing or too long (%zu characters)", tlen);
    else if (inject && !packet_hex_ok(c->packet))
        snprintf(why, whylen, "packet is not the hex of 40 to %d bytes", QCG_PACKET_MAX);
    else
        return 0;
    return -1;
}

static int copy_field(char *dst, size_t size, const char *src)
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
        copy_field(out->token, sizeof(out->token), p->token) < 0 || p->port < 0 ||
        p->port > 65535 || (t == TECH_DIRECT && (p->port == 0 || out->address[0] == '\0'))) {
        snprintf(msg, msglen, "lookup: the frontend sent a malformed %s plan", p->technique);
        memset(out, 0, sizeof(*out));
        return QCG_EUPSTREAM;
    }
    out->technique = local_technique((enum technique)t);
    out->port = (uint16_t)p->port;
    return 0;
}

/* qcg-probe's calls. */

/* "address:port" of a service endpoint into out ("" for none); -1 when it
   does not fit or is malformed. */
static int endpoint_text(const struct qcg__endpoint *e, char *out, size_t outlen)
{
    out[0] = '\0';
    if (e == NULL)
        return 0;
    if (e->address == NULL || e->address[0] == '\0' || e->port < 1 || e->port > 65535)
        return -1;
    int n = snprintf(out, outlen, "%s:%d", e->address, e->port);
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
static int site_copy(const struct qcg__siteInfoResponse *r, struct local_site *out)
{
    if (cluster_copy(&r->cluster, &out->cluster) < 0 ||
        copy_field(out->broker, sizeof(out->broker), r->broker) < 0 ||
        copy_field(out->frontend_seen_from, sizeof(out->frontend_seen_from),
                   r->frontendSeenFrom) < 0 ||
        endpoint_text(r->reflector, out->reflector, sizeof(out->reflector)) < 0 ||
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

static int call_site(struct upstream *u, struct soap *soap, const struct call_args *a,
                     enum call_status *st, char *msg, size_t msglen)
{
    struct qcg__siteInfoResponse resp;

    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__siteInfo(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION, &resp);
    rc = finish_call(u, soap, rc, "siteInfo", 1, st, msg, msglen);
    if (rc == 0 && site_copy(&resp, a->site) < 0) {
        snprintf(msg, msglen, "siteInfo: the frontend sent a malformed or oversized answer");
        rc = QCG_EUPSTREAM;
    }
    return rc;
}

static int call_probe(struct upstream *u, struct soap *soap, const struct call_args *a,
                      enum call_status *st, char *msg, size_t msglen)
{
    struct qcg__probeResponse resp;
    struct local_probe_ok *out = a->probe_ok;

    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__probe(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION,
                                  (char *)a->probe->cluster, (int)a->probe->seconds, &resp);
    rc = finish_call(u, soap, rc, "probe", 1, st, msg, msglen);
    if (rc != 0)
        return rc;
    memset(out, 0, sizeof(*out));
    if (resp.job == NULL || !job_valid(resp.job) || resp.secret == NULL ||
        !secret_valid(resp.secret) || copy_field(out->job, sizeof(out->job), resp.job) < 0 ||
        copy_field(out->secret, sizeof(out->secret), resp.secret) < 0 ||
        copy_field(out->cluster, sizeof(out->cluster), resp.cluster) < 0 ||
        copy_field(out->node, sizeof(out->node), resp.node) < 0 ||
        copy_field(out->address, sizeof(out->address), resp.address) < 0 || resp.rank < 0 ||
        resp.seconds < 1 || resp.seconds > QCG_PROBE_TTL_MAX) {
        explicit_bzero(out, sizeof(*out));
        snprintf(msg, msglen, "probe: the frontend sent a malformed answer");
        return QCG_EUPSTREAM;
    }
    out->rank = resp.rank;
    out->seconds = (uint32_t)resp.seconds;
    return 0;
}

static int call_observed(struct upstream *u, struct soap *soap, const struct call_args *a,
                         enum call_status *st, char *msg, size_t msglen)
{
    const struct local_observed *o = a->observed;
    /* cluster and node: the frontend sets them from our certificate. */
    struct qcg__observation obs = {
        .kind = (char *)o->kind,
        .publicAddress = o->public_address[0] ? (char *)o->public_address : NULL,
        .portPreserving = o->port_preserving,
        .mapping = (char *)o->mapping,
        .inbound = (char *)o->inbound,
    };
    struct qcg__ackResponse resp;

    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__observed(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION, &obs,
                                     &resp);
    return finish_call(u, soap, rc, "observed", 1, st, msg, msglen);
}

int upstream_site(struct upstream *u, struct local_site *site, char *msg, size_t msglen)
{
    struct call_args a = {.site = site};

    return pool_call(u, call_site, &a, msg, msglen);
}

int upstream_probe(struct upstream *u, const struct local_probe *p, struct local_probe_ok *ok,
                   char *msg, size_t msglen)
{
    struct call_args a = {.probe = p, .probe_ok = ok};

    return pool_call(u, call_probe, &a, msg, msglen);
}

int upstream_observed(struct upstream *u, const struct local_observed *o, char *msg,
                      size_t msglen)
{
    struct call_args a = {.observed = o};

    return pool_call(u, call_observed, &a, msg, msglen);
}

/* The registration thread. */

static int register_node(struct upstream *u, uint64_t *epoch, char *msg, size_t msglen)
{
    struct qcg__node node = {
        .name = u->cfg->node,
        .address = u->cfg->address,
        .portLow = u->cfg->ports[0],
        .portHigh = u->cfg->ports[1],
        .canIntercept = u->can_intercept,
    };
    struct qcg__registerResponse resp;
    enum call_status st;

    memset(&resp, 0, sizeof(resp));
    soap_client_set_wait(u->soap, 0);
    int rc = soap_call_qcg__registerNode(u->soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION,
                                         &node, &resp);
    rc = finish(u, u->soap, rc, "registerNode", &st, msg, msglen);
    if (rc == 0)
        *epoch = resp.epoch;
    soap_client_reset(u->soap);
    return rc == 0 ? 0 : -1;
}

/* After a (re-)registration: the frontend knows nothing of our contacts. */
static int republish(struct upstream *u, size_t *count)
{
    struct contact *list;
    size_t n;
    int rc = 0;

    *count = 0;
    contacts_sync_exclusive(u->cs);
    if (contacts_snapshot(u->cs, &list, &n) < 0) {
        contacts_sync_end(u->cs);
        log_warnx("out of memory: contacts not re-published");
        return -1;
    }
    for (size_t i = 0; i < n && !u->stop; i++) {
        struct call_args a = {.c = &list[i]};
        char msg[LOCAL_MESSAGE_MAX];
        enum call_status st;

        if (call_publish(u, u->soap, &a, &st, msg, sizeof(msg)) == 0) {
            (*count)++;
        } else if (st == CALL_UNREACHABLE) {
            log_warnx("re-publish of job %s rank %d: %s", list[i].job, list[i].rank, msg);
            rc = -1;
        } else {
            log_warnx("re-publish of job %s rank %d (pid %d): %s", list[i].job, list[i].rank,
                      (int)list[i].pid, msg);
        }
        soap_client_reset(u->soap);
        if (rc < 0)
            break;
    }
    contacts_sync_end(u->cs);
    explicit_bzero(list, n * sizeof(*list));
    free(list);
    return rc;
}

/* Withdrawals that failed while the frontend was away. */
static void retry_orphans(struct upstream *u)
{
    struct contact *list;
    size_t n, i;

    contacts_sync_exclusive(u->cs);
    if (contacts_orphans_take(u->cs, &list, &n) < 0) {
        contacts_sync_end(u->cs);
        return;
    }
    for (i = 0; i < n && !u->stop; i++) {
        struct call_args a = {.c = &list[i]};
        char msg[LOCAL_MESSAGE_MAX];
        enum call_status st;

        /* A process published the same rank again meanwhile: its contact wins. */
        if (contacts_held(u->cs, list[i].job, list[i].rank, 0))
            continue;
        int rc = call_withdraw(u, u->soap, &a, &st, msg, sizeof(msg));
        soap_client_reset(u->soap);
        if (st == CALL_UNREACHABLE)
            break;
        if (rc == 0)
            log_info("withdrew job %s rank %d (its process ended while the frontend was away)",
                     list[i].job, list[i].rank);
        else
            log_debug("late withdraw of job %s rank %d: %s", list[i].job, list[i].rank, msg);
    }
    for (; i < n; i++)
        contacts_orphan_add(u->cs, &list[i]);
    contacts_sync_end(u->cs);
    explicit_bzero(list, n * sizeof(*list));
    free(list);
}

/* An order for this node: checked, executed once per (epoch, seq) even when
   a poll after a lost connection delivers it again. */
static void take_order(struct upstream *u, uint64_t epoch, const struct qcg__command *in)
{
    struct command c;
    char why[200];

    memset(&c, 0, sizeof(c));
    c.seq = in->seq;
    c.rank = in->rank;
    c.peer_rank = in->peerRank;
    c.port = in->port;
    c.seconds = in->seconds;
    if (in->kind == NULL || copy_field(c.kind, sizeof(c.kind), in->kind) < 0 ||
        copy_field(c.job, sizeof(c.job), in->job) < 0 ||
        copy_field(c.node, sizeof(c.node), in->node) < 0 ||
        copy_field(c.address, sizeof(c.address), in->address) < 0 ||
        copy_field(c.token, sizeof(c.token), in->token) < 0 ||
        copy_field(c.packet, sizeof(c.packet), in->packet) < 0) {
        log_warnx("command %llu: a field does not fit; ignored", (unsigned long long)in->seq);
        return;
    }
    if (epoch == u->orders_epoch && c.seq <= u->orders_seq) {
        log_debug("command %llu (%s) seen before; not repeated", (unsigned long long)c.seq,
                  c.kind);
        return;
    }
    u->orders_epoch = epoch;
    u->orders_seq = c.seq;
    if (upstream_order_check(&c, u->cfg->node, why, sizeof(why)) < 0) {
        log_warnx("command %llu (%s for job %s rank %d) refused: %s", (unsigned long long)c.seq,
                  c.kind, c.job, c.rank, why);
    } else if (u->on_order == NULL) {
        log_warnx("command %llu (%s) dropped: nothing executes orders", (unsigned long long)c.seq,
                  c.kind);
    } else {
        log_debug("command %llu: %s job %s rank %d for initiator rank %d", (unsigned long long)c.seq,
                  c.kind, c.job, c.rank, c.peer_rank);
        u->on_order(u->order_arg, &c);
    }
    explicit_bzero(&c, sizeof(c));
}

/* One long-poll: 0 same epoch, 1 the frontend restarted, -1 failed. */
static int poll_once(struct upstream *u, uint64_t epoch, uint64_t *ack, char *msg, size_t msglen)
{
    struct qcg__pollResponse resp;
    enum call_status st;

    memset(&resp, 0, sizeof(resp));
    soap_client_set_wait(u->soap, UPSTREAM_POLL_WAIT);
    int rc = soap_call_qcg__poll(u->soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION, epoch,
                                 *ack, UPSTREAM_POLL_WAIT, &resp);
    rc = finish(u, u->soap, rc, "poll", &st, msg, msglen);
    if (rc != 0) {
        soap_client_reset(u->soap);
        return -1;
    }
    if (resp.epoch != epoch) {
        log_info("frontend %s restarted (epoch %llu, was %llu): registering again",
                 u->cfg->frontend, (unsigned long long)resp.epoch, (unsigned long long)epoch);
        soap_client_reset(u->soap);
        return 1;
    }
    for (int i = 0; i < resp.__sizeCommand && resp.command != NULL; i++) {
        const struct qcg__command *c = &resp.command[i];
        /* invalidate and flush are about caches, which the helper does not
           keep; orders name this node. */
        if (c->node != NULL && c->node[0] != '\0')
            take_order(u, epoch, c);
        else
            log_debug("command %llu: %s job %s rank %d", (unsigned long long)c->seq,
                      c->kind != NULL ? c->kind : "(none)", c->job != NULL ? c->job : "-",
                      c->rank);
        if (c->seq > *ack)
            *ack = c->seq;
    }
    soap_client_reset(u->soap);
    return 0;
}

static void *upstream_main(void *arg)
{
    struct upstream *u = arg;
    char msg[LOCAL_MESSAGE_MAX], last[LOCAL_MESSAGE_MAX] = "";
    unsigned failures = 0;
    uint64_t epoch = 0, ack = 0;
    int registered = 0;

    while (!u->stop) {
        if (!registered) {
            size_t n;
            if (register_node(u, &epoch, msg, sizeof(msg)) < 0)
                goto fail;
            if (republish(u, &n) < 0)
                goto fail;
            registered = 1;
            ack = 0;
            set_state(u, 1, epoch);
            log_info("registered node %s/%s with %s (epoch %llu, %zu contacts re-published)",
                     u->cfg->cluster, u->cfg->node, u->cfg->frontend,
                     (unsigned long long)epoch, n);
            failures = 0;
        }
        retry_orphans(u);
        int rc = poll_once(u, epoch, &ack, msg, sizeof(msg));
        if (rc == 1) {
            registered = 0;
            set_state(u, 0, 0);
            continue;
        }
        if (rc == 0)
            continue;
    fail:
        if (u->stop)
            break;
        registered = 0;
        set_state(u, 0, 0);
        /* A new failure is news; the same one again is not. */
        if (failures == 0 || strcmp(msg, last) != 0)
            log_warnx("%s; retrying", msg);
        else
            log_debug("%s (attempt %u)", msg, failures + 1);
        snprintf(last, sizeof(last), "%s", msg);
        sleep_unless_stopped(backoff_ms(failures, BACKOFF_BASE_MS, BACKOFF_MAX_MS), &u->stop);
        failures++;
    }
    set_state(u, 0, 0);
    return NULL;
}

int upstream_start(struct upstream *u, char *err, size_t errlen)
{
    int rc = pthread_create(&u->thread, NULL, upstream_main, u);

    if (rc != 0) {
        snprintf(err, errlen, "cannot start the upstream thread: %s", strerror(rc));
        return -1;
    }
    u->started = 1;
    return 0;
}

void upstream_stop(struct upstream *u)
{
    u->stop = 1;
    pthread_mutex_lock(&u->lock);
    if (soap_valid_socket(u->fd))
        shutdown(u->fd, SHUT_RDWR);
    pthread_mutex_unlock(&u->lock);
}

void upstream_free(struct upstream *u)
{
    if (u == NULL)
        return;
    if (u->started) {
        upstream_stop(u);
        pthread_join(u->thread, NULL);
    }
    if (u->soap != NULL)
        soap_client_free(u->soap);
    if (u->pool != NULL)
        soap_pool_free(u->pool);
    pthread_mutex_destroy(&u->lock);
    free(u);
}
