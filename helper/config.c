/* The helper's settings: one table for the config file, the flags and --help. */
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "metrics_server.h"
#include "address.h"
#include "helper.h"
#include "log.h"
#include "proto.h"

#define OPT(n, t, f, lo, hi, d, h)                                                                 \
    {                                                                                              \
        n, t, offsetof(struct helper_config, f), lo, hi, d, h                                      \
    }

const struct config_option helper_options[] = {
    OPT("socket", CONFIG_STRING, socket, 0, 0, HELPER_DEFAULT_SOCKET,
        "the Unix socket processes connect to"),
    OPT("socket-mode", CONFIG_STRING, socket_mode, 0, 0, "0666",
        "permissions of the socket (octal); callers are authorized by job secret"),
    OPT("allow-uids", CONFIG_STRING, allow_uids, 0, 0, "",
        "comma list of uids or user names allowed to connect (empty: everyone)"),
    OPT("max-clients", CONFIG_INT, max_clients, 1, 65536, "4096",
        "local connections served at once, all uids together"),
    OPT("max-clients-per-uid", CONFIG_INT, max_clients_per_uid, 1, 65536, "256",
        "local connections served at once for one uid; more are refused 100 ms after they "
        "connect"),
    OPT("max-requests", CONFIG_INT, max_requests, 1, 4096, "64",
        "requests in flight per connection; at the bound the connection is not read"),
    OPT("max-requests-per-uid", CONFIG_INT, max_requests_per_uid, 1, 4096, "6",
        "requests of one uid on the thread pool at once; more wait unread"),
    OPT("max-lookups-per-uid", CONFIG_INT, max_lookups_per_uid, 1, 4096, "256",
        "first lookups of one uid waiting for, or in, a batch to the frontend (a batch "
        "takes one thread, whatever it carries); more wait unread"),
    OPT("lookups-per-uid", CONFIG_INT, lookups_per_uid, 1, 1000000, "1000",
        "LOOKUPs of one uid a second on average (bursts of 10 s worth pass) while another "
        "uid of the node looked up within 10 s (a uid alone is not held to it); more are "
        "refused (busy: the library asks again) 100 ms after the request, the connection "
        "unread meanwhile. Keep it below the frontend's "
        "node-lookups, which every uid of the node shares: what is left is the other "
        "uids'; the default is half of node-lookups' default"),
    OPT("publishes-per-uid", CONFIG_INT, publishes_per_uid, 1, 100000, "50",
        "PUBLISH and WITHDRAW requests of one uid a second on average (bursts of 10 s "
        "worth pass) while another uid of the node looked up, published or withdrew "
        "within 10 s (a uid alone is not held to it); more are refused (busy) 100 ms after "
        "the request, the connection unread meanwhile"),
    OPT("reports-per-uid", CONFIG_INT, reports_per_uid, 1, 100000, "64",
        "REPORTs of one uid sent upstream a second on average (bursts of 16 s worth "
        "pass); the excess is dropped and counted, and so is a success reported while the "
        "uid has max-requests-per-uid upstream"),
    OPT("probes-per-uid", CONFIG_INT, probes_per_uid, 1, 3600, "60",
        "SITE and PROBE requests (qcg-probe) of one uid a minute on average (a burst of "
        "as many passes); more are refused"),
    OPT("threads", CONFIG_INT, threads, 1, 128, "8",
        "threads for calls to the frontend (UV_THREADPOOL_SIZE, unless set in the "
        "environment) and kept-alive connections to it"),
    OPT("frontend", CONFIG_STRING, frontend, 0, 0, NULL,
        "the cluster frontend's URL, https://HOST:PORT/, IPv6 in brackets (required)"),
    OPT("ca", CONFIG_STRING, ca, 0, 0, NULL, "the grid CA certificate (PEM, required)"),
    OPT("cert", CONFIG_STRING, cert, 0, 0, NULL,
        "this helper's certificate and key in one PEM (required); reread on SIGHUP, with ca"),
    OPT("crl", CONFIG_STRING, crl, 0, 0, NULL,
        "the grid's revocation list (qcg-certs revoke; PEM), optional; reread on SIGHUP (the "
        "setting itself is read at start only)"),
    OPT("crl-accept-older", CONFIG_BOOL, crl_accept_older, 0, 0, "no",
        "at SIGHUP, load the crl file even when it is expired or older than the CRL in force "
        "(default: keep the one in force and log an error)"),
    OPT("cluster", CONFIG_STRING, cluster, 0, 0, NULL,
        "this node's cluster (default: from the certificate's CN)"),
    OPT("node", CONFIG_STRING, node, 0, 0, NULL,
        "this node's name (default: from the certificate's CN)"),
    OPT("address", CONFIG_STRING, address, 0, 0, NULL,
        "the node's address inside its site, an IPv4/IPv6 literal (required); a dual-stack node "
        "lists one of each family, comma-separated"),
    OPT("ports", CONFIG_PORTS, ports, 0, 0, NULL,
        "the node's listening port range LOW-HIGH (required)"),
    OPT("intercept", CONFIG_BOOL, intercept, 0, 0, "yes",
        "take part in traversing TCP (NFQUEUE + raw socket; needs CAP_NET_ADMIN and "
        "CAP_NET_RAW); no: declare this node unable to, as a helper without privileges"),
    OPT("nfqueue", CONFIG_INT, nfqueue, 0, 65535, "7710",
        "the NFQUEUE number this helper's interception rules use"),
    OPT("punch-ttl", CONFIG_STRING, punch_ttl, 0, 0, "auto",
        "a hole punch's first SYN: auto (a TTL of the routers counted to the reflector, "
        "when 2 or more, so that it expires before the peer's firewall), plain (the "
        "normal TTL) or a TTL 1-64 (when the path to the reflector is not the path "
        "to the peers)"),
    OPT("log-level", CONFIG_STRING, log_level, 0, 0, "info", "error, warn, info or debug"),
    OPT("syslog", CONFIG_BOOL, syslog, 0, 0, "no", "log to syslog instead of stderr"),
    OPT("status", CONFIG_BOOL, status, CONFIG_ACTION, 0, "no",
        "ask the running helper (at --socket) for its state, print it and exit"),
    OPT("json", CONFIG_BOOL, json, CONFIG_ACTION, 0, "no", "with --status: print one JSON object"),
    METRICS_CONFIG_OPTIONS(struct helper_config),
    {0},
};

/* punch-ttl: auto 0, plain -1, else the TTL 1-64 (punch_params.first_ttl). */
static int parse_punch_ttl(const char *text, int *ttl)
{
    char *end;
    long v;

    if (text == NULL || strcmp(text, "auto") == 0) {
        *ttl = 0;
        return 0;
    }
    if (strcmp(text, "plain") == 0) {
        *ttl = -1;
        return 0;
    }
    errno = 0;
    v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < 1 || v > 64)
        return -1;
    *ttl = (int)v;
    return 0;
}

static int parse_mode(const char *text, mode_t *mode)
{
    char *end;

    errno = 0;
    long v = strtol(text, &end, 8);
    if (errno != 0 || end == text || *end != '\0' || v < 0 || v > 0777)
        return -1;
    *mode = (mode_t)v;
    return 0;
}

static int parse_uid(const char *text, uid_t *uid)
{
    char *end;

    errno = 0;
    unsigned long v = strtoul(text, &end, 10);
    if (errno == 0 && end != text && *end == '\0' && text[0] != '-' && v < UINT_MAX) {
        *uid = (uid_t)v;
        return 0;
    }
    struct passwd *pw = getpwnam(text);
    if (pw == NULL)
        return -1;
    *uid = pw->pw_uid;
    return 0;
}

static int parse_uids(struct helper_config *cfg, char *err, size_t errlen)
{
    char *copy = strdup(cfg->allow_uids != NULL ? cfg->allow_uids : "");
    char *save = NULL;

    if (copy == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    cfg->nuids = 0;
    for (char *tok = strtok_r(copy, ", ", &save); tok != NULL; tok = strtok_r(NULL, ", ", &save)) {
        if (cfg->nuids == HELPER_MAX_UIDS) {
            snprintf(err, errlen, "allow-uids: more than %d entries", HELPER_MAX_UIDS);
            free(copy);
            return -1;
        }
        if (parse_uid(tok, &cfg->uids[cfg->nuids]) < 0) {
            snprintf(err, errlen, "allow-uids: '%s' is neither a uid nor a user name", tok);
            free(copy);
            return -1;
        }
        cfg->nuids++;
    }
    free(copy);
    return 0;
}

int helper_config_check_status(const struct helper_config *cfg, char *err, size_t errlen)
{
    const size_t max = sizeof(((struct sockaddr_un *)0)->sun_path);

    if (cfg->socket == NULL || cfg->socket[0] == '\0') {
        snprintf(err, errlen, "socket: a path is required");
        return -1;
    }
    if (strlen(cfg->socket) >= max) {
        snprintf(err, errlen, "socket: path longer than %zu bytes: %s", max - 1, cfg->socket);
        return -1;
    }
    return 0;
}

int helper_config_check(struct helper_config *cfg, char *err, size_t errlen)
{
    if (helper_config_check_status(cfg, err, errlen) < 0)
        return -1;
    if (cfg->socket_mode == NULL || parse_mode(cfg->socket_mode, &cfg->mode) < 0) {
        snprintf(err, errlen, "socket-mode: '%s' is not an octal mode (e.g. 0660)",
                 cfg->socket_mode != NULL ? cfg->socket_mode : "");
        return -1;
    }
    if (parse_uids(cfg, err, errlen) < 0)
        return -1;
    if (parse_punch_ttl(cfg->punch_ttl, &cfg->first_ttl) < 0) {
        snprintf(err, errlen, "punch-ttl: '%s' is not auto, plain or a TTL 1-64",
                 cfg->punch_ttl != NULL ? cfg->punch_ttl : "");
        return -1;
    }
    if (cfg->frontend == NULL || cfg->frontend[0] == '\0') {
        snprintf(err, errlen, "frontend: the frontend's URL is required (https://HOST:PORT/)");
        return -1;
    }
    char host[256], why[240];
    int port;
    if (strncmp(cfg->frontend, "https://", 8) != 0 || cfg->frontend[8] == '\0' ||
        strlen(cfg->frontend) >= 256) {
        snprintf(err, errlen, "frontend: '%s' is not an https://HOST:PORT/ URL", cfg->frontend);
        return -1;
    }
    if (url_hostport(cfg->frontend, host, sizeof(host), &port, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "frontend: %s", why);
        return -1;
    }
    if (cfg->ca == NULL || cfg->ca[0] == '\0') {
        snprintf(err, errlen, "ca: the grid CA certificate is required");
        return -1;
    }
    if (cfg->cert == NULL || cfg->cert[0] == '\0') {
        snprintf(err, errlen, "cert: this helper's certificate and key are required");
        return -1;
    }
    if (cfg->cluster != NULL && !name_valid(cfg->cluster)) {
        snprintf(err, errlen, "cluster: '%s' is not a valid name", cfg->cluster);
        return -1;
    }
    if (cfg->node != NULL && !name_valid(cfg->node)) {
        snprintf(err, errlen, "node: '%s' is not a valid name", cfg->node);
        return -1;
    }
    if (cfg->address == NULL) {
        snprintf(err, errlen, "address: required, an IPv4 or IPv6 literal");
        return -1;
    }
    char awhy[160];
    cfg->naddrs = address_list_parse(cfg->address, cfg->addrs, QCG_NODE_ADDRS, awhy, sizeof(awhy));
    if (cfg->naddrs < 0) {
        snprintf(err, errlen, "address: %s", awhy);
        return -1;
    }
    /* From here on `address` is the first one, as every single-address
       user of it (traversing, punching, status) expects. */
    char *first = strdup(cfg->addrs[0]);
    if (first == NULL) {
        snprintf(err, errlen, "address: out of memory");
        return -1;
    }
    free(cfg->address);
    cfg->address = first;
    if (cfg->ports[0] <= 0 || cfg->ports[1] < cfg->ports[0]) {
        snprintf(err, errlen, "ports: the node's port range LOW-HIGH is required");
        return -1;
    }
    if (log_level_parse(cfg->log_level != NULL ? cfg->log_level : "") < 0) {
        snprintf(err, errlen, "log-level: '%s' is not error, warn, info or debug",
                 cfg->log_level != NULL ? cfg->log_level : "");
        return -1;
    }
    return 0;
}

bool helper_uid_allowed(const struct helper_config *cfg, uid_t uid)
{
    if (cfg->nuids == 0)
        return true;
    for (int i = 0; i < cfg->nuids; i++) {
        if (cfg->uids[i] == uid)
            return true;
    }
    return false;
}
