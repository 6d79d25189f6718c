/* The helper's upstream: its configuration, connections and thread, and
   what it tells the rest of the helper about the link. */
#include <stdio.h>
#include <stdlib.h>

#include "longpoll.h"
#include "upstream_internal.h"

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
    u->scc.url = cfg->frontend;
    u->scc.tls.ca = cfg->ca;
    u->scc.tls.certkey = cfg->cert;
    u->scc.tls.crl = cfg->crl;
    /* Only the frontend of our own cluster gets our contacts and orders us. */
    u->scc.expect_role = QCG_ROLE_FRONTEND;
    u->scc.expect_cluster = cfg->cluster;
    u->scc.connect_timeout = UPSTREAM_CONNECT_TIMEOUT;
    u->scc.io_timeout = UPSTREAM_IO_TIMEOUT;

    /* A kept-alive connection per pool thread: a call never waits for one. */
    u->pool = soap_pool_new(&u->scc, cfg->threads, err, errlen);
    if (u->pool == NULL)
        goto fail;
    u->lp = upstream_poll_new(u, err, errlen);
    if (u->lp == NULL)
        goto fail;
    u->reports = reports_new(upstream_send_reports, u, err, errlen);
    if (u->reports == NULL)
        goto fail;
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
    longpoll_state(u->lp, connected, epoch);
}

void upstream_set_can_intercept(struct upstream *u, int can_intercept)
{
    if (atomic_exchange(&u->can_intercept, can_intercept) != can_intercept && u->lp != NULL)
        longpoll_register_again(u->lp);
}

void upstream_on_order(struct upstream *u, upstream_order_fn fn, void *arg)
{
    u->on_order = fn;
    u->order_arg = arg;
}

int upstream_start(struct upstream *u, char *err, size_t errlen)
{
    return longpoll_start(u->lp, err, errlen);
}

void upstream_stop(struct upstream *u)
{
    longpoll_stop(u->lp);
}

void upstream_free(struct upstream *u)
{
    if (u == NULL)
        return;
    /* The last reports go while the pool is there. */
    reports_free(u->reports);
    longpoll_free(u->lp);
    if (u->pool != NULL)
        soap_pool_free(u->pool);
    free(u);
}
