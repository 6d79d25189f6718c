/* Limits, roles, cluster kinds and the rules for names shared by every
   component: the daemons, the tools and libqcgconn. */
#ifndef QCG_PROTO_H
#define QCG_PROTO_H

#include <stdbool.h>
#include <stddef.h>

#include "technique.h"

/* 2: publish, withdraw, lookup and report carry the job's verifier
   (core/verifier.h), never its secret; a version-1 caller is refused. */
#define QCG_PROTOCOL_VERSION 2

/* Longest job id, secret, cluster/node name, address text, token accepted anywhere. */
#define QCG_JOB_MAX 64
#define QCG_SECRET_MAX 128
#define QCG_NAME_MAX 64
#define QCG_ADDR_MAX 48
/* Addresses a node (and so each of its ranks' contacts) has at most: one
   of each family is the usual case, a few more leave room. */
#define QCG_NODE_ADDRS 4
#define QCG_TOKEN_MAX 128
/* The token field of the hello one process sends another (libqcgconn's
   handshake.h), NUL included: a connect-back order's token must fit it. */
#define QCG_HELLO_TOKEN_MAX 64
/* A SYN shipped for traversing: at most 120 bytes (IPv4 + TCP with options), hex. */
#define QCG_PACKET_MAX 120
#define QCG_PACKET_HEX_MAX (2 * QCG_PACKET_MAX + 1)
/* qcg-probe's test endpoints (qcg__probe): longest life, and how many probe
   jobs one cluster may have at once. */
#define QCG_PROBE_TTL_MAX 120
#define QCG_PROBES_PER_CLUSTER 8
#define QCG_PROBES_PER_NODE_DEFAULT 2 /* of them, one calling node's (broker's probes-per-node) */
/* Every probe job's id starts with it: an order to publish is only obeyed
   for such jobs, never for a job of real processes. */
#define QCG_PROBE_JOB_PREFIX "probe-"
#define QCG_PROBE_JOB_PREFIX_LEN 6
_Static_assert(sizeof(QCG_PROBE_JOB_PREFIX) - 1 == QCG_PROBE_JOB_PREFIX_LEN, "prefix length");
/* qcg__reports: most attempts in one call, and how long a frontend gathers
   its nodes' reports before it sends them on (a report is advice: its
   delay only delays what the broker learns). */
#define QCG_REPORTS_MAX 256
#define QCG_REPORTS_FLUSH_MS 100
/* Lookups in one qcg__lookups call. */
#define QCG_LOOKUPS_MAX 256
/* The rank a probe's test endpoint publishes; the prober is rank 0. */
#define QCG_PROBE_ENDPOINT_RANK 1
/* The first line qcg-probe sends on its last connection to a test endpoint:
   echoed, then the endpoint withdraws at once instead of living out its
   seconds (it holds a slot of the node's helper and of the caller's cluster). */
#define QCG_PROBE_DONE_LINE "qcg-probe done\n"

enum qcg_role {
    QCG_ROLE_NONE,
    QCG_ROLE_BROKER,
    QCG_ROLE_PROXY,
    QCG_ROLE_FRONTEND,
    QCG_ROLE_HELPER
};

enum cluster_kind { CLUSTER_OPEN, CLUSTER_FIREWALLED, CLUSTER_NAT, CLUSTER_SYMNAT };

const char *role_name(enum qcg_role role);
enum qcg_role role_parse(const char *name); /* QCG_ROLE_NONE if unknown */
const char *cluster_kind_name(enum cluster_kind kind);
int cluster_kind_parse(const char *name); /* -1 if unknown */
/* An observation's word for unsolicited inbound TCP: open | dropped |
   reset | icmp | unknown, and rejected (a reset or an ICMP error not told
   apart: older probes, reflectors and state files). */
bool observed_inbound_valid(const char *word);

/* Cluster, node, proxy names: [A-Za-z0-9][A-Za-z0-9._-]{0,62} (as certs/qcg-certs). */
bool name_valid(const char *name);
/* Job ids: the same alphabet, up to QCG_JOB_MAX-1 characters. */
bool job_valid(const char *job);
/* Secrets: 1..QCG_SECRET_MAX-1 printable ASCII characters. */
bool secret_valid(const char *secret);

#endif
