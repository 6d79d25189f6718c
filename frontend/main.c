/*
 * qcg-frontend: one per cluster, on its head node.  Serves the qcg service to
 * the helpers of its cluster, relays their requests to the broker, caches
 * direct plans, and passes the broker's commands down to the helpers.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "crl.h"
#include "daemon.h"
#include "frontend.h"
#include "report_batch.h"
#include "frontend_config.h"
#include "known.h"
#include "log.h"
#include "metrics.h"
#include "metrics_server.h"
#include "revoked.h"
#include "soap_server.h"
#include "stats_query.h"
#include "store.h"
#include "upstream.h"

static void stop_server(void *arg)
{
    soap_server_stop(arg);
}

static void close_queues(void *arg)
{
    store_close_queues(((struct frontend *)arg)->store);
}

int main(int argc, char **argv)
{
    struct frontend_config cfg;
    char err[512];
    switch (frontend_config_load(&cfg, argc, argv, err, sizeof(err))) {
    case CONFIG_OK:
        break;
    case CONFIG_EXIT_OK:
        frontend_config_free(&cfg);
        return 0;
    case CONFIG_ERROR:
    default:
        fprintf(stderr, "%s\n", err);
        frontend_config_free(&cfg);
        return 2;
    }
    if (cfg.stats) {
        struct tls_files tls = {.ca = cfg.ca, .certkey = cfg.cert};
        int rc = stats_query("qcg-frontend", cfg.stats_url, &tls, cfg.json != 0);
        frontend_config_free(&cfg);
        return rc;
    }

    log_init("frontend", (enum log_level)cfg.log_level_value, cfg.syslog != 0);
    /* A setup error (a file that does not load: certificate, CA, CRL) is
       a configuration error: exit status 2, as documented. */
    struct frontend *fe = frontend_new(&cfg, err, sizeof(err));
    if (fe == NULL) {
        log_error("%s", err);
        frontend_config_free(&cfg);
        return 2;
    }
    fe->reports = reports_new(frontend_send_reports, fe, err, sizeof(err));
    if (fe->reports == NULL) {
        log_error("%s", err);
        frontend_free(fe);
        frontend_config_free(&cfg);
        return 1;
    }
    struct metrics_server *metrics;
    struct tls_files metrics_tls = {.ca = cfg.ca, .certkey = cfg.cert, .crl = cfg.crl};
    struct metrics_server_config mc = {.listen = cfg.metrics_listen,
                                       .tls = cfg.metrics_tls ? &metrics_tls : NULL,
                                       .allow = cfg.metrics_allow,
                                       .daemon = "frontend",
                                       .render = frontend_metrics,
                                       .arg = fe};
    if (metrics_start_if("qcg-frontend", &mc, &metrics, err, sizeof(err)) != 0) {
        log_error("%s", err);
        frontend_free(fe);
        frontend_config_free(&cfg);
        return 2;
    }
    struct soap_server_config scfg = {
        .listen_addr = cfg.listen,
        .port = cfg.port,
        .tls = {.ca = cfg.ca, .certkey = cfg.cert, .crl = cfg.crl},
        .max_connections = cfg.max_connections,
        .max_handshakes = cfg.max_handshakes,
        .ipv6_prefix = cfg.ipv6_prefix,
        .role = SERVED_FRONTEND,
        .user = fe,
    };
    struct soap_server *server = soap_server_new(&scfg, err, sizeof(err));
    __atomic_store_n(&fe->server, server, __ATOMIC_RELEASE);
    if (server == NULL) {
        log_error("%s", err);
        metrics_server_stop(metrics);
        frontend_free(fe);
        frontend_config_free(&cfg);
        return 2;
    }
    log_say_where();
    frontend_know(server, &cfg);
    soap_server_on_stop(server, close_queues, fe);
    soap_server_on_revoked(server, frontend_revoked);
    static atomic_int stop;
    crl_set_accept_older(cfg.crl_accept_older != 0);
    daemon_signals(&stop, stop_server, server);

    struct upstream *up = upstream_start(fe, err, sizeof(err));
    if (up == NULL) {
        log_error("%s", err);
        /* The metrics read the server's counts: they stop first. */
        metrics_server_stop(metrics);
        soap_server_free(server);
        frontend_free(fe);
        frontend_config_free(&cfg);
        return 1;
    }
    log_info("frontend of cluster %s (%s) on port %d, broker %s, cache %d plans", fe->cluster,
             cfg.kind, soap_server_port(server), cfg.broker, cfg.cache_size);
    int rc = soap_server_run(server);
    upstream_stop(up);
    if (rc != 0) {
        /* Connection threads still run (e.g. relays stalled on an unreachable
           broker) and use the pool, the store and the cache: exit without
           freeing them. */
        log_error("connections still busy: exiting without a clean stop");
        return 1;
    }
    /* The metrics read the server's counts: they stop first. */
    metrics_server_stop(metrics);
    soap_server_free(server);
    frontend_free(fe);
    log_info("stopped");
    frontend_config_free(&cfg);
    return 0;
}
