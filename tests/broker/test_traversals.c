/* traversals.c: one job, or one initiating cluster, filling the pending
   traversals leaves room for the others. */
#include <string.h>

#include "check.h"
#include "log.h"
#include "traversals.h"

static struct traversal make(const char *job, const char *cluster, unsigned n)
{
    struct traversal tr;
    memset(&tr, 0, sizeof(tr));
    memcpy(tr.pair, &n, sizeof(n));
    tr.expiry = 1000 + TRAVERSAL_LIFETIME;
    snprintf(tr.job, sizeof(tr.job), "%s", job);
    snprintf(tr.from_cluster, sizeof(tr.from_cluster), "%s", cluster);
    return tr;
}

int main(void)
{
    log_init("test", LOG_LEVEL_ERROR, false);
    static struct traversals t;
    traversals_init(&t);
    unsigned n = 0, added = 0;

    /* One job adds as fast as it can: it gets its share, no more. */
    for (int i = 0; i < TRAVERSALS_MAX; i++) {
        struct traversal tr = make("storm", "c1", ++n);
        added += traversals_add(&t, &tr, 1000) == 0;
    }
    CHECK_EQ(added, TRAVERSALS_JOB_SHARE);
    struct traversal other = make("other", "c1", ++n);
    CHECKF(traversals_add(&t, &other, 1000) == 0, "another job of the cluster is served");

    /* One cluster with many jobs: its share, then another cluster still fits. */
    added = 0;
    for (int i = 0; i < TRAVERSALS_MAX; i++) {
        char job[32];
        snprintf(job, sizeof(job), "j%d", i / 16);
        struct traversal tr = make(job, "c1", ++n);
        added += traversals_add(&t, &tr, 1000) == 0;
    }
    CHECK_EQ(added, TRAVERSALS_CLUSTER_SHARE - TRAVERSALS_JOB_SHARE - 1);
    struct traversal far = make("far", "c2", ++n);
    CHECKF(traversals_add(&t, &far, 1000) == 0, "another cluster is served");
    CHECK(traversals_refused(&t) > 0);

    /* What a refused job had taken is still there to take. */
    struct traversal first = make("storm", "c1", 1), out;
    CHECK(traversals_take(&t, first.pair, 1000, &out) == 0);
    CHECK_STR(out.job, "storm");
    /* Expired entries make room again. */
    struct traversal late = make("storm", "c1", ++n);
    late.expiry = 5000;
    CHECK(traversals_add(&t, &late, 2000) == 0);
    traversals_destroy(&t);
    return check_result("test_traversals");
}
