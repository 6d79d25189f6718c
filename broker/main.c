/*
 * qcg-broker: knows every cluster's capabilities and every process's contact,
 * and answers lookups with plans.  This file only wires the parts together:
 * settings, the state, the SOAP server, signals.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "address.h"
#include "broker.h"
#include "broker_config.h"
#include "crl.h"
#include "daemon.h"
#include "grid_query.h"
#include "lease.h"
#include "log.h"
#include "metrics.h"
#include "known.h"
#include "metrics_server.h"
#include "monotonic.h"
#include "proxy_live.h"
#include "reflector.h"
#include "reflector_msg.h"
#include "revoked.h"
#include "soap_server.h"
#include "state_file.h"
#include "stats_query.h"
#include "ticker.h"

/* From the signal handler: only sets the server's stop flag. */
static void stop_server(void *srv)
{
    soap_server_stop(srv);
}

/* From soap_server_run once it stops accepting: pending long-polls return at
   once instead of holding the shutdown for up to 25 s. */
static void end_polls(void *arg)
{
    struct broker *b = arg;
    struct registry_counts k;
    registry_counts(b->reg, &k);
    log_info("stopping: dropping %zu clusters, %zu nodes, %zu contacts", k.clusters, k.nodes,
             k.contacts);
    registry_close(b->reg);
}

/* What the last run learned, then the thread that keeps it.  A state file
   that cannot be read is a misconfiguration (exit); damaged lines are not. */
static struct state_saver *start_state(struct broker *b, const char *path, char *err, size_t errlen)
{
    struct state_loaded st;
    if (state_load(b->outcomes, b->reg, path, &st, err, errlen) < 0)
        return NULL;
    if (st.missing)
        log_info("state file %s: none yet, starting with no memory of outcomes", path);
    else
        log_info("state file %s: %zu cluster pairs' outcomes and %zu clusters' observations "
                 "restored",
                 path, st.pairs, st.observations);
    if (st.frontends > 0)
        log_info("state file %s: %zu clusters' frontend addresses known before they log in", path,
                 st.frontends);
    if (st.skipped > 0)
        log_warnx("state file %s: %zu lines skipped (first: line %d): not understood", path,
                  st.skipped, st.first_bad);
    /* Written once now: an unwritable place is found at start, not at the stop. */
    if (state_save(b->outcomes, b->reg, path, err, errlen) < 0)
        return NULL;
    return state_saver_start(b->outcomes, b->reg, path, err, errlen);
}

int main(int argc, char **argv)
{
    struct broker_config cfg;
    char err[512];

    /* The reflector's own process (reflector_client.c): before any file or
       option is read, so that it never holds what the broker does. */
    if (argc == 2 && strcmp(argv[1], REFLECTOR_PROCESS_ARG) == 0)
        return reflector_process_main();
    switch (broker_config_load(&cfg, argc, argv, err, sizeof(err))) {
    case CONFIG_OK:
        break;
    case CONFIG_EXIT_OK:
        broker_config_free(&cfg);
        return 0;
    default:
        fprintf(stderr, "%s\n", err);
        broker_config_free(&cfg);
        return 2;
    }
    if (cfg.stats || cfg.grid) {
        log_init("broker", LOG_LEVEL_WARN, false);
        char url[256];
        if (cfg.url != NULL)
            snprintf(url, sizeof(url), "%s", cfg.url);
        else
            url_local(cfg.listen, cfg.port, url, sizeof(url));
        struct tls_files tls = {.ca = cfg.ca, .certkey = cfg.cert};
        int rc = cfg.grid ? grid_query("qcg-broker", url, &tls, cfg.json != 0, cfg.html)
                          : stats_query("qcg-broker", url, &tls, cfg.json != 0);
        broker_config_free(&cfg);
        return rc;
    }
    log_init("broker", (enum log_level)log_level_parse(cfg.log_level), cfg.syslog != 0);
    struct identity self;
    if (identity_from_file(cfg.cert, QCG_ROLE_BROKER, &self, err, sizeof(err)) != 0) {
        fprintf(stderr, "qcg-broker: %s\n", err);
        broker_config_free(&cfg);
        return 2;
    }
    /* Before anything starts: a missing directory is one line, not a cascade. */
    if (cfg.state_file != NULL && cfg.state_file[0] != '\0' &&
        state_dir_ready(cfg.state_file, err, sizeof(err)) < 0) {
        fprintf(stderr, "qcg-broker: %s\n", err);
        broker_config_free(&cfg);
        return 2;
    }

    static atomic_int stop; /* static: the signal handler keeps a pointer */
    /* Far above what a frontend relays within its nodes' own rates: a share
       of the broker, not a throttle of legitimate work. */
    const struct rate limits[RATE_KINDS] = {
        [RATE_LOOKUP] = {cfg.cluster_lookups, 10.0 * cfg.cluster_lookups},
        [RATE_REPORT] = {cfg.cluster_reports, 10.0 * cfg.cluster_reports},
        [RATE_PROBE] = {cfg.cluster_probes / 60.0, cfg.cluster_probes},
    };
    struct broker *b =
        broker_new((size_t)cfg.max_contacts, self.name, (unsigned)cfg.outcome_expiry, limits);
    if (b == NULL)
        fatalx("out of memory");
    struct metrics_server *metrics;
    struct tls_files metrics_tls = {.ca = cfg.ca, .certkey = cfg.cert, .crl = cfg.crl};
    struct metrics_server_config mc = {.listen = cfg.metrics_listen,
                                       .tls = cfg.metrics_tls ? &metrics_tls : NULL,
                                       .allow = cfg.metrics_allow,
                                       .daemon = "broker",
                                       .render = broker_metrics,
                                       .arg = b};
    if (metrics_start_if("qcg-broker", &mc, &metrics, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        broker_free(b);
        broker_config_free(&cfg);
        return 2;
    }
    log_say_where();
    if (cfg.max_contacts_per_cluster > 0)
        registry_set_cluster_share(b->reg, (size_t)cfg.max_contacts_per_cluster);
    b->proxies = cfg.proxies;
    b->proxy_live = proxy_live_new(&b->proxies, (unsigned)cfg.proxy_dead_after, monotonic_ms());
    if (b->proxy_live == NULL)
        fatalx("out of memory");
    for (int i = 0; i < b->proxies.count; i++) {
        const struct proxy_addr *px = &b->proxies.list[i];
        if (px->host2[0] != '\0')
            log_info("proxy %s at %s port %d and %s port %d", px->name, px->host, px->port,
                     px->host2, px->port2);
        else
            log_info("proxy %s at %s port %d", px->name, px->host, px->port);
    }
    if (b->proxies.count == 0)
        log_info("no proxy configured: pairs that need one get status unavailable");
    if (cfg.reflector_port > 0) {
        char listen[HOSTPORT_MAX], listen6[HOSTPORT_MAX];
        /* Each configured address a socket of its own, never the wildcard:
           the host's other addresses stay closed. */
        hostport_format(cfg.reflector_host, cfg.reflector_port, listen, sizeof(listen));
        hostport_format(cfg.reflector6_host, cfg.reflector_port, listen6, sizeof(listen6));
        struct reflector_process_config rc = {.listen = listen,
                                              .listen6 = cfg.reflector6_host[0] ? listen6 : NULL,
                                              .user = cfg.reflector_user,
                                              .same_user = cfg.reflector_same_user != 0,
                                              .syslog = cfg.syslog != 0,
                                              .tuning = broker_reflector_tuning(&cfg)};
        b->reflector = reflector_client_start(&rc, &b->punch_key, broker_reflector_observed, b, err,
                                              sizeof(err));
        if (b->reflector == NULL) {
            fprintf(stderr, "qcg-broker: reflector: %s\n", err);
            if (cfg.syslog)
                log_error("reflector: %s", err);
            metrics_server_stop(metrics);
            broker_free(b);
            broker_config_free(&cfg);
            return 2;
        }
        snprintf(b->reflector_host, sizeof(b->reflector_host), "%s", cfg.reflector_host);
        snprintf(b->reflector6_host, sizeof(b->reflector6_host), "%s", cfg.reflector6_host);
        b->reflector_port = cfg.reflector_port;
        log_info("reflector on %s%s%s port %d: hole punching available%s", b->reflector_host,
                 b->reflector6_host[0] ? " and " : "", b->reflector6_host, b->reflector_port,
                 b->reflector6_host[0] ? ", over IPv6 too" : "");
    } else {
        log_info("no reflector configured: hole punching is not planned");
    }
    log_info("a technique that failed between two clusters is avoided for %d s",
             cfg.outcome_expiry);
    struct ticker *leases = NULL;
    b->probes_per_node = cfg.probes_per_node;
    if (cfg.cluster_lease > 0) {
        b->lease = lease_new((unsigned)cfg.cluster_lease);
        if (b->lease == NULL)
            fatalx("out of memory");
        leases = ticker_start(1, false, broker_sweep_leases, b, err, sizeof(err));
        if (leases == NULL)
            fatalx("%s", err);
        log_info("a cluster whose frontend has not polled for %d s is dropped (cluster-lease)",
                 cfg.cluster_lease);
    }
    struct state_saver *saver = NULL;
    if (cfg.state_file != NULL && cfg.state_file[0] != '\0') {
        saver = start_state(b, cfg.state_file, err, sizeof(err));
        if (saver == NULL) {
            fprintf(stderr, "qcg-broker: %s\n", err);
            ticker_stop(leases);
            if (cfg.syslog)
                log_error("%s", err);
            if (b->reflector != NULL)
                reflector_client_stop(b->reflector);
            metrics_server_stop(metrics);
            broker_free(b);
            broker_config_free(&cfg);
            return 2;
        }
    }
    struct soap_server_config sc = {
        .listen_addr = cfg.listen,
        .port = cfg.port,
        .tls = {.ca = cfg.ca, .certkey = cfg.cert, .crl = cfg.crl},
        .max_connections = cfg.max_connections,
        .max_handshakes = cfg.max_handshakes,
        .ipv6_prefix = cfg.ipv6_prefix,
        .role = SERVED_BROKER,
        .user = b,
    };
    struct soap_server *srv = soap_server_new(&sc, err, sizeof(err));
    __atomic_store_n(&b->server, srv, __ATOMIC_RELEASE);
    if (srv == NULL) {
        fprintf(stderr, "qcg-broker: %s\n", err);
        if (cfg.syslog)
            log_error("%s", err);
        ticker_stop(leases);
        state_saver_stop(saver);
        if (b->reflector != NULL)
            reflector_client_stop(b->reflector);
        metrics_server_stop(metrics);
        broker_free(b);
        broker_config_free(&cfg);
        return 2;
    }
    log_info("%s listening on %s port %d, epoch %llu, at most %d contacts", self.name,
             cfg.listen ? cfg.listen : "any address", soap_server_port(srv),
             (unsigned long long)registry_epoch(b->reg), cfg.max_contacts);

    broker_know_frontends(b);
    soap_server_on_stop(srv, end_polls, b);
    soap_server_on_revoked(srv, broker_revoked);
    crl_set_accept_older(cfg.crl_accept_older != 0);
    daemon_signals(&stop, stop_server, srv);
    if (soap_server_run(srv) != 0) {
        /* Connection threads may still be running and use the state: exit
           without freeing it. */
        log_error("connections still busy: exiting without a clean stop");
        return 1;
    }
    ticker_stop(leases);
    state_saver_stop(saver);
    if (b->reflector != NULL)
        reflector_client_stop(b->reflector);
    log_info("stopped");
    /* The metrics read the server's counts: they stop first. */
    metrics_server_stop(metrics);
    soap_server_free(srv);
    broker_free(b);
    broker_config_free(&cfg);
    return 0;
}
