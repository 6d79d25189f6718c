/* frontend-reports: the frontend's batches of reports (util/report_batch.c)
   with a stand-in for the broker call: reports go in order, at most
   QCG_REPORTS_MAX a batch, a lone report within QCG_REPORTS_FLUSH_MS (not
   held until a batch fills), reports_flush returns once what was queued is
   sent, a full queue refuses, and stopping sends what is left. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "report_batch.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int sent, batches, biggest, in_order = 1, next_rank;
static atomic_int hold;    /* the stand-in broker does not answer meanwhile */
static atomic_int holding; /* a send waits for it */

static void send_fn(void *arg, const struct report_item *items, int n)
{
    (void)arg;
    while (hold) {
        holding = 1;
        usleep(1000);
    }
    holding = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n; i++) {
        if (items[i].to_rank != next_rank || strcmp(items[i].job, "job1") != 0)
            in_order = 0;
        next_rank = items[i].to_rank + 1;
    }
    sent += n;
    batches++;
    if (n > biggest)
        biggest = n;
    pthread_mutex_unlock(&lock);
}

static int sent_now(void)
{
    pthread_mutex_lock(&lock);
    int n = sent;
    pthread_mutex_unlock(&lock);
    return n;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static struct report_item item(int rank)
{
    struct report_item r;
    memset(&r, 0, sizeof(r));
    snprintf(r.job, sizeof(r.job), "job1");
    snprintf(r.technique, sizeof(r.technique), "direct");
    r.from_rank = 0;
    r.to_rank = rank;
    r.ok = 1;
    return r;
}

int main(void)
{
    char err[128];
    struct reports *r = reports_new(send_fn, NULL, err, sizeof(err));
    int rank = 0;

    REQUIRE(r != NULL);
    /* One report alone goes within the flush interval (bounded: 5 s). */
    uint64_t t0 = now_ms();
    struct report_item one = item(rank++);
    CHECK(reports_add(r, &one));
    while (sent_now() < 1 && now_ms() - t0 < 5000)
        usleep(1000);
    CHECK(sent_now() == 1);
    printf("a lone report went after %llu ms\n", (unsigned long long)(now_ms() - t0));

    /* 600 at once: in order, no batch above QCG_REPORTS_MAX; flush returns
       with all of them sent. */
    for (int i = 0; i < 600; i++) {
        struct report_item x = item(rank++);
        CHECK(reports_add(r, &x));
    }
    reports_flush(r);
    CHECK(sent_now() == 601);
    CHECK(biggest <= QCG_REPORTS_MAX && biggest > 1);
    CHECK(in_order);
    printf("601 reports in %d batches, the largest %d\n", batches, biggest);

    /* A broker that does not answer: the queue fills, then refuses. */
    hold = 1;
    struct report_item x = item(rank);
    CHECK(reports_add(r, &x));
    t0 = now_ms();
    while (!holding && now_ms() - t0 < 5000) /* its batch is out, the send held */
        usleep(1000);
    CHECK(holding);
    int taken = 0;
    for (int i = 0; i < REPORTS_QUEUED_MAX + 10; i++) {
        x = item(rank + 1 + taken);
        if (!reports_add(r, &x))
            break;
        taken++;
    }
    CHECK(taken == REPORTS_QUEUED_MAX);
    hold = 0;
    /* Stopping sends what is left. */
    reports_free(r);
    CHECK(sent_now() == 601 + 1 + REPORTS_QUEUED_MAX);
    CHECK(in_order);
    return check_result("frontend-reports");
}
