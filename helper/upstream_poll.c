/* The registration/poll thread's work (longpoll.h runs it): registering the
   node and re-publishing the live contacts, retrying withdrawals that failed,
   and the orders a poll brings. */
#include <inttypes.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmdqueue.h"
#include "hex.h"
#include "log.h"
#include "longpoll.h"
#include "proto.h"
#include "qcgconn.h"
#include "upstream_internal.h"

static int republish(struct upstream *u, struct soap *soap, size_t *count, char *why,
                     size_t whylen);

/* The node, then every live contact: after a (re-)registration the frontend
   knows nothing of them. */
static int register_node(void *arg, struct soap *soap, uint64_t *epoch, char *why, size_t whylen)
{
    struct upstream *u = arg;
    /* Random per start: the broker drops the contacts a previous start of
       this helper left (their processes are gone), and keeps ours when only
       the frontend or the broker restarted. */
    unsigned char raw[16];
    if (u->incarnation[0] == '\0') {
        if (RAND_bytes(raw, sizeof(raw)) != 1) {
            snprintf(why, whylen, "no randomness for the incarnation");
            return -1;
        }
        hex_encode(raw, sizeof(raw), u->incarnation);
    }
    char *other[QCG_NODE_ADDRS];
    for (int i = 1; i < u->cfg->naddrs; i++)
        other[i - 1] = (char *)u->cfg->addrs[i];
    struct qcg__node node = {
        .name = u->cfg->node,
        .address = u->cfg->address,
        .portLow = u->cfg->ports[0],
        .portHigh = u->cfg->ports[1],
        .canIntercept = atomic_load(&u->can_intercept),
        .incarnation = u->incarnation,
        .__sizeOtherAddress = u->cfg->naddrs - 1,
        .otherAddress = other,
    };
    struct qcg__registerResponse resp;
    char subcode[32], text[256];
    size_t n;

    memset(&resp, 0, sizeof(resp));
    int rc = soap_call_qcg__registerNode(soap, u->cfg->frontend, NULL, QCG_PROTOCOL_VERSION, &node,
                                         &resp);
    if (soap_call_status(soap, rc, subcode, sizeof(subcode), text, sizeof(text)) != CALL_OK) {
        snprintf(why, whylen, "registerNode%s%s: %s", subcode[0] ? " refused: " : "", subcode,
                 text);
        return -1;
    }
    *epoch = resp.epoch;
    soap_client_reset(soap);
    if (republish(u, soap, &n, why, whylen) < 0)
        return -1;
    log_info("registered node %s/%s with %s (epoch %" PRIu64 ", %zu contacts re-published)",
             u->cfg->cluster, u->cfg->node, u->cfg->frontend, *epoch, n);
    return 0;
}

/* After a (re-)registration: the frontend knows nothing of our contacts. */
static int republish(struct upstream *u, struct soap *soap, size_t *count, char *why, size_t whylen)
{
    struct contact *list;
    size_t n;
    int rc = 0;

    *count = 0;
    contacts_sync_exclusive(u->cs);
    if (contacts_snapshot(u->cs, &list, &n) < 0) {
        contacts_sync_end(u->cs);
        snprintf(why, whylen, "out of memory: contacts not re-published");
        return -1;
    }
    for (size_t i = 0; i < n && !longpoll_stopping(u->lp); i++) {
        struct call_args a = {.c = &list[i]};
        char msg[LOCAL_MESSAGE_MAX];
        enum call_status st;

        int err = call_publish(u, soap, &a, &st, msg, sizeof(msg));
        if (err == 0) {
            (*count)++;
        } else if (err == QCG_EUPSTREAM) {
            /* Unreachable, or a frontend that just restarted and refuses
               publishes until its own broker link is up: the registration is
               retried, not the contact forgotten. */
            snprintf(why, whylen, "re-publish of job %s rank %d: %s", list[i].job, list[i].rank,
                     msg);
            rc = -1;
        } else {
            log_warnx("re-publish of job %s rank %d (pid %d): %s", list[i].job, list[i].rank,
                      (int)list[i].pid, msg);
        }
        soap_client_reset(soap);
        if (rc < 0)
            break;
    }
    contacts_sync_end(u->cs);
    explicit_bzero(list, n * sizeof(*list));
    free(list);
    return rc;
}

/* Withdrawals that failed while the frontend was away. */
static void retry_orphans(void *arg, struct soap *soap)
{
    struct upstream *u = arg;
    struct contact *list;
    size_t n, i;

    contacts_sync_exclusive(u->cs);
    if (contacts_orphans_take(u->cs, &list, &n) < 0) {
        contacts_sync_end(u->cs);
        return;
    }
    for (i = 0; i < n && !longpoll_stopping(u->lp); i++) {
        struct call_args a = {.c = &list[i]};
        char msg[LOCAL_MESSAGE_MAX];
        enum call_status st;

        /* A process published the same rank again meanwhile: its contact wins. */
        if (contacts_held(u->cs, list[i].job, list[i].rank, 0))
            continue;
        int rc = call_withdraw(u, soap, &a, &st, msg, sizeof(msg));
        soap_client_reset(soap);
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

/* A command for this node: orders are checked before they go on; the long
   poll hands each on once. */
static void take_command(void *arg, const struct command *c)
{
    struct upstream *u = arg;
    char why[200];

    /* invalidate and flush are about caches, which the helper does not keep;
       orders name this node. */
    if (c->node[0] == '\0') {
        log_debug("command %" PRIu64 ": %s job %s rank %d", c->seq, c->kind,
                  c->job[0] != '\0' ? c->job : "-", c->rank);
    } else if (upstream_order_check(c, u->cfg->node, why, sizeof(why)) < 0) {
        log_warnx("command %" PRIu64 " (%s for job %s rank %d) refused: %s", c->seq, c->kind,
                  c->job, c->rank, why);
    } else if (u->on_order == NULL) {
        log_warnx("command %" PRIu64 " (%s) dropped: nothing executes orders", c->seq, c->kind);
    } else {
        log_debug("command %" PRIu64 ": %s job %s rank %d for initiator rank %d", c->seq, c->kind,
                  c->job, c->rank, c->peer_rank);
        u->on_order(u->order_arg, c);
    }
}

static const struct longpoll_ops ops = {
    .registered = register_node,
    .command = take_command,
    .before_poll = retry_orphans,
};

struct longpoll *upstream_poll_new(struct upstream *u, char *err, size_t errlen)
{
    struct longpoll_config cfg = {
        .client = &u->scc,
        .service = "frontend",
        .wait = UPSTREAM_POLL_WAIT,
        .ops = &ops,
        .arg = u,
    };

    return longpoll_new(&cfg, err, errlen);
}
