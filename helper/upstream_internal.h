/* The upstream's state, shared by its files (upstream*.c) and never used
   outside them.  upstream.h is its interface. */
#ifndef QCG_HELPER_UPSTREAM_INTERNAL_H
#define QCG_HELPER_UPSTREAM_INTERNAL_H

#include <stdatomic.h>

#include "soapH.h"

#include "report_batch.h"
#include "upstream.h"

struct upstream {
    const struct helper_config *cfg;
    struct contacts *cs;
    atomic_int can_intercept; /* read by the poll thread at each registration */
    char incarnation[33];     /* random per start, made at the first registration */
    struct soap_client_config scc;
    struct soap_pool *pool;    /* for the workers' requests */
    struct longpoll *lp;       /* the registration/poll thread */
    struct reports *reports;   /* the processes' reports, sent in batches */
    atomic_int single_reports; /* an older frontend: no qcg__reports */
    atomic_int single_lookups; /* an older frontend: no qcg__lookups */
    /* An older broker refused "holepunch6" in a lookup's tried list, an
       older frontend or broker in a report: the IPv6 punch goes there as
       plain "holepunch". */
    atomic_int no_punch6_tried, no_punch6_report;
    atomic_ullong reports_dropped;

    upstream_order_fn on_order;
    void *order_arg;
};

struct call_args {
    const struct contact *c;
    int32_t to_rank;
    uint32_t tried_mask;
    struct local_plan *plan;
    const char *token, *packet;         /* traverse */
    const struct report_item *items;    /* reports */
    struct lookup_call *const *lookups; /* lookups */
    int nitems, *accepted;
    uint32_t only;                   /* lookup: one technique (enum qcg_technique) */
    struct local_site *site;         /* siteInfo */
    const struct local_probe *probe; /* probe */
    struct local_probe_ok *probe_ok;
    const struct local_observed *observed;
};

typedef int (*call_fn)(struct upstream *u, struct soap *soap, const struct call_args *a,
                       enum call_status *st, char *msg, size_t msglen);

/* upstream_calls.c: a finished call classified (msg filled, the QCG_E*
   code returned); frontend_said: a qcg:unavailable fault names the broker
   behind the frontend. */
int finish_call(struct upstream *u, struct soap *soap, int rc, const char *op, int frontend_said,
                enum call_status *st, char *msg, size_t msglen);
int finish(struct upstream *u, struct soap *soap, int rc, const char *op, enum call_status *st,
           char *msg, size_t msglen);
int call_publish(struct upstream *u, struct soap *soap, const struct call_args *a,
                 enum call_status *st, char *msg, size_t msglen);
int call_withdraw(struct upstream *u, struct soap *soap, const struct call_args *a,
                  enum call_status *st, char *msg, size_t msglen);

/* upstream_convert.c: a string of an answer into a fixed field (NULL: "");
   -1 when it does not fit.  site_copy: the grid's part of a siteInfo
   answer. */
int copy_field(char *dst, size_t size, const char *src);
int site_copy(const struct qcg__siteInfoResponse *r, struct local_site *out);

/* upstream_calls.c: reports_send_fn of u->reports. */
void upstream_send_reports(void *u, const struct report_item *items, int n);

/* upstream_poll.c: the registration/poll thread, not started. */
struct longpoll *upstream_poll_new(struct upstream *u, char *err, size_t errlen);

#endif
