/*
 * broker-grid: what `qcg-broker --grid` shows for a pair of clusters.  The
 * technique that worked last is the one shown; outcomes of the same second
 * (ages are whole seconds) show the technique the broker prefers, whatever
 * order the broker listed them in, so two looks at the same grid agree and a
 * sample in the docs can be checked.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "grid_query.h"
#include "soapH.h"

static struct qcg__outcome outcome(char *technique, int ok, unsigned long long age, int ms)
{
    return (struct qcg__outcome){.from = "nata",
                                 .to = "natb",
                                 .technique = technique,
                                 .ok = ok ? 1 : 0,
                                 .failed = ok ? 0 : 1,
                                 .lastOk = ok,
                                 .lastSetupMs = ms,
                                 .age = age};
}

/* The text --grid prints for outcomes o[0..n). */
static void print(struct qcg__outcome *o, int n, char *buf, size_t len)
{
    struct qcg__gridCluster c[2];
    memset(c, 0, sizeof(c));
    c[0].declared.name = "nata";
    c[1].declared.name = "natb";
    struct qcg__gridResponse g = {
        .__sizeCluster = 2, .cluster = c, .__sizeOutcome = n, .outcome = o};
    FILE *f = fmemopen(buf, len, "w");
    REQUIRE(f != NULL);
    grid_print(f, &g, false, 1000);
    fclose(f);
}

int main(void)
{
    struct qcg__outcome a = outcome("proxy", 1, 3, 40), b = outcome("holepunch", 1, 3, 25);
    struct qcg__outcome c = outcome("reversed", 1, 9, 12), x = outcome("traversing", 0, 1, 0);

    CHECK(grid_newer_ok(&a, NULL));
    CHECK(!grid_newer_ok(&x, NULL));
    CHECK(grid_newer_ok(&a, &c)); /* 3 s against 9 s ago */
    CHECK(!grid_newer_ok(&c, &a));
    CHECK(grid_newer_ok(&b, &a)); /* the same second: holepunch before proxy */
    CHECK(!grid_newer_ok(&a, &b));
    /* The IPv6 punch stands where hole punching does: after direct. */
    struct qcg__outcome d = outcome("direct", 1, 3, 1), p6 = outcome("holepunch6", 1, 3, 20);
    CHECK(grid_newer_ok(&d, &p6));
    CHECK(!grid_newer_ok(&p6, &d));
    CHECK(grid_newer_ok(&p6, &a));

    static char one[4096], two[4096];
    struct qcg__outcome ab[] = {a, b, c, x}, ba[] = {x, c, b, a};
    print(ab, 4, one, sizeof(one));
    print(ba, 4, two, sizeof(two));
    CHECK_HAS(one, "holepunch 25ms, x traversing");
    CHECK_STR(one, two);
    return check_result("broker-grid");
}
