/* qcg-proxy's settings: one table (util/config.h) for the config file, the
   command line and --help, plus the checks that need more than a type. */
#ifndef PROXY_CONFIG_H
#define PROXY_CONFIG_H

#include <stddef.h>
#include "config.h"

#define PROXY_DEFAULT_PORT 7703
#define PROXY_DEFAULT_CONTROL_PORT 7702

struct proxy_config {
    char *listen;     /* NULL = any address */
    int port;         /* data: clients present their tokens here */
    int control_port; /* mutual-TLS SOAP: stats only */
    char *ca;
    char *cert;
    char *crl;
    int crl_accept_older; /* reloads take an expired or older CRL too */
    char *key_file;
    int token_skew;         /* seconds a token is still accepted after its expiry */
    int pair_timeout;       /* seconds a connection waits for the other side */
    int stall_timeout;      /* seconds of data unacknowledged before a pair is aborted; 0 never */
    int hello_timeout;      /* seconds a new connection has for its token */
    int hellos_per_address; /* connections without a token yet, per address */
    int ipv6_prefix;        /* an address: an IPv6 /ipv6_prefix */
    int token_memory;       /* MiB the seen tokens may take */
    int tokens_per_address; /* seen tokens per address; 0 = a quarter of token-memory's */
    int max_pairs;
    int pipe_size;      /* bytes buffered per direction of a pair */
    char *broker;       /* the broker's URL for the beats; NULL = no beats */
    int alive_interval; /* seconds between beats */
    char *log_level;
    int syslog;
    int stats; /* --stats: ask a running proxy for its counters */
    int json;
    char *url;
    char *metrics_listen, *metrics_allow; /* common/metrics_server.h */
    int metrics_tls;
};

extern const struct config_option proxy_options[];

/* config_load over proxy_options, then: ca, cert (and key-file unless --stats)
   given and readable, log-level known, url https.  CONFIG_ERROR leaves one
   line in err, starting with "qcg-proxy: ". */
enum config_result proxy_config_load(struct proxy_config *cfg, int argc, char **argv, char *err,
                                     size_t errlen);
void proxy_config_free(struct proxy_config *cfg);

#endif
