/* The frontend's settings: one option table for the command line, the config
   file and --help, plus the checks that turn text into usable values. */
#ifndef FRONTEND_CONFIG_H
#define FRONTEND_CONFIG_H

#include <stddef.h>
#include "config.h"
#include "proto.h"

#define FRONTEND_PUBLIC_MAX 16
#define FRONTEND_RANGES_MAX 16 /* as many as the broker takes (REG_MAX_RANGES) */
#define FRONTEND_RANGE_LEN (QCG_ADDR_MAX + 4)

struct frontend_config {
    /* as read (see the option table in frontend_config.c) */
    char *listen;
    int port;
    char *ca;
    char *cert;
    char *crl;
    int crl_accept_older; /* reloads take an expired or older CRL too */
    char *broker;
    char *cluster;
    char *kind;
    char *public_address;
    char *addresses;
    char *open_addresses;
    int open_ports[2];
    int node_lease;
    int cache_size;
    int max_connections;
    int max_handshakes; /* the SOAP handshake stage */
    int ipv6_prefix;    /* per-address limits count an IPv6 /ipv6_prefix */
    int node_lookups;   /* per node: lookups a second (bursts of 10 s worth) */
    int node_reports;   /* per node: reports a second (bursts of 10 s worth) */
    int node_probes;    /* per node: siteInfo, probe, observed calls a minute (bursts of as many) */
    char *log_level;
    int syslog;
    int stats;
    int json;
    char *url;
    char *metrics_listen, *metrics_allow; /* common/metrics_server.h */
    int metrics_tls;

    /* derived by frontend_config_load */
    enum cluster_kind kind_value;
    int log_level_value;
    int npublic;
    char public_addrs[FRONTEND_PUBLIC_MAX][QCG_ADDR_MAX];
    int nranges; /* 0: none declared (the broker accepts nodes at our own address only) */
    char ranges[FRONTEND_RANGES_MAX][FRONTEND_RANGE_LEN];
    int nopen; /* open-addresses: node ranges that take inbound connections */
    char open[FRONTEND_RANGES_MAX][FRONTEND_RANGE_LEN];
    char cluster_name[QCG_NAME_MAX]; /* from the certificate, == cluster when given */
    char stats_url[300];             /* --stats: url, or built from listen and port */
};

/* Reads and checks everything; CONFIG_ERROR with a one-line reason in err. */
enum config_result frontend_config_load(struct frontend_config *cfg, int argc, char **argv,
                                        char *err, size_t errlen);
/* The checks alone, for a cfg filled by config_set (tests). */
int frontend_config_check(struct frontend_config *cfg, char *err, size_t errlen);
void frontend_config_free(struct frontend_config *cfg);
extern const struct config_option frontend_options[];

#endif
