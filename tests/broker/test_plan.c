/*
 * broker-plan: the plan table of docs/architecture.md over the five lab sites
 * (open, fw, nata, natb, sym) pairwise, the same cluster, and a firewalled
 * site with an open port range.
 */
#include <string.h>

#include "check.h"
#include "plan.h"

/* The lab's sites as their frontends declare them.  fw's node can intercept. */
static const struct plan_end open_site = {"open", CLUSTER_OPEN, 0, 0, false, 20001};
static const struct plan_end fw_site = {"fw", CLUSTER_FIREWALLED, 0, 0, true, 20001};
static const struct plan_end nata_site = {"nata", CLUSTER_NAT, 0, 0, false, 20001};
static const struct plan_end natb_site = {"natb", CLUSTER_NAT, 0, 0, false, 20001};
static const struct plan_end sym_site = {"sym", CLUSTER_SYMNAT, 0, 0, false, 20001};

struct row {
    const struct plan_end *from, *to;
    bool ok;
    enum technique technique;
};

/* Rows: initiator, target, expected status and technique. */
static const struct row pairs[] = {
    /* to open: always direct */
    {&open_site, &open_site, true, TECH_DIRECT},
    {&fw_site, &open_site, true, TECH_DIRECT},
    {&nata_site, &open_site, true, TECH_DIRECT},
    {&natb_site, &open_site, true, TECH_DIRECT},
    {&sym_site, &open_site, true, TECH_DIRECT},
    /* to fw (no open range, node can intercept) */
    {&open_site, &fw_site, false, TECH_REVERSED},
    {&fw_site, &fw_site, true, TECH_DIRECT},
    {&nata_site, &fw_site, false, TECH_TRAVERSING},
    {&natb_site, &fw_site, false, TECH_TRAVERSING},
    {&sym_site, &fw_site, false, TECH_PROXY},
    /* to nata */
    {&open_site, &nata_site, false, TECH_REVERSED},
    {&fw_site, &nata_site, false, TECH_HOLEPUNCH},
    {&nata_site, &nata_site, true, TECH_DIRECT},
    {&natb_site, &nata_site, false, TECH_HOLEPUNCH},
    {&sym_site, &nata_site, false, TECH_PROXY},
    /* to natb */
    {&open_site, &natb_site, false, TECH_REVERSED},
    {&fw_site, &natb_site, false, TECH_HOLEPUNCH},
    {&nata_site, &natb_site, false, TECH_HOLEPUNCH},
    {&natb_site, &natb_site, true, TECH_DIRECT},
    {&sym_site, &natb_site, false, TECH_PROXY},
    /* to sym */
    {&open_site, &sym_site, false, TECH_REVERSED},
    {&fw_site, &sym_site, false, TECH_PROXY},
    {&nata_site, &sym_site, false, TECH_PROXY},
    {&natb_site, &sym_site, false, TECH_PROXY},
    {&sym_site, &sym_site, true, TECH_DIRECT},
};

static void check_row(const struct plan_end *from, const struct plan_end *to, bool ok,
                      enum technique t)
{
    struct plan_decision d;
    plan_decide(from, to, &d);
    CHECK(d.ok == ok && d.technique == t, "%s -> %s: got %s %s, want %s %s (%s)", from->cluster,
          to->cluster, d.ok ? "ok" : "unavailable", technique_name(d.technique),
          ok ? "ok" : "unavailable", technique_name(t), d.reason);
    /* Only direct plans may be cached, and every plan explains itself. */
    CHECK(d.cacheable == ok, "%s -> %s: cacheable %d", from->cluster, to->cluster, d.cacheable);
    CHECK(strstr(d.reason, to->cluster) != NULL, "%s -> %s: reason does not name the target: %s",
          from->cluster, to->cluster, d.reason);
    if (!ok) {
        CHECK(strstr(d.reason, from->cluster) != NULL && strstr(d.reason, "not available"),
              "%s -> %s: reason: %s", from->cluster, to->cluster, d.reason);
        CHECK(strstr(d.reason, technique_name(t)) != NULL, "%s -> %s: reason lacks %s: %s",
              from->cluster, to->cluster, technique_name(t), d.reason);
    }
}

static void test_reasons(void)
{
    struct plan_decision d;
    plan_decide(&nata_site, &natb_site, &d);
    CHECK(strcmp(d.reason, "cluster nata is behind a NAT and cluster natb is not reachable "
                           "(behind a NAT): needs holepunch, which is not available in this "
                           "version") == 0,
          "reason: %s", d.reason);
    plan_decide(&nata_site, &sym_site, &d);
    CHECK(strstr(d.reason, "behind a symmetric NAT") != NULL, "reason: %s", d.reason);
    plan_decide(&open_site, &fw_site, &d);
    CHECK(strstr(d.reason, "cluster open is open") != NULL &&
              strstr(d.reason, "firewalled with no open port range") != NULL,
          "reason: %s", d.reason);
}

static void test_open_range(void)
{
    /* A firewalled site that opens 30000-30099: contacts inside are direct,
       outside they are like any firewalled contact. */
    struct plan_end fw_in = {"fwr", CLUSTER_FIREWALLED, 30000, 30099, true, 30050};
    struct plan_end fw_out = fw_in;
    fw_out.port = 20001;
    struct plan_end fw_edge = fw_in;
    fw_edge.port = 30099;
    check_row(&nata_site, &fw_in, true, TECH_DIRECT);
    check_row(&sym_site, &fw_edge, true, TECH_DIRECT);
    check_row(&nata_site, &fw_out, false, TECH_TRAVERSING);
    /* As the initiator, a contact inside the open range can take a call back. */
    check_row(&fw_in, &nata_site, false, TECH_REVERSED);
    check_row(&fw_in, &sym_site, false, TECH_REVERSED);
    check_row(&fw_out, &nata_site, false, TECH_HOLEPUNCH);

    struct plan_decision d;
    plan_decide(&nata_site, &fw_out, &d);
    CHECK(strstr(d.reason, "port 20001 outside its open range 30000-30099") != NULL, "reason: %s",
          d.reason);
}

static void test_no_intercept(void)
{
    /* Without a helper able to intercept, traversing is out: hole punching,
       or the proxy when a symmetric NAT is involved. */
    struct plan_end fw_plain = fw_site;
    fw_plain.can_intercept = false;
    check_row(&nata_site, &fw_plain, false, TECH_HOLEPUNCH);
    struct plan_end fw_other = fw_site;
    fw_other.cluster = "fw2";
    check_row(&fw_other, &fw_plain, false, TECH_HOLEPUNCH);
    check_row(&open_site, &fw_plain, false, TECH_REVERSED);
    check_row(&sym_site, &fw_plain, false, TECH_PROXY);
    struct plan_decision d;
    plan_decide(&nata_site, &fw_plain, &d);
    CHECK(strstr(d.reason, "cannot intercept") != NULL, "reason: %s", d.reason);
}

static void test_same_cluster(void)
{
    /* Inside one site everything is direct to the private address, whatever its kind. */
    const struct plan_end *sites[] = {&open_site, &fw_site, &nata_site, &natb_site, &sym_site};
    for (size_t i = 0; i < sizeof(sites) / sizeof(sites[0]); i++) {
        struct plan_end other = *sites[i];
        other.port = 20002;
        struct plan_decision d;
        plan_decide(sites[i], &other, &d);
        CHECK(d.ok && d.technique == TECH_DIRECT && d.cacheable, "%s internal: %s",
              sites[i]->cluster, d.reason);
        CHECK(strstr(d.reason, "same cluster") != NULL, "reason: %s", d.reason);
    }
}

int main(void)
{
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
        check_row(pairs[i].from, pairs[i].to, pairs[i].ok, pairs[i].technique);
    test_same_cluster();
    test_open_range();
    test_no_intercept();
    test_reasons();
    if (check_failures == 0)
        printf("broker-plan: all checks passed\n");
    return check_failures != 0;
}
