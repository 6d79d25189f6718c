/* qcg-proxy's settings; see proxy_config.h. */
#include "proxy_config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "address.h"
#include "metrics_server.h"
#include "identity.h"
#include "log.h"

#define OPT(field) offsetof(struct proxy_config, field)

const struct config_option proxy_options[] = {
    {"listen", CONFIG_STRING, OPT(listen), 0, 0, NULL,
     "address to listen on, data and control, IPv4 or IPv6 (no brackets) (default: any "
     "address, IPv6 and IPv4 on one socket where the host has IPv6)"},
    {"port", CONFIG_INT, OPT(port), 1, 65535, "7703",
     "TCP port where processes present their tokens (plain TCP)"},
    {"control-port", CONFIG_INT, OPT(control_port), 1, 65535, "7702",
     "TCP port of the mutual-TLS SOAP endpoint (stats)"},
    {"ca", CONFIG_STRING, OPT(ca), 0, 0, NULL, "the grid CA certificate (PEM), required"},
    {"cert", CONFIG_STRING, OPT(cert), 0, 0, NULL,
     "the proxy's certificate and key in one PEM file (qcg-certs issue proxy NAME), required; "
     "reread on SIGHUP, with ca"},
    {"crl", CONFIG_STRING, OPT(crl), 0, 0, NULL,
     "the grid's revocation list (qcg-certs revoke; PEM), optional; reread on SIGHUP (the setting "
     "itself is read at start only)"},
    {"crl-accept-older", CONFIG_BOOL, OPT(crl_accept_older), 0, 0, "no",
     "at SIGHUP, load the crl file even when it is expired or older than the CRL in force "
     "(default: keep the one in force and log an error)"},
    {"key-file", CONFIG_STRING, OPT(key_file), 0, 0, NULL,
     "the token key shared with the broker: 64 hex characters, mode 0600, required"},
    {"token-skew", CONFIG_INT, OPT(token_skew), 0, 86400, "300",
     "seconds a token is still accepted after its expiry (clock skew with the broker)"},
    {"pair-timeout", CONFIG_INT, OPT(pair_timeout), 1, 3600, "30",
     "seconds a connection waits for the other side of its pair"},
    {"stall-timeout", CONFIG_INT, OPT(stall_timeout), 0, 3600, "10",
     "seconds one side of a pair may hold data its peer never acknowledges (not even a window "
     "probe: a NAT or firewall on the way forgot it) before the pair is aborted, so that both "
     "ends connect anew at once (0: never)"},
    {"hello-timeout", CONFIG_INT, OPT(hello_timeout), 1, 60, "5",
     "seconds a new connection has to send its whole token (at most pair-timeout)"},
    {"hellos-per-address", CONFIG_INT, OPT(hellos_per_address), 1, 1000000, "1024",
     "connections from one address (an IPv6 /64: ipv6-prefix) that have not sent their token yet"},
    {"ipv6-prefix", CONFIG_INT, OPT(ipv6_prefix), 1, 128, "64",
     "bits of an IPv6 source address that count as one address for the per-address limits (a host "
     "commonly holds a whole /64)"},
    {"token-memory", CONFIG_INT, OPT(token_memory), 1, 65536, "64",
     "MiB for the tokens remembered against replay (about 16 bytes each, kept until expiry + "
     "token-skew); when full, new pairs are refused"},
    {"tokens-per-address", CONFIG_INT, OPT(tokens_per_address), 0, 1000000000, "0",
     "tokens one address may have remembered against replay, one job half of them (0 = a "
     "quarter of what token-memory holds, at least 256)"},
    {"max-pairs", CONFIG_INT, OPT(max_pairs), 1, 1000000, "10000",
     "pairs relayed at once (also bounded by the descriptors the system allows)"},
    {"pipe-size", CONFIG_INT, OPT(pipe_size), 4096, 1048576, "262144",
     "bytes buffered per direction of a pair (a kernel pipe, made on first data)"},
    {"broker", CONFIG_STRING, OPT(broker), 0, 0, NULL,
     "the broker's URL (https://HOST:7700/): the proxy tells it every alive-interval that it "
     "is alive and how loaded it is; without it the broker cannot tell whether it is alive"},
    {"alive-interval", CONFIG_INT, OPT(alive_interval), 1, 60, "5",
     "seconds between two beats to the broker (the broker's proxy-dead-after allows three)"},
    {"log-level", CONFIG_STRING, OPT(log_level), 0, 0, "info", "error, warn, info or debug"},
    {"syslog", CONFIG_BOOL, OPT(syslog), 0, 0, "no", "log to syslog instead of stderr"},
    {"stats", CONFIG_BOOL, OPT(stats), CONFIG_ACTION, 0, "no",
     "print the counters of the running proxy and exit"},
    {"json", CONFIG_BOOL, OPT(json), CONFIG_ACTION, 0, "no", "with --stats: one JSON object"},
    {"url", CONFIG_STRING, OPT(url), CONFIG_ACTION, 0, NULL,
     "with --stats: the proxy to ask (default https://127.0.0.1:CONTROL-PORT/)"},
    METRICS_CONFIG_OPTIONS(struct proxy_config),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};

static int readable(const char *what, const char *path, char *err, size_t errlen)
{
    if (path == NULL || path[0] == '\0') {
        snprintf(err, errlen, "qcg-proxy: %s is required (--%s FILE)", what, what);
        return -1;
    }
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "qcg-proxy: %s: cannot read %s: %s", what, path, strerror(errno));
        return -1;
    }
    fclose(f);
    return 0;
}

enum config_result proxy_config_load(struct proxy_config *cfg, int argc, char **argv, char *err,
                                     size_t errlen)
{
    int first = 0;
    memset(cfg, 0, sizeof(*cfg));
    enum config_result res = config_load(proxy_options, cfg, argc, argv,
                                         "qcg-proxy [--config FILE] [options]\n"
                                         "       qcg-proxy --stats [--json] [--url URL] [options]",
                                         &first, err, errlen);
    if (res != CONFIG_OK)
        return res;
    if (first < argc) {
        snprintf(err, errlen, "qcg-proxy: unexpected argument: %s", argv[first]);
        return CONFIG_ERROR;
    }
    if (log_level_parse(cfg->log_level) < 0) {
        snprintf(err, errlen, "qcg-proxy: --log-level: %s is not one of error, warn, info, debug",
                 cfg->log_level ? cfg->log_level : "(none)");
        return CONFIG_ERROR;
    }
    if (readable("ca", cfg->ca, err, errlen) != 0 || readable("cert", cfg->cert, err, errlen) != 0)
        return CONFIG_ERROR;
    if (!cfg->stats && (cfg->key_file == NULL || cfg->key_file[0] == '\0')) {
        snprintf(err, errlen, "qcg-proxy: key-file is required (--key-file FILE)");
        return CONFIG_ERROR;
    }
    if (!cfg->stats && cfg->port == cfg->control_port) {
        snprintf(err, errlen, "qcg-proxy: port and control-port are both %d", cfg->port);
        return CONFIG_ERROR;
    }
    if (cfg->broker != NULL && strncmp(cfg->broker, "https://", 8) != 0) {
        snprintf(err, errlen, "qcg-proxy: --broker: %s does not start with https://", cfg->broker);
        return CONFIG_ERROR;
    }
    char host[256], why[240];
    int port;
    if (cfg->broker != NULL &&
        url_hostport(cfg->broker, host, sizeof(host), &port, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "qcg-proxy: --broker: %s", why);
        return CONFIG_ERROR;
    }
    if (cfg->url != NULL && strncmp(cfg->url, "https://", 8) != 0) {
        snprintf(err, errlen, "qcg-proxy: --url: %s does not start with https://", cfg->url);
        return CONFIG_ERROR;
    }
    return CONFIG_OK;
}

void proxy_config_free(struct proxy_config *cfg)
{
    config_free(proxy_options, cfg);
}
