/*
 * broker-outcomes: the outcome memory (a failure is held against a technique
 * between two clusters, in that direction only, until it expires or a
 * success clears it; bounded), the pending traversals (taken once, never
 * after expiry) and the broker's check of a handed-over SYN.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "issued.h"
#include "outcomes.h"
#include "plan.h"
#include "syncheck.h"
#include "traversals.h"

/* What job j (on node "n1") skips from `from` to `to`. */
static unsigned own(struct outcomes *o, const char *from, const char *to, uint64_t now)
{
    return outcomes_failing(o, from, to, "j", now).own;
}

static void test_memory(void)
{
    struct outcomes *o = outcomes_new(600);
    CHECKF(o != NULL, "outcomes_new");
    CHECKF(own(o, "sym", "natb", 1000) == 0, "nothing remembered at first");
    outcomes_record(o, "sym", "natb", TECH_HOLEPUNCH, false, 0, 1000, "j", "n1");
    CHECKF(own(o, "sym", "natb", 1001) == TECH_BIT(TECH_HOLEPUNCH), "failure held");
    CHECKF(own(o, "natb", "sym", 1001) == 0, "only in that direction");
    CHECKF(own(o, "sym", "natb", 1599) == TECH_BIT(TECH_HOLEPUNCH), "until expiry");
    CHECKF(own(o, "sym", "natb", 1600) == 0, "expired");
    outcomes_record(o, "sym", "natb", TECH_PROXY, true, 42, 1002, "j", "n1");
    outcomes_record(o, "sym", "natb", TECH_HOLEPUNCH, true, 30, 1003, "j", "n1");
    CHECKF(own(o, "sym", "natb", 1004) == 0, "a success clears the failure");
    /* The IPv6 punch is remembered apart from the IPv4 one. */
    outcomes_record(o, "nata", "natb", (enum technique)TECH_PUNCH6, false, 0, 1004, "j", "n1");
    CHECKF(own(o, "nata", "natb", 1005) == TECH_BIT(TECH_PUNCH6),
           "the IPv6 punch's failure: holepunch6 alone");
    outcomes_record(o, "nata", "natb", TECH_HOLEPUNCH, true, 20, 1005, "j", "n1");
    CHECKF(own(o, "nata", "natb", 1006) == TECH_BIT(TECH_PUNCH6),
           "the IPv4 punch working leaves the IPv6 one's failure");
    outcomes_record(o, "nata", "natb", (enum technique)TECH_PUNCH6, true, 20, 1006, "j", "n1");
    CHECKF(own(o, "nata", "natb", 1007) == 0, "an IPv6 punch working clears it");
    outcomes_record(o, "nata", "fw", TECH_TRAVERSING, false, 0, 1005, "j", "n1");
    outcomes_record(o, "nata", "fw", (enum technique)99, false, 0, 1005, "j", "n1"); /* ignored */
    struct outcome_pair snap[8];
    size_t n = outcomes_snapshot(o, snap, 8);
    CHECKF(n == 3, "three pairs, got %zu", n);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(snap[i].from, "sym") == 0) {
            CHECKF(snap[i].tech[TECH_HOLEPUNCH].ok == 1 &&
                       snap[i].tech[TECH_HOLEPUNCH].failed == 1 &&
                       snap[i].tech[TECH_HOLEPUNCH].last_setup_ms == 30 &&
                       snap[i].tech[TECH_PROXY].ok == 1,
                   "sym->natb tallies");
        }
    }
    /* Bounded: the oldest pair goes when full. */
    char from[32];
    for (int i = 0; i < OUTCOMES_PAIRS_MAX + 10; i++) {
        snprintf(from, sizeof(from), "c%d", i);
        outcomes_record(o, from, "x", TECH_PROXY, false, 0, 2000 + (uint64_t)i, "j", "n1");
    }
    static struct outcome_pair big[OUTCOMES_PAIRS_MAX + 16];
    n = outcomes_snapshot(o, big, OUTCOMES_PAIRS_MAX + 16);
    CHECKF(n == OUTCOMES_PAIRS_MAX, "bounded at %d, got %zu", OUTCOMES_PAIRS_MAX, n);
    CHECKF(own(o, "c0", "x", 2100) == 0, "oldest forgotten");
    snprintf(from, sizeof(from), "c%d", OUTCOMES_PAIRS_MAX + 9);
    CHECKF(own(o, from, "x", 2000 + OUTCOMES_PAIRS_MAX + 20) == TECH_BIT(TECH_PROXY),
           "newest kept");
    outcomes_free(o);
}

/* One user cannot steer other jobs' plans: another job's failure counts for
   it only until a second job from a second node saw the same; one job holds
   one witness slot whatever it reports. */
static void test_witnesses(void)
{
    struct outcomes *o = outcomes_new(600);
    outcomes_record(o, "a", "b", TECH_DIRECT, false, 0, 1000, "evil", "a1");
    struct outcome_failing f = outcomes_failing(o, "a", "b", "victim", 1001);
    CHECKF(f.own == 0 && f.shared == 0, "one other job: nothing for the victim (%x %x)", f.own,
           f.shared);
    CHECKF(outcomes_failing(o, "a", "b", "evil", 1001).own == TECH_BIT(TECH_DIRECT),
           "the failing job itself skips it");
    outcomes_record(o, "a", "b", TECH_DIRECT, false, 0, 1002, "evil2", "a1");
    CHECKF(outcomes_failing(o, "a", "b", "victim", 1003).shared == 0,
           "two jobs from one node do not corroborate");
    for (int i = 0; i < 10; i++)
        outcomes_record(o, "a", "b", TECH_DIRECT, false, 0, 1004, "evil", "a1");
    CHECKF(outcomes_failing(o, "a", "b", "victim", 1005).shared == 0,
           "one job reporting again is still one job");
    outcomes_record(o, "a", "b", TECH_DIRECT, false, 0, 1006, "other", "a2");
    CHECKF(outcomes_failing(o, "a", "b", "victim", 1007).shared == TECH_BIT(TECH_DIRECT),
           "two jobs from two nodes: held for everyone");
    CHECKF(outcomes_failing(o, "a", "b", "victim", 1700).shared == 0, "until it expires");
    outcomes_record(o, "a", "b", TECH_DIRECT, true, 3, 1008, "victim", "a3");
    f = outcomes_failing(o, "a", "b", "evil", 1009);
    CHECKF(f.own == 0 && f.shared == 0, "a success clears every witness (%x %x)", f.own, f.shared);
    outcomes_free(o);
}

/* A report counts only for a plan the broker issued to that cluster, for
   that job, target rank and technique, within its window; one job's plans
   never push out another's. */
static void test_issued(void)
{
    struct issued *s = issued_new(6);
    CHECKF(s != NULL, "issued_new");
    CHECKF(!issued_check(s, "a", "j", 1, TECH_DIRECT, 100), "nothing issued yet");
    issued_record(s, "a", "j", 1, TECH_DIRECT, 700, 100);
    CHECKF(issued_check(s, "a", "j", 1, TECH_DIRECT, 101), "issued: reportable");
    CHECKF(!issued_check(s, "b", "j", 1, TECH_DIRECT, 101), "not from another cluster");
    CHECKF(!issued_check(s, "a", "k", 1, TECH_DIRECT, 101), "not for another job");
    CHECKF(!issued_check(s, "a", "j", 2, TECH_DIRECT, 101), "not towards another rank");
    CHECKF(!issued_check(s, "a", "j", 1, TECH_PROXY, 101), "not for another technique");
    CHECKF(!issued_check(s, "a", "j", 1, TECH_DIRECT, 700), "not after its window");
    issued_record(s, "a", "j", 1, TECH_DIRECT, 900, 200);
    CHECKF(issued_check(s, "a", "j", 1, TECH_DIRECT, 800) && issued_count(s) == 1,
           "issued again: renewed, not doubled");
    issued_record(s, "a", "victim", 7, TECH_PROXY, 900, 200);
    for (int r = 0; r < ISSUED_PER_JOB_MAX + 5; r++)
        issued_record(s, "a", "j", 100 + r, TECH_DIRECT, 900, 201);
    CHECKF(issued_check(s, "a", "victim", 7, TECH_PROXY, 300), "one job's plans stay its own");
    CHECKF(!issued_check(s, "a", "j", 100, TECH_DIRECT, 300) &&
               issued_check(s, "a", "j", 100 + ISSUED_PER_JOB_MAX + 4, TECH_DIRECT, 300),
           "a job's oldest plan goes first");
    /* Issue 32: a cluster publishing in job after job pushed out the other
       clusters' plans (least recently used first); now it pushes out its
       own once it holds as many as any other. */
    char job[16];
    for (int i = 0; i < 8; i++) {
        snprintf(job, sizeof(job), "many%d", i);
        issued_record(s, "z", job, 1, TECH_DIRECT, 900, 202);
    }
    CHECKF(issued_check(s, "z", "many7", 1, TECH_DIRECT, 300) &&
               !issued_check(s, "z", "many0", 1, TECH_DIRECT, 300),
           "bounded in (cluster, job) pairs: the flooding cluster's least recently used goes");
    CHECKF(issued_check(s, "a", "victim", 7, TECH_PROXY, 300) &&
               issued_check(s, "a", "j", 100 + ISSUED_PER_JOB_MAX + 4, TECH_DIRECT, 300),
           "another cluster's plans stay");
    /* A cluster with nothing yet takes from the one holding the most. */
    issued_record(s, "n", "new", 1, TECH_DIRECT, 900, 203);
    CHECKF(issued_check(s, "n", "new", 1, TECH_DIRECT, 300) &&
               issued_check(s, "a", "victim", 7, TECH_PROXY, 300) &&
               !issued_check(s, "z", "many4", 1, TECH_DIRECT, 300),
           "a newcomer takes from the cluster holding the most");
    issued_record(s, "q", "late", 1, TECH_DIRECT, 2000, 1000);
    CHECKF(issued_count(s) == 1, "expired pairs are dropped as new plans come: %zu left",
           issued_count(s));
    issued_free(s);
}

static void test_traversals(void)
{
    static struct traversals t;
    traversals_init(&t);
    struct traversal tr, out;
    memset(&tr, 0, sizeof(tr));
    memset(tr.pair, 7, sizeof(tr.pair));
    tr.expiry = 130;
    snprintf(tr.target_node, sizeof(tr.target_node), "fw1");
    CHECKF(traversals_add(&t, &tr, 100) == 0, "add");
    unsigned char other[TOKEN_PAIR_LEN];
    memset(other, 8, sizeof(other));
    CHECKF(traversals_take(&t, other, 101, &out) == -1, "unknown pair");
    CHECKF(traversals_take(&t, tr.pair, 101, &out) == 0 && strcmp(out.target_node, "fw1") == 0,
           "taken");
    CHECKF(traversals_take(&t, tr.pair, 102, &out) == -1, "taken only once");
    CHECKF(traversals_add(&t, &tr, 100) == 0, "add again");
    CHECKF(traversals_take(&t, tr.pair, 131, &out) == -1, "not after expiry");
    /* Full of live entries: refused; expired ones make room. */
    for (int i = 0; i < TRAVERSALS_MAX; i++) {
        memcpy(tr.pair, &i, sizeof(i));
        traversals_add(&t, &tr, 100);
    }
    CHECKF(traversals_add(&t, &tr, 100) == -1, "full");
    CHECKF(traversals_add(&t, &tr, 200) == 0, "expired entries make room");
    traversals_destroy(&t);
}

/* A SYN from 198.18.1.11:21005 to 198.51.100.74:24001 with MSS, SACK, TS, wscale. */
static const char syn[] = "4500003c1c4640004006000"
                          "0c612010bc6336"
                          "44a"
                          "520d5dc1"
                          "12345678000000"
                          "00a002faf000000000020405b40402080a"
                          "0001e2400000000001030307";

static void test_syncheck(void)
{
    struct syn_info si;
    char why[128], bad[sizeof(syn)];
    int rc = syn_check_hex(syn, &si, why, sizeof(why));
    CHECKF(rc == 0, "valid SYN refused: %s", why);
    if (rc == 0)
        CHECKF(strcmp(si.saddr, "198.18.1.11") == 0 && strcmp(si.daddr, "198.51.100.74") == 0 &&
                   si.sport == 21005 && si.dport == 24001,
               "fields %s:%d -> %s:%d", si.saddr, si.sport, si.daddr, si.dport);
    memcpy(bad, syn, sizeof(syn));
    bad[66] = '1'; /* flags 0x02 -> 0x12: SYN/ACK */
    CHECKF(syn_check_hex(bad, &si, why, sizeof(why)) == -1 && strstr(why, "SYN"), "SYN/ACK: %s",
           why);
    CHECKF(syn_check_hex("4500", &si, why, sizeof(why)) == -1, "short");
    CHECKF(syn_check_hex("zz", &si, why, sizeof(why)) == -1, "not hex");
    CHECKF(syn_check_hex("", &si, why, sizeof(why)) == -1, "empty");
    CHECKF(syn_check_hex(NULL, &si, why, sizeof(why)) == -1, "NULL");
    memcpy(bad, syn, sizeof(syn));
    bad[19] = '1'; /* protocol 6 -> 1: ICMP */
    CHECKF(syn_check_hex(bad, &si, why, sizeof(why)) == -1, "not TCP: %s", why);
    memcpy(bad, syn, sizeof(syn));
    bad[sizeof(syn) - 3] = '\0'; /* odd length */
    CHECKF(syn_check_hex(bad, &si, why, sizeof(why)) == -1, "odd length");
    char longer[2 * QCG_PACKET_MAX + 8];
    memset(longer, 'a', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    CHECKF(syn_check_hex(longer, &si, why, sizeof(why)) == -1, "too long");
}

/* The same SYN over IPv6: 2001:db8:3::11 port 21005 -> 2001:db8:6::11 port
   24001, its TCP header right after the IPv6 header. */
static const char syn6[] = "6000000000280640"
                           "20010db8000300000000000000000011"
                           "20010db8000600000000000000000011"
                           "520d5dc1"
                           "12345678000000"
                           "00a002faf000000000020405b40402080a"
                           "0001e2400000000001030307";

static void test_syncheck6(void)
{
    struct syn_info si;
    char why[128], bad[sizeof(syn6)];
    int rc = syn_check_hex(syn6, &si, why, sizeof(why));
    CHECKF(rc == 0, "valid IPv6 SYN refused: %s", why);
    if (rc == 0)
        CHECKF(strcmp(si.saddr, "2001:db8:3::11") == 0 && strcmp(si.daddr, "2001:db8:6::11") == 0 &&
                   si.sport == 21005 && si.dport == 24001,
               "fields %s:%d -> %s:%d", si.saddr, si.sport, si.daddr, si.dport);
    memcpy(bad, syn6, sizeof(syn6));
    bad[13] = '0'; /* next header 6 -> 0: a hop-by-hop options header */
    CHECKF(syn_check_hex(bad, &si, why, sizeof(why)) == -1 &&
               strstr(why, "not TCP right after the IPv6 header"),
           "extension header: %s", why);
    memcpy(bad, syn6, sizeof(syn6));
    bad[11] = '9'; /* payload length 40 -> 41 */
    CHECKF(syn_check_hex(bad, &si, why, sizeof(why)) == -1, "IPv6 length: %s", why);
    memcpy(bad, syn6, sizeof(syn6));
    bad[2 * 53] = '1'; /* flags 0x02 -> 0x12: SYN/ACK */
    CHECKF(syn_check_hex(bad, &si, why, sizeof(why)) == -1 && strstr(why, "SYN"), "SYN/ACK: %s",
           why);
}

int main(void)
{
    test_memory();
    test_witnesses();
    test_issued();
    test_traversals();
    test_syncheck();
    test_syncheck6();
    return check_result("broker-outcomes");
}
