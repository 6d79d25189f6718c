/* qcg-broker's settings: one table (util/config.h) for the config file, the
   command line and --help, plus the checks that need more than a type. */
#ifndef BROKER_CONFIG_H
#define BROKER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include "config.h"
#include "proxies.h"
#include "reflector.h"

#define BROKER_DEFAULT_PORT 7700
/* Whom the reflector's process becomes unless told (debian/ creates it). */
#define REFLECTOR_USER_DEFAULT "qcg-reflector"

struct broker_config {
    char *listen; /* NULL = any address */
    int port;
    char *ca;
    char *cert;
    char *crl;
    int crl_accept_older; /* reloads take an expired or older CRL too */
    int max_connections;
    int max_handshakes; /* the SOAP handshake stage */
    int ipv6_prefix;    /* per-address limits count an IPv6 /ipv6_prefix */
    char *log_level;
    int syslog;
    int max_contacts;
    int max_contacts_per_cluster; /* 0: a quarter of max_contacts */
    int cluster_lookups;          /* per cluster: lookups a second (bursts of 10 s worth) */
    int cluster_reports;          /* per cluster: reports a second (bursts of 10 s worth) */
    int cluster_probes;           /* per cluster: probe-related calls a minute */
    int probes_per_node;          /* live probe endpoints one calling node may hold */
    int stats;                    /* --stats: ask a running broker for its counters */
    int grid;                     /* --grid: ask it for its picture of the grid */
    int json;
    char *html; /* --grid --html FILE: the grid's picture as a page */
    char *url;
    char *proxy;             /* NAME@HOST:PORT[,...] */
    char *proxy_key;         /* the key shared with the proxies */
    char *reflector;         /* ADDR:PORT, NULL = no hole punching */
    char *reflector_user;    /* whom the reflector's process becomes */
    int reflector_same_user; /* 1: it keeps the broker's uid instead (asked for) */
    /* The reflector's bounds (reflector.h's REFLECTOR_* defaults). */
    int reflector_line_timeout;      /* seconds for a request line */
    int reflector_connections;       /* connections at once */
    int reflector_per_address;       /* connections without a token, per address (/64) */
    int reflector_plans;             /* expected punches */
    int reflector_plans_per_cluster; /* of one initiating cluster; 0: an eighth */
    int outcome_expiry;
    int cluster_lease;    /* seconds without a frontend's poll before its cluster goes; 0 never */
    int proxy_dead_after; /* seconds without a beat after which a proxy is not planned */
    char *state_file;     /* what the broker learned, kept across restarts; NULL = not kept */
    char *metrics_listen, *metrics_allow; /* common/metrics_server.h */
    int metrics_tls;

    /* Derived by broker_config_load. */
    char reflector_host[48];
    char reflector6_host[48]; /* "": no hole punching over IPv6 */
    int reflector_port;
    struct proxies proxies;
};

extern const struct config_option broker_options[];

/* config_load over broker_options, then: ca and cert given and readable,
   log-level known, proxies parsed and their key loaded.  CONFIG_ERROR leaves one line in err,
   starting with "qcg-broker: ". */
enum config_result broker_config_load(struct broker_config *cfg, int argc, char **argv, char *err,
                                      size_t errlen);
void broker_config_free(struct broker_config *cfg);
/* The reflector's bounds from the reflector-* options. */
struct reflector_tuning broker_reflector_tuning(const struct broker_config *cfg);

#endif
