/* The initiator's side of traversing and hole punching; see attempts.h. */
#include "attempts.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "address.h"
#include "hex.h"
#include "local.h"
#include "log.h"
#include "proto.h"
#include "punch.h"
#include "qcgconn.h"
#include "privsep.h"
#include "upstream.h"

struct attempt {
    struct attempts *as;
    struct attempt *prev, *next;
    struct conn *c; /* held: the process's connection the plan went to */
    uint32_t rid;
    struct local_plan plan;
    struct punch *punch;
    int fd; /* holepunch: the connected socket until it is handed over */
    uv_timer_t retry;
    int timer_open;
    unsigned tries;
    int watching; /* traversing: the SYN watch may still call back */
    uv_work_t work;
    char packet[QCG_PACKET_HEX_MAX];
    int rc;
    char msg[LOCAL_MESSAGE_MAX];
};

struct attempts {
    uv_loop_t *loop;
    const struct helper_config *cfg;
    struct upstream *up;
    struct privsep *ps;
    struct attempt *list;
    int closed;
};

struct attempts *attempts_new(uv_loop_t *loop, const struct helper_config *cfg, struct upstream *up,
                              struct privsep *ps)
{
    struct attempts *as = calloc(1, sizeof(*as));

    if (as == NULL)
        return NULL;
    as->loop = loop;
    as->cfg = cfg;
    as->up = up;
    as->ps = ps;
    return as;
}

static void on_timer_closed(uv_handle_t *h)
{
    struct attempt *a = h->data;

    explicit_bzero(a, sizeof(*a));
    free(a);
}

/* Forgets the attempt; the memory goes once its timer handle is closed. */
static void attempt_free(struct attempt *a)
{
    struct attempts *as = a->as;

    if (a->prev != NULL)
        a->prev->next = a->next;
    else if (as->list == a)
        as->list = a->next;
    if (a->next != NULL)
        a->next->prev = a->prev;
    a->prev = a->next = NULL;
    if (a->fd >= 0)
        close(a->fd);
    a->fd = -1;
    if (a->c != NULL)
        local_conn_drop(a->c);
    a->c = NULL;
    if (a->timer_open) {
        a->timer_open = 0;
        uv_close((uv_handle_t *)&a->retry, on_timer_closed);
    } else {
        explicit_bzero(a, sizeof(*a));
        free(a);
    }
}

/* The attempt failed on our side: tell the process at once. */
static void attempt_fail(struct attempt *a, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void attempt_fail(struct attempt *a, int code, const char *fmt, ...)
{
    char why[LOCAL_MESSAGE_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    log_info("%s to %s/%s port %u failed on our side: %s",
             technique_name((enum technique)a->plan.technique), a->plan.cluster, a->plan.node,
             a->plan.port, why);
    if (a->c != NULL && local_conn_alive(a->c))
        local_conn_error(a->c, a->rid, code, why);
    attempt_free(a);
}

static void do_traverse(uv_work_t *w)
{
    struct attempt *a = w->data;

    a->rc = upstream_traverse(a->as->up, a->plan.token, a->packet, a->msg, sizeof(a->msg));
}

static void traverse_sent(uv_work_t *w, int status)
{
    struct attempt *a = w->data;

    if (status == UV_ECANCELED || a->as->closed) {
        attempt_free(a);
        return;
    }
    if (a->rc < 0) {
        attempt_fail(a, QCG_EPEER, "the broker did not take the SYN: %s", a->msg);
        return;
    }
    log_debug("traversing to %s/%s port %u: SYN handed over", a->plan.cluster, a->plan.node,
              a->plan.port);
    attempt_free(a);
}

static void on_syn(void *arg, int status, const uint8_t *pkt, size_t len, const char *why)
{
    struct attempt *a = arg;

    a->watching = 0;
    if (a->as->closed) {
        attempt_free(a);
        return;
    }
    if (status < 0 || len == 0 || len > QCG_PACKET_MAX) {
        attempt_fail(a, QCG_EPEER, "no SYN towards %s port %u: %s", a->plan.address, a->plan.port,
                     why != NULL ? why : "packet too long");
        return;
    }
    hex_encode(pkt, len, a->packet);
    a->work.data = a;
    if (uv_queue_work(a->as->loop, &a->work, do_traverse, traverse_sent) < 0)
        attempt_fail(a, QCG_ESYS, "traversing: cannot queue the call to the broker");
}

/* The SYN watch is in place (or could not be made): now the process gets
   its plan, and sends the SYN. */
static void on_watch_acked(void *arg, int status, const char *why)
{
    struct attempt *a = arg;

    if (status < 0)
        a->watching = 0;
    if (!a->as->closed && a->c != NULL && local_conn_alive(a->c))
        local_conn_plan(a->c, a->rid, &a->plan, status < 0 ? why : NULL);
    /* A watch in place ends in on_syn (a SYN, or none within its time). */
    if (status < 0)
        attempt_free(a);
}

static void deliver(struct attempt *a);

static void on_retry(uv_timer_t *t)
{
    deliver(t->data);
}

/* The punched socket goes to the process on the connection the plan went to. */
static void deliver(struct attempt *a)
{
    struct local_incoming in;
    char why[200] = "";

    if (a->c == NULL || !local_conn_alive(a->c)) {
        log_info("holepunch to %s/%s: the process gave up before the socket was ready",
                 a->plan.cluster, a->plan.node);
        attempt_free(a);
        return;
    }
    memset(&in, 0, sizeof(in));
    in.peer_rank = -1; /* the op knows its peer */
    in.technique = QCG_TECH_HOLEPUNCH;
    in.role = LOCAL_ROLE_HELLO;
    int rc = local_conn_pass(a->c, a->rid, &in, a->fd, why, sizeof(why));
    if (rc == 0) {
        attempt_free(a);
        return;
    }
    if (rc < 0) {
        attempt_fail(a, QCG_EPEER, "holepunch: %s", why);
        return;
    }
    if (++a->tries > ATTEMPT_DELIVER_TRIES) {
        attempt_fail(a, QCG_EPEER, "holepunch: the process does not read its connection");
        return;
    }
    if (!a->timer_open) {
        uv_timer_init(a->as->loop, &a->retry);
        a->retry.data = a;
        a->timer_open = 1;
    }
    uv_timer_start(&a->retry, on_retry, ATTEMPT_DELIVER_MS, 0);
}

static void on_punched(void *arg, const struct punch_result *r)
{
    struct attempt *a = arg;

    a->punch = NULL;
    if (r->status != 0) {
        attempt_fail(a, QCG_EPEER, "%s", r->why);
        return;
    }
    a->fd = r->fd;
    log_info("holepunch to %s/%s: connected from port %u (seen as %s) to %s in %u ms%s",
             a->plan.cluster, a->plan.node, r->local_port, r->own_text, r->peer_text, r->setup_ms,
             strchr(r->peer_addr, ':') != NULL ? ", over IPv6" : "");
    deliver(a);
}

int attempt_begin(struct attempts *as, struct conn *c, uint32_t rid, const struct local_plan *plan,
                  char *why, size_t whylen)
{
    struct rawpkt_addr addr;
    struct attempt *a;

    if (as->closed) {
        snprintf(why, whylen, "the helper is stopping");
        return -1;
    }
    /* Traversing goes over the family of the target's address, a punch
       over its reflector's. */
    if (rawpkt_addr_parse(plan->address, &addr) < 0) {
        snprintf(why, whylen, "%s plan: '%s' is not an IP address",
                 technique_name((enum technique)plan->technique), plan->address);
        return -1;
    }
    if (plan->technique == QCG_TECH_TRAVERSING && as->ps == NULL) {
        snprintf(why, whylen, "traversing planned, but this helper cannot intercept");
        return -1;
    }
    a = calloc(1, sizeof(*a));
    if (a == NULL) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    a->as = as;
    a->rid = rid;
    a->plan = *plan;
    a->fd = -1;
    if (plan->technique == QCG_TECH_TRAVERSING) {
        if (privsep_watch_syn(as->ps, addr, plan->port, ATTEMPT_SYN_WAIT_MS, on_watch_acked, on_syn,
                              a, why, whylen) < 0) {
            free(a);
            return -1;
        }
        a->watching = 1;
    } else {
        struct punch_params p;

        punch_params_for_node(&p, plan->address, plan->port, plan->token,
                              (const char(*)[QCG_ADDR_MAX])as->cfg->addrs, as->cfg->naddrs,
                              as->cfg->ports, as->cfg->first_ttl);
        a->punch = punch_start(as->loop, &p, on_punched, a, why, whylen);
        explicit_bzero(&p, sizeof(p));
        if (a->punch == NULL) {
            free(a);
            return -1;
        }
    }
    a->c = c;
    local_conn_hold(c);
    a->next = as->list;
    if (as->list != NULL)
        as->list->prev = a;
    as->list = a;
    return a->watching;
}

void attempts_close(struct attempts *as)
{
    as->closed = 1;
    /* Punches stop here; SYN watches end in privsep_close and calls to the
       broker in the thread pool, both calling back into a closed set. */
    for (struct attempt *a = as->list, *next; a != NULL; a = next) {
        next = a->next;
        if (a->punch != NULL) {
            punch_cancel(a->punch);
            a->punch = NULL;
            attempt_free(a);
        } else if (a->c != NULL) {
            local_conn_drop(a->c);
            a->c = NULL;
        }
    }
}

void attempts_free(struct attempts *as)
{
    free(as);
}
