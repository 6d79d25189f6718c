/* qcg-broker's settings; see broker_config.h. */
#include "broker_config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "address.h"
#include "lease.h"
#include "log.h"
#include "reflector.h"
#include "metrics_server.h"
#include "proto.h"

#define OPT(field) offsetof(struct broker_config, field)
#define STR_(x) #x
#define STR(x) STR_(x) /* a default kept in proto.h, as the table's text */

const struct config_option broker_options[] = {
    {"listen", CONFIG_STRING, OPT(listen), 0, 0, NULL,
     "address to listen on, IPv4 or IPv6 (no brackets); :: takes both families on one socket "
     "(default: any IPv4 address)"},
    {"port", CONFIG_INT, OPT(port), 1, 65535, "7700", "TCP port to listen on"},
    {"ca", CONFIG_STRING, OPT(ca), 0, 0, NULL, "the grid CA certificate (PEM), required"},
    {"cert", CONFIG_STRING, OPT(cert), 0, 0, NULL,
     "the broker's certificate and key in one PEM file, required; reread on SIGHUP, with ca"},
    {"crl", CONFIG_STRING, OPT(crl), 0, 0, NULL,
     "the grid's revocation list (qcg-certs revoke; PEM), optional; reread on SIGHUP (the setting "
     "itself is read at start only)"},
    {"crl-accept-older", CONFIG_BOOL, OPT(crl_accept_older), 0, 0, "no",
     "at SIGHUP, load the crl file even when it is expired or older than the CRL in force "
     "(default: keep the one in force and log an error)"},
    {"max-connections", CONFIG_INT, OPT(max_connections), 1, 10000, "1024",
     "authenticated connections served at once (clusters x 9 and some)"},
    {"max-handshakes", CONFIG_INT, OPT(max_handshakes), 16, 10000, "1024",
     "TLS handshakes in progress at once (a thread each); strangers' connections give way "
     "to known addresses', and an attacker with fewer addresses than this keeps no new "
     "client out"},
    {"ipv6-prefix", CONFIG_INT, OPT(ipv6_prefix), 1, 128, "64",
     "bits of an IPv6 source address that count as one address for the per-address limits (a host "
     "commonly holds a whole /64)"},
    {"log-level", CONFIG_STRING, OPT(log_level), 0, 0, "info", "error, warn, info or debug"},
    {"syslog", CONFIG_BOOL, OPT(syslog), 0, 0, "no", "log to syslog instead of stderr"},
    {"max-contacts", CONFIG_INT, OPT(max_contacts), 1, 100000000, "1000000",
     "contacts held at most; publishes beyond are refused"},
    {"max-contacts-per-cluster", CONFIG_INT, OPT(max_contacts_per_cluster), 0, 100000000, "0",
     "one cluster's share of max-contacts, so that one site cannot fill the broker (0: a "
     "quarter of max-contacts)"},
    {"cluster-lookups", CONFIG_INT, OPT(cluster_lookups), 1, 10000000, "20000",
     "lookups of one cluster's frontend a second on average; a burst of 10 s worth passes, "
     "beyond it a lookup waits up to 1 s for its turn, then is refused (retry)"},
    {"cluster-reports", CONFIG_INT, OPT(cluster_reports), 1, 10000000, "10000",
     "reports of one cluster's frontend a second on average (bursts of 10 s worth); more are "
     "refused"},
    {"cluster-probes", CONFIG_INT, OPT(cluster_probes), 1, 1000000, "600",
     "probe calls (qcg-probe's test endpoints) of one cluster's frontend a minute (a burst of "
     "as many); more are refused"},
    {"probes-per-node", CONFIG_INT, OPT(probes_per_node), 1, QCG_PROBES_PER_CLUSTER,
     STR(QCG_PROBES_PER_NODE_DEFAULT),
     "probe endpoints alive at once for one calling node, of its cluster's " STR(
         QCG_PROBES_PER_CLUSTER) ": one node cannot take every probe of its site; more are "
                                 "refused (retry)"},
    {"stats", CONFIG_BOOL, OPT(stats), CONFIG_ACTION, 0, "no",
     "print the counters of the running broker and exit"},
    {"grid", CONFIG_BOOL, OPT(grid), CONFIG_ACTION, 0, "no",
     "print the running broker's picture of the grid (clusters declared and observed by "
     "qcg-probe, the techniques that last worked between them) and exit"},
    {"json", CONFIG_BOOL, OPT(json), CONFIG_ACTION, 0, "no",
     "with --stats or --grid: one JSON object"},
    {"html", CONFIG_STRING, OPT(html), CONFIG_ACTION, 0, NULL,
     "with --grid: write the grid's picture to this file (- for stdout) instead: one "
     "self-contained HTML page (SVG) to open in a browser"},
    {"url", CONFIG_STRING, OPT(url), CONFIG_ACTION, 0, NULL,
     "with --stats or --grid: the broker to ask (default https://127.0.0.1:PORT/)"},
    {"proxy", CONFIG_STRING, OPT(proxy), 0, 0, NULL,
     "proxies for pairs nothing else connects: NAME@HOST:PORT or NAME@[IPv6]:PORT (qcg-proxy's "
     "data address), comma-separated; a NAME twice for its address in each family"},
    {"proxy-key", CONFIG_STRING, OPT(proxy_key), 0, 0, NULL,
     "the key shared with the proxies (64 hex characters, mode 0600); required with proxy"},
    {"reflector", CONFIG_STRING, OPT(reflector), 0, 0, NULL,
     "where nodes reach the broker's reflector for hole punching and qcg-probe: ADDR:PORT "
     "(an IPv4 address of this host, e.g. 203.0.113.10:7704), and for hole punching over IPv6 "
     "an IPv6 address after a comma with the same port (203.0.113.10:7704, "
     "[2001:db8::10]:7704); the reflector listens on these addresses only; plain TCP; "
     "none = no hole punching"},
    {"reflector-user", CONFIG_STRING, OPT(reflector_user), 0, 0, REFLECTOR_USER_DEFAULT,
     "the unprivileged user the reflector's process becomes (qcg-broker needs root, or "
     "CAP_SETUID and CAP_SETGID as the shipped unit gives it); never the broker's own uid"},
    {"reflector-same-user", CONFIG_BOOL, OPT(reflector_same_user), 0, 0, "no",
     "run the reflector's process as the broker's own uid instead of reflector-user (it can "
     "then read the broker's TLS key and proxy key: for tests and hosts without that user)"},
    {"reflector-line-timeout", CONFIG_INT, OPT(reflector_line_timeout), 1, 60, "5",
     "seconds a connection to the reflector has to send its request line (then FAIL)"},
    {"reflector-connections", CONFIG_INT, OPT(reflector_connections), 16, 65536, "1024",
     "connections the reflector holds at once (each a descriptor of its process); beyond, "
     "the oldest still sending its line is cut"},
    {"reflector-per-address", CONFIG_INT, OPT(reflector_per_address), 1, 65536, "128",
     "connections without a valid token the reflector holds from one address (IPv6: one "
     "/64); beyond, a new one is closed at once.  A NATed site is one address: keep it "
     "above the punches its nodes start at once"},
    {"reflector-plans", CONFIG_INT, OPT(reflector_plans), 64, 1048576, "65536",
     "planned hole punches the reflector expects at once (each a few hundred bytes); "
     "beyond, a plan is not taken and its punches get FAIL"},
    {"reflector-plans-per-cluster", CONFIG_INT, OPT(reflector_plans_per_cluster), 0, 1048576, "0",
     "of those, the plans one initiating cluster may hold (one job: half of it); 0 = an "
     "eighth of reflector-plans"},
    {"proxy-dead-after", CONFIG_INT, OPT(proxy_dead_after), 1, 3600, "15",
     "seconds without a beat (qcg-proxy's alive-interval) after which a proxy is dead and no "
     "pair is planned through it"},
    {"outcome-expiry", CONFIG_INT, OPT(outcome_expiry), 1, 86400, "600",
     "seconds a technique that failed between two clusters is not planned again between them"},
    {"cluster-lease", CONFIG_INT, OPT(cluster_lease), 0, 86400, "120",
     "seconds a cluster's contacts stay at the broker after its frontend's last poll (a dead "
     "frontend's contacts then go; it publishes them again when it returns); at least 30, "
     "0 = until the broker stops"},
    {"state-file", CONFIG_STRING, OPT(state_file), 0, 0, NULL,
     "where what the broker learned between clusters is kept across restarts (rewritten "
     "atomically every 30 s when it changed, and at a clean stop); default: not kept"},
    METRICS_CONFIG_OPTIONS(struct broker_config),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};

static int readable(const char *what, const char *path, char *err, size_t errlen)
{
    if (path == NULL || path[0] == '\0') {
        snprintf(err, errlen, "qcg-broker: %s is required (--%s FILE)", what, what);
        return -1;
    }
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "qcg-broker: %s: cannot read %s: %s", what, path, strerror(errno));
        return -1;
    }
    fclose(f);
    return 0;
}

/* One ADDR:PORT of `reflector`: a literal, non-wildcard address of family
   (nodes connect to it as given) into host. */
static int parse_reflector_one(const char *text, int family, char *host, size_t hostlen, int *port,
                               char *err, size_t errlen)
{
    char why[200];
    if (hostport_parse(text, false, host, hostlen, port, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "qcg-broker: --reflector: %s", why);
        return -1;
    }
    if (address_family(host) != family || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0) {
        snprintf(err, errlen,
                 "qcg-broker: --reflector: '%s' is not an %s address nodes can connect to "
                 "(first an IPv4 one, then optionally an IPv6 one for hole punching over IPv6)",
                 host, family == AF_INET ? "IPv4" : "IPv6");
        return -1;
    }
    return 0;
}

/* "203.0.113.10:7704" or "203.0.113.10:7704, [2001:db8::10]:7704": an IPv4
   reflector (qcg-probe observes IPv4 mappings), and an IPv6 address on the
   same port for hole punching over IPv6. */
static int parse_reflector(struct broker_config *cfg, char *err, size_t errlen)
{
    char first[HOSTPORT_MAX];
    const char *comma = strchr(cfg->reflector, ',');
    size_t len = comma != NULL ? (size_t)(comma - cfg->reflector) : strlen(cfg->reflector);
    int port, port6;

    if (len >= sizeof(first)) {
        snprintf(err, errlen, "qcg-broker: --reflector: too long");
        return -1;
    }
    memcpy(first, cfg->reflector, len);
    first[len] = '\0';
    if (parse_reflector_one(first, AF_INET, cfg->reflector_host, sizeof(cfg->reflector_host), &port,
                            err, errlen) < 0)
        return -1;
    cfg->reflector6_host[0] = '\0';
    if (comma != NULL) {
        const char *second = comma + 1 + strspn(comma + 1, " \t");
        if (strchr(second, ',') != NULL) {
            snprintf(err, errlen, "qcg-broker: --reflector: at most two addresses, IPv4 then IPv6");
            return -1;
        }
        if (parse_reflector_one(second, AF_INET6, cfg->reflector6_host,
                                sizeof(cfg->reflector6_host), &port6, err, errlen) < 0)
            return -1;
        if (port6 != port) {
            snprintf(err, errlen,
                     "qcg-broker: --reflector: the IPv6 address's port %d is not the IPv4 one's "
                     "(%d): the reflector listens on one port for both",
                     port6, port);
            return -1;
        }
    }
    cfg->reflector_port = port;
    return 0;
}

enum config_result broker_config_load(struct broker_config *cfg, int argc, char **argv, char *err,
                                      size_t errlen)
{
    int first = 0;
    memset(cfg, 0, sizeof(*cfg));
    enum config_result res =
        config_load(broker_options, cfg, argc, argv,
                    "qcg-broker [--config FILE] [options]\n"
                    "       qcg-broker --stats [--json] [--url URL] [options]\n"
                    "       qcg-broker --grid [--json | --html FILE] [--url URL] [options]",
                    &first, err, errlen);
    if (res != CONFIG_OK)
        return res;
    if (first < argc) {
        snprintf(err, errlen, "qcg-broker: unexpected argument: %s", argv[first]);
        return CONFIG_ERROR;
    }
    if (log_level_parse(cfg->log_level) < 0) {
        snprintf(err, errlen, "qcg-broker: --log-level: %s is not one of error, warn, info, debug",
                 cfg->log_level ? cfg->log_level : "(none)");
        return CONFIG_ERROR;
    }
    if (cfg->html != NULL && (!cfg->grid || cfg->json)) {
        snprintf(err, errlen, "qcg-broker: --html goes with --grid, without --json");
        return CONFIG_ERROR;
    }
    if (readable("ca", cfg->ca, err, errlen) != 0 || readable("cert", cfg->cert, err, errlen) != 0)
        return CONFIG_ERROR;
    if (cfg->url != NULL && strncmp(cfg->url, "https://", 8) != 0) {
        snprintf(err, errlen, "qcg-broker: --url: %s does not start with https://", cfg->url);
        return CONFIG_ERROR;
    }
    if (cfg->cluster_lease != 0 && cfg->cluster_lease < LEASE_MIN_S) {
        snprintf(err, errlen,
                 "qcg-broker: --cluster-lease: %d s is shorter than a frontend's poll may take "
                 "(at least %d, or 0 for none)",
                 cfg->cluster_lease, LEASE_MIN_S);
        return CONFIG_ERROR;
    }
    if (cfg->reflector_plans_per_cluster > cfg->reflector_plans) {
        snprintf(err, errlen,
                 "qcg-broker: --reflector-plans-per-cluster: %d is more than reflector-plans (%d)",
                 cfg->reflector_plans_per_cluster, cfg->reflector_plans);
        return CONFIG_ERROR;
    }
    bool query = cfg->stats || cfg->grid;
    if (!query && cfg->reflector != NULL && cfg->reflector[0] != '\0' &&
        strcmp(cfg->reflector, "none") != 0 && parse_reflector(cfg, err, errlen) < 0)
        return CONFIG_ERROR;
    if (!query) {
        char why[400];
        struct reflector_process_config rc = {.user = cfg->reflector_user,
                                              .same_user = cfg->reflector_same_user != 0};
        uint32_t uid, gid;
        if (cfg->reflector_port > 0 &&
            reflector_user_resolve(&rc, &uid, &gid, why, sizeof(why)) < 0) {
            snprintf(err, errlen, "qcg-broker: %s", why);
            return CONFIG_ERROR;
        }
        if (proxies_parse(&cfg->proxies, cfg->proxy, cfg->proxy_key, why, sizeof(why)) < 0) {
            snprintf(err, errlen, "qcg-broker: %s", why);
            return CONFIG_ERROR;
        }
    }
    return CONFIG_OK;
}

void broker_config_free(struct broker_config *cfg)
{
    proxies_clear(&cfg->proxies);
    config_free(broker_options, cfg);
}

struct reflector_tuning broker_reflector_tuning(const struct broker_config *cfg)
{
    return (struct reflector_tuning){
        .read_timeout_ms = (unsigned)cfg->reflector_line_timeout * 1000,
        .conns_max = (unsigned)cfg->reflector_connections,
        .conns_per_address = (unsigned)cfg->reflector_per_address,
        .expected_max = (unsigned)cfg->reflector_plans,
        .expected_per_cluster = (unsigned)cfg->reflector_plans_per_cluster,
    };
}
