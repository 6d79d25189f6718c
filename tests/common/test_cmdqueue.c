/* cmdqueue.c: numbering, acknowledgement, redelivery, timeout, overflow, close. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "cmdqueue.h"
#include "log.h"

static struct command invalidate(const char *job, int rank)
{
    struct command c;
    memset(&c, 0, sizeof(c));
    snprintf(c.kind, sizeof(c.kind), "invalidate");
    snprintf(c.job, sizeof(c.job), "%s", job);
    c.rank = rank;
    return c;
}

static long elapsed_ms(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (t1.tv_sec - t0->tv_sec) * 1000 + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

static void test_seq_ack_redelivery(void)
{
    struct cmdqueue *q = cmdqueue_new(16);
    struct command c = invalidate("job1", 0), out[8];
    uint64_t s1 = cmdqueue_push(q, &c);
    c.rank = 1;
    uint64_t s2 = cmdqueue_push(q, &c);
    c.rank = 2;
    uint64_t s3 = cmdqueue_push(q, &c);
    CHECK(s1 >= 1 && s2 == s1 + 1 && s3 == s2 + 1);
    CHECK(cmdqueue_pending(q) == 3);

    /* ack 0: everything, in order, with its sequence number and payload. */
    int n = cmdqueue_wait(q, 0, 0, out, 8);
    CHECK(n == 3);
    CHECK(out[0].seq == s1 && out[1].seq == s2 && out[2].seq == s3);
    CHECK_STR(out[1].kind, "invalidate");
    CHECK_STR(out[1].job, "job1");
    CHECK(out[1].rank == 1);

    /* The response was lost: the same ack again gets the same commands. */
    n = cmdqueue_wait(q, 0, 0, out, 8);
    CHECK(n == 3 && out[0].seq == s1);

    /* ack s1: only newer ones, and s1 is forgotten. */
    n = cmdqueue_wait(q, s1, 0, out, 8);
    CHECK(n == 2 && out[0].seq == s2 && out[1].seq == s3);
    CHECK(cmdqueue_pending(q) == 2);
    /* Redelivery with the same ack. */
    n = cmdqueue_wait(q, s1, 0, out, 8);
    CHECK(n == 2 && out[0].seq == s2);
    /* max limits the copy, not the queue. */
    n = cmdqueue_wait(q, s1, 0, out, 1);
    CHECK(n == 1 && out[0].seq == s2);
    CHECK(cmdqueue_pending(q) == 2);

    n = cmdqueue_wait(q, s3, 0, out, 8);
    CHECK(n == 0);
    CHECK(cmdqueue_pending(q) == 0);

    /* Numbers keep increasing after the queue emptied. */
    uint64_t s4 = cmdqueue_push(q, &c);
    CHECK(s4 == s3 + 1);
    /* An ack from the future does not swallow later commands. */
    n = cmdqueue_wait(q, 1000, 0, out, 8);
    CHECK(n == 0);
    uint64_t s5 = cmdqueue_push(q, &c);
    n = cmdqueue_wait(q, s4, 0, out, 8);
    CHECK(n == 1 && out[0].seq == s5);
    cmdqueue_free(q);
}

static void test_timeout(void)
{
    struct cmdqueue *q = cmdqueue_new(4);
    struct command out[4];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int n = cmdqueue_wait(q, 0, 200, out, 4);
    long ms = elapsed_ms(&t0);
    CHECK(n == 0);
    CHECK(ms >= 190 && ms < 2000);
    cmdqueue_free(q);
}

static struct command order(const char *job, int rank)
{
    struct command c;
    memset(&c, 0, sizeof(c));
    snprintf(c.kind, sizeof(c.kind), "connect-back");
    snprintf(c.job, sizeof(c.job), "%s", job);
    snprintf(c.token, sizeof(c.token), "tok");
    c.rank = rank;
    return c;
}

static void test_overflow(void)
{
    struct cmdqueue *q = cmdqueue_new(4);
    struct command c = invalidate("j", 0), out[8];
    uint64_t last = 0;
    for (int i = 0; i < 4; i++) {
        c.rank = i;
        last = cmdqueue_push(q, &c);
    }
    CHECK(cmdqueue_pending(q) == 4);
    c.rank = 99;
    uint64_t s = cmdqueue_push(q, &c);
    CHECK(s > last);
    CHECK(cmdqueue_pending(q) == 1);
    int n = cmdqueue_wait(q, 0, 0, out, 8);
    CHECK(n == 1);
    CHECK_STR(out[0].kind, "flush");
    CHECK(out[0].seq == s);

    /* An order that a flush does not cover survives the overflow after it. */
    for (int i = 0; i < 3; i++)
        cmdqueue_push(q, &c);
    struct command o = order("k", 1);
    uint64_t so = cmdqueue_push(q, &o);
    n = cmdqueue_wait(q, 0, 0, out, 8);
    CHECK(n == 2);
    CHECK_STR(out[0].kind, "flush");
    CHECK_STR(out[1].kind, "connect-back");
    CHECK(out[1].seq == so && out[0].seq < so);
    cmdqueue_free(q);
}

/* One job's churn (invalidations of its publish/withdraw loop, orders of its
   lookups) fills the queue: another job's order queued before it is still
   delivered, the churning job's excess orders are refused (EDQUOT), and the
   other job's next order still finds room. */
static void test_churn_keeps_others_orders(void)
{
    struct cmdqueue *q = cmdqueue_new(16);
    struct command out[16];
    struct command victim = order("victim", 3);
    uint64_t sv = cmdqueue_push(q, &victim);
    CHECK(sv > 0);

    int refused = 0, edquot = 0;
    for (int i = 0; i < 1000; i++) {
        struct command inv = invalidate("churn", i);
        CHECK(cmdqueue_push(q, &inv) > 0);
        struct command o = order("churn", i);
        errno = 0;
        if (cmdqueue_push(q, &o) == 0) {
            refused++;
            edquot += errno == EDQUOT;
        }
    }
    CHECKF(refused > 0 && edquot == refused, "%d refused, %d for the job's share", refused, edquot);
    struct command other = order("other", 5);
    uint64_t so = cmdqueue_push(q, &other);
    CHECKF(so > 0, "another job's order still finds room");

    int n = cmdqueue_wait(q, 0, 0, out, 16);
    int victim_seen = 0, other_seen = 0, churn = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(out[i].kind, "connect-back") != 0)
            continue;
        victim_seen += out[i].seq == sv && strcmp(out[i].job, "victim") == 0;
        other_seen += out[i].seq == so && strcmp(out[i].job, "other") == 0;
        churn += strcmp(out[i].job, "churn") == 0;
    }
    CHECKF(victim_seen == 1, "the victim's connect-back is still queued");
    CHECK(other_seen == 1);
    CHECKF(churn == 12, "the churning job holds its share (12 of 16), got %d", churn);
    for (int i = 1; i < n; i++)
        CHECK(out[i].seq > out[i - 1].seq);
    cmdqueue_free(q);
}

/* Orders alone never take the last slot, and an invalidation then still goes
   in (as a flush when the queue is full). */
static void test_orders_full(void)
{
    struct cmdqueue *q = cmdqueue_new(4);
    struct command out[8];
    cmdqueue_set_job_share(q, 4);
    for (int i = 0; i < 3; i++) {
        struct command o = order("a", i);
        CHECK(cmdqueue_push(q, &o) > 0);
    }
    struct command o = order("b", 0);
    errno = 0;
    CHECK(cmdqueue_push(q, &o) == 0 && errno == ENOSPC);
    struct command inv = invalidate("a", 0);
    CHECK(cmdqueue_push(q, &inv) > 0);
    CHECK(cmdqueue_push(q, &inv) > 0);
    int n = cmdqueue_wait(q, 0, 0, out, 8);
    CHECK(n == 4);
    CHECK_STR(out[3].kind, "flush");
    for (int i = 0; i < 3; i++)
        CHECK_STR(out[i].kind, "connect-back");
    /* Acknowledged orders free their slots. */
    n = cmdqueue_wait(q, out[3].seq, 0, out, 8);
    CHECK(n == 0);
    CHECK(cmdqueue_push(q, &o) > 0);
    cmdqueue_free(q);
}

struct waiter {
    struct cmdqueue *q;
    atomic_int tid; /* set just before the wait */
    int n;
    long ms;
    struct command out[4];
};

static void *wait_thread(void *arg)
{
    struct waiter *w = arg;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    atomic_store(&w->tid, (int)syscall(SYS_gettid));
    w->n = cmdqueue_wait(w->q, 0, 5000, w->out, 4);
    w->ms = elapsed_ms(&t0);
    return NULL;
}

/* The waiter's thread sleeps (state S): blocked in cmdqueue_wait, so that the
   wake-up path is what runs next. */
static bool blocked(const struct waiter *w)
{
    char path[64], stat[512];
    int tid = atomic_load(&w->tid);

    if (tid == 0)
        return false;
    snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
    FILE *f = fopen(path, "r");
    size_t n = f != NULL ? fread(stat, 1, sizeof(stat) - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    stat[n] = '\0';
    const char *end = strrchr(stat, ')'); /* after the command name, which may hold anything */
    return end != NULL && end[1] == ' ' && end[2] == 'S';
}

static void test_wakeups(void)
{
    /* A push wakes a waiter at once. */
    struct waiter w = {.q = cmdqueue_new(4), .n = -1};
    pthread_t t;
    pthread_create(&t, NULL, wait_thread, &w);
    WAIT_UNTIL(blocked(&w), 2000, "the waiter to block");
    struct command c = invalidate("j", 7);
    cmdqueue_push(w.q, &c);
    pthread_join(t, NULL);
    CHECK(w.n == 1 && w.out[0].rank == 7);
    CHECK(w.ms < 2000);

    /* close wakes a waiter in another thread, which gets nothing. */
    struct cmdqueue *q2 = cmdqueue_new(4);
    struct waiter w2 = {.q = q2, .n = -1};
    pthread_create(&t, NULL, wait_thread, &w2);
    WAIT_UNTIL(blocked(&w2), 2000, "the waiter to block");
    cmdqueue_close(q2);
    pthread_join(t, NULL);
    CHECK(w2.n == 0);
    CHECK(w2.ms < 2000);
    /* ...and later waits return at once. */
    struct command out[4];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(cmdqueue_wait(q2, 0, 3000, out, 4) == 0);
    CHECK(elapsed_ms(&t0) < 1000);
    cmdqueue_free(w.q);
    cmdqueue_free(q2);
}

int main(void)
{
    log_init("test", LOG_LEVEL_ERROR, false);
    test_seq_ack_redelivery();
    test_timeout();
    test_overflow();
    test_churn_keeps_others_orders();
    test_orders_full();
    test_wakeups();
    return check_result("test_cmdqueue");
}
