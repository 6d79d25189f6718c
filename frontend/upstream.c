#include "upstream.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cache.h"
#include "cmdqueue.h"
#include "daemon.h"
#include "frontend.h"
#include "frontend_config.h"
#include "log.h"
#include "relay.h"
#include "soapH.h"
#include "store.h"

#define BACKOFF_BASE_MS 200
#define BACKOFF_MAX_MS 10000
#define POLL_COMMANDS 64
/* Re-sending what we hold while helpers keep changing it: rounds at most. */
#define REGISTER_ROUNDS 10
#define UPSTREAM_PLUGIN "qcg-upstream"

struct upstream {
    struct frontend *fe;
    struct soap *soap;            /* used by the thread only */
    pthread_t thread;
    volatile sig_atomic_t stop;

    /* The socket to the broker, tracked through gSOAP's open/close hooks so
       upstream_stop can shut it down under the lock without ever touching a
       descriptor that was closed and reused meanwhile. */
    pthread_mutex_t lock;
    SOAP_SOCKET fd;
    int stopping;
    SOAP_SOCKET (*orig_fopen)(struct soap *, const char *, const char *, int);
    int (*orig_fclosesocket)(struct soap *, SOAP_SOCKET);
};

/* gSOAP registers a plugin only with a delete function; the data is not
   the plugin's to free (upstream_stop does). */
static void plugin_delete(struct soap *soap, struct soap_plugin *p)
{
    (void)soap;
    p->data = NULL;
}

/* The plugin only ties the upstream state to the context (soap->user is
   taken by soap_client). */
static int plugin_init(struct soap *soap, struct soap_plugin *p, void *arg)
{
    (void)soap;
    p->id = UPSTREAM_PLUGIN;
    p->data = arg;
    p->fcopy = NULL;
    p->fdelete = plugin_delete;
    return SOAP_OK;
}

static SOAP_SOCKET hook_open(struct soap *soap, const char *endpoint, const char *host, int port)
{
    struct upstream *up = soap_lookup_plugin(soap, UPSTREAM_PLUGIN);
    SOAP_SOCKET s = up->orig_fopen(soap, endpoint, host, port);
    pthread_mutex_lock(&up->lock);
    up->fd = s;
    if (up->stopping && soap_valid_socket(s))
        shutdown(s, SHUT_RDWR);
    pthread_mutex_unlock(&up->lock);
    return s;
}

static int hook_close(struct soap *soap, SOAP_SOCKET s)
{
    struct upstream *up = soap_lookup_plugin(soap, UPSTREAM_PLUGIN);
    pthread_mutex_lock(&up->lock);
    if (up->fd == s)
        up->fd = SOAP_INVALID_SOCKET;
    int rc = up->orig_fclosesocket(soap, s);
    pthread_mutex_unlock(&up->lock);
    return rc;
}

static const char *url(const struct upstream *up)
{
    return up->fe->cfg->broker;
}

/* Sends what we hold again; -1 with reason when the broker cannot be reached
   (or refuses the cluster itself), else the link is up.  *epoch holds the
   broker's epoch seen last (0: none) and gets the new one. */
static int register_all(struct upstream *up, uint64_t *epoch, char *reason, size_t len)
{
    uint64_t previous = *epoch;
    struct frontend *fe = up->fe;
    const struct frontend_config *cfg = fe->cfg;
    const char *addrs[FRONTEND_PUBLIC_MAX];
    for (int i = 0; i < cfg->npublic; i++)
        addrs[i] = cfg->public_addrs[i];
    struct cluster_decl decl = {
        .name = fe->cluster,
        .kind = cluster_kind_name(cfg->kind_value),
        .naddrs = cfg->npublic,
        .addrs = addrs,
        .port_low = cfg->open_ports[0],
        .port_high = cfg->open_ports[1],
    };
    struct relay_error err;
    int rc = relay_register_cluster(up->soap, url(up), &decl, epoch, &err);
    soap_client_reset(up->soap);
    if (rc < 0) {
        if (err.status == CALL_FAULT) {
            snprintf(reason, len, "the broker refused cluster %s: %s%s%.160s", fe->cluster,
                     err.subcode, err.subcode[0] ? ": " : "", err.msg);
            log_error("%s", reason);
        } else {
            snprintf(reason, len, "%s", err.msg);
        }
        return -1;
    }
    atomic_store(&fe->counters.upstream_epoch, *epoch);
    if (previous != 0 && *epoch != previous) {
        /* A restarted broker lost its queues, and with them the invalidations
           meant for us (a contact withdrawn meanwhile is not even known to
           it): every cached plan may be stale.  Dropped before the link is
           up again. */
        size_t n = cache_flush(fe->cache);
        log_info("the broker restarted: %zu cached plans dropped", n);
    }

    for (int round = 0; round < REGISTER_ROUNDS && !up->stop; round++) {
        uint64_t version;
        struct node_info *nodes;
        size_t nn = store_nodes(fe->store, &nodes, &version);
        for (size_t i = 0; i < nn && rc == 0; i++) {
            rc = relay_register_node(up->soap, url(up), &nodes[i], &err);
            soap_client_reset(up->soap);
            if (rc < 0 && err.status == CALL_FAULT) {
                log_warnx("the broker refused node %s: %s: %s", nodes[i].name, err.subcode,
                          err.msg);
                rc = 0;
            }
        }
        free(nodes);

        struct contact_info *contacts;
        size_t nc = rc == 0 ? store_contacts(fe->store, &contacts) : 0;
        for (size_t i = 0; i < nc && rc == 0; i++) {
            rc = relay_publish(up->soap, url(up), &contacts[i], fe->cluster, &err);
            soap_client_reset(up->soap);
            if (rc < 0 && err.status == CALL_FAULT) {
                log_warnx("the broker refused job %s rank %d from node %s: %s: %s",
                          contacts[i].job, contacts[i].rank, contacts[i].node, err.subcode,
                          err.msg);
                rc = 0;
            }
        }
        if (nc > 0)
            store_secrets_free(contacts, sizeof(*contacts), nc);

        struct withdrawal *ws;
        size_t nw = rc == 0 ? store_withdrawals_take(fe->store, &ws) : 0;
        for (size_t i = 0; i < nw; i++) {
            if (rc < 0) {   /* keep the rest for the next attempt */
                store_withdrawal_add(fe->store, &ws[i]);
                continue;
            }
            rc = relay_withdraw(up->soap, url(up), ws[i].job, ws[i].secret, ws[i].rank,
                                ws[i].node, &err);
            soap_client_reset(up->soap);
            if (rc < 0 && err.status == CALL_FAULT) {
                /* e.g. notfound after a broker restart: nothing left to undo */
                log_debug("withdrawal of job %s rank %d: %s: %s", ws[i].job, ws[i].rank,
                          err.subcode, err.msg);
                rc = 0;
            } else if (rc < 0) {
                store_withdrawal_add(fe->store, &ws[i]);
            }
        }
        if (nw > 0)
            store_secrets_free(ws, sizeof(*ws), nw);

        if (rc < 0) {
            snprintf(reason, len, "%s", err.msg);
            return -1;
        }
        if (store_link_up_if(fe->store, version)) {
            atomic_fetch_add(&fe->counters.upstream_registrations, 1);
            log_info("registered cluster %s (%s) with the broker at %s, epoch %" PRIu64
                     ": %zu nodes, %zu contacts",
                     fe->cluster, decl.kind, url(up), *epoch, nn, nc);
            return 0;
        }
    }
    snprintf(reason, len, up->stop ? "stopping" : "the nodes and contacts kept changing");
    return -1;
}

static void handle_command(struct upstream *up, const struct command *c)
{
    struct frontend *fe = up->fe;
    int known = 0;
    if (strcmp(c->kind, "invalidate") == 0) {
        size_t n = cache_invalidate(fe->cache, c->job, c->rank);
        log_debug("invalidate job %s rank %d: %zu cached plans dropped", c->job, c->rank, n);
        known = 1;
    } else if (strcmp(c->kind, "flush") == 0) {
        size_t n = cache_flush(fe->cache);
        log_info("flush: %zu cached plans dropped", n);
        known = 1;
    }
    if (c->node[0] != '\0') {
        struct cmdqueue *q = store_node_queue(fe->store, c->node);
        if (q == NULL) {
            log_warnx("command %s for node %s, which has not registered here: dropped", c->kind,
                      c->node);
            return;
        }
        uint64_t seq = cmdqueue_push(q, c);
        log_debug("command %s passed on to node %s (seq %" PRIu64 ")", c->kind, c->node, seq);
    } else if (!known) {
        log_warnx("unknown command \"%s\" from the broker ignored", c->kind);
    }
}

static void *upstream_main(void *arg)
{
    struct upstream *up = arg;
    struct frontend *fe = up->fe;
    struct command *cmds = calloc(POLL_COMMANDS, sizeof(*cmds));
    unsigned attempt = 0;
    uint64_t epoch = 0, ack = 0;
    uint64_t ack_epoch = 0; /* the broker epoch `ack` counts in */
    int registered = 0;
    char reason[300];

    if (cmds == NULL) {
        log_error("out of memory: no link to the broker");
        store_link_down(fe->store, "out of memory");
        return NULL;
    }
    while (!up->stop) {
        if (!registered) {
            if (register_all(up, &epoch, reason, sizeof(reason)) < 0) {
                if (up->stop)
                    break;
                char down[350];
                snprintf(down, sizeof(down), "%s", reason);
                store_link_down(fe->store, down);
                unsigned ms = backoff_ms(attempt++, BACKOFF_BASE_MS, BACKOFF_MAX_MS);
                if (attempt == 1)
                    log_warnx("broker %s unreachable: %s; retrying", url(up), reason);
                else
                    log_info("broker %s still unreachable: %s; next try in %u ms", url(up),
                             reason, ms);
                sleep_unless_stopped(ms, &up->stop);
                continue;
            }
            registered = 1;
            attempt = 0;
            /* The same broker kept our queue and what we acknowledged: ack 0
               would have it send the last batch again (orders for helpers
               would be passed down, and executed, twice).  A new broker
               numbers from 1 again. */
            if (epoch != ack_epoch) {
                ack = 0;
                ack_epoch = epoch;
            }
        }
        uint64_t server_epoch = 0, last = ack;
        int n = 0;
        struct relay_error err;
        soap_client_set_wait(up->soap, UPSTREAM_POLL_WAIT);
        int rc = relay_poll(up->soap, url(up), epoch, ack, UPSTREAM_POLL_WAIT, &server_epoch, cmds,
                            POLL_COMMANDS, &n, &last, &err);
        soap_client_reset(up->soap);
        soap_client_set_wait(up->soap, 0);
        if (up->stop)
            break;
        if (rc < 0) {
            registered = 0;
            snprintf(reason, sizeof(reason), "%s%s%.200s", err.subcode,
                     err.subcode[0] ? ": " : "", err.msg);
            store_link_down(fe->store, reason);
            log_warnx("lost the broker %s: %s; registering again", url(up), reason);
            sleep_unless_stopped(backoff_ms(attempt++, BACKOFF_BASE_MS, BACKOFF_MAX_MS),
                                 &up->stop);
            continue;
        }
        if (server_epoch != epoch) {
            log_warnx("the broker restarted (epoch %" PRIu64 " -> %" PRIu64 "): registering again",
                      epoch, server_epoch);
            store_link_down(fe->store, "the broker restarted: registering again");
            registered = 0;
            continue;
        }
        for (int i = 0; i < n; i++)
            handle_command(up, &cmds[i]);
        ack = last;
    }
    store_link_down(fe->store, "the frontend is stopping");
    free(cmds);
    return NULL;
}

struct upstream *upstream_start(struct frontend *fe, char *err, size_t errlen)
{
    struct upstream *up = calloc(1, sizeof(*up));
    if (up == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    up->fe = fe;
    up->fd = SOAP_INVALID_SOCKET;
    pthread_mutex_init(&up->lock, NULL);
    up->soap = soap_client_new(&fe->upstream, err, errlen);
    if (up->soap == NULL)
        goto fail;
    if (soap_register_plugin_arg(up->soap, plugin_init, up) != SOAP_OK) {
        snprintf(err, errlen, "cannot attach the upstream state to its SOAP context");
        goto fail;
    }
    up->orig_fopen = up->soap->fopen;
    up->orig_fclosesocket = up->soap->fclosesocket;
    up->soap->fopen = hook_open;
    up->soap->fclosesocket = hook_close;
    int rc = pthread_create(&up->thread, NULL, upstream_main, up);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the upstream thread: %s", strerror(rc));
        goto fail;
    }
    return up;
fail:
    if (up->soap != NULL) {
        if (up->orig_fopen != NULL) {
            up->soap->fopen = up->orig_fopen;
            up->soap->fclosesocket = up->orig_fclosesocket;
        }
        soap_client_free(up->soap);
    }
    pthread_mutex_destroy(&up->lock);
    free(up);
    return NULL;
}

void upstream_stop(struct upstream *up)
{
    if (up == NULL)
        return;
    up->stop = 1;
    pthread_mutex_lock(&up->lock);
    up->stopping = 1;
    if (soap_valid_socket(up->fd))
        shutdown(up->fd, SHUT_RDWR);
    pthread_mutex_unlock(&up->lock);
    pthread_join(up->thread, NULL);
    up->soap->fopen = up->orig_fopen;
    up->soap->fclosesocket = up->orig_fclosesocket;
    soap_client_free(up->soap);
    pthread_mutex_destroy(&up->lock);
    free(up);
}
