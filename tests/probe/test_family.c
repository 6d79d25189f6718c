/* qcg-probe's findings per address family (tools/probe/family.c): from what
   the probe measured, each family says this node's addresses, the services
   it reached, unsolicited inbound, and what connected to each site over it
   and why nothing did; a node without IPv6 says so plainly.  Both the page
   (report_human) and --json (report_json). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "probe.h"
#include "render.h"

static struct probe_opts opts = {.encrypt = QCG_ENCRYPT_INTER_SITE};
static struct probe_run run;
static struct probe_peer peers[2];

static void add_rtt(const char *name, const char *endpoint, bool ok)
{
    struct probe_rtt *r = &run.site.rtt[run.site.nrtt++];
    snprintf(r->name, sizeof(r->name), "%s", name);
    snprintf(r->endpoint, sizeof(r->endpoint), "%s", endpoint);
    r->ok = ok;
    r->ms = 1.5;
    if (!ok)
        snprintf(r->why, sizeof(r->why), "connect: Network is unreachable");
}

static void works(struct probe_peer *p, enum qcg_technique t, int af, const char *address)
{
    p->tech[t].tried = p->tech[t].works = true;
    p->tech[t].setup_ms = 2.0;
    p->tech[t].family = af;
    snprintf(p->tech[t].address, sizeof(p->tech[t].address), "%s", address);
}

/* A dual-stack node of a NATed site (nata1 in the lab): IPv6 direct to open,
   only IPv4 techniques to fw. */
static void dual_stack(void)
{
    struct probe_site *s = &run.site;

    memset(&run, 0, sizeof(run));
    memset(peers, 0, sizeof(peers));
    run.opts = &opts;
    run.peers = peers;
    snprintf(s->info.node, sizeof(s->info.node), "nata1");
    snprintf(s->info.address, sizeof(s->info.address), "198.18.1.11");
    snprintf(s->info.cluster.name, sizeof(s->info.cluster.name), "nata");
    snprintf(s->info.cluster.kind, sizeof(s->info.cluster.kind), "nat");
    snprintf(s->info.reflector, sizeof(s->info.reflector), "203.0.113.10:7704");
    snprintf(s->addresses[0], sizeof(s->addresses[0]), "198.18.1.11");
    snprintf(s->addresses[1], sizeof(s->addresses[1]), "2001:db8:3::11");
    s->naddresses = 2;
    s->mapping = "endpoint-independent";
    s->in4.state = "filtered";
    s->in4.filtering = "dropped";
    snprintf(s->in4.why, sizeof(s->in4.why), "the reflector's SYN got no answer");
    add_rtt("frontend", "198.18.1.10:7701", true);
    add_rtt("broker", "203.0.113.10:7700", true);
    add_rtt("reflector", "203.0.113.10:7704", true);
    add_rtt("proxy", "[2001:db8::20]:7703", false);

    snprintf(peers[0].site, sizeof(peers[0].site), "open");
    peers[0].endpoint_ok = true;
    works(&peers[0], QCG_TECH_DIRECT, AF_INET6, "2001:db8:1::11");
    works(&peers[0], QCG_TECH_PROXY, AF_INET, "203.0.113.20");
    peers[0].chosen = QCG_TECH_DIRECT;
    peers[0].chosen_family = AF_INET6;
    snprintf(peers[1].site, sizeof(peers[1].site), "fw");
    peers[1].endpoint_ok = true;
    works(&peers[1], QCG_TECH_TRAVERSING, AF_INET, "198.51.100.75");
    peers[1].chosen = QCG_TECH_TRAVERSING;
    peers[1].chosen_family = AF_INET;
    run.npeers = 2;
}

static void test_dual_stack(void)
{
    dual_stack();
    char *j = render(report_json, &run);
    /* What was there stays (scripts read it), the families come on top. */
    CHECK_HAS(j, "\"address\":\"198.18.1.11\",\"addresses\":[\"198.18.1.11\",\"2001:db8:3::11\"]");
    CHECK_HAS(j, "\"inbound\":\"filtered\",\"inbound_filtering\":\"dropped\"");
    CHECK_HAS(j, "\"family\":\"ipv6\",\"address\":\"2001:db8:1::11\"");
    CHECK_HAS(j, "\"chosen_family\":\"ipv6\"");
    CHECK_HAS(j, "\"ipv4\":{\"addresses\":[\"198.18.1.11\"],\"none\":null,\"services\":["
                 "{\"to\":\"frontend\",\"endpoint\":\"198.18.1.10:7701\",\"reachable\":true}");
    CHECK_HAS(j, "\"inbound\":\"filtered\",\"inbound_filtering\":\"dropped\",\"inbound_why\":"
                 "\"the reflector's SYN got no answer\"");
    CHECK_HAS(j,
              "{\"site\":\"fw\",\"connected\":[\"traversing\"],\"chosen\":true,\"why_not\":null}");
    CHECK_HAS(j, "\"ipv6\":{\"addresses\":[\"2001:db8:3::11\"],\"none\":null,\"services\":["
                 "{\"to\":\"proxy\",\"endpoint\":\"[2001:db8::20]:7703\",\"reachable\":false}]");
    /* The reflector has no IPv6 address: IPv6's inbound was not measured, and says why. */
    CHECK_HAS(j, "\"inbound\":\"unknown\",\"inbound_filtering\":null,\"inbound_why\":\"not "
                 "measured: the reflector has no IPv6 address\"");
    CHECK_HAS(j, "{\"site\":\"open\",\"connected\":[\"direct\"],\"chosen\":true,\"why_not\":null}");
    CHECK_HAS(j, "{\"site\":\"fw\",\"connected\":[],\"chosen\":false,\"why_not\":\"every "
                 "connection went over IPv4: no IPv6 plan for this pair");
    free(j);

    char *h = render(report_human, &run);
    CHECK_HAS(h, "qcg-probe: node nata1 (198.18.1.11, 2001:db8:3::11) of site nata\n");
    CHECK_HAS(h, "\nper family\n  IPv4           address 198.18.1.11\n");
    CHECK_HAS(h, "reaches frontend 198.18.1.10:7701, broker 203.0.113.10:7700, reflector "
                 "203.0.113.10:7704\n                 inbound filtered (dropped)\n");
    CHECK_HAS(h, "                 to open: proxy\n                 to fw: traversing\n");
    CHECK_HAS(h, "  IPv6           address 2001:db8:3::11\n                 reaches proxy "
                 "[2001:db8::20]:7703 unreachable\n");
    CHECK_HAS(h, "inbound not measured: the reflector has no IPv6 address");
    CHECK_HAS(h, "                 to open: direct\n                 to fw: nothing: every "
                 "connection went over IPv4");
    free(h);
}

/* The same node with a reflector that has an IPv6 address: each family's
   dial-back says what its own firewall did. */
static void test_inbound_per_family(void)
{
    dual_stack();
    struct probe_site *s = &run.site;
    snprintf(s->info.reflector6, sizeof(s->info.reflector6), "[2001:db8::10]:7704");
    s->in6.state = "filtered";
    s->in6.filtering = "reset";
    snprintf(s->in6.why, sizeof(s->in6.why), "the reflector's SYN was answered by a TCP reset");
    char *j = render(report_json, &run);
    CHECK_HAS(j, "\"inbound\":\"filtered\",\"inbound_filtering\":\"dropped\",\"inbound_why\":"
                 "\"the reflector's SYN got no answer\",\"peers\"");
    CHECK_HAS(j, "\"inbound\":\"filtered\",\"inbound_filtering\":\"reset\",\"inbound_why\":"
                 "\"the reflector's SYN was answered by a TCP reset\",\"peers\"");
    free(j);
    char *h = render(report_human, &run);
    CHECK_HAS(h, "[2001:db8::20]:7703 unreachable\n                 inbound filtered (reset)\n");
    free(h);
}

/* An IPv4-only node: IPv6 is "none", in words, and nothing is claimed of it. */
static void test_no_ipv6(void)
{
    dual_stack();
    run.site.naddresses = 1;
    run.site.nrtt = 3;
    peers[0].tech[QCG_TECH_DIRECT].family = AF_INET;
    peers[0].chosen_family = AF_INET;

    char *h = render(report_human, &run);
    CHECK_HAS(h, "qcg-probe: node nata1 (198.18.1.11) of site nata\n");
    CHECK_HAS(h, "  IPv6           none: this node has no IPv6 address (the helper's `address`)\n");
    CHECK(strstr(strstr(h, "  IPv6 "), "to open") == NULL);
    free(h);
    char *j = render(report_json, &run);
    CHECK_HAS(j, "\"ipv6\":{\"addresses\":[],\"none\":\"this node has no IPv6 address\","
                 "\"services\":[],\"inbound\":\"unknown\"");
    CHECK_HAS(j, "{\"site\":\"open\",\"connected\":[],\"chosen\":false,\"why_not\":\"this node "
                 "has no IPv6 address\"}");
    CHECK_HAS(j, "{\"site\":\"open\",\"connected\":[\"direct\",\"proxy\"],\"chosen\":true");
    free(j);
}

static void test_endpoints(void)
{
    CHECK_EQ(family_of_endpoint("203.0.113.10:7704"), AF_INET);
    CHECK_EQ(family_of_endpoint("[2001:db8::10]:7700"), AF_INET6);
    CHECK_EQ(family_of_endpoint("https://[2001:db8::10]:7700/"), AF_INET6);
    CHECK_EQ(family_of_endpoint("https://198.18.1.10:7701/"), AF_INET);
    CHECK_EQ(family_of_endpoint("2001:db8::10:7700"), 0); /* no brackets: not an endpoint */
    CHECK_EQ(family_of_endpoint(""), 0);
}

/* The far end of a connection to a dual-stack listener from 127.0.0.1: the
   accepted socket's peer is ::ffff:127.0.0.1, which is that IPv4 host. */
static void test_socket(void)
{
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
    socklen_t len = sizeof(sa);
    int off = 0, l = socket(AF_INET6, SOCK_STREAM, 0);
    if (l < 0) {
        printf("probe-family: no IPv6 here, the socket check skipped\n");
        return;
    }
    CHECK(setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)) == 0);
    CHECK(bind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    CHECK(listen(l, 1) == 0);
    CHECK(getsockname(l, (struct sockaddr *)&sa, &len) == 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = sa.sin6_port};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(connect(c, (struct sockaddr *)&to, sizeof(to)) == 0);
    int a = accept(l, NULL, NULL);
    int af = 0;
    char addr[LOCAL_ADDR_MAX];
    CHECK(family_of_socket(a, &af, addr, sizeof(addr)) == 0);
    CHECK_EQ(af, AF_INET);
    CHECK_STR(addr, "127.0.0.1");
    CHECK(family_of_socket(c, &af, addr, sizeof(addr)) == 0);
    CHECK_EQ(af, AF_INET);
    close(a);
    close(c);
    close(l);
}

int main(void)
{
    test_dual_stack();
    test_inbound_per_family();
    test_no_ipv6();
    test_endpoints();
    test_socket();
    return check_result("probe-family");
}
