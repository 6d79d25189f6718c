/*
 * qcg-proxy: relays bytes between two processes that both connect out to it,
 * paired by the one-time tokens the broker issued them.  This file only wires
 * the parts together: settings, the token key, the relay loop (its own
 * thread), the beats to the broker (their own thread), the control endpoint
 * (stats), signals.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "address.h"
#include "alive.h"
#include "backlog.h"
#include "crl.h"
#include "daemon.h"
#include "identity.h"
#include "log.h"
#include "nofile.h"
#include "proxy_config.h"
#include "relay.h"
#include "service.h"
#include "soap_server.h"
#include "stats_query.h"
#include "metrics.h"
#include "metrics_server.h"
#include "token.h"

#define CONTROL_MAX_CONNECTIONS 16

struct proxy {
    struct relay *relay;
    struct soap_server *control;
};

/* From the signal handler: both calls only set flags (and wake the relay). */
static void stop_all(void *arg)
{
    struct proxy *px = arg;
    soap_server_stop(px->control);
    relay_stop(px->relay);
}

static void *relay_thread(void *arg)
{
    struct proxy *px = arg;
    if (relay_run(px->relay) != 0)
        log_error("relay loop failed: stopping");
    /* Whatever ended the relay ends the daemon. */
    soap_server_stop(px->control);
    return NULL;
}

static int config_error(struct proxy_config *cfg, const char *err)
{
    fprintf(stderr, "%s\n", err);
    if (cfg->syslog)
        log_error("%s", err);
    proxy_config_free(cfg);
    return 2;
}

int main(int argc, char **argv)
{
    struct proxy_config cfg;
    struct proxy_key key;
    struct proxy_service svc = {0};
    char err[512], msg[600];

    switch (proxy_config_load(&cfg, argc, argv, err, sizeof(err))) {
    case CONFIG_OK:
        break;
    case CONFIG_EXIT_OK:
        proxy_config_free(&cfg);
        return 0;
    default:
        fprintf(stderr, "%s\n", err);
        proxy_config_free(&cfg);
        return 2;
    }
    if (cfg.stats) {
        log_init("proxy", LOG_LEVEL_WARN, false);
        char url[256];
        if (cfg.url != NULL)
            snprintf(url, sizeof(url), "%s", cfg.url);
        else
            url_local(cfg.listen, cfg.control_port, url, sizeof(url));
        struct tls_files tls = {.ca = cfg.ca, .certkey = cfg.cert};
        int rc = stats_query("qcg-proxy", url, &tls, cfg.json != 0);
        proxy_config_free(&cfg);
        return rc;
    }
    log_init("proxy", (enum log_level)log_level_parse(cfg.log_level), cfg.syslog != 0);
    struct identity self;
    if (identity_from_file(cfg.cert, QCG_ROLE_PROXY, &self, err, sizeof(err)) != 0) {
        snprintf(msg, sizeof(msg), "qcg-proxy: %s", err);
        return config_error(&cfg, msg);
    }
    snprintf(svc.name, sizeof(svc.name), "%s", self.name);
    if (proxy_key_load(cfg.key_file, &key, err, sizeof(err)) != 0) {
        snprintf(msg, sizeof(msg), "qcg-proxy: %s", err);
        return config_error(&cfg, msg);
    }

    log_say_where();
    int max_pairs = nofile_raise(cfg.max_pairs);
    struct relay_config rc = {
        .listen_addr = cfg.listen,
        .port = cfg.port,
        .key = &key,
        .token_skew = (unsigned)cfg.token_skew,
        .pair_timeout = (unsigned)cfg.pair_timeout,
        .stall_timeout = (unsigned)cfg.stall_timeout,
        .max_pairs = max_pairs,
        .pipe_size = (size_t)cfg.pipe_size,
        .hello_timeout = (unsigned)cfg.hello_timeout,
        .hellos_per_address = (unsigned)cfg.hellos_per_address,
        .ipv6_prefix = (unsigned)cfg.ipv6_prefix,
        .token_memory = (size_t)cfg.token_memory << 20,
        .tokens_per_address = (unsigned)cfg.tokens_per_address,
    };
    static struct proxy px; /* static: the signal handler keeps a pointer */
    static atomic_int stop;
    px.relay = relay_new(&rc, err, sizeof(err));
    explicit_bzero(&key, sizeof(key));
    if (px.relay == NULL) {
        snprintf(msg, sizeof(msg), "qcg-proxy: %s", err);
        return config_error(&cfg, msg);
    }
    svc.relay = px.relay;
    struct soap_server_config sc = {
        .listen_addr = cfg.listen,
        .port = cfg.control_port,
        .tls = {.ca = cfg.ca, .certkey = cfg.cert, .crl = cfg.crl},
        .max_connections = CONTROL_MAX_CONNECTIONS,
        .role = SERVED_PROXY,
        .user = &svc,
    };
    px.control = soap_server_new(&sc, err, sizeof(err));
    if (px.control == NULL) {
        relay_free(px.relay);
        snprintf(msg, sizeof(msg), "qcg-proxy: %s", err);
        return config_error(&cfg, msg);
    }
    char capped[96];
    backlog_capped_text(relay_backlog(px.relay), capped, sizeof(capped));
    log_info("%s relaying on %s port %d (control port %d), at most %d pairs, pipes of %d bytes, "
             "tokens accepted up to %d s after expiry and remembered in up to %d MiB, pair "
             "timeout %d s, hello timeout %d s, %d connections without a token per address, "
             "listen backlog %d%s",
             svc.name, cfg.listen ? cfg.listen : "any address", relay_port(px.relay),
             soap_server_port(px.control), max_pairs, cfg.pipe_size, cfg.token_skew,
             cfg.token_memory, cfg.pair_timeout, cfg.hello_timeout, cfg.hellos_per_address,
             relay_backlog(px.relay), capped);

    static struct proxy_metrics pm;
    pm = (struct proxy_metrics){.relay = px.relay, .control = px.control, .max_pairs = max_pairs};
    struct metrics_server *metrics;
    struct tls_files metrics_tls = {.ca = cfg.ca, .certkey = cfg.cert, .crl = cfg.crl};
    struct metrics_server_config mc = {.listen = cfg.metrics_listen,
                                       .tls = cfg.metrics_tls ? &metrics_tls : NULL,
                                       .allow = cfg.metrics_allow,
                                       .daemon = "proxy",
                                       .render = proxy_metrics,
                                       .arg = &pm};
    if (metrics_start_if("qcg-proxy", &mc, &metrics, msg, sizeof(msg)) != 0) {
        soap_server_free(px.control);
        relay_free(px.relay);
        return config_error(&cfg, msg);
    }
    struct alive *beats = NULL;
    if (cfg.broker != NULL && cfg.broker[0] != '\0') {
        struct alive_config ac = {.url = cfg.broker,
                                  .tls = {.ca = cfg.ca, .certkey = cfg.cert, .crl = cfg.crl},
                                  .interval = cfg.alive_interval,
                                  .relay = px.relay};
        beats = alive_start(&ac, err, sizeof(err));
        if (beats == NULL) {
            metrics_server_stop(metrics);
            soap_server_free(px.control);
            relay_free(px.relay);
            snprintf(msg, sizeof(msg), "qcg-proxy: beats to %s: %s", cfg.broker, err);
            return config_error(&cfg, msg);
        }
        log_info("telling the broker at %s every %d s that we are alive", cfg.broker,
                 cfg.alive_interval);
    } else {
        log_info("no broker configured: the broker cannot tell whether this proxy is alive");
    }

    crl_set_accept_older(cfg.crl_accept_older != 0);
    daemon_signals(&stop, stop_all, &px);
    pthread_t tid;
    if (pthread_create(&tid, NULL, relay_thread, &px) != 0)
        fatalx("cannot start the relay thread");
    int rc_control = soap_server_run(px.control);
    relay_stop(px.relay);
    pthread_join(tid, NULL);
    alive_stop(beats);
    if (rc_control != 0) {
        /* Control threads may still run and read the relay's counters. */
        log_error("control connections still busy: exiting without a clean stop");
        return 1;
    }
    log_info("stopped");
    metrics_server_stop(metrics);
    soap_server_free(px.control);
    relay_free(px.relay);
    proxy_config_free(&cfg);
    return 0;
}
