/*
 * Reports (how a connection attempt ended) gathered for the service above
 * and handed to it in batches (qcg__reports): one call per
 * QCG_REPORTS_FLUSH_MS or QCG_REPORTS_MAX reports, instead of one call and
 * a wait per connection.  The helper gathers its processes' reports for its
 * frontend, the frontend its nodes' for the broker.  A report is advice:
 * when the queue is full, or the service cannot be reached, it is dropped
 * (the caller counts it).  The sending is the caller's (reports_send_fn),
 * on the batch's own thread.
 */
#ifndef QCG_REPORT_BATCH_H
#define QCG_REPORT_BATCH_H

#include <stdbool.h>

#include "proto.h"
#include "verifier.h"

#define REPORT_WHY_MAX 256
#define REPORTS_QUEUED_MAX 8192
/* reports_flush waits this long at most (a connect and an answer). */
#define REPORTS_FLUSH_WAIT_MS 15000

/* One report, as it goes up. */
struct report_item {
    char job[QCG_JOB_MAX];
    char verifier[QCG_VERIFIER_LEN + 1];
    char technique[16];
    char why[REPORT_WHY_MAX + 1];
    int from_rank, to_rank, ok, setup_ms;
};

/* Sends n (1..QCG_REPORTS_MAX) reports; called on the batch's own thread. */
typedef void (*reports_send_fn)(void *arg, const struct report_item *items, int n);

struct reports;

/* Starts the thread that sends.  NULL with a reason in err. */
struct reports *reports_new(reports_send_fn send, void *arg, char *err, size_t errlen);
/* Queues a copy of *item: false when the queue is full (dropped). */
bool reports_add(struct reports *r, const struct report_item *item);
/* Returns once what is queued now was sent (or failed to): a withdraw
   waits for it, so that a job's reports reach the broker before the job
   leaves it. */
void reports_flush(struct reports *r);
/* Sends what is queued, then stops the thread. */
void reports_free(struct reports *r);

#endif
