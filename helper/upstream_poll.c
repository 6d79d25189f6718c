/* The registration/poll thread: registers the node, re-publishes the live
   contacts, retries withdrawals that failed, and long-polls for orders. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmdqueue.h"
#include "daemon.h"
#include "log.h"
#include "proto.h"
#include "qcgconn.h"
#include "upstream_internal.h"

#define BACKOFF_BASE_MS 200
#define BACKOFF_MAX_MS 10000

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

void *upstream_main(void *arg)
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
