/*
 * broker-state-file: what the broker learned survives a save and a load
 * (the same plans are skipped, for the same jobs), a damaged file costs only
 * its damaged lines, and a save leaves nothing half-written behind; the
 * clusters' observations (qcg-probe's, what --grid shows) survive a restart
 * before their frontends register again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "fixtures.h"
#include "outcomes.h"
#include "plan.h"
#include "registry.h"
#include "state_file.h"

static char dir[] = "/tmp/qcg-test-state-XXXXXX";

static const char *in_dir(const char *name)
{
    static char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return path;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs(text, f);
    fclose(f);
}

static void test_round_trip(void)
{
    char err[512];
    struct outcomes *a = outcomes_new(600), *b = outcomes_new(600);
    struct state_loaded st;
    REQUIRE(a != NULL && b != NULL);
    /* j's own failure; proxy failed for two jobs from two nodes (shared). */
    outcomes_record(a, "nata", "open", TECH_HOLEPUNCH, false, 0, 1000, "j", "nata1");
    outcomes_record(a, "nata", "open", (enum technique)TECH_PUNCH6, false, 0, 1000, "j", "nata1");
    outcomes_record(a, "nata", "open", TECH_DIRECT, true, 3, 1001, "j", "nata1");
    outcomes_record(a, "sym", "natb", TECH_PROXY, false, 0, 1002, "j1", "sym1");
    outcomes_record(a, "sym", "natb", TECH_PROXY, false, 0, 1003, "j2", "sym2");
    CHECK_EQ(state_save(a, NULL, in_dir("s"), err, sizeof(err)), 0);
    struct stat sb;
    CHECK(stat(in_dir("s"), &sb) == 0 && (sb.st_mode & 0777) == 0600);
    CHECK_EQ(count_entries(dir), 1);

    CHECK_EQ(state_load(b, NULL, in_dir("s"), &st, err, sizeof(err)), 0);
    CHECK_EQ(st.pairs, 2u);
    CHECK_EQ(st.skipped, 0u);
    for (uint64_t now = 1004; now < 1700; now += 300) {
        const char *jobs[] = {"j", "j1", "k"};
        for (int i = 0; i < 3; i++) {
            struct outcome_failing fa = outcomes_failing(a, "nata", "open", jobs[i], now);
            struct outcome_failing fb = outcomes_failing(b, "nata", "open", jobs[i], now);
            CHECK(fa.own == fb.own && fa.shared == fb.shared);
            fa = outcomes_failing(a, "sym", "natb", jobs[i], now);
            fb = outcomes_failing(b, "sym", "natb", jobs[i], now);
            CHECK(fa.own == fb.own && fa.shared == fb.shared);
        }
    }
    CHECK(outcomes_failing(b, "sym", "natb", "k", 1004).shared == TECH_BIT(TECH_PROXY));
    CHECK(outcomes_failing(b, "nata", "open", "j", 1004).own ==
          (TECH_BIT(TECH_HOLEPUNCH) | TECH_BIT(TECH_PUNCH6)));
    struct outcome_pair pa[4], pb[4];
    CHECK_EQ(outcomes_snapshot(a, pa, 4), outcomes_snapshot(b, pb, 4));
    outcomes_free(a);
    outcomes_free(b);
}

static void test_damaged(void)
{
    char err[512], longline[3000];
    struct outcomes *o = outcomes_new(600);
    struct state_loaded st;
    REQUIRE(o != NULL);
    memset(longline, 'x', sizeof(longline) - 2);
    longline[sizeof(longline) - 2] = '\n';
    longline[sizeof(longline) - 1] = '\0';
    char text[8192];
    snprintf(text, sizeof(text),
             "# comment\nqcg-broker-state 1\n"
             "pair a b proxy 1 2 0 900 0\n"
             "witness a b proxy j n 900\n"
             "witness a b proxy j2 n2 900\nwitness a b proxy j3 n3 900\n"
             "witness a b proxy j4 n4 900\nwitness a b proxy j5 n5 900\n" /* a 5th: too many */
             "witness a b direct j n 900\n"  /* no pair line for direct */
             "pair a b warp 1 1 0 900 0\n"   /* no such technique */
             "pair a b proxy 1 -2 0 900 0\n" /* negative */
             "pair a b proxy 1 99999999999999999999999 0 900 0\n"
             "pair a b proxy 1 2 2 900 0\n"        /* last_ok 0/1 */
             "pair a b proxy 1 2 0 900\n"          /* a word short */
             "pair bad/name b proxy 1 2 0 900 0\n" /* not a cluster name */
             "%s"
             "pair c d direct 4 0 1 950 12\n",
             longline);
    write_text(in_dir("d"), text);
    CHECK_EQ(state_load(o, NULL, in_dir("d"), &st, err, sizeof(err)), 0);
    CHECK_EQ(st.skipped, 9u);
    CHECK_EQ(st.first_bad, 8);
    /* a -> b with its four witnesses, c -> d; bad/name's pair is refused. */
    CHECK_EQ(st.pairs, 2u);
    CHECK(outcomes_failing(o, "a", "b", "j4", 901).own == TECH_BIT(TECH_PROXY));
    CHECK(outcomes_failing(o, "a", "b", "k", 901).shared == TECH_BIT(TECH_PROXY));
    outcomes_free(o);

    o = outcomes_new(600);
    write_text(in_dir("w"), "pair a b proxy 1 2 0 900 0\n");
    CHECK_EQ(state_load(o, NULL, in_dir("w"), &st, err, sizeof(err)), -1);
    CHECK_HAS(err, "is not \"qcg-broker-state 1\"");
    CHECK_EQ(state_load(o, NULL, in_dir("none"), &st, err, sizeof(err)), 0);
    CHECK_EQ(st.missing, 1);
    CHECK_EQ(state_load(o, NULL, dir, &st, err, sizeof(err)), -1);
    CHECK_HAS(err, "not a regular file");
    CHECK_EQ(state_save(o, NULL, "/nonexistent/dir/s", err, sizeof(err)), -1);
    CHECK_HAS(err, "cannot create");
    outcomes_free(o);
}

static struct reg_cluster nat_cluster(const char *name, const char *public_addr)
{
    struct reg_cluster c;
    memset(&c, 0, sizeof(c));
    snprintf(c.name, sizeof(c.name), "%s", name);
    c.kind = CLUSTER_NAT;
    c.npublic = 1;
    snprintf(c.public_addr[0], sizeof(c.public_addr[0]), "%s", public_addr);
    return c;
}

/* Observed before a restart: after it, the cluster shows it again once its
   frontend registers (not "not probed"), also across a second restart
   before that; a cluster declaring another public address drops it. */
static void test_observations(void)
{
    char err[512], why[256];
    struct outcomes *o = outcomes_new(600);
    struct registry *a = registry_new(100, 1), *b = registry_new(100, 2), *c = registry_new(100, 3);
    struct state_loaded st;
    REQUIRE(o != NULL && a != NULL && b != NULL && c != NULL);
    struct reg_cluster nata = nat_cluster("nata", "203.0.113.66"),
                       natb = nat_cluster("natb", "203.0.113.82"), decl;
    CHECK(registry_register_cluster(a, &nata, why, sizeof(why)) == REG_OK);
    CHECK(registry_register_cluster(a, &natb, why, sizeof(why)) == REG_OK);
    struct reg_observation seen = {.when = 1234, .kind = CLUSTER_NAT, .port_preserving = 1};
    snprintf(seen.node, sizeof(seen.node), "nata1");
    snprintf(seen.public_addr, sizeof(seen.public_addr), "203.0.113.66");
    snprintf(seen.mapping, sizeof(seen.mapping), "endpoint-independent");
    snprintf(seen.inbound, sizeof(seen.inbound), "dropped");
    CHECK(registry_observe(a, "nata", &seen, &decl, why, sizeof(why)) == REG_OK);
    snprintf(seen.node, sizeof(seen.node), "natb1");
    snprintf(seen.public_addr, sizeof(seen.public_addr), "203.0.113.82");
    CHECK(registry_observe(a, "natb", &seen, &decl, why, sizeof(why)) == REG_OK);
    CHECK_EQ(state_save(o, a, in_dir("o"), err, sizeof(err)), 0);

    /* Restart: nothing registered yet; saved again as it is (a second restart). */
    CHECK_EQ(state_load(o, b, in_dir("o"), &st, err, sizeof(err)), 0);
    CHECK_EQ(st.observations, 2u);
    CHECK_EQ(st.skipped, 0u);
    CHECK_EQ(state_save(o, b, in_dir("o"), err, sizeof(err)), 0);
    CHECK_EQ(state_load(o, c, in_dir("o"), &st, err, sizeof(err)), 0);
    CHECK_EQ(st.observations, 2u);
    /* natb now declares another public address: its old observation goes. */
    struct reg_cluster moved = nat_cluster("natb", "203.0.113.99");
    CHECK(registry_register_cluster(c, &nata, why, sizeof(why)) == REG_OK);
    CHECK(registry_register_cluster(c, &moved, why, sizeof(why)) == REG_OK);
    struct reg_cluster_view *v;
    size_t n;
    REQUIRE(registry_clusters(c, &v, &n) == 0 && n == 2);
    CHECK_EQ(v[0].observed.when, 1234u);
    CHECK_HAS(v[0].observed.node, "nata1");
    CHECK_HAS(v[0].observed.public_addr, "203.0.113.66");
    CHECK_HAS(v[0].observed.mapping, "endpoint-independent");
    CHECK_HAS(v[0].observed.inbound, "dropped");
    CHECK_EQ(v[0].observed.port_preserving, 1);
    CHECK_EQ(v[1].observed.when, 0u);
    free(v);

    /* Damaged observation lines are skipped like any other. */
    write_text(in_dir("ob"), "qcg-broker-state 1\n"
                             "observed nata 0 nata1 nat - 1 none open\n"
                             "observed nata 5 nata1 warp - 1 none open\n"
                             "observed nata 5 nata1 nat - 2 none open\n"
                             "observed nata 5 nata1 nat - 1 sideways open\n"
                             "observed nata 5 nata1 nat not-an-address 1 none open\n"
                             "observed nata 5 nata1 nat - 1 none\n"
                             "observed nata 5 nata1 symnat - -1 unknown unknown\n");
    CHECK_EQ(state_load(o, b, in_dir("ob"), &st, err, sizeof(err)), 0);
    CHECK_EQ(st.skipped, 6u);
    CHECK_EQ(st.observations, 1u);
    registry_free(a);
    registry_free(b);
    registry_free(c);
    outcomes_free(o);
}

struct seen_frontends {
    char text[512];
};

static void list_frontend(void *arg, const char *cluster, const char (*addrs)[QCG_ADDR_MAX], int n)
{
    struct seen_frontends *f = arg;
    size_t len = strlen(f->text);
    len += (size_t)snprintf(f->text + len, sizeof(f->text) - len, "%s", cluster);
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(f->text + len, sizeof(f->text) - len, " %s", addrs[i]);
    snprintf(f->text + len, sizeof(f->text) - len, ";");
}

/* The addresses a cluster's frontend connects from survive restarts (issue
   32: the broker knows them before the frontend logs in again), also a
   second restart before it registers; its registration's then count. */
static void test_frontends(void)
{
    char err[512], why[256];
    struct outcomes *o = outcomes_new(600);
    struct registry *a = registry_new(100, 1), *b = registry_new(100, 2), *c = registry_new(100, 3);
    struct state_loaded st;
    REQUIRE(o != NULL && a != NULL && b != NULL && c != NULL);
    struct reg_cluster nata = nat_cluster("nata", "203.0.113.66");
    snprintf(nata.from, sizeof(nata.from), "198.51.100.7");
    CHECK(registry_register_cluster(a, &nata, why, sizeof(why)) == REG_OK);
    CHECK_EQ(state_save(o, a, in_dir("f"), err, sizeof(err)), 0);

    CHECK_EQ(state_load(o, b, in_dir("f"), &st, err, sizeof(err)), 0);
    CHECK_EQ(st.frontends, 1u);
    CHECK_EQ(st.skipped, 0u);
    struct seen_frontends f = {""};
    registry_frontends_each(b, list_frontend, &f);
    CHECK_HAS(f.text, "nata 203.0.113.66 198.51.100.7;");
    CHECK_EQ(state_save(o, b, in_dir("f"), err, sizeof(err)), 0);
    CHECK_EQ(state_load(o, c, in_dir("f"), &st, err, sizeof(err)), 0);
    CHECK_EQ(st.frontends, 1u);
    struct reg_cluster moved = nat_cluster("nata", "203.0.113.99");
    CHECK(registry_register_cluster(c, &moved, why, sizeof(why)) == REG_OK);
    f.text[0] = '\0';
    registry_frontends_each(c, list_frontend, &f);
    CHECK(strcmp(f.text, "nata 203.0.113.99;") == 0);

    write_text(in_dir("fb"), "qcg-broker-state 1\n"
                             "frontend nata\n"
                             "frontend nata not-an-address\n"
                             "frontend bad/name 203.0.113.1\n"
                             "frontend nata 1.1.1.1 1.1.1.2 1.1.1.3 1.1.1.4 1.1.1.5 1.1.1.6 "
                             "1.1.1.7 1.1.1.8 1.1.1.9 1.1.1.10\n"
                             "frontend nata 203.0.113.1 2001:db8::1\n");
    CHECK_EQ(state_load(o, a, in_dir("fb"), &st, err, sizeof(err)), 0);
    CHECK_EQ(st.skipped, 4u);
    CHECK_EQ(st.frontends, 0u); /* nata is registered in a: its registration counts */
    registry_free(a);
    registry_free(b);
    registry_free(c);
    outcomes_free(o);
}

int main(void)
{
    REQUIRE(mkdtemp(dir) != NULL);
    test_round_trip();
    test_damaged();
    test_observations();
    test_frontends();
    const char *names[] = {"s", "d", "w", "o", "ob", "f", "fb"};
    for (int i = 0; i < 7; i++)
        unlink(in_dir(names[i]));
    rmdir(dir);
    return check_result("broker-state-file");
}
