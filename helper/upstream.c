/* The helper's upstream: its configuration, connections and thread, and
   what it tells the rest of the helper about the link. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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

void set_state(struct upstream *u, int connected, uint64_t epoch)
{
    pthread_mutex_lock(&u->lock);
    u->connected = connected;
    if (connected)
        u->epoch = epoch;
    pthread_mutex_unlock(&u->lock);
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
