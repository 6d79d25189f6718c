/*
 * Calls from the frontend to the broker, converting between the gSOAP structs
 * and ours.  Every function takes the client context to use (one from the
 * pool, or the upstream loop's own), returns 0 on success or -1 with *err
 * saying whether the broker was unreachable or answered with a fault.  The
 * caller resets the context (soap_client_reset) afterwards: nothing returned
 * points into it.
 */
#ifndef FRONTEND_RELAY_H
#define FRONTEND_RELAY_H

#include <stdint.h>
#include "proto.h"
#include "soap_client.h"

struct contact_info;
struct node_info;

struct relay_error {
    enum call_status status; /* CALL_UNREACHABLE or CALL_FAULT */
    char subcode[32];        /* fault subcode without "qcg:", e.g. "denied" */
    char msg[256];
};

/* Our form of struct qcg__plan. */
struct plan {
    char status[16];
    char technique[16];
    char cluster[QCG_NAME_MAX];
    char node[QCG_NAME_MAX];
    char address[QCG_ADDR_MAX];
    int port;
    char token[QCG_TOKEN_MAX];
    int cacheable;
    char reason[400];            /* the broker's plan_decision.reason */
    char fallback[QCG_ADDR_MAX]; /* direct over IPv6: the IPv4 address behind it, or "" */
};

struct cluster_decl {
    const char *name;
    const char *kind;
    int naddrs;
    const char *const *addrs;
    int port_low, port_high;
    int nranges; /* the nodes' address ranges, CIDR */
    const char *const *ranges;
    int nopen; /* open ranges (inside the node ranges), CIDR */
    const char *const *open;
};

int relay_register_cluster(struct soap *soap, const char *url, const struct cluster_decl *cluster,
                           uint64_t *epoch, struct relay_error *err);
int relay_register_node(struct soap *soap, const char *url, const struct node_info *node,
                        struct relay_error *err);
int relay_publish(struct soap *soap, const char *url, const struct contact_info *contact,
                  const char *cluster, struct relay_error *err);
int relay_withdraw(struct soap *soap, const char *url, const char *job, const char *verifier,
                   int rank, const char *node, struct relay_error *err);
/* A plan the broker sent that does not fit our limits is an error
   (CALL_UNREACHABLE, "malformed plan"), not a truncated answer.  tried: the
   techniques the process already tried (NULL or "" for none); only: the one
   technique to plan (NULL or "" for a normal lookup). */
int relay_lookup(struct soap *soap, const char *url, const char *job, const char *verifier,
                 int from_rank, int to_rank, const char *tried, const char *only, struct plan *plan,
                 struct relay_error *err);
/* One lookup of a lookups call and its answer: a plan, or the broker's
   refusal of it (fault, e.g. "retry", and fault_text). */
struct lookup_ask {
    const char *job, *verifier;
    int from_rank, to_rank;
    struct plan plan;
    char fault[32];
    char fault_text[512];
};
/* Many lookups in one call (qcg__lookups): -1 when the call failed as a
   whole, else 0 with each ask's answer filled in. */
int relay_lookups(struct soap *soap, const char *url, struct lookup_ask *asks, int n,
                  struct relay_error *err);
/* Traversing: hands the initiator's SYN (hex) over with the plan's token. */
int relay_traverse(struct soap *soap, const char *url, const char *token, const char *packet,
                   struct relay_error *err);
/* The outcome of one connection attempt (qcg__report). */
struct report_item;
int relay_report(struct soap *soap, const char *url, const struct report_item *r,
                 struct relay_error *err);
/* Many reports in one call (qcg__reports); *accepted: how many the broker
   recorded. */
int relay_reports(struct soap *soap, const char *url, const struct report_item *items, int n,
                  int *accepted, struct relay_error *err);
/* qcg-probe's operations.  The answers are deep-copied into `dst` (the
   helper's server context, whose response they become) before the caller
   resets `soap`. */
struct qcg__siteInfoResponse;
struct qcg__probeResponse;
struct qcg__observation;
int relay_site_info(struct soap *soap, const char *url, struct soap *dst,
                    struct qcg__siteInfoResponse *out, struct relay_error *err);
/* node: the calling helper's, from its certificate (the broker's per-node probe slots). */
int relay_probe(struct soap *soap, const char *url, const char *cluster, int seconds,
                const char *node, struct soap *dst, struct qcg__probeResponse *out,
                struct relay_error *err);
int relay_observed(struct soap *soap, const char *url, const struct qcg__observation *o,
                   struct relay_error *err);
#endif
