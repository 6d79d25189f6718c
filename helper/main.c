/* qcg-helper: wires the configuration, the upstream thread and the local
   socket to one libuv loop, and stops cleanly on SIGTERM/SIGINT. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include <arpa/inet.h>

#include "attempts.h"
#include "contacts.h"
#include "daemon.h"
#include "helper.h"
#include "local.h"
#include "log.h"
#include "orders.h"
#include "responder.h"
#include "status.h"
#include "traverse.h"
#include "upstream.h"

static const char usage[] =
    "qcg-helper [--config FILE] --frontend URL --ca FILE --cert FILE --address ADDR "
    "--ports LOW-HIGH [options]\n"
    "       qcg-helper --status [--json] [--socket PATH]";

struct helper {
    uv_loop_t loop;
    uv_async_t stop_async;
    volatile sig_atomic_t stop;
    int stopping;
    struct contacts *contacts;
    struct upstream *up;
    struct local_server *srv;
    struct orders *orders;
    struct responders *responders; /* qcg-probe's test endpoints */
    struct attempts *attempts;
    struct traverse *traverse; /* NULL without privileges */
};

/* From the upstream thread. */
static void take_order(void *arg, const struct command *cmd)
{
    orders_push(arg, cmd);
}

/* From the signal handler: uv_async_send is async-signal-safe. */
static void signal_stop(void *arg)
{
    uv_async_send(arg);
}

/* Once the probe endpoints have withdrawn (or their time ran out). */
static void stop_rest(void *arg)
{
    struct helper *h = arg;

    /* Connections first: their withdrawals are queued while the upstream
       state still says whether the frontend is there to hear them. */
    local_server_close(h->srv);
    upstream_stop(h->up);
    uv_close((uv_handle_t *)&h->stop_async, NULL);
}

static void on_stop(uv_async_t *a)
{
    struct helper *h = a->data;

    if (h->stopping)
        return;
    h->stopping = 1;
    log_info("stopping");
    /* Attempts first (they stop answering), then the packet engine (its
       pending callbacks fail), then the orders. */
    attempts_close(h->attempts);
    if (h->traverse != NULL)
        traverse_close(h->traverse);
    orders_close(h->orders);
    /* The probe endpoints withdraw through the socket, which stays open
       for them (bounded by RESPONDERS_STOP_MS). */
    responders_stop(h->responders, stop_rest, h);
}

/* libuv sizes its thread pool at the first request, from the environment;
   an administrator's UV_THREADPOOL_SIZE wins. */
static void size_thread_pool(const struct helper_config *cfg)
{
    const char *env = getenv("UV_THREADPOOL_SIZE");
    char n[16];

    if (env != NULL && env[0] != '\0') {
        log_info("UV_THREADPOOL_SIZE=%.16s from the environment, not threads = %d", env,
                 cfg->threads);
        return;
    }
    snprintf(n, sizeof(n), "%d", cfg->threads);
    setenv("UV_THREADPOOL_SIZE", n, 1);
}

static int run(struct helper_config *cfg)
{
    struct helper h;
    char err[512];
    int rc = 1;

    memset(&h, 0, sizeof(h));
    size_thread_pool(cfg);
    if (uv_loop_init(&h.loop) < 0)
        fatalx("cannot create the event loop");
    char missing[64], intercept[LOCAL_MESSAGE_MAX];
    int privileged = helper_caps_missing(missing, sizeof(missing)) == 0;
    int can_intercept = 0;
    const char *why_not = "intercept = no in the config";

    /* Room for every client's contact plus those of closed clients whose
       withdrawal is still in flight. */
    h.contacts = contacts_new(2 * (size_t)cfg->max_clients);
    if (h.contacts == NULL)
        fatalx("out of memory");
    h.up = upstream_new(cfg, h.contacts, can_intercept, err, sizeof(err));
    if (h.up == NULL) {
        log_error("%s", err);
        rc = 2;
        goto out;
    }
    h.srv = local_server_new(&h.loop, cfg, h.contacts, h.up, err, sizeof(err));
    if (h.srv == NULL) {
        log_error("%s", err);
        goto out;
    }
    /* After the socket: a second helper on it stops before touching rules. */
    if (cfg->intercept && !privileged) {
        snprintf(intercept, sizeof(intercept), "no %s", missing);
        why_not = intercept;
    } else if (cfg->intercept) {
        struct traverse_config tc = {.queue_num = (uint16_t)cfg->nfqueue};
        if (inet_pton(AF_INET, cfg->address, &tc.node) != 1) {
            why_not = "the node's address is not IPv4";
        } else {
            h.traverse = traverse_new(&h.loop, &tc, err, sizeof(err));
            if (h.traverse == NULL) {
                log_warnx("traversing disabled: %s", err);
                snprintf(intercept, sizeof(intercept), "the packet engine did not start: %.180s",
                         err);
                why_not = intercept;
            }
        }
        can_intercept = h.traverse != NULL;
    }
    upstream_set_can_intercept(h.up, can_intercept);
    h.attempts = attempts_new(&h.loop, cfg, h.up, h.traverse);
    h.orders = orders_new(&h.loop, h.srv, cfg, h.traverse, err, sizeof(err));
    if (h.orders != NULL)
        h.responders = responders_new(&h.loop, cfg, err, sizeof(err));
    if (h.orders == NULL || h.responders == NULL || h.attempts == NULL) {
        if (h.orders == NULL || h.responders == NULL)
            log_error("%s", err);
        else
            log_error("out of memory");
        if (h.orders != NULL)
            orders_close(h.orders);
        if (h.responders != NULL)
            responders_stop(h.responders, NULL, NULL);
        local_server_close(h.srv);
        if (h.traverse != NULL)
            traverse_close(h.traverse);
        uv_run(&h.loop, UV_RUN_DEFAULT);
        goto out;
    }
    local_server_set_attempts(h.srv, h.attempts);
    {
        char line[LOCAL_MESSAGE_MAX];

        if (can_intercept)
            snprintf(line, sizeof(line), "CAP_NET_ADMIN and CAP_NET_RAW held, NFQUEUE %d bound",
                     cfg->nfqueue);
        else
            snprintf(line, sizeof(line),
                     "%.190s: traversing is not planned towards or from this node", why_not);
        local_server_set_intercept(h.srv, can_intercept, cfg->nfqueue, line);
    }
    orders_set_responders(h.orders, h.responders);
    upstream_on_order(h.up, take_order, h.orders);
    log_info("node %s/%s, address %s, ports %d-%d, frontend %s; %s%s%s", cfg->cluster,
             cfg->node, cfg->address, cfg->ports[0], cfg->ports[1], cfg->frontend,
             can_intercept ? "can intercept and inject" : "cannot intercept (",
             can_intercept ? "" : why_not, can_intercept ? "" : "): traversing is not planned "
                                                                "towards or from this node");
    uv_async_init(&h.loop, &h.stop_async, on_stop);
    h.stop_async.data = &h;
    daemon_signals(&h.stop, signal_stop, &h.stop_async);
    if (upstream_start(h.up, err, sizeof(err)) < 0) {
        log_error("%s", err);
        h.stop = 1;
        uv_async_send(&h.stop_async);
    } else {
        rc = 0;
    }
    log_info("listening on %s", cfg->socket);
    uv_run(&h.loop, UV_RUN_DEFAULT);
    log_info("stopped");
out:
    upstream_free(h.up);
    responders_free(h.responders);
    orders_free(h.orders);
    if (h.attempts != NULL)
        attempts_free(h.attempts);
    if (h.traverse != NULL)
        traverse_free(h.traverse);
    local_server_free(h.srv);
    contacts_free(h.contacts);
    uv_run(&h.loop, UV_RUN_NOWAIT);
    uv_loop_close(&h.loop);
    return rc;
}

int main(int argc, char **argv)
{
    struct helper_config cfg;
    char err[512];
    int first = argc, rc;

    memset(&cfg, 0, sizeof(cfg));
    switch (config_load(helper_options, &cfg, argc, argv, usage, &first, err, sizeof(err))) {
    case CONFIG_EXIT_OK:
        config_free(helper_options, &cfg);
        return 0;
    case CONFIG_ERROR:
        fprintf(stderr, "%s\n", err);
        config_free(helper_options, &cfg);
        return 2;
    case CONFIG_OK:
        break;
    }
    if (first < argc) {
        fprintf(stderr, "qcg-helper: unexpected argument '%s'\n", argv[first]);
        config_free(helper_options, &cfg);
        return 2;
    }
    if (cfg.status) {
        if (helper_config_check_status(&cfg, err, sizeof(err)) < 0) {
            fprintf(stderr, "qcg-helper: %s\n", err);
            rc = 2;
        } else {
            rc = helper_status(cfg.socket, cfg.json, stdout, stderr);
        }
        config_free(helper_options, &cfg);
        return rc;
    }
    if (helper_config_check(&cfg, err, sizeof(err)) < 0 ||
        helper_cert_check(&cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "qcg-helper: %s\n", err);
        config_free(helper_options, &cfg);
        return 2;
    }
    log_init("helper", (enum log_level)log_level_parse(cfg.log_level), cfg.syslog);
    rc = run(&cfg);
    config_free(helper_options, &cfg);
    return rc;
}
