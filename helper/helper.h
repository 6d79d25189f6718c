/*
 * qcg-helper: the per-node agent.  Processes talk to it over a Unix socket
 * (libqcgconn/localproto.h); it talks to its cluster's frontend over SOAP.
 *
 *   main.c      wires the pieces and runs the libuv loop
 *   config.c    the option table and its checks (this header)
 *   cert.c      the certificate's CN must name this node (this header)
 *   caps.c      whether we may intercept/inject packets (dropping capabilities: privdrop.h)
 *   privsep.c   the main process's side of the privileged process (privsep.h)
 *   privsep_child.c  the privileged process: the packet engine, nothing else
 *   privsep_msg.c    the message list between the two and its checks (privsep_msg.h)
 *   attempts.c  the initiator's side of traversing and hole punching
 *   orders.c    the broker's orders: connect-back, proxy-connect, punch, inject, probe-listen
 *   responder.c qcg-probe's test endpoints: libqcgconn threads on our own socket
 *   punch.c     TCP hole punching through the broker's reflector
 *   traverse.c  traversing TCP: SYN interception (NFQUEUE) and injection (raw socket),
 *               run by the privileged process only
 *   local.c     the Unix socket server: its connections, who publishes what (local.h)
 *   local_framing.c, local_dispatch.c, local_requests.c, local_fdpass.c, local_socket.c
 *               its message framing, request handlers, thread-pool bridge, descriptor
 *               passing and socket file (local_internal.h)
 *   shares.c    per-uid counts of connections and requests (bounds per uid)
 *   contacts.c  the contacts published through this node (thread-safe)
 *   upstream.c  the link to the frontend: its connections and thread (upstream.h)
 *   upstream_calls.c, upstream_convert.c, upstream_orders.c, upstream_poll.c
 *               its request calls, answers in local terms, order checks, the
 *               registration/poll thread (upstream_internal.h); the frontend's
 *               certificate is checked by common/soap_client.c (expect_role)
 *   status.c    `qcg-helper --status`: the client side of LOCAL_STATUS
 */
#ifndef QCG_HELPER_H
#define QCG_HELPER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "proto.h"

#define HELPER_DEFAULT_SOCKET "/run/qcg/helper.sock"
#define HELPER_MAX_UIDS 64

struct helper_config {
    char *socket;
    char *socket_mode; /* octal text, e.g. "0666" */
    char *allow_uids;  /* comma list of uids or user names; empty = everyone */
    int max_clients;   /* local connections at once, every uid together */
    int max_clients_per_uid;
    int max_requests; /* requests in flight per connection */
    /* Requests of one uid on the thread pool at once. */
    int max_requests_per_uid;
    /* First lookups of one uid waiting for, or in, a batch to the frontend. */
    int max_lookups_per_uid;
    /* LOOKUPs a second, per uid; bursts of 10 s worth: a share of the
       node's budget at the frontend (node-lookups), so that one uid cannot
       spend all of it. */
    int lookups_per_uid;
    /* PUBLISH and WITHDRAW a second, per uid, while another uid is active;
       bursts of 10 s worth: each is a call to the frontend and the broker. */
    int publishes_per_uid;
    int reports_per_uid; /* REPORTs upstream a second, per uid; bursts of 16 s worth */
    int probes_per_uid;  /* SITE and PROBE requests a minute, per uid; bursts of as many */
    int threads;         /* the thread pool's size (UV_THREADPOOL_SIZE) */
    char *frontend;      /* https://host:port/ */
    char *ca;
    char *cert;           /* certificate chain and key in one PEM */
    char *crl;            /* the grid's revocation list, optional */
    int crl_accept_older; /* reloads take an expired or older CRL too */
    char *cluster;        /* default: from the certificate's CN */
    char *node;
    char *address; /* the node's addresses inside its site: the first (IPv4 if any) after
                      helper_config_check, the others in addrs[] */
    int ports[2];  /* the node's listening port range */
    int intercept; /* take part in traversing when privileged */
    int nfqueue;   /* the NFQUEUE number of our interception rules */

    char *punch_ttl; /* auto, plain or 1-64 */
    int first_ttl;   /* from punch_ttl: 0 auto, -1 plain, else the TTL (punch.h) */

    char *log_level;
    int syslog;
    int status; /* --status: ask a running helper, print, exit */
    int json;
    char *metrics_listen, *metrics_allow; /* common/metrics_server.h */
    int metrics_tls;

    /* Derived by helper_config_check. */
    char addrs[QCG_NODE_ADDRS][QCG_ADDR_MAX]; /* from `address`: addrs[0] is `address` then */
    int naddrs;
    mode_t mode;
    uid_t uids[HELPER_MAX_UIDS];
    int nuids;
};

extern const struct config_option helper_options[];

/* Checks a loaded configuration for the daemon and fills the derived fields.
   -1 with a one-line reason in err. */
int helper_config_check(struct helper_config *cfg, char *err, size_t errlen);
/* Only what `--status` needs (the socket path). */
int helper_config_check_status(const struct helper_config *cfg, char *err, size_t errlen);
bool helper_uid_allowed(const struct helper_config *cfg, uid_t uid);

/* Reads the certificate in cfg->cert: it must be a helper certificate whose CN
   is <cluster>/<node>.  Unset cluster/node are taken from it; set ones must
   match.  -1 with a one-line reason in err. */
int helper_cert_check(struct helper_config *cfg, char *err, size_t errlen);

/* 1 when process pid (0: this one) holds CAP_NET_ADMIN and CAP_NET_RAW
   (effective), else 0.  Once the helper has forked its privileged process,
   that process is the one that intercepts: ask about its pid. */
int helper_can_intercept(pid_t pid);
/* How many of the two are missing; out names them ("CAP_NET_RAW"). */
int helper_caps_missing(pid_t pid, char *out, size_t outlen);

#endif
