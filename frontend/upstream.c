#include "upstream.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "cmdqueue.h"
#include "frontend.h"
#include "frontend_config.h"
#include "log.h"
#include "longpoll.h"
#include "monotonic.h"
#include "ratelimit.h"
#include "relay.h"
#include "store.h"

/* Re-sending what we hold while helpers keep changing it: rounds at most. */
#define REGISTER_ROUNDS 10

struct upstream {
    struct frontend *fe;
    struct longpoll *lp;
    struct ratelimit refused_log; /* the poll thread's only */
};

static const char *url(const struct upstream *up)
{
    return up->fe->cfg->broker;
}

/* Sends what we hold again; -1 with reason when the broker cannot be reached
   (or refuses the cluster itself), else the link is up.  *epoch holds the
   broker's epoch seen last (0: none) and gets the new one. */
static int register_all(void *arg, struct soap *soap, uint64_t *epoch, char *reason, size_t len)
{
    struct upstream *up = arg;
    uint64_t previous = *epoch;
    struct frontend *fe = up->fe;
    const struct frontend_config *cfg = fe->cfg;
    const char *addrs[FRONTEND_PUBLIC_MAX];
    const char *ranges[FRONTEND_RANGES_MAX];
    for (int i = 0; i < cfg->npublic; i++)
        addrs[i] = cfg->public_addrs[i];
    for (int i = 0; i < cfg->nranges; i++)
        ranges[i] = cfg->ranges[i];
    const char *open[FRONTEND_RANGES_MAX];
    for (int i = 0; i < cfg->nopen; i++)
        open[i] = cfg->open[i];
    struct cluster_decl decl = {
        .name = fe->cluster,
        .kind = cluster_kind_name(cfg->kind_value),
        .naddrs = cfg->npublic,
        .addrs = addrs,
        .port_low = cfg->open_ports[0],
        .port_high = cfg->open_ports[1],
        .nranges = cfg->nranges,
        .ranges = ranges,
        .nopen = cfg->nopen,
        .open = open,
    };
    struct relay_error err;
    int rc = relay_register_cluster(soap, url(up), &decl, epoch, &err);
    soap_client_reset(soap);
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

    for (int round = 0; round < REGISTER_ROUNDS && !longpoll_stopping(up->lp); round++) {
        uint64_t version;
        struct node_info *nodes;
        size_t nn = store_nodes(fe->store, &nodes, &version);
        for (size_t i = 0; i < nn && rc == 0; i++) {
            rc = relay_register_node(soap, url(up), &nodes[i], &err);
            soap_client_reset(soap);
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
            rc = relay_publish(soap, url(up), &contacts[i], fe->cluster, &err);
            soap_client_reset(soap);
            if (rc < 0 && err.status == CALL_FAULT) {
                log_warnx("the broker refused job %s rank %d from node %s: %s: %s", contacts[i].job,
                          contacts[i].rank, contacts[i].node, err.subcode, err.msg);
                rc = 0;
            }
        }
        if (nc > 0)
            store_secrets_free(contacts, sizeof(*contacts), nc);

        struct withdrawal *ws;
        size_t nw = rc == 0 ? store_withdrawals_take(fe->store, &ws) : 0;
        for (size_t i = 0; i < nw; i++) {
            if (rc < 0) { /* keep the rest for the next attempt */
                store_withdrawal_add(fe->store, &ws[i]);
                continue;
            }
            rc = relay_withdraw(soap, url(up), ws[i].job, ws[i].verifier, ws[i].rank, ws[i].node,
                                &err);
            soap_client_reset(soap);
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
    snprintf(reason, len,
             longpoll_stopping(up->lp) ? "stopping" : "the nodes and contacts kept changing");
    return -1;
}

static void handle_command(void *arg, const struct command *c)
{
    struct upstream *up = arg;
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
        uint64_t seq = store_node_push(fe->store, c->node, c);
        unsigned left_out;
        if (seq == 0 && errno == ENOENT) {
            log_warnx("command %s for node %s, which is not registered here (or its lease ran "
                      "out): dropped",
                      c->kind, c->node);
            return;
        }
        if (seq == 0) {
            /* The broker's own per-job share should have stopped it there. */
            atomic_fetch_add(&fe->counters.orders_refused, 1);
            if (ratelimit_ok(&up->refused_log, monotonic_ms(), 10000, &left_out))
                log_warnx("%s for job %s rank %d dropped: node %s's queue is full or holds "
                          "the job's share (%u such lines left out)",
                          c->kind, c->job, c->rank, c->node, left_out);
            return;
        }
        log_debug("command %s passed on to node %s (seq %" PRIu64 ")", c->kind, c->node, seq);
    } else if (!known) {
        log_warnx("unknown command \"%s\" from the broker ignored", c->kind);
    }
}

/* The nodes' leases, before each poll (at least every poll wait): a node
   whose helper neither polled nor registered for node-lease seconds is gone,
   and so are its processes' contacts.  Withdrawn upstream now, or kept for
   the next registration when the broker cannot be reached. */
static void expire_nodes(void *arg, struct soap *soap)
{
    struct upstream *up = arg;
    struct frontend *fe = up->fe;
    struct withdrawal *ws;
    struct relay_error err;
    size_t nodes;
    size_t n = store_expire(fe->store, (uint64_t)fe->cfg->node_lease * 1000, &ws, &nodes);
    if (nodes > 0)
        log_info("%zu node%s silent for %d s (node-lease): %zu contact%s withdrawn", nodes,
                 nodes == 1 ? "" : "s", fe->cfg->node_lease, n, n == 1 ? "" : "s");
    for (size_t i = 0; i < n; i++) {
        int rc =
            relay_withdraw(soap, url(up), ws[i].job, ws[i].verifier, ws[i].rank, ws[i].node, &err);
        soap_client_reset(soap);
        if (rc < 0 && err.status != CALL_FAULT)
            store_withdrawal_add(fe->store, &ws[i]);
        log_debug("job %s rank %d of node %s expired%s%s", ws[i].job, ws[i].rank, ws[i].node,
                  rc < 0 ? ": " : "", rc < 0 ? err.msg : "");
    }
    atomic_fetch_add(&fe->counters.contacts_expired, n);
    store_secrets_free(ws, sizeof(*ws), n);
}

static void link_down(void *arg, const char *why)
{
    struct upstream *up = arg;

    store_link_down(up->fe->store, why);
}

static const struct longpoll_ops ops = {
    .registered = register_all,
    .command = handle_command,
    .before_poll = expire_nodes,
    .down = link_down,
};

struct upstream *upstream_start(struct frontend *fe, char *err, size_t errlen)
{
    struct upstream *up = calloc(1, sizeof(*up));
    if (up == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    up->fe = fe;
    if (fe->cfg->nranges == 0)
        log_warnx("addresses is not set: the broker accepts nodes at this frontend's own address "
                  "only; set addresses = the CIDR ranges of this site's node addresses");
    struct longpoll_config cfg = {
        .client = &fe->upstream,
        .service = "broker",
        /* The leases are checked between polls: often enough for the bound
           (node-lease plus a third of it). */
        .wait = fe->cfg->node_lease / 3 < UPSTREAM_POLL_WAIT ? fe->cfg->node_lease / 3
                                                             : UPSTREAM_POLL_WAIT,
        .ops = &ops,
        .arg = up,
    };
    up->lp = longpoll_new(&cfg, err, errlen);
    if (up->lp == NULL || longpoll_start(up->lp, err, errlen) < 0) {
        longpoll_free(up->lp);
        free(up);
        return NULL;
    }
    return up;
}

void upstream_stop(struct upstream *up)
{
    if (up == NULL)
        return;
    longpoll_free(up->lp);
    store_link_down(up->fe->store, "the frontend is stopping");
    free(up);
}
