/*
 * The helper's side of the SOAP control plane, towards its frontend.
 *
 * One thread registers the node, long-polls for commands and, whenever the
 * frontend was lost or restarted (new epoch), registers again and re-publishes
 * every live contact.  Requests from processes (publish, withdraw, lookup) are
 * made by the caller's worker threads through a small pool of connections;
 * those functions block and must never run on the event loop.
 */
#ifndef QCG_HELPER_UPSTREAM_H
#define QCG_HELPER_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "contacts.h"
#include "helper.h"
#include "localproto.h"
#include "soap_client.h"

/* How long a poll waits at the frontend, and the limits of other calls. */
#define UPSTREAM_POLL_WAIT 20
#define UPSTREAM_CONNECT_TIMEOUT 5
#define UPSTREAM_IO_TIMEOUT 10

struct upstream;
struct qcg__plan;
struct command;

/* Receives each new order for this node (connect-back, proxy-connect, punch,
   inject) on the
   registration thread, checked and at most once; must not block. */
typedef void (*upstream_order_fn)(void *arg, const struct command *cmd);

/* cfg and cs must outlive it.  NULL with a reason in err. */
struct upstream *upstream_new(const struct helper_config *cfg, struct contacts *cs,
                              int can_intercept, char *err, size_t errlen);
/* What the node registration declares; after upstream_start (any thread),
   the node registers again with it within the poll's wait. */
void upstream_set_can_intercept(struct upstream *u, int can_intercept);
/* Before upstream_start: where orders go (none: they are logged and dropped). */
void upstream_on_order(struct upstream *u, upstream_order_fn fn, void *arg);
/* Starts the registration/poll thread. */
int upstream_start(struct upstream *u, char *err, size_t errlen);
/* Asks the thread to stop and interrupts a pending poll; does not block. */
void upstream_stop(struct upstream *u);
/* Stops and waits for the thread, then frees everything. */
void upstream_free(struct upstream *u);

/* Whether the node is registered now, and the frontend's epoch. */
void upstream_state(struct upstream *u, int *connected, uint64_t *epoch);
const char *upstream_url(const struct upstream *u);

/* Blocking calls for worker threads.  0, or a negative QCG_E* code with the
   reason in msg. */
int upstream_publish(struct upstream *u, const struct contact *c, char *msg, size_t msglen);
int upstream_withdraw(struct upstream *u, const struct contact *c, char *msg, size_t msglen);
/* tried_mask: 1 << enum qcg_technique of each technique that failed; only:
   that technique alone (QCG_ETECHNIQUE then carries the broker's reason
   verbatim in msg), or QCG_TECH_NONE. */
int upstream_lookup(struct upstream *u, const struct contact *from, int32_t to_rank,
                    uint32_t tried_mask, uint32_t only, struct local_plan *plan, char *msg,
                    size_t msglen);
/* A first lookup (no technique tried, none asked for alone) of a batch, and
   its answer (rc and msg as upstream_lookup's). */
struct lookup_call {
    const struct contact *from;
    int32_t to_rank;
    struct local_plan *plan;
    char *msg;
    size_t msglen;
    int rc;
};
/* Many first lookups in one call (qcg__lookups; one by one to a frontend
   that lacks it); each call's rc and msg filled in.  Blocks. */
void upstream_lookups(struct upstream *u, struct lookup_call *const *calls, int n);
/* Traversing: hands the SYN our process sent (hex) to the broker with the
   plan's token. */
int upstream_traverse(struct upstream *u, const char *token, const char *packet_hex, char *msg,
                      size_t msglen);
/* How a process's attempt ended, for the broker's outcome memory: queued,
   and sent with others within QCG_REPORTS_FLUSH_MS (report_batch.h).
   QCG_EBUSY when too many wait (dropped).  Does not block. */
int upstream_report(struct upstream *u, const struct contact *from, const struct local_report *r,
                    char *msg, size_t msglen);
/* Blocks until the reports queued now are sent: a withdraw goes after its
   process's reports. */
void upstream_reports_flush(struct upstream *u);
/* qcg-probe.  siteInfo: fills the grid's part of *site (cluster, broker,
   frontend_seen_from, reflector, proxies, peers), not the node's.  probe:
   a test endpoint in p->cluster (QCG_ENOTFOUND, QCG_EBUSY, QCG_EDENIED with
   the fault's text).  observed: what a probe saw of this site.  A
   qcg:unavailable fault is told apart from an unreachable frontend in msg
   ("frontend ... reached, but it says: broker unreachable: ..."). */
int upstream_site(struct upstream *u, struct local_site *site, char *msg, size_t msglen);
int upstream_probe(struct upstream *u, const struct local_probe *p, struct local_probe_ok *ok,
                   char *msg, size_t msglen);
int upstream_observed(struct upstream *u, const struct local_observed *o, char *msg, size_t msglen);
/* The tried list of a lookup: "reversed,proxy"; "" for none.  The IPv6
   punch's bit (TECH_PUNCH6) is "holepunch6", or with !punch6 (services
   that refuse that name) "holepunch". */
void upstream_tried_text(uint32_t tried_mask, bool punch6, char *out, size_t outlen);
/* A report's technique name (technique or TECH_PUNCH6), as above. */
const char *upstream_attempt_name(uint32_t t, bool punch6);
/* Checks an order from the poll: kind connect-back, proxy-connect, punch or
   inject, for `node`, valid job, ranks, address, port, token and (inject)
   packet; probe-listen, for `node`, a probe-... job, rank, the job secret
   (token) and seconds >= 1 (clamped later).  0, or -1 with why. */
int upstream_order_check(const struct command *c, const char *node, char *why, size_t whylen);

/* What a failed call means to a process: a QCG_E* code, or LOCAL_ERETRY for
   qcg:retry (a rate or a full queue upstream: ask again later; qcg:busy is
   a rank held, or from an older service either).  subcode is the fault's
   qcg: subcode (ignored unless st is CALL_FAULT). */
int upstream_error(enum call_status st, const char *subcode);
/* Converts a lookup answer into a local plan: 0, QCG_ENOTFOUND,
   QCG_ETECHNIQUE (msg names the technique needed and the broker's reason) or
   QCG_EUPSTREAM when the answer is malformed. */
int upstream_plan(const struct qcg__plan *p, int32_t to_rank, struct local_plan *out, char *msg,
                  size_t msglen);

#endif
