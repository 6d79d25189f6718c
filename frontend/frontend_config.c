#include "frontend_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics_server.h"
#include "address.h"
#include "identity.h"
#include "log.h"

#define OFF(field) offsetof(struct frontend_config, field)

const struct config_option frontend_options[] = {
    {"listen", CONFIG_STRING, OFF(listen), 0, 0, NULL,
     "address to accept helpers on, IPv4 or IPv6 (no brackets); :: takes both families on one "
     "socket (default: any IPv4 address)"},
    {"port", CONFIG_INT, OFF(port), 1, 65535, "7701", "port to accept helpers on"},
    {"ca", CONFIG_STRING, OFF(ca), 0, 0, NULL, "the grid CA certificate (PEM)"},
    {"cert", CONFIG_STRING, OFF(cert), 0, 0, NULL,
     "this frontend's certificate and key in one PEM (CN = cluster); reread on SIGHUP, with ca"},
    {"crl", CONFIG_STRING, OFF(crl), 0, 0, NULL,
     "the grid's revocation list (qcg-certs revoke; PEM), optional; reread on SIGHUP (the setting "
     "itself is read at start only)"},
    {"crl-accept-older", CONFIG_BOOL, OFF(crl_accept_older), 0, 0, "no",
     "at SIGHUP, load the crl file even when it is expired or older than the CRL in force "
     "(default: keep the one in force and log an error)"},
    {"broker", CONFIG_STRING, OFF(broker), 0, 0, NULL,
     "the broker's URL, https://HOST:PORT/ (IPv6 in brackets: https://[2001:db8::10]:7700/)"},
    {"cluster", CONFIG_STRING, OFF(cluster), 0, 0, NULL,
     "this cluster's name (default and must be: the certificate's CN)"},
    {"kind", CONFIG_STRING, OFF(kind), 0, 0, NULL,
     "what the site's router does: open | firewalled | nat | symnat"},
    {"public-address", CONFIG_STRING, OFF(public_address), 0, 0, NULL,
     "comma-separated addresses the nodes appear from (required for nat, symnat)"},
    {"addresses", CONFIG_STRING, OFF(addresses), 0, 0, NULL,
     "comma-separated CIDR ranges the nodes' addresses lie in, e.g. 10.1.0.0/16 or "
     "2001:db8:1::/48 (unset: the broker accepts nodes at this frontend's own address only)"},
    {"open-addresses", CONFIG_STRING, OFF(open_addresses), 0, 0, NULL,
     "comma-separated CIDR ranges, inside addresses, whose nodes take inbound connections "
     "whatever kind says (an IPv6 prefix the site's firewall lets in, e.g. 2001:db8:1:5::/64)"},
    {"open-ports", CONFIG_PORTS, OFF(open_ports), 0, 0, NULL,
     "LOW-HIGH inbound ports the firewall lets through (firewalled only)"},
    {"node-lease", CONFIG_INT, OFF(node_lease), 30, 86400, "60",
     "seconds a node keeps its contacts without a poll or registration of its helper (above "
     "the helper's 20 s poll)"},
    {"cache-size", CONFIG_INT, OFF(cache_size), 0, 10000000, "100000",
     "plans cached at most (0: no cache)"},
    {"max-connections", CONFIG_INT, OFF(max_connections), 1, 10000, "1024",
     "helper connections served at once (each helper keeps one for its long-poll)"},
    {"max-handshakes", CONFIG_INT, OFF(max_handshakes), 16, 10000, "256",
     "TLS handshakes in progress at once (a thread each); strangers' connections give way "
     "to known addresses', and an attacker with fewer addresses than this keeps no new "
     "client out"},
    {"ipv6-prefix", CONFIG_INT, OFF(ipv6_prefix), 1, 128, "64",
     "bits of an IPv6 source address that count as one address for the per-address limits (a host "
     "commonly holds a whole /64)"},
    {"node-lookups", CONFIG_INT, OFF(node_lookups), 1, 1000000, "2000",
     "lookups of one node a second on average; a burst of 10 s worth passes, beyond it a "
     "lookup waits up to 1 s for its turn, then is refused (retry)"},
    {"node-reports", CONFIG_INT, OFF(node_reports), 1, 1000000, "1000",
     "reports of one node a second on average (bursts of 10 s worth); more are refused"},
    {"node-probes", CONFIG_INT, OFF(node_probes), 1, 100000, "120",
     "siteInfo, probe and observed calls (qcg-probe) of one node a minute (a burst of as "
     "many); more are refused"},
    {"log-level", CONFIG_STRING, OFF(log_level), 0, 0, "info", "error | warn | info | debug"},
    {"syslog", CONFIG_BOOL, OFF(syslog), 0, 0, "no", "log to syslog instead of stderr"},
    {"stats", CONFIG_BOOL, OFF(stats), CONFIG_ACTION, 0, "no",
     "print the running frontend's counters and exit"},
    {"json", CONFIG_BOOL, OFF(json), CONFIG_ACTION, 0, "no", "--stats: one JSON object"},
    {"url", CONFIG_STRING, OFF(url), CONFIG_ACTION, 0, NULL,
     "--stats: the frontend to ask (default: https://LISTEN:PORT/)"},
    METRICS_CONFIG_OPTIONS(struct frontend_config),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};

static const char usage[] = "qcg-frontend --broker URL --kind KIND --ca FILE --cert FILE "
                            "[options]\n       qcg-frontend --stats [--json] [--url URL] "
                            "--ca FILE --cert FILE";

/* An item of a list option: 0, or -1 with why. */
typedef int (*item_check)(const char *item, char *why, size_t whylen);

static int public_item(const char *item, char *why, size_t whylen)
{
    if (address_valid(item))
        return 0;
    snprintf(why, whylen, "'%.64s' is not an IP address", item);
    return -1;
}

static int range_item(const char *item, char *why, size_t whylen)
{
    struct addr_range r;
    if (addr_range_parse(item, &r, why, whylen) < 0 || addr_range_declarable(&r, why, whylen) < 0)
        return -1;
    return 0;
}

/* Splits option `name`'s comma- or space-separated text into out (each
   checked, at most max of len bytes); *n gets the count. */
static int parse_list(const char *name, const char *text, item_check check, char *out, size_t len,
                      int max, int *n, char *err, size_t errlen)
{
    char why[160];
    *n = 0;
    if (text == NULL)
        return 0;
    char *copy = strdup(text), *save = NULL;
    if (copy == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = 0;
    for (char *tok = strtok_r(copy, ", ", &save); tok != NULL; tok = strtok_r(NULL, ", ", &save)) {
        if (check(tok, why, sizeof(why)) < 0) {
            snprintf(err, errlen, "%s: %s", name, why);
            rc = -1;
            break;
        }
        if (*n == max) {
            snprintf(err, errlen, "%s: at most %d", name, max);
            rc = -1;
            break;
        }
        snprintf(out + (size_t)(*n)++ * len, len, "%s", tok);
    }
    free(copy);
    return rc;
}

static int check_stats_mode(struct frontend_config *cfg, char *err, size_t errlen)
{
    if (cfg->url != NULL) {
        snprintf(cfg->stats_url, sizeof(cfg->stats_url), "%s", cfg->url);
        return 0;
    }
    int n = url_local(cfg->listen, cfg->port, cfg->stats_url, sizeof(cfg->stats_url));
    if (n < 0 || (size_t)n >= sizeof(cfg->stats_url)) {
        snprintf(err, errlen, "listen: address too long");
        return -1;
    }
    return 0;
}

int frontend_config_check(struct frontend_config *cfg, char *err, size_t errlen)
{
    cfg->log_level_value = log_level_parse(cfg->log_level != NULL ? cfg->log_level : "info");
    if (cfg->log_level_value < 0) {
        snprintf(err, errlen, "log-level: '%.32s' is not error, warn, info or debug",
                 cfg->log_level);
        return -1;
    }
    if (cfg->ca == NULL || cfg->cert == NULL) {
        snprintf(err, errlen, "--ca and --cert are required");
        return -1;
    }
    struct identity id;
    if (identity_from_file(cfg->cert, QCG_ROLE_NONE, &id, err, errlen) < 0)
        return -1;
    if (cfg->stats)
        return check_stats_mode(cfg, err, errlen);

    if (id.role != QCG_ROLE_FRONTEND) {
        snprintf(err, errlen, "%s is a %s certificate, not a frontend's", cfg->cert,
                 role_name(id.role));
        return -1;
    }
    if (cfg->cluster != NULL && strcmp(cfg->cluster, id.cluster) != 0) {
        snprintf(err, errlen, "cluster '%.64s' differs from the certificate's CN '%s' (%s)",
                 cfg->cluster, id.cluster, cfg->cert);
        return -1;
    }
    snprintf(cfg->cluster_name, sizeof(cfg->cluster_name), "%s", id.cluster);
    if (cfg->broker == NULL || strncmp(cfg->broker, "https://", 8) != 0) {
        snprintf(err, errlen, "--broker https://HOST:PORT/ is required");
        return -1;
    }
    char host[256], why[240];
    int port;
    if (url_hostport(cfg->broker, host, sizeof(host), &port, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "broker: %s", why);
        return -1;
    }
    if (cfg->kind == NULL) {
        snprintf(err, errlen, "--kind is required: open, firewalled, nat or symnat");
        return -1;
    }
    int kind = cluster_kind_parse(cfg->kind);
    if (kind < 0) {
        snprintf(err, errlen, "kind: '%.32s' is not open, firewalled, nat or symnat", cfg->kind);
        return -1;
    }
    cfg->kind_value = (enum cluster_kind)kind;
    if (parse_list("public-address", cfg->public_address, public_item, &cfg->public_addrs[0][0],
                   QCG_ADDR_MAX, FRONTEND_PUBLIC_MAX, &cfg->npublic, err, errlen) < 0 ||
        parse_list("addresses", cfg->addresses, range_item, &cfg->ranges[0][0], FRONTEND_RANGE_LEN,
                   FRONTEND_RANGES_MAX, &cfg->nranges, err, errlen) < 0 ||
        parse_list("open-addresses", cfg->open_addresses, range_item, &cfg->open[0][0],
                   FRONTEND_RANGE_LEN, FRONTEND_RANGES_MAX, &cfg->nopen, err, errlen) < 0)
        return -1;
    for (int i = 0; i < cfg->nopen; i++) {
        struct addr_range o, r;
        bool inside = false;
        addr_range_parse(cfg->open[i], &o, why, sizeof(why));
        for (int j = 0; j < cfg->nranges && !inside; j++)
            inside = addr_range_parse(cfg->ranges[j], &r, why, sizeof(why)) == 0 &&
                     addr_range_within_any(&o, &r, 1);
        if (!inside) {
            snprintf(err, errlen, "open-addresses: %s lies in none of the ranges of addresses",
                     cfg->open[i]);
            return -1;
        }
    }
    /* Behind a NAT the nodes' own addresses say nothing about where they
       appear from; open and firewalled sites' nodes are public themselves. */
    if ((kind == CLUSTER_NAT || kind == CLUSTER_SYMNAT) && cfg->npublic == 0) {
        snprintf(err, errlen, "kind %s needs --public-address (the NAT's addresses)", cfg->kind);
        return -1;
    }
    if (cfg->open_ports[0] != 0 && kind != CLUSTER_FIREWALLED) {
        snprintf(err, errlen, "open-ports only applies to kind firewalled");
        return -1;
    }
    return 0;
}

enum config_result frontend_config_load(struct frontend_config *cfg, int argc, char **argv,
                                        char *err, size_t errlen)
{
    memset(cfg, 0, sizeof(*cfg));
    int first = argc;
    enum config_result r =
        config_load(frontend_options, cfg, argc, argv, usage, &first, err, errlen);
    if (r != CONFIG_OK)
        return r;
    /* config_load's messages already start with the program name; ours get it too. */
    char why[400];
    if (first < argc)
        snprintf(why, sizeof(why), "unexpected argument '%.64s'", argv[first]);
    else if (frontend_config_check(cfg, why, sizeof(why)) == 0)
        return CONFIG_OK;
    snprintf(err, errlen, "qcg-frontend: %s", why);
    return CONFIG_ERROR;
}

void frontend_config_free(struct frontend_config *cfg)
{
    config_free(frontend_options, cfg);
}
