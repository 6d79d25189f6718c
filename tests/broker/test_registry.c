/*
 * broker-registry: the registry's operations through its internal API —
 * publish, busy, idempotent re-publish, withdraw, secrets, a job leaving with
 * its last contact, invalidations for every cluster, capacity — then 100,000
 * contacts: every lookup right, resident memory bounded, all withdrawn again.
 * Also the field checks the service runs before the registry.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "cmdqueue.h"
#include "log.h"
#include "outcomes.h"
#include "proxies.h"
#include "registry.h"
#include "site_ranges.h"

/* No reflector: these tests are about the registry, the plan table has its own. */
static const struct plan_offer offer_all = {.proxy = true,
                                            .reflector = false,
                                            .proxy_families = FAMILY_V4 | FAMILY_V6,
                                            .proxy_bridge = true};
static const struct plan_offer offer_noproxy = {.proxy = false, .reflector = false};
#include "soapH.h"
#include "validate.h"

static char why[256];

/* Each test cluster's node range, by name. */
static const char *range_of(const char *name)
{
    static const char *const ranges[][2] = {
        {"nata", "198.18.3.0/24"},
        {"open", "203.0.113.16/28"},
        {"x", "198.18.9.0/24"},
        {"empty", "192.0.2.0/28"},
        {NULL, NULL},
    };
    for (int i = 0; ranges[i][0] != NULL; i++) {
        if (strcmp(ranges[i][0], name) == 0)
            return ranges[i][1];
    }
    return NULL;
}

static struct reg_cluster cluster(const char *name, enum cluster_kind kind, int lo, int hi)
{
    struct reg_cluster c;
    memset(&c, 0, sizeof(c));
    snprintf(c.name, sizeof(c.name), "%s", name);
    c.kind = kind;
    c.port_low = lo;
    c.port_high = hi;
    const char *range = range_of(name);
    if (range != NULL && addr_range_parse(range, &c.ranges[0], why, sizeof(why)) == 0)
        c.nranges = 1;
    return c;
}

static struct reg_node node(const char *name, const char *addr, int lo, int hi)
{
    struct reg_node n;
    memset(&n, 0, sizeof(n));
    snprintf(n.name, sizeof(n.name), "%s", name);
    snprintf(n.address, sizeof(n.address), "%s", addr);
    n.port_low = lo;
    n.port_high = hi;
    return n;
}

static struct reg_contact contact(const char *job, int rank, const char *cl, const char *nd,
                                  const char *addr, int port)
{
    struct reg_contact c;
    memset(&c, 0, sizeof(c));
    snprintf(c.job, sizeof(c.job), "%s", job);
    c.rank = rank;
    snprintf(c.cluster, sizeof(c.cluster), "%s", cl);
    snprintf(c.node, sizeof(c.node), "%s", nd);
    snprintf(c.address, sizeof(c.address), "%s", addr);
    c.port = port;
    return c;
}

/* Two sites: nata (NAT, nodes nata1, nata2) and open (open, node open1). */
static struct registry *two_sites(size_t max_contacts)
{
    struct registry *r = registry_new(max_contacts, 42);
    struct reg_cluster a = cluster("nata", CLUSTER_NAT, 0, 0);
    struct reg_cluster o = cluster("open", CLUSTER_OPEN, 0, 0);
    struct reg_node n1 = node("nata1", "198.18.3.11", 20000, 20999);
    struct reg_node n2 = node("nata2", "198.18.3.12", 21000, 21999);
    struct reg_node o1 = node("open1", "203.0.113.21", 20000, 20999);
    CHECKF(registry_register_cluster(r, &a, why, sizeof(why)) == REG_OK, "%s", why);
    CHECKF(registry_register_cluster(r, &o, why, sizeof(why)) == REG_OK, "%s", why);
    CHECKF(registry_register_node(r, "nata", &n1, why, sizeof(why)) == REG_OK, "%s", why);
    CHECKF(registry_register_node(r, "nata", &n2, why, sizeof(why)) == REG_OK, "%s", why);
    CHECKF(registry_register_node(r, "open", &o1, why, sizeof(why)) == REG_OK, "%s", why);
    return r;
}

static enum reg_status publish(struct registry *r, struct reg_contact c, const char *secret)
{
    why[0] = '\0';
    return registry_publish(r, &c, secret, why, sizeof(why));
}

static void test_registration(void)
{
    struct registry *r = registry_new(10, 7);
    CHECKF(registry_epoch(r) == 7, "epoch");
    struct reg_node n = node("x1", "198.18.9.1", 1, 2);
    CHECKF(registry_register_node(r, "nope", &n, why, sizeof(why)) == REG_NOTFOUND,
           "node of an unregistered cluster");
    CHECKF(strstr(why, "nope") != NULL, "why: %s", why);
    CHECKF(registry_queue(r, "nope") == NULL, "queue of an unregistered cluster");
    struct reg_cluster c = cluster("x", CLUSTER_OPEN, 0, 0);
    CHECKF(registry_register_cluster(r, &c, why, sizeof(why)) == REG_OK, "register");
    CHECKF(registry_register_cluster(r, &c, why, sizeof(why)) == REG_OK, "register again");
    CHECKF(registry_register_node(r, "x", &n, why, sizeof(why)) == REG_OK, "node");
    CHECKF(registry_register_node(r, "x", &n, why, sizeof(why)) == REG_OK, "node again");
    struct registry_counts k;
    registry_counts(r, &k);
    CHECKF(k.clusters == 1 && k.nodes == 1 && k.jobs == 0 && k.contacts == 0,
           "counts %zu %zu %zu %zu", k.clusters, k.nodes, k.jobs, k.contacts);
    registry_free(r);
}

static void test_publish(void)
{
    struct registry *r = two_sites(100);
    struct reg_contact c = contact("job1", 0, "nata", "nata1", "198.18.3.11", 20001);
    CHECKF(publish(r, c, "s3cret") == REG_OK, "first publish: %s", why);
    CHECKF(publish(r, c, "s3cret") == REG_OK, "same contact again is idempotent: %s", why);

    struct reg_contact moved = c;
    moved.port = 20002;
    CHECKF(publish(r, moved, "s3cret") == REG_BUSY, "same rank, other port");
    CHECKF(strstr(why, "already published") != NULL, "why: %s", why);
    struct reg_contact other_node = contact("job1", 0, "nata", "nata2", "198.18.3.12", 21001);
    CHECKF(publish(r, other_node, "s3cret") == REG_BUSY, "same rank, other node");
    struct reg_contact other_site = contact("job1", 0, "open", "open1", "203.0.113.21", 20001);
    CHECKF(publish(r, other_site, "s3cret") == REG_BUSY, "same rank, other cluster");

    struct reg_contact r1 = contact("job1", 1, "nata", "nata2", "198.18.3.12", 21001);
    CHECKF(publish(r, r1, "wrong") == REG_DENIED, "secret mismatch");
    CHECKF(strstr(why, "secret") != NULL, "why: %s", why);
    CHECKF(publish(r, r1, "s3cret") == REG_OK, "rank 1: %s", why);

    struct reg_contact bad = contact("job1", 2, "nata", "nata9", "198.18.3.19", 20001);
    CHECKF(publish(r, bad, "s3cret") == REG_NOTFOUND, "unregistered node");
    bad = contact("job1", 2, "natz", "nata1", "198.18.3.11", 20001);
    CHECKF(publish(r, bad, "s3cret") == REG_NOTFOUND, "unregistered cluster");
    bad = contact("job1", 2, "nata", "nata1", "198.18.3.99", 20001);
    CHECKF(publish(r, bad, "s3cret") == REG_DENIED, "address not the node's");
    bad = contact("job1", 2, "nata", "nata1", "198.18.3.11", 21001);
    CHECKF(publish(r, bad, "s3cret") == REG_INVALID, "port outside the node's range");

    /* The same rank in another job is another contact. */
    struct reg_contact j2 = contact("job2", 0, "open", "open1", "203.0.113.21", 20005);
    CHECKF(publish(r, j2, "other") == REG_OK, "job2: %s", why);

    struct registry_counts k;
    registry_counts(r, &k);
    CHECKF(k.clusters == 2 && k.nodes == 3 && k.jobs == 2 && k.contacts == 3,
           "counts %zu %zu %zu %zu", k.clusters, k.nodes, k.jobs, k.contacts);
    registry_free(r);
}

/* A helper that restarts registers its node with a new incarnation: the
   contacts of its old processes go (their jobs with the last), each
   invalidated; the same incarnation (a frontend or broker restart) or none
   (an older helper) keeps them. */
static void test_incarnation(void)
{
    struct registry *r = two_sites(100);
    struct reg_node n1 = node("nata1", "198.18.3.11", 20000, 20999);
    snprintf(n1.incarnation, sizeof(n1.incarnation), "aaaa");
    CHECKF(registry_register_node(r, "nata", &n1, why, sizeof(why)) == REG_OK, "%s", why);
    CHECKF(publish(r, contact("j", 0, "nata", "nata1", "198.18.3.11", 20001), "s") == REG_OK, "0");
    CHECKF(publish(r, contact("j", 1, "nata", "nata2", "198.18.3.12", 21001), "s") == REG_OK, "1");
    CHECKF(publish(r, contact("k", 0, "nata", "nata1", "198.18.3.11", 20002), "t") == REG_OK, "k");
    CHECKF(registry_register_node(r, "nata", &n1, why, sizeof(why)) == REG_OK, "same again");
    struct reg_node none = node("nata1", "198.18.3.11", 20000, 20999);
    CHECKF(registry_register_node(r, "nata", &none, why, sizeof(why)) == REG_OK, "none");
    struct registry_counts k;
    registry_counts(r, &k);
    CHECKF(k.contacts == 3 && k.contacts_dropped == 0, "kept: %zu contacts", k.contacts);

    struct cmdqueue *q = registry_queue(r, "open");
    struct command cmds[8];
    int before = cmdqueue_wait(q, 0, 0, cmds, 8);
    snprintf(n1.incarnation, sizeof(n1.incarnation), "bbbb");
    why[0] = '\0';
    CHECKF(registry_register_node(r, "nata", &n1, why, sizeof(why)) == REG_OK &&
               strstr(why, "2 contacts"),
           "restarted: %s", why);
    registry_counts(r, &k);
    CHECKF(k.contacts == 1 && k.jobs == 1 && k.contacts_dropped == 2,
           "nata1's contacts and job k gone: %zu contacts, %zu jobs", k.contacts, k.jobs);
    struct reg_lookup res;
    CHECKF(registry_lookup(r, "nata", "j", "s", 1, 0, 0, TECH_NONE, &offer_all, NULL, &res, why,
                           sizeof(why)) == REG_OK &&
               !res.found,
           "a lookup of the dead rank: notfound, no order");
    CHECKF(cmdqueue_wait(q, 0, 0, cmds, 8) == before + 2, "two invalidates for every cluster");
    CHECKF(publish(r, contact("k", 0, "nata", "nata1", "198.18.3.11", 20002), "new") == REG_OK,
           "job k's id is free again, with a new secret");
    registry_free(r);
}

static void test_capacity(void)
{
    struct registry *r = two_sites(2);
    registry_set_cluster_share(r, 2);
    CHECKF(publish(r, contact("j", 0, "nata", "nata1", "198.18.3.11", 20001), "s") == REG_OK, "0");
    CHECKF(publish(r, contact("j", 1, "nata", "nata1", "198.18.3.11", 20002), "s") == REG_OK, "1");
    CHECKF(publish(r, contact("j", 2, "nata", "nata1", "198.18.3.11", 20003), "s") == REG_FULL,
           "beyond max-contacts");
    CHECKF(strcmp(reg_status_subcode(REG_FULL), "unavailable") == 0, "subcode");
    CHECKF(strstr(why, "max-contacts") != NULL, "why: %s", why);
    /* Re-publishing what is held still works when full. */
    CHECKF(publish(r, contact("j", 1, "nata", "nata1", "198.18.3.11", 20002), "s") == REG_OK,
           "idempotent when full: %s", why);
    registry_free(r);
}

/* One cluster holds at most its share (a quarter of max-contacts unless
   set): its flood of publishes leaves the other sites room. */
static void test_cluster_share(void)
{
    struct registry *r = two_sites(8);
    for (int i = 0; i < 2; i++)
        CHECKF(publish(r, contact("flood", i, "nata", "nata1", "198.18.3.11", 20001 + i), "s") ==
                   REG_OK,
               "nata's contact %d: %s", i, why);
    CHECKF(publish(r, contact("flood", 2, "nata", "nata1", "198.18.3.11", 20003), "s") == REG_FULL,
           "nata beyond its share of 8 / 4");
    CHECKF(strstr(why, "max-contacts-per-cluster") != NULL, "why: %s", why);
    CHECKF(publish(r, contact("other", 0, "open", "open1", "203.0.113.21", 20001), "s") == REG_OK,
           "open still publishes: %s", why);
    /* A withdrawal gives the share back. */
    CHECKF(registry_withdraw(r, "nata", "nata1", "flood", "s", 0, why, sizeof(why)) == REG_OK,
           "withdraw: %s", why);
    CHECKF(publish(r, contact("flood", 2, "nata", "nata1", "198.18.3.11", 20003), "s") == REG_OK,
           "nata again within its share: %s", why);
    registry_free(r);
}

static void test_withdraw(void)
{
    struct registry *r = two_sites(100);
    CHECKF(publish(r, contact("job1", 0, "nata", "nata1", "198.18.3.11", 20001), "s") == REG_OK,
           "0");
    CHECKF(publish(r, contact("job1", 1, "nata", "nata2", "198.18.3.12", 21001), "s") == REG_OK,
           "1");
    CHECKF(registry_withdraw(r, "nata", NULL, "job1", "bad", 0, why, sizeof(why)) == REG_DENIED,
           "wrong secret");
    CHECKF(registry_withdraw(r, "open", NULL, "job1", "s", 0, why, sizeof(why)) == REG_DENIED,
           "another cluster's contact");
    CHECKF(registry_withdraw(r, "nata", "nata2", "job1", "s", 0, why, sizeof(why)) == REG_DENIED,
           "another node's contact");
    CHECKF(registry_withdraw(r, "nata", NULL, "job1", "s", 7, why, sizeof(why)) == REG_NOTFOUND,
           "unpublished rank");
    CHECKF(registry_withdraw(r, "nata", "nata1", "job1", "s", 0, why, sizeof(why)) == REG_OK,
           "withdraw 0: %s", why);
    CHECKF(registry_withdraw(r, "nata", "nata1", "job1", "s", 0, why, sizeof(why)) == REG_NOTFOUND,
           "withdraw 0 twice");

    /* Every cluster's frontend is told to forget (job1, 0). */
    const char *sites[] = {"nata", "open"};
    for (int i = 0; i < 2; i++) {
        struct command cmds[4];
        int n = cmdqueue_wait(registry_queue(r, sites[i]), 0, 0, cmds, 4);
        CHECKF(n == 1 && strcmp(cmds[0].kind, "invalidate") == 0 &&
                   strcmp(cmds[0].job, "job1") == 0 && cmds[0].rank == 0,
               "%s: %d commands", sites[i], n);
    }

    struct registry_counts k;
    registry_counts(r, &k);
    CHECKF(k.jobs == 1 && k.contacts == 1, "after one withdraw: %zu jobs %zu contacts", k.jobs,
           k.contacts);
    CHECKF(registry_withdraw(r, "nata", "", "job1", "s", 1, why, sizeof(why)) == REG_OK, "1: %s",
           why);
    registry_counts(r, &k);
    CHECKF(k.jobs == 0 && k.contacts == 0, "job removed with its last contact: %zu jobs", k.jobs);
    /* The job is gone, and with it its secret: the id can start afresh. */
    CHECKF(publish(r, contact("job1", 0, "nata", "nata1", "198.18.3.11", 20001), "new") == REG_OK,
           "job id reused with a new secret: %s", why);
    registry_free(r);
}

/* node n with a further address, or c with a further address, for the
   family tests. */
static struct reg_node node2(const char *name, const char *addr, const char *other, int lo, int hi)
{
    struct reg_node n = node(name, addr, lo, hi);
    if (other != NULL) {
        snprintf(n.other[0], sizeof(n.other[0]), "%s", other);
        n.nother = 1;
    }
    return n;
}

static struct reg_contact contact2(int rank, const char *cl, const char *nd, const char *addr,
                                   const char *other, int port)
{
    struct reg_contact c = contact("fam", rank, cl, nd, addr, port);
    if (other != NULL) {
        snprintf(c.other[0], sizeof(c.other[0]), "%s", other);
        c.nother = 1;
    }
    return c;
}

/* Contacts with an address of each family (issue 33): every address in the
   site's ranges of its family, a contact's among its node's, and the plans'
   family: IPv6 first with IPv4 behind it, IPv6 through an open range
   instead of a NAT's technique, a connect-back to the initiator's IPv6
   address for an IPv6-only target. */
static void test_families(void)
{
    struct registry *r = registry_new(100, 42);
    struct reg_cluster a = cluster("nata", CLUSTER_NAT, 0, 0);
    struct reg_cluster o = cluster("open", CLUSTER_OPEN, 0, 0);
    addr_range_parse("2001:db8:3::/48", &a.ranges[a.nranges++], why, sizeof(why));
    addr_range_parse("2001:db8:3:5::/64", &a.open[a.nopen++], why, sizeof(why));
    addr_range_parse("2001:db8:16::/48", &o.ranges[o.nranges++], why, sizeof(why));
    CHECKF(registry_register_cluster(r, &a, why, sizeof(why)) == REG_OK, "%s", why);
    CHECKF(registry_register_cluster(r, &o, why, sizeof(why)) == REG_OK, "%s", why);
    struct reg_node nodes[] = {
        node2("open1", "203.0.113.21", "2001:db8:16::21", 20000, 20999),
        node2("nata1", "198.18.3.11", "2001:db8:3:5::11", 20000, 20999),
        node2("nata2", "198.18.3.12", "2001:db8:3::12", 21000, 21999),
        node2("nata3", "2001:db8:3::13", NULL, 22000, 22999),
    };
    for (int i = 0; i < 4; i++)
        CHECKF(registry_register_node(r, i == 0 ? "open" : "nata", &nodes[i], why, sizeof(why)) ==
                   REG_OK,
               "node %d: %s", i, why);
    struct reg_node out = node2("nata4", "198.18.3.14", "2001:db8:4::14", 23000, 23999);
    CHECKF(registry_register_node(r, "nata", &out, why, sizeof(why)) == REG_DENIED &&
               strstr(why, "address 2001:db8:4::14 of node nata4 is outside the node ranges") !=
                   NULL,
           "an IPv6 address outside the site's IPv6 range: %s", why);

    CHECKF(publish(r, contact2(0, "open", "open1", "203.0.113.21", "2001:db8:16::21", 20001),
                   "s") == REG_OK,
           "0: %s", why);
    CHECKF(publish(r, contact2(1, "nata", "nata1", "198.18.3.11", "2001:db8:3:5::11", 20001),
                   "s") == REG_OK,
           "1: %s", why);
    CHECKF(publish(r, contact2(2, "nata", "nata2", "198.18.3.12", "2001:db8:3::12", 21001), "s") ==
               REG_OK,
           "2: %s", why);
    CHECKF(publish(r, contact2(3, "nata", "nata3", "2001:db8:3::13", NULL, 22001), "s") == REG_OK,
           "3: %s", why);
    CHECKF(publish(r, contact2(5, "nata", "nata2", "198.18.3.12", "2001:db8:3::99", 21002), "s") ==
                   REG_DENIED &&
               strstr(why, "2001:db8:3::99 is not among node nata2's") != NULL,
           "a contact's further address not its node's: %s", why);

    struct reg_lookup res;
#define LOOK(from_cl, from, to)                                                                    \
    CHECKF(registry_lookup(r, from_cl, "fam", "s", from, to, 0, TECH_NONE, &offer_all, NULL, &res, \
                           why, sizeof(why)) == REG_OK &&                                          \
               res.found,                                                                          \
           "%d -> %d: %s", from, to, why)
    LOOK("nata", 1, 0);
    CHECKF(res.decision.technique == TECH_DIRECT &&
               strcmp(res.direct_address, "2001:db8:16::21") == 0 &&
               strcmp(res.fallback, "203.0.113.21") == 0,
           "to an open dual-stack node: IPv6 first, IPv4 behind it (%s, %s): %s",
           res.direct_address, res.fallback, res.decision.reason);
    LOOK("open", 0, 1);
    CHECKF(res.decision.ok && res.decision.technique == TECH_DIRECT &&
               strcmp(res.direct_address, "2001:db8:3:5::11") == 0 && res.fallback[0] == '\0',
           "into a NAT, the target's IPv6 in an open range: direct over IPv6 (%s): %s",
           res.direct_address, res.decision.reason);
    LOOK("open", 0, 2);
    CHECKF(res.decision.technique == TECH_REVERSED && res.direct_address[0] == '\0' &&
               strcmp(res.back_address, "203.0.113.21") == 0,
           "into a NAT, IPv6 not open: reversed to the initiator's IPv4 (%s): %s", res.back_address,
           res.decision.reason);
    LOOK("nata", 1, 2);
    CHECKF(res.decision.technique == TECH_DIRECT &&
               strcmp(res.direct_address, "2001:db8:3::12") == 0 &&
               strcmp(res.fallback, "198.18.3.12") == 0,
           "inside the site: IPv6 first (%s, %s): %s", res.direct_address, res.fallback,
           res.decision.reason);
    LOOK("open", 0, 3);
    CHECKF(res.decision.technique == TECH_REVERSED &&
               strcmp(res.back_address, "2001:db8:16::21") == 0,
           "an IPv6-only target calls back the initiator's IPv6 address (%s): %s", res.back_address,
           res.decision.reason);
    LOOK("nata", 3, 2);
    CHECKF(res.decision.technique == TECH_DIRECT && res.fallback[0] == '\0' &&
               strcmp(res.direct_address, "2001:db8:3::12") == 0,
           "from an IPv6-only node: IPv6, no IPv4 fallback it could not use (%s): %s",
           res.direct_address, res.decision.reason);
    /* open1's rank 4 published its IPv4 address only: to it from the
       IPv6-only nata3, and back, only the proxy, whatever the sites. */
    CHECKF(publish(r, contact2(4, "open", "open1", "203.0.113.21", NULL, 20004), "s") == REG_OK,
           "4: %s", why);
    LOOK("nata", 3, 4);
    CHECKF(res.decision.ok && res.decision.technique == TECH_PROXY &&
               res.direct_address[0] == '\0' &&
               strstr(res.decision.reason, "bridging IPv6 to IPv4") != NULL,
           "IPv6-only to IPv4-only: the proxy, bridging: %s", res.decision.reason);
    LOOK("open", 4, 3);
    CHECKF(res.decision.ok && res.decision.technique == TECH_PROXY &&
               strstr(res.decision.reason, "bridging IPv4 to IPv6") != NULL,
           "IPv4-only to IPv6-only: the proxy, bridging: %s", res.decision.reason);
#undef LOOK
    registry_free(r);
}

static void test_lookup(void)
{
    struct registry *r = two_sites(100);
    struct reg_lookup res;
    CHECKF(registry_lookup(r, "nata", "job1", "s", 0, 1, 0, TECH_NONE, &offer_all, NULL, &res, why,
                           sizeof(why)) == REG_DENIED,
           "unknown job");
    CHECKF(publish(r, contact("job1", 0, "nata", "nata1", "198.18.3.11", 20001), "s") == REG_OK,
           "0");
    CHECKF(publish(r, contact("job1", 1, "nata", "nata2", "198.18.3.12", 21001), "s") == REG_OK,
           "1");
    CHECKF(publish(r, contact("job1", 2, "open", "open1", "203.0.113.21", 20002), "s") == REG_OK,
           "2");

    CHECKF(registry_lookup(r, "nata", "job1", "x", 0, 1, 0, TECH_NONE, &offer_all, NULL, &res, why,
                           sizeof(why)) == REG_DENIED,
           "wrong secret");
    CHECKF(registry_lookup(r, "open", "job1", "s", 0, 1, 0, TECH_NONE, &offer_all, NULL, &res, why,
                           sizeof(why)) == REG_DENIED,
           "fromRank published in another cluster");
    CHECKF(registry_lookup(r, "nata", "job1", "s", 5, 1, 0, TECH_NONE, &offer_all, NULL, &res, why,
                           sizeof(why)) == REG_DENIED,
           "fromRank not published");

    CHECKF(registry_lookup(r, "nata", "job1", "s", 0, 9, 0, TECH_NONE, &offer_all, NULL, &res, why,
                           sizeof(why)) == REG_OK &&
               !res.found,
           "unpublished target is not found (status notfound, not a fault)");

    CHECKF(registry_lookup(r, "nata", "job1", "s", 0, 1, 0, TECH_NONE, &offer_all, NULL, &res, why,
                           sizeof(why)) == REG_OK,
           "0->1");
    CHECKF(res.found && res.decision.ok && res.decision.technique == TECH_DIRECT &&
               strcmp(res.target.address, "198.18.3.12") == 0 && res.target.port == 21001 &&
               strcmp(res.target.node, "nata2") == 0 && strcmp(res.target.cluster, "nata") == 0,
           "same cluster: %s %s:%d", res.decision.reason, res.target.address, res.target.port);

    CHECKF(registry_lookup(r, "nata", "job1", "s", 0, 2, 0, TECH_NONE, &offer_all, NULL, &res, why,
                           sizeof(why)) == REG_OK,
           "0->2");
    CHECKF(res.found && res.decision.ok && res.decision.technique == TECH_DIRECT &&
               strcmp(res.target.address, "203.0.113.21") == 0,
           "to an open site: %s", res.decision.reason);

    /* A report's pair: both contacts, no plan; after the target left,
       where it was (the lookup only says notfound). */
    CHECKF(registry_pair(r, "nata", "job1", "s", 0, 2, &res, why, sizeof(why)) == REG_OK &&
               res.found && strcmp(res.target.cluster, "open") == 0 &&
               strcmp(res.from.cluster, "nata") == 0,
           "pair 0->2: %s", why);
    CHECKF(registry_pair(r, "nata", "job1", "x", 0, 2, &res, why, sizeof(why)) == REG_DENIED,
           "pair with a wrong secret");
    CHECKF(registry_withdraw(r, "open", NULL, "job1", "s", 2, why, sizeof(why)) == REG_OK,
           "withdraw 2: %s", why);
    CHECKF(registry_pair(r, "nata", "job1", "s", 0, 2, &res, why, sizeof(why)) == REG_OK &&
               !res.found && res.target_gone && strcmp(res.target.cluster, "open") == 0 &&
               strcmp(res.target.node, "open1") == 0,
           "pair after the target left: gone from open/open1");
    CHECKF(registry_lookup(r, "nata", "job1", "s", 0, 2, 0, TECH_NONE, &offer_all, NULL, &res, why,
                           sizeof(why)) == REG_OK &&
               !res.found && !res.target_gone,
           "lookup after the target left: notfound");
    CHECKF(publish(r, contact("job1", 2, "open", "open1", "203.0.113.21", 20002), "s") == REG_OK,
           "2 again");

    CHECKF(registry_lookup(r, "open", "job1", "s", 2, 0, 0, TECH_NONE, &offer_all, NULL, &res, why,
                           sizeof(why)) == REG_OK,
           "2->0");
    CHECKF(res.found && res.decision.ok && res.decision.technique == TECH_REVERSED &&
               !res.decision.cacheable,
           "open -> nat: %s", res.decision.reason);
    /* The connect-back calls the initiator's contact. */
    CHECKF(res.from.rank == 2 && strcmp(res.from.address, "203.0.113.21") == 0 &&
               strcmp(res.from.cluster, "open") == 0 && strcmp(res.target.node, "nata1") == 0,
           "open -> nat: from %s/%s %s:%d", res.from.cluster, res.from.node, res.from.address,
           res.from.port);
    /* Reversed tried: the proxy next, or nothing without one. */
    CHECKF(registry_lookup(r, "open", "job1", "s", 2, 0, TECH_BIT(TECH_REVERSED), TECH_NONE,
                           &offer_all, NULL, &res, why, sizeof(why)) == REG_OK &&
               res.decision.ok && res.decision.technique == TECH_PROXY,
           "open -> nat, reversed tried: %s", res.decision.reason);
    CHECKF(registry_lookup(r, "open", "job1", "s", 2, 0, TECH_BIT(TECH_REVERSED), TECH_NONE,
                           &offer_noproxy, NULL, &res, why, sizeof(why)) == REG_OK &&
               !res.decision.ok && res.decision.technique == TECH_PROXY,
           "open -> nat, reversed tried, no proxy: %s", res.decision.reason);
    /* The outcome memory between the two clusters is consulted, in that
       direction only. */
    struct outcomes *mem = outcomes_new(600);
    uint64_t now = (uint64_t)time(NULL);
    /* Another job's failure alone does not steer job1's plans. */
    outcomes_record(mem, "open", "nata", TECH_REVERSED, false, 0, now, "other", "open2");
    CHECKF(registry_lookup(r, "open", "job1", "s", 2, 0, 0, TECH_NONE, &offer_all, mem, &res, why,
                           sizeof(why)) == REG_OK &&
               res.decision.ok && res.decision.technique == TECH_REVERSED,
           "open -> nat, reversed failed for one other job only: %s", res.decision.reason);
    outcomes_record(mem, "open", "nata", TECH_REVERSED, false, 0, now, "job1", "open1");
    CHECKF(registry_lookup(r, "open", "job1", "s", 2, 0, 0, TECH_NONE, &offer_all, mem, &res, why,
                           sizeof(why)) == REG_OK &&
               res.decision.ok && res.decision.technique == TECH_PROXY &&
               strstr(res.decision.reason, "reversed failed recently"),
           "open -> nat, reversed remembered as failing: %s", res.decision.reason);
    /* Two jobs from two nodes corroborate each other, but never leave a job
       without a technique its own attempts did not rule out. */
    outcomes_record(mem, "open", "nata", TECH_PROXY, false, 0, now, "evil1", "open1");
    outcomes_record(mem, "open", "nata", TECH_PROXY, false, 0, now, "evil2", "open2");
    CHECKF(registry_lookup(r, "open", "job1", "s", 2, 0, TECH_BIT(TECH_REVERSED), TECH_NONE,
                           &offer_all, mem, &res, why, sizeof(why)) == REG_OK &&
               res.decision.ok && res.decision.technique == TECH_PROXY,
           "open -> nat, reversed tried, proxy failed for two other jobs: %s", res.decision.reason);
    /* `only` plans that technique whatever the memory says, and names the
       target's node when it cannot work. */
    CHECKF(registry_lookup(r, "open", "job1", "s", 2, 0, 0, TECH_REVERSED, &offer_all, mem, &res,
                           why, sizeof(why)) == REG_OK &&
               res.decision.ok && res.decision.technique == TECH_REVERSED &&
               !res.decision.cacheable,
           "open -> nat, only reversed, remembered as failing: %s", res.decision.reason);
    CHECKF(registry_lookup(r, "open", "job1", "s", 2, 0, 0, TECH_DIRECT, &offer_all, mem, &res, why,
                           sizeof(why)) == REG_OK &&
               !res.decision.ok && res.decision.technique == TECH_DIRECT &&
               strstr(res.decision.reason, "cluster nata is behind a NAT"),
           "open -> nat, only direct: %s", res.decision.reason);
    outcomes_free(mem);

    /* A frontend re-declaring its site changes the plans at once. */
    struct reg_cluster a = cluster("nata", CLUSTER_OPEN, 0, 0);
    CHECKF(registry_register_cluster(r, &a, why, sizeof(why)) == REG_OK, "re-register");
    CHECKF(registry_lookup(r, "open", "job1", "s", 2, 0, 0, TECH_NONE, &offer_all, NULL, &res, why,
                           sizeof(why)) == REG_OK,
           "2->0");
    CHECKF(res.decision.ok && res.decision.technique == TECH_DIRECT, "now open: %s",
           res.decision.reason);
    registry_free(r);
}

static void test_close(void)
{
    struct registry *r = two_sites(10);
    registry_close(r);
    struct command cmds[1];
    /* A poll after shutdown returns at once instead of waiting 25 s. */
    CHECKF(cmdqueue_wait(registry_queue(r, "nata"), 0, 25000, cmds, 1) == 0, "closed queue");
    registry_free(r);
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f != NULL && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kib;
}

#define MANY 100000

static void test_many(void)
{
    struct registry *r = two_sites(1000000);
    for (int rank = 0; rank < MANY; rank++) {
        bool one = rank % 2 == 0;
        int port = (one ? 20000 : 21000) + rank % 1000;
        enum reg_status st = publish(r,
                                     contact("big", rank, "nata", one ? "nata1" : "nata2",
                                             one ? "198.18.3.11" : "198.18.3.12", port),
                                     "big-secret");
        if (st != REG_OK) {
            CHECKF(st == REG_OK, "publish %d: %s", rank, why);
            break;
        }
    }
    long rss = rss_kib();
    CHECKF(rss > 0 && rss < 200 * 1024, "RSS with %d contacts: %ld KiB", MANY, rss);
    printf("broker-registry: %d contacts, RSS %ld KiB\n", MANY, rss);
    struct registry_counts k;
    registry_counts(r, &k);
    CHECKF(k.contacts == MANY && k.jobs == 1, "%zu contacts", k.contacts);

    int wrong = 0;
    for (int to = 0; to < MANY; to++) {
        struct reg_lookup res;
        bool one = to % 2 == 0;
        if (registry_lookup(r, "nata", "big", "big-secret", 0, to, 0, TECH_NONE, &offer_all, NULL,
                            &res, why, sizeof(why)) != REG_OK ||
            !res.found || res.target.port != (one ? 20000 : 21000) + to % 1000 ||
            strcmp(res.target.node, one ? "nata1" : "nata2") != 0 || res.target.rank != to)
            wrong++;
    }
    CHECKF(wrong == 0, "%d of %d lookups wrong", wrong, MANY);

    /* Withdraw the odd ranks (rank 0 stays, it is the caller), then check that
       what remains is intact and what went is gone. */
    for (int rank = 1; rank < MANY; rank += 2)
        if (registry_withdraw(r, "nata", NULL, "big", "big-secret", rank, why, sizeof(why)) !=
            REG_OK)
            wrong++;
    CHECKF(wrong == 0, "%d withdraws failed", wrong);
    for (int to = 0; to < MANY; to++) {
        struct reg_lookup res;
        registry_lookup(r, "nata", "big", "big-secret", 0, to, 0, TECH_NONE, &offer_all, NULL, &res,
                        why, sizeof(why));
        if (res.found != (to % 2 == 0) || (res.found && res.target.rank != to))
            wrong++;
    }
    CHECKF(wrong == 0, "%d lookups wrong after withdrawing half", wrong);
    registry_counts(r, &k);
    CHECKF(k.contacts == MANY / 2, "%zu contacts left", k.contacts);
    registry_free(r);
}

static void test_validate(void)
{
    char *addrs[9] = {"203.0.113.1", "2001:db8::1", "203.0.113.3", "203.0.113.4", "203.0.113.5",
                      "203.0.113.6", "203.0.113.7", "203.0.113.8", "203.0.113.9"};
    struct reg_cluster rc;
    struct qcg__cluster c = {"nata", "nat", 2, addrs, 0, 0, 0, NULL, 0, NULL};
    CHECKF(validate_cluster(&c, &rc, why, sizeof(why)) == 0 && rc.npublic == 2 &&
               rc.kind == CLUSTER_NAT,
           "good cluster: %s", why);
    c.__sizePublicAddress = 9;
    CHECKF(validate_cluster(&c, &rc, why, sizeof(why)) == -1, "9 public addresses");
    c.__sizePublicAddress = 1;
    c.kind = "wormhole";
    CHECKF(validate_cluster(&c, &rc, why, sizeof(why)) == -1 && strstr(why, "kind"), "kind: %s",
           why);
    c.kind = NULL;
    CHECKF(validate_cluster(&c, &rc, why, sizeof(why)) == -1, "no kind");
    c.kind = "firewalled";
    c.portLow = 30100;
    c.portHigh = 30000;
    CHECKF(validate_cluster(&c, &rc, why, sizeof(why)) == -1, "reversed range");
    c.portLow = 0;
    c.portHigh = 70000;
    CHECKF(validate_cluster(&c, &rc, why, sizeof(why)) == -1, "port 70000");
    c.portHigh = 0;
    c.name = "../etc";
    CHECKF(validate_cluster(&c, &rc, why, sizeof(why)) == -1 && strstr(why, "name"), "name: %s",
           why);
    c.name = "nata";
    addrs[0] = "not-an-address";
    CHECKF(validate_cluster(&c, &rc, why, sizeof(why)) == -1 && strstr(why, "publicAddress"),
           "address: %s", why);
    CHECKF(validate_cluster(NULL, &rc, why, sizeof(why)) == -1, "NULL cluster");
    /* Open ranges: IPv6 prefixes inside the node ranges. */
    addrs[0] = "203.0.113.1";
    char *node_ranges[2] = {"198.18.3.0/24", "2001:db8:3::/48"};
    char *open_ranges[1] = {"2001:db8:3:5::/64"};
    c.__sizeNodeRange = 2;
    c.nodeRange = node_ranges;
    c.__sizeOpenRange = 1;
    c.openRange = open_ranges;
    CHECKF(validate_cluster(&c, &rc, why, sizeof(why)) == 0 && rc.nopen == 1 &&
               rc.open[0].family == AF_INET6 && rc.open[0].bits == 64,
           "an IPv6 open range inside the node ranges: %s", why);
    open_ranges[0] = "2001:db8:4::/64";
    CHECKF(validate_cluster(&c, &rc, why, sizeof(why)) == -1 &&
               strstr(why, "lies in none of the cluster's node ranges") != NULL,
           "an open range outside the node ranges: %s", why);
    open_ranges[0] = "2001:db8:3::/40";
    CHECKF(validate_cluster(&c, &rc, why, sizeof(why)) == -1,
           "an open range wider than its node range: %s", why);
    c.__sizeOpenRange = 0;
    c.__sizeNodeRange = 0;

    struct reg_node rn;
    char *others[4] = {"2001:DB8:3::11", "2001:db8:3:0::11", "198.18.3.12", "x"};
    struct qcg__node n = {"nata1", "198.18.3.11", 20000, 20999, 1, NULL, 0, NULL};
    CHECKF(validate_node(&n, &rn, why, sizeof(why)) == 0 && rn.can_intercept, "good node: %s", why);
    n.__sizeOtherAddress = 1;
    n.otherAddress = others;
    CHECKF(validate_node(&n, &rn, why, sizeof(why)) == 0 && rn.nother == 1 &&
               strcmp(rn.other[0], "2001:db8:3::11") == 0,
           "a dual-stack node, its IPv6 address canonical: %s", why);
    n.__sizeOtherAddress = 2;
    CHECKF(validate_node(&n, &rn, why, sizeof(why)) == -1 && strstr(why, "twice") != NULL,
           "the same address twice: %s", why);
    n.__sizeOtherAddress = 4;
    CHECKF(validate_node(&n, &rn, why, sizeof(why)) == -1 && strstr(why, "otherAddress") != NULL,
           "four further addresses: %s", why);
    others[1] = "x";
    n.__sizeOtherAddress = 2;
    CHECKF(validate_node(&n, &rn, why, sizeof(why)) == -1 && strstr(why, "otherAddress") != NULL,
           "a further address that is none: %s", why);
    n.__sizeOtherAddress = 0;
    n.portLow = 0;
    CHECKF(validate_node(&n, &rn, why, sizeof(why)) == -1, "port 0");
    n.portLow = 20000;
    n.address = "198.18.3";
    CHECKF(validate_node(&n, &rn, why, sizeof(why)) == -1, "short address");
    n.address = NULL;
    CHECKF(validate_node(&n, &rn, why, sizeof(why)) == -1, "no address");

    struct reg_contact ct;
    struct qcg__contact k = {
        "job1",  "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e",
        3,       NULL,
        "nata1", "198.18.3.11",
        20001,   0,
        NULL};
    CHECKF(validate_contact(&k, &ct, why, sizeof(why)) == 0 && ct.cluster[0] == '\0',
           "good contact: %s", why);
    k.rank = -1;
    CHECKF(validate_contact(&k, &ct, why, sizeof(why)) == -1 && strstr(why, "rank"), "rank: %s",
           why);
    k.rank = 3;
    k.verifier = "";
    CHECKF(validate_contact(&k, &ct, why, sizeof(why)) == -1 && strstr(why, "verifier"),
           "verifier");
    /* A secret where a verifier belongs: refused, not hashed and kept. */
    k.verifier = "s3cret";
    CHECKF(validate_contact(&k, &ct, why, sizeof(why)) == -1 && strstr(why, "verifier"),
           "a secret as verifier");
    k.verifier = "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e";
    k.job = "job 1";
    CHECKF(validate_contact(&k, &ct, why, sizeof(why)) == -1 && strstr(why, "job"), "job");
    k.job = "job1";
    k.port = 65536;
    CHECKF(validate_contact(&k, &ct, why, sizeof(why)) == -1 && strstr(why, "port"), "port");
    k.port = 20001;
    k.node = NULL;
    CHECKF(validate_contact(&k, &ct, why, sizeof(why)) == -1 && strstr(why, "node"), "node");
}

/* qcg-probe's state: probe slots per calling cluster (freed when they
   expire), endpoints spread over the target's nodes, the last observation,
   the reflector's punch tally, and the picture sorted by name. */
static void test_probing(void)
{
    struct registry *r = two_sites(100);
    struct reg_node n;
    int on_nata1 = 0;
    char job[QCG_PROBES_PER_CLUSTER][32], where[QCG_PROBES_PER_CLUSTER][QCG_NAME_MAX];
    for (int i = 0; i < QCG_PROBES_PER_CLUSTER; i++) {
        snprintf(job[i], sizeof(job[i]), "probe-%d", i);
        CHECKF(registry_probe_start(r, "open", "", 2, "nata", job[i], 1000, 1010, &n, why,
                                    sizeof(why)) == REG_OK,
               "probe %d: %s", i, why);
        snprintf(where[i], sizeof(where[i]), "%s", n.name);
        on_nata1 += strcmp(n.name, "nata1") == 0;
    }
    CHECKF(on_nata1 == QCG_PROBES_PER_CLUSTER / 2, "round-robin over nata's two nodes: %d on nata1",
           on_nata1);
    CHECKF(registry_probe_start(r, "open", "", 2, "nata", "probe-8", 1005, 1015, &n, why,
                                sizeof(why)) == REG_RETRY &&
               strstr(why, "open already has 8 probe endpoints"),
           "ninth live probe: %s", why);
    CHECKF(registry_probe_start(r, "nata", "", 2, "nata", "probe-n", 1005, 1015, &n, why,
                                sizeof(why)) == REG_OK,
           "another caller, its own cluster: %s", why);

    /* A probe whose endpoint (rank 1 on the node the broker chose) has
       withdrawn is over before its seconds: its slot is free again at once.
       Nothing else frees it: not the prober's withdrawal, not a rank 1
       published elsewhere with the job's secret. */
    const char *other = strcmp(where[3], "nata1") == 0 ? "nata2" : "nata1";
    const char *other_addr = strcmp(other, "nata1") == 0 ? "198.18.3.11" : "198.18.3.12";
    const char *addr = strcmp(where[3], "nata1") == 0 ? "198.18.3.11" : "198.18.3.12";
    struct reg_contact prober = contact(job[3], 0, "open", "open1", "203.0.113.21", 20001);
    int base = strcmp(where[3], "nata1") == 0 ? 20000 : 21000; /* the nodes' port ranges */
    int other_port = base == 20000 ? 21002 : 20002;
    struct reg_contact impostor = contact(job[3], 1, "nata", other, other_addr, other_port);
    struct reg_contact endpoint = contact(job[3], 1, "nata", where[3], addr, base + 3);
    CHECKF(publish(r, prober, "ps") == REG_OK, "%s", why);
    CHECKF(registry_withdraw(r, "open", "open1", job[3], "ps", 0, why, sizeof(why)) == REG_OK, "%s",
           why);
    CHECKF(registry_probe_start(r, "open", "", 2, "nata", "probe-9", 1006, 1016, &n, why,
                                sizeof(why)) == REG_RETRY,
           "the prober withdrawing before its endpoint published frees nothing");
    CHECKF(publish(r, impostor, "ps") == REG_OK, "%s", why);
    CHECKF(registry_withdraw(r, "nata", other, job[3], "ps", 1, why, sizeof(why)) == REG_OK, "%s",
           why);
    CHECKF(registry_probe_start(r, "open", "", 2, "nata", "probe-9", 1006, 1016, &n, why,
                                sizeof(why)) == REG_RETRY,
           "rank 1 withdrawn from another node than the endpoint's frees nothing");
    CHECKF(publish(r, prober, "ps") == REG_OK && publish(r, endpoint, "ps") == REG_OK, "%s", why);
    CHECKF(registry_withdraw(r, "nata", where[3], job[3], "ps", 1, why, sizeof(why)) == REG_OK,
           "%s", why);
    CHECKF(registry_probe_start(r, "open", "", 2, "nata", "probe-9", 1006, 1016, &n, why,
                                sizeof(why)) == REG_OK,
           "the slot of a finished probe is free: %s", why);
    CHECKF(registry_probe_start(r, "open", "", 2, "nata", "probe-10", 1006, 1016, &n, why,
                                sizeof(why)) == REG_RETRY,
           "only that one slot was freed");
    CHECKF(registry_withdraw(r, "open", "open1", job[3], "ps", 0, why, sizeof(why)) == REG_OK, "%s",
           why);

    CHECKF(registry_probe_start(r, "open", "", 2, "nata", "probe-11", 1010, 1020, &n, why,
                                sizeof(why)) == REG_OK,
           "a slot is free once a probe expired: %s", why);
    CHECKF(registry_probe_start(r, "open", "", 2, "nosuch", "probe-12", 1010, 1020, &n, why,
                                sizeof(why)) == REG_NOTFOUND &&
               strstr(why, "nosuch"),
           "unknown cluster: %s", why);
    struct reg_cluster empty = cluster("empty", CLUSTER_OPEN, 0, 0);
    CHECKF(registry_register_cluster(r, &empty, why, sizeof(why)) == REG_OK, "%s", why);
    CHECKF(registry_probe_start(r, "open", "", 2, "empty", "probe-13", 1010, 1020, &n, why,
                                sizeof(why)) == REG_NOTFOUND &&
               strstr(why, "no registered node"),
           "cluster without nodes: %s", why);

    /* Per calling node: one node holds at most per_node of its cluster's
       slots, so the cluster's other nodes can still probe; a caller that
       names no node (an older frontend) has the cluster's bound only. */
    struct registry *r2 = two_sites(100);
    for (int i = 0; i < 2; i++)
        CHECKF(registry_probe_start(r2, "open", "open1", 2, "nata", job[i], 1000, 1010, &n, why,
                                    sizeof(why)) == REG_OK,
               "open1's probe %d: %s", i, why);
    CHECKF(registry_probe_start(r2, "open", "open1", 2, "nata", "probe-x", 1000, 1010, &n, why,
                                sizeof(why)) == REG_RETRY &&
               strstr(why, "node open1 of cluster open already has 2 probe endpoints alive"),
           "open1's third live probe: %s", why);
    CHECKF(registry_probe_start(r2, "open", "open2", 2, "nata", "probe-y", 1000, 1010, &n, why,
                                sizeof(why)) == REG_OK,
           "another node of the cluster still probes: %s", why);
    CHECKF(registry_probe_start(r2, "open", "open1", 2, "nata", "probe-z", 1010, 1020, &n, why,
                                sizeof(why)) == REG_OK,
           "open1 again once its probes expired: %s", why);
    for (int i = 0; i < QCG_PROBES_PER_CLUSTER - 1; i++) /* probe-z holds the 8th */
        CHECKF(registry_probe_start(r2, "open", "", 2, "nata", job[i], 1010, 1020, &n, why,
                                    sizeof(why)) == REG_OK,
               "no node named: the cluster's slots, probe %d: %s", i, why);
    CHECKF(registry_probe_start(r2, "open", "open3", 2, "nata", "probe-w", 1010, 1020, &n, why,
                                sizeof(why)) == REG_RETRY &&
               strstr(why, "open already has 8 probe endpoints"),
           "the cluster's bound holds over its nodes': %s", why);

    registry_free(r2);

    struct reg_observation o = {.when = 1234, .kind = CLUSTER_SYMNAT, .port_preserving = 0};
    struct reg_cluster decl;
    snprintf(o.node, sizeof(o.node), "nata2");
    snprintf(o.mapping, sizeof(o.mapping), "endpoint-dependent");
    CHECKF(registry_observe(r, "nata", &o, &decl, why, sizeof(why)) == REG_OK &&
               decl.kind == CLUSTER_NAT,
           "observe: %s", why);
    CHECKF(registry_observe(r, "nosuch", &o, &decl, why, sizeof(why)) == REG_NOTFOUND, "observe");
    registry_punch_seen(r, "nata", true);
    registry_punch_seen(r, "nata", false);
    registry_punch_seen(r, "nata", false);
    registry_punch_seen(r, "nosuch", true);

    struct reg_cluster_view *v;
    size_t nv;
    CHECKF(registry_clusters(r, &v, &nv) == 0 && nv == 3, "clusters: %zu", nv);
    CHECKF(strcmp(v[0].decl.name, "empty") == 0 && strcmp(v[1].decl.name, "nata") == 0 &&
               strcmp(v[2].decl.name, "open") == 0,
           "sorted by name");
    CHECKF(v[1].nodes == 2 && v[1].observed.when == 1234 && v[1].observed.kind == CLUSTER_SYMNAT &&
               strcmp(v[1].observed.node, "nata2") == 0 && v[1].punches_kept == 1 &&
               v[1].punches_changed == 2,
           "nata's view");
    CHECKF(v[2].observed.when == 0 && v[2].punches_kept == 0 && v[0].nodes == 0, "open, empty");
    free(v);
    registry_free(r);
}

/* The address rules alone (site_ranges.h), with what the service cannot
   reach through registrations: an order into the target's own range. */
static void test_site_ranges(void)
{
    struct reg_cluster o = cluster("open", CLUSTER_OPEN, 0, 0);
    struct reg_cluster a = cluster("nata", CLUSTER_NAT, 0, 0);
    struct reg_cluster b = cluster("nata", CLUSTER_NAT, 0, 0);
    snprintf(b.name, sizeof(b.name), "natb");
    CHECKF(site_ranges_clash(&b, &a, why, sizeof(why)) == 0, "NATs' private ranges may overlap");
    snprintf(b.public_addr[0], sizeof(b.public_addr[0]), "198.18.3.99");
    b.npublic = 1;
    CHECKF(site_ranges_clash(&b, &a, why, sizeof(why)) < 0 && strstr(why, "public address"),
           "a public address in another's private range: %s", why);
    CHECKF(site_holds_public(&o, "203.0.113.21") && !site_holds_public(&a, "198.18.3.11"),
           "an open site's nodes are public, a NAT's are not");
    /* open's contact 203.0.113.21 inside nata's ranges (as if nata had been
       let in): an order there would reach into nata's LAN. */
    struct reg_cluster lan = a;
    addr_range_parse("203.0.113.16/28", &lan.ranges[1], why, sizeof(why));
    lan.nranges = 2;
    CHECKF(!site_order_address_ok(&o, &lan, "203.0.113.21", false, "reversed", why, sizeof(why)) &&
               strstr(why, "lies in cluster nata's own node range 203.0.113.16/28"),
           "connect-back into the target's range: %s", why);
    CHECKF(site_order_address_ok(&o, &a, "203.0.113.21", false, "reversed", why, sizeof(why)),
           "connect-back to the initiator's own node: %s", why);
    CHECKF(site_order_address_ok(&lan, &lan, "203.0.113.21", false, "reversed", why, sizeof(why)),
           "inside one cluster its own range is fine");
    /* A grid on one host: every cluster's implicit range is 127.0.0.1. */
    struct reg_cluster l1 = cluster("l1", CLUSTER_OPEN, 0, 0), l2 = l1;
    snprintf(l2.name, sizeof(l2.name), "l2");
    addr_range_parse("127.0.0.1", &l1.ranges[0], why, sizeof(why));
    l1.nranges = 1;
    l2.ranges[0] = l1.ranges[0];
    l2.nranges = 1;
    CHECKF(site_ranges_clash(&l2, &l1, why, sizeof(why)) == 0 &&
               site_order_address_ok(&l1, &l2, "127.0.0.1", false, "reversed", why, sizeof(why)),
           "loopback never clashes: %s", why);
    struct addr_range r;
    CHECKF(addr_range_parse("198.51.100.0/26", &r, why, sizeof(why)) == 0 &&
               addr_range_contains(&r, "198.51.100.63") &&
               !addr_range_contains(&r, "198.51.100.64"),
           "a /26 ends where it should");
    CHECKF(addr_range_parse("2001:db8::/32", &r, why, sizeof(why)) == 0 &&
               addr_range_contains(&r, "2001:db8:1::5") && !addr_range_contains(&r, "198.51.100.1"),
           "IPv6");
    CHECKF(addr_range_parse("198.51.100.0/33", &r, why, sizeof(why)) < 0, "prefix 33");
    CHECKF(addr_range_parse("198.51.100.1/24", &r, why, sizeof(why)) < 0 &&
               strstr(why, "198.51.100.0/24"),
           "host bits: %s", why);
}

int main(void)
{
    /* Withdrawing 50,000 ranks overflows the unacknowledged queues on purpose. */
    log_init("broker", LOG_LEVEL_ERROR, false);
    test_registration();
    test_publish();
    test_incarnation();
    test_capacity();
    test_cluster_share();
    test_withdraw();
    test_lookup();
    test_families();
    test_close();
    test_probing();
    test_validate();
    test_site_ranges();
    test_many();
    return check_result("broker-registry");
}
