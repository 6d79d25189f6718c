/* qcg-helper: forks the privileged process, drops every capability, wires
   the configuration, the upstream thread and the local socket to one libuv
   loop, and stops cleanly on SIGTERM/SIGINT. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include <arpa/inet.h>

#include "metrics.h"
#include "metrics_server.h"
#include "attempts.h"
#include "contacts.h"
#include "crl.h"
#include "daemon.h"
#include "ephemeral.h"
#include "helper.h"
#include "privdrop.h"
#include "local.h"
#include "log.h"
#include "orders.h"
#include "privsep.h"
#include "responder.h"
#include "status.h"
#include "upstream.h"

static const char usage[] =
    "qcg-helper [--config FILE] --frontend URL --ca FILE --cert FILE --address ADDR "
    "--ports LOW-HIGH [options]\n"
    "       qcg-helper --status [--json] [--socket PATH]";

struct helper {
    uv_loop_t loop;
    uv_async_t stop_async;
    atomic_int stop;
    int stopping;
    struct contacts *contacts;
    struct upstream *up;
    struct local_server *srv;
    struct orders *orders;
    struct responders *responders; /* qcg-probe's test endpoints */
    struct attempts *attempts;
    struct metrics_server *metrics;
    struct privsep *priv; /* the packet engine's process; NULL without privileges */
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
    /* Who asked: a stop nobody meant (a stale pid signalled) is then explained. */
    char why[160];
    daemon_stop_cause(why, sizeof(why));
    log_info("stopping (%s)", why);
    /* Attempts first (they stop answering), then the packet engine (its
       pending callbacks fail; its process removes the rules and exits
       meanwhile), then the orders. */
    attempts_close(h->attempts);
    privsep_close(h->priv);
    orders_close(h->orders);
    /* The probe endpoints withdraw through the socket, which stays open
       for them (bounded by RESPONDERS_STOP_MS). */
    responders_stop(h->responders, stop_rest, h);
}

/* The privileged process is gone (and not restarted: no capability is left
   to start another): qcg-probe's SITE says so from now on. */
static void on_priv_lost(void *arg, const char *why)
{
    struct helper *h = arg;
    char line[LOCAL_MESSAGE_MAX];

    snprintf(line, sizeof(line), "%.190s: traversing is no longer available on this node", why);
    local_server_set_intercept(h->srv, 0, 0, line);
    /* The frontend and the broker hear it at the next registration, within
       a poll's wait: no more traversals are planned to or from this node. */
    if (!h->stopping)
        upstream_set_can_intercept(h->up, 0);
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

/* Before any thread, loop or socket: the privileged process when this one
   may intercept, then no capability here, for good.  *why_not says why
   traversing is off (priv NULL). */
static struct privsep *fork_privileged(const struct helper_config *cfg, char *why_not,
                                       size_t whylen)
{
    char missing[64], err[256];
    struct privsep *ps = NULL;

    if (!cfg->intercept)
        snprintf(why_not, whylen, "intercept = no in the config");
    else if (helper_caps_missing(0, missing, sizeof(missing)) != 0)
        snprintf(why_not, whylen, "no %s", missing);
    else if ((ps = privsep_fork(cfg, err, sizeof(err))) == NULL) {
        log_warnx("traversing disabled: %s", err);
        snprintf(why_not, whylen, "the packet engine did not start: %.180s", err);
    }
    if (privdrop(0, NULL, err, sizeof(err)) < 0)
        fatalx("cannot drop the capabilities: %s", err);
    return ps;
}

/* After the local socket (a second helper on it stops before the engine
   touches any rule): the engine starts, or traversing is off. */
static int start_privileged(struct helper *h, char *why_not, size_t whylen)
{
    char err[256], missing[64];

    if (h->priv == NULL)
        return 0;
    if (privsep_start(h->priv, &h->loop, err, sizeof(err)) == 0) {
        if (helper_caps_missing(privsep_pid(h->priv), missing, sizeof(missing)) == 0) {
            privsep_on_lost(h->priv, on_priv_lost, h);
            return 1;
        }
        snprintf(err, sizeof(err), "the privileged process lacks %s", missing);
    }
    log_warnx("traversing disabled: %s", err);
    snprintf(why_not, whylen, "the packet engine did not start: %.180s", err);
    privsep_free(h->priv);
    h->priv = NULL;
    return 0;
}

static int run(struct helper_config *cfg)
{
    struct helper h;
    char err[512], why_not[LOCAL_MESSAGE_MAX] = "";
    int can_intercept = 0;
    int rc = 1;

    memset(&h, 0, sizeof(h));
    h.priv = fork_privileged(cfg, why_not, sizeof(why_not));
    size_thread_pool(cfg);
    if (uv_loop_init(&h.loop) < 0)
        fatalx("cannot create the event loop");

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
    /* Once the socket is ours: a refused start stays one line. */
    log_say_where();
    can_intercept = start_privileged(&h, why_not, sizeof(why_not));
    upstream_set_can_intercept(h.up, can_intercept);
    h.attempts = attempts_new(&h.loop, cfg, h.up, h.priv);
    h.orders = orders_new(&h.loop, h.srv, cfg, h.priv, err, sizeof(err));
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
        privsep_close(h.priv);
        uv_run(&h.loop, UV_RUN_DEFAULT);
        goto out;
    }
    local_server_set_attempts(h.srv, h.attempts);
    {
        char line[LOCAL_MESSAGE_MAX];

        if (can_intercept)
            snprintf(line, sizeof(line),
                     "CAP_NET_ADMIN and CAP_NET_RAW held (by the privileged process, pid %d), "
                     "NFQUEUE %d bound",
                     (int)privsep_pid(h.priv), cfg->nfqueue);
        else
            snprintf(line, sizeof(line),
                     "%.190s: traversing is not planned towards or from this node", why_not);
        local_server_set_intercept(h.srv, can_intercept, cfg->nfqueue, line);
    }
    orders_set_responders(h.orders, h.responders);
    upstream_on_order(h.up, take_order, h.orders);
    if (can_intercept)
        log_info("node %s/%s, address %s, ports %d-%d, frontend %s; can intercept and inject "
                 "(through the privileged process, pid %d; this one holds no capability)",
                 cfg->cluster, cfg->node, cfg->address, cfg->ports[0], cfg->ports[1], cfg->frontend,
                 (int)privsep_pid(h.priv));
    else
        log_info("node %s/%s, address %s, ports %d-%d, frontend %s; cannot intercept (%s): "
                 "traversing is not planned towards or from this node",
                 cfg->cluster, cfg->node, cfg->address, cfg->ports[0], cfg->ports[1], cfg->frontend,
                 why_not);
    ephemeral_warn(cfg->ports[0], cfg->ports[1]);
    uv_async_init(&h.loop, &h.stop_async, on_stop);
    h.stop_async.data = &h;
    crl_set_accept_older(cfg->crl_accept_older != 0);
    daemon_signals(&h.stop, signal_stop, &h.stop_async);
    struct tls_files metrics_tls = {.ca = cfg->ca, .certkey = cfg->cert, .crl = cfg->crl};
    struct metrics_server_config mc = {.listen = cfg->metrics_listen,
                                       .tls = cfg->metrics_tls ? &metrics_tls : NULL,
                                       .allow = cfg->metrics_allow,
                                       .daemon = "helper",
                                       .render = helper_metrics,
                                       .arg = h.srv};
    if (metrics_start_if("qcg-helper", &mc, &h.metrics, err, sizeof(err)) != 0) {
        log_error("%s", err);
        rc = 2;
        h.stop = 1;
        uv_async_send(&h.stop_async);
    } else if (upstream_start(h.up, err, sizeof(err)) < 0) {
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
    metrics_server_stop(h.metrics);
    upstream_free(h.up);
    responders_free(h.responders);
    orders_free(h.orders);
    if (h.attempts != NULL)
        attempts_free(h.attempts);
    privsep_free(h.priv); /* waits for it to remove its rules and exit */
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
