/* This node's site as the grid sees it: the helper's view, then what two
   observers (the broker's reflector and a proxy) see of connections from here,
   whether unsolicited inbound TCP gets in, and round trips. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "address.h"
#include "probe.h"

#define PROBE_RTT_SAMPLES 3
#define STEP_TIMEOUT_MS 3000
/* The reflector waits up to 2 s for its dial (REFLECTOR_DIAL_TIMEOUT_MS). */
#define DIAL_ANSWER_TIMEOUT_MS 5000
#define HELPER_TIMEOUT_MS 15000

/* "addr:port" or "[v6]:port" into its parts.  0 or -1. */
static int split_endpoint(const char *text, char *addr, size_t alen, int *port)
{
    char why[200];
    return hostport_parse(text, false, addr, alen, port, why, sizeof(why));
}

/* "https://198.18.1.10:7701/" into "198.18.1.10:7701" ("[v6]:port").  0 or -1. */
static int url_endpoint(const char *url, char *out, size_t len)
{
    char host[256], why[200];
    int port, n;
    if (url_hostport(url, host, sizeof(host), &port, why, sizeof(why)) < 0)
        return -1;
    n = hostport_format(host, port, out, len);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median TCP handshake time to an endpoint: what a round trip costs. */
static void measure_rtt(struct probe_rtt *r, const char *local_addr, double deadline_ms)
{
    char addr[LOCAL_ADDR_MAX];
    double samples[PROBE_RTT_SAMPLES];
    int port, n = 0;

    if (split_endpoint(r->endpoint, addr, sizeof(addr), &port) < 0) {
        snprintf(r->why, sizeof(r->why), "cannot read the endpoint '%s'", r->endpoint);
        return;
    }
    for (int i = 0; i < PROBE_RTT_SAMPLES; i++) {
        int left = probe_left_ms(deadline_ms);
        if (left == 0)
            break;
        int fd = probe_connect(local_addr, 0, addr, port,
                               left < STEP_TIMEOUT_MS ? left : STEP_TIMEOUT_MS, &samples[n], NULL,
                               r->why, sizeof(r->why));
        if (fd < 0)
            break;
        close(fd);
        n++;
    }
    if (n < PROBE_RTT_SAMPLES)
        return;
    qsort(samples, (size_t)n, sizeof(double), compare_double);
    r->ok = true;
    r->ms = samples[n / 2];
    r->why[0] = '\0';
}

static void add_rtt(struct probe_site *s, const char *name, const char *endpoint)
{
    if (s->nrtt >= PROBE_RTT_MAX || endpoint[0] == '\0')
        return;
    struct probe_rtt *r = &s->rtt[s->nrtt++];
    snprintf(r->name, sizeof(r->name), "%s", name);
    snprintf(r->endpoint, sizeof(r->endpoint), "%s", endpoint);
}

/* "MAPPED <addr> <port>" from an observer, for a connection from local_port. */
static void observe(struct probe_mapping *m, const struct probe_site *s, const char *request,
                    size_t reqlen, double deadline_ms)
{
    char addr[LOCAL_ADDR_MAX], line[256];
    int port, p;
    double ms;

    if (split_endpoint(m->endpoint, addr, sizeof(addr), &port) < 0) {
        snprintf(m->why, sizeof(m->why), "cannot read the endpoint '%s'", m->endpoint);
        return;
    }
    int left = probe_left_ms(deadline_ms);
    int fd = probe_connect(s->info.address, m->local_port, addr, port,
                           left < STEP_TIMEOUT_MS ? left : STEP_TIMEOUT_MS, &ms, NULL, m->why,
                           sizeof(m->why));
    if (fd < 0)
        return;
    if (probe_exchange_line(fd, request, reqlen, line, sizeof(line), STEP_TIMEOUT_MS, m->why,
                            sizeof(m->why)) == 0) {
        if (probe_mapped_parse(line, m->addr, sizeof(m->addr), &p) == 0) {
            m->port = p;
            m->ok = true;
        } else {
            snprintf(m->why, sizeof(m->why), "unexpected answer '%.80s'", line);
        }
    }
    close(fd);
}

/* A free port of this node: bound once with port 0 and released. */
static int pick_port(const char *local_addr)
{
    char why[160];
    int port = -1;
    int fd = probe_listen(local_addr, 0, &port, why, sizeof(why));
    if (fd < 0)
        return -1;
    close(fd);
    return port;
}

/* The first proxy endpoint of family af (the broker lists each proxy's
   addresses one after the other), or NULL. */
static const char *proxy_of_family(const struct probe_site *s, int af)
{
    for (uint32_t i = 0; i < s->info.proxies && i < LOCAL_PROXIES_MAX; i++)
        if (family_of_endpoint(s->info.proxy[i]) == af)
            return s->info.proxy[i];
    return NULL;
}

static void check_mapping(const struct probe_opts *o, struct probe_site *s, double deadline_ms)
{
    static const char map_line[] = "MAP\n";
    char qcgm[4 + 128] = "QCGM";
    int p1 = pick_port(s->info.address), p2 = pick_port(s->info.address);

    s->mapping = "unknown";
    s->port_preserving = -1;
    if (s->info.reflector[0] == '\0') {
        snprintf(s->mapping_why, sizeof(s->mapping_why),
                 "the broker has no reflector configured: no observer to ask");
        return;
    }
    if (p1 < 0 || p2 < 0) {
        snprintf(s->mapping_why, sizeof(s->mapping_why), "no free local port on %s",
                 s->info.address);
        return;
    }
    /* The reflector, then a proxy from the same local port (RFC 5780's test:
       does the mapping depend on the destination?), then the reflector from
       another port (does the NAT keep ports, again?). */
    probe_progress(o, "asking the reflector %s for the mapping", s->info.reflector);
    struct probe_mapping *m = &s->map[s->nmap++];
    snprintf(m->observer, sizeof(m->observer), "reflector");
    snprintf(m->endpoint, sizeof(m->endpoint), "%s", s->info.reflector);
    m->local_port = p1;
    observe(m, s, map_line, strlen(map_line), deadline_ms);
    const char *observer = proxy_of_family(s, family_of_endpoint(s->info.reflector));
    if (observer != NULL) {
        probe_progress(o, "asking the proxy %s for the mapping", observer);
        m = &s->map[s->nmap++];
        snprintf(m->observer, sizeof(m->observer), "proxy");
        snprintf(m->endpoint, sizeof(m->endpoint), "%s", observer);
        m->local_port = p1;
        observe(m, s, qcgm, sizeof(qcgm), deadline_ms);
    }
    m = &s->map[s->nmap++];
    snprintf(m->observer, sizeof(m->observer), "reflector");
    snprintf(m->endpoint, sizeof(m->endpoint), "%s", s->info.reflector);
    m->local_port = p2;
    observe(m, s, map_line, strlen(map_line), deadline_ms);

    const struct probe_mapping *r1 = &s->map[0], *px = s->nmap == 3 ? &s->map[1] : NULL,
                               *r2 = &s->map[s->nmap - 1];
    if (!r1->ok) {
        snprintf(s->mapping_why, sizeof(s->mapping_why), "the reflector did not answer: %s",
                 r1->why);
        return;
    }
    snprintf(s->public_address, sizeof(s->public_address), "%s", r1->addr);
    bool kept = r1->port == r1->local_port && (!r2->ok || r2->port == r2->local_port);
    if (strcmp(r1->addr, s->info.address) == 0 && kept) {
        s->mapping = "none";
        s->port_preserving = 1;
        snprintf(s->mapping_why, sizeof(s->mapping_why),
                 "the reflector sees this node's own address and port");
        return;
    }
    s->port_preserving = kept ? 1 : 0;
    if (px == NULL || !px->ok) {
        snprintf(s->mapping_why, sizeof(s->mapping_why),
                 "a NAT, but only one observer answered (%.120s): mapping not compared",
                 px ? px->why : "no proxy configured");
        return;
    }
    if (strcmp(px->addr, r1->addr) == 0 && px->port == r1->port) {
        s->mapping = "endpoint-independent";
        snprintf(s->mapping_why, sizeof(s->mapping_why),
                 "local port %d appeared as %s:%d to both the reflector and the proxy",
                 r1->local_port, r1->addr, r1->port);
    } else {
        s->mapping = "endpoint-dependent";
        snprintf(s->mapping_why, sizeof(s->mapping_why),
                 "local port %d appeared as %s:%d to the reflector but %s:%d to the proxy",
                 r1->local_port, r1->addr, r1->port, px->addr, px->port);
    }
}

/* The reflector at `reflector` dials back to the address it sees us from
   (we connect from `local`), at a port we listen on: does unsolicited
   inbound TCP get in? */
static void check_inbound(const struct probe_opts *o, const char *reflector, const char *local,
                          struct probe_inbound *in, struct capture *cap, double deadline_ms)
{
    char addr[LOCAL_ADDR_MAX], req[32], line[256], a[LOCAL_ADDR_MAX], result[16];
    int port, p;
    double ms;

    in->state = "unknown";
    in->syns_seen = -1;
    if (reflector[0] == '\0' || split_endpoint(reflector, addr, sizeof(addr), &port) < 0) {
        snprintf(in->why, sizeof(in->why), "no reflector to dial back");
        return;
    }
    int lfd = probe_listen(local, 0, &in->port, in->why, sizeof(in->why));
    if (lfd < 0)
        return;
    probe_progress(o, "asking the reflector to dial back to port %d", in->port);
    int left = probe_left_ms(deadline_ms);
    int fd = probe_connect(local, 0, addr, port, left < STEP_TIMEOUT_MS ? left : STEP_TIMEOUT_MS,
                           &ms, NULL, in->why, sizeof(in->why));
    if (fd < 0) {
        close(lfd);
        return;
    }
    int n = snprintf(req, sizeof(req), "DIAL %d\n", in->port);
    int rc = probe_exchange_line(fd, req, (size_t)n, line, sizeof(line), DIAL_ANSWER_TIMEOUT_MS,
                                 in->why, sizeof(in->why));
    close(fd);
    int accepted = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (accepted >= 0)
        close(accepted);
    close(lfd);
    if (cap != NULL)
        in->syns_seen = capture_syns_to(cap, in->port);
    if (rc < 0)
        return;
    if (probe_dialed_parse(line, a, sizeof(a), &p, result, sizeof(result)) < 0) {
        snprintf(in->why, sizeof(in->why), "the reflector answered '%.80s'", line);
        return;
    }
    if (strcmp(result, "open") == 0) {
        in->state = "open";
        snprintf(in->why, sizeof(in->why), "the reflector's connection to %s:%d was accepted", a,
                 p);
    } else if (strcmp(result, "reset") == 0) {
        in->state = "filtered";
        in->filtering = "reset";
        snprintf(in->why, sizeof(in->why),
                 "the reflector's SYN to %s:%d was answered by a TCP reset", a, p);
    } else if (strcmp(result, "icmp") == 0) {
        in->state = "filtered";
        in->filtering = "icmp";
        snprintf(in->why, sizeof(in->why),
                 "the reflector's SYN to %s:%d was answered by an ICMP error", a, p);
    } else if (strcmp(result, "refused") == 0) {
        /* A reflector that does not tell the two apart. */
        in->state = "filtered";
        in->filtering = "rejected";
        snprintf(in->why, sizeof(in->why),
                 "the reflector's SYN to %s:%d was answered by a reset or an ICMP error (this "
                 "reflector does not say which)",
                 a, p);
    } else if (strcmp(result, "timeout") == 0) {
        in->state = "filtered";
        in->filtering = "dropped";
        snprintf(in->why, sizeof(in->why),
                 "the reflector's SYN to %s:%d got no answer (silently dropped)", a, p);
    } else {
        snprintf(in->why, sizeof(in->why), "the reflector answered '%.80s'", line);
    }
    if (in->syns_seen > 0 && strcmp(in->state, "open") != 0) {
        size_t used = strlen(in->why);
        snprintf(in->why + used, sizeof(in->why) - used,
                 "; the SYN reached this node: a filter on the node itself");
    }
}

int site_addresses_of(const struct probe_site *s, int af, const char *out[QCG_NODE_ADDRS])
{
    int n = 0;
    for (int i = 0; i < s->naddresses; i++)
        if (address_family(s->addresses[i]) == af)
            out[n++] = s->addresses[i];
    return n;
}

/* The node's first address of family af, or NULL. */
static const char *first_address(const struct probe_site *s, int af)
{
    const char *addr[QCG_NODE_ADDRS];
    return site_addresses_of(s, af, addr) > 0 ? addr[0] : NULL;
}

/* The same over IPv6, from the node's first IPv6 address (the capture
   watches IPv4 only). */
static void check_inbound6(const struct probe_opts *o, struct probe_site *s, double deadline_ms)
{
    const char *local = first_address(s, AF_INET6);
    s->in6.state = "unknown";
    s->in6.syns_seen = -1;
    if (local == NULL) {
        snprintf(s->in6.why, sizeof(s->in6.why), "this node has no IPv6 address");
        return;
    }
    if (s->info.reflector6[0] == '\0') {
        snprintf(s->in6.why, sizeof(s->in6.why), "the reflector has no IPv6 address");
        return;
    }
    check_inbound(o, s->info.reflector6, local, &s->in6, NULL, deadline_ms);
}

/* open | firewalled | nat | symnat from what was observed; NULL when unsure. */
static const char *observed_kind(const struct probe_site *s)
{
    if (strcmp(s->mapping, "none") == 0) {
        if (strcmp(s->in4.state, "open") == 0)
            return "open";
        return strcmp(s->in4.state, "filtered") == 0 ? "firewalled" : NULL;
    }
    /* In plans, "nat" promises that the public port is the local one (the
       reflector holds punches to it); anything else is unpredictable. */
    if (strcmp(s->mapping, "endpoint-independent") == 0)
        return s->port_preserving == 1 ? "nat" : "symnat";
    if (strcmp(s->mapping, "endpoint-dependent") == 0)
        return "symnat";
    return NULL;
}

static void add_mismatch(struct probe_site *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add_mismatch(struct probe_site *s, const char *fmt, ...)
{
    va_list ap;
    if (s->nmismatch >= PROBE_MISMATCH_MAX)
        return;
    va_start(ap, fmt);
    vsnprintf(s->mismatch[s->nmismatch++], sizeof(s->mismatch[0]), fmt, ap);
    va_end(ap);
}

static void compare_declared(struct probe_site *s)
{
    const struct local_cluster *c = &s->info.cluster;
    s->observed_kind = observed_kind(s);
    if (s->observed_kind != NULL && strcmp(s->observed_kind, c->kind) != 0) {
        const char *because = strcmp(s->mapping, "none") != 0 ? s->mapping_why : s->in4.why;
        add_mismatch(s, "site %s declares %s, but this node observed %s: %s", c->name, c->kind,
                     s->observed_kind, because);
    }
    bool natted = strcmp(s->mapping, "none") != 0 && s->public_address[0] != '\0';
    if (natted && c->public_address[0][0] != '\0') {
        bool listed = false;
        for (int i = 0; i < LOCAL_PUBLIC_MAX; i++)
            listed = listed || strcmp(c->public_address[i], s->public_address) == 0;
        if (!listed)
            add_mismatch(s,
                         "site %s declares public address %s, but the reflector sees this node "
                         "as %s",
                         c->name, c->public_address[0], s->public_address);
    }
}

/* Tells the broker what was seen (root only, the helper checks). */
static void report_observation(struct probe_site *s)
{
    struct local_observed ob;
    int code;
    memset(&ob, 0, sizeof(ob));
    if (s->observed_kind == NULL) {
        snprintf(s->report_why, sizeof(s->report_why), "nothing certain to report");
        return;
    }
    snprintf(ob.kind, sizeof(ob.kind), "%s", s->observed_kind);
    snprintf(ob.public_address, sizeof(ob.public_address), "%s", s->public_address);
    ob.port_preserving = s->port_preserving;
    snprintf(ob.mapping, sizeof(ob.mapping), "%s", s->mapping);
    snprintf(ob.inbound, sizeof(ob.inbound), "%s",
             s->in4.filtering                    ? s->in4.filtering
             : strcmp(s->in4.state, "open") == 0 ? "open"
                                                 : "unknown");
    int t = helper_ask(s->helper_socket, LOCAL_OBSERVED, &ob, NULL, 0, HELPER_TIMEOUT_MS, &code,
                       s->report_why, sizeof(s->report_why));
    s->reported = t == LOCAL_OK;
    if (s->reported)
        s->report_why[0] = '\0';
    else if (t == LOCAL_ERROR && code == QCG_EDENIED)
        /* A user's probe: everything above was measured all the same. */
        snprintf(s->report_why, sizeof(s->report_why),
                 "a user's probe measures all of the above, but only root's (or the helper's "
                 "user's) tells the broker what the site looks like (qcg-broker --grid)");
}

/* Every address of this node, from the helper's HELLO_OK; the SITE answer's
   one when the helper does not say more. */
static void site_addresses(const struct probe_opts *o, struct probe_site *s)
{
    struct local_hello_ok ok;
    char why[LOCAL_MESSAGE_MAX];

    snprintf(s->addresses[0], sizeof(s->addresses[0]), "%s", s->info.address);
    s->naddresses = 1;
    if (helper_hello(o->helper_socket, &ok, HELPER_TIMEOUT_MS, why, sizeof(why)) < 0)
        return;
    for (int i = 0; i < QCG_NODE_ADDRS - 1 && ok.other_address[i][0]; i++) {
        if (address_equal(ok.other_address[i], s->info.address))
            continue;
        snprintf(s->addresses[s->naddresses], sizeof(s->addresses[0]), "%s", ok.other_address[i]);
        s->naddresses++;
    }
}

int site_probe(const struct probe_opts *o, struct probe_site *s, double deadline_ms)
{
    int code;
    char endpoint[LOCAL_ENDPOINT_MAX];
    struct local_status st;

    memset(s, 0, sizeof(*s));
    s->helper_socket = o->helper_socket;
    s->mapping = "unknown";
    s->in4.state = s->in6.state = "unknown";
    s->port_preserving = -1;
    s->in4.syns_seen = s->in6.syns_seen = -1;
    s->hairpin = -1;
    probe_progress(o, "asking the helper at %s about this site", o->helper_socket);
    int t = helper_ask(o->helper_socket, LOCAL_SITE, NULL, &s->info, sizeof(s->info),
                       HELPER_TIMEOUT_MS, &code, s->upstream_why, sizeof(s->upstream_why));
    if (t == LOCAL_SITE_OK) {
        s->helper_ok = s->upstream_ok = true;
        site_addresses(o, s);
        punching_ask(o, s, deadline_ms);
        return 0;
    }
    if (t != LOCAL_ERROR)
        return -1; /* no helper */
    s->helper_ok = true;
    /* The helper is there but the grid services did not answer: which one?
       Its status names the frontend, which we can try ourselves. */
    char why[LOCAL_MESSAGE_MAX];
    if (helper_ask(o->helper_socket, LOCAL_STATUS, NULL, &st, sizeof(st), HELPER_TIMEOUT_MS, &code,
                   why, sizeof(why)) == LOCAL_STATUS_OK &&
        url_endpoint(st.frontend, endpoint, sizeof(endpoint)) == 0) {
        snprintf(s->info.frontend, sizeof(s->info.frontend), "%s", st.frontend);
        snprintf(s->info.node, sizeof(s->info.node), "%s", st.node);
        snprintf(s->info.cluster.name, sizeof(s->info.cluster.name), "%s", st.cluster);
        add_rtt(s, "frontend", endpoint);
        measure_rtt(&s->rtt[0], "0.0.0.0", deadline_ms);
    }
    return -1;
}

/* The proxies' endpoints in the families this node has an address in (an
   IPv6-only node checks the IPv6 ones); every one when none is of those
   (an older broker names one address a proxy): what fails then says so. */
static void add_proxy_rtts(struct probe_site *s)
{
    int usable = 0;
    for (int pass = 0; pass < 2 && usable == 0; pass++) {
        for (uint32_t i = 0; i < s->info.proxies && i < LOCAL_PROXIES_MAX; i++) {
            if (pass == 0 && first_address(s, family_of_endpoint(s->info.proxy[i])) == NULL)
                continue;
            add_rtt(s, "proxy", s->info.proxy[i]);
            usable++;
        }
    }
}

/* The measurements, once the helper answered SITE. */
void site_measure(const struct probe_opts *o, struct probe_site *s, struct capture *cap,
                  double deadline_ms)
{
    char endpoint[LOCAL_ENDPOINT_MAX];

    check_mapping(o, s, deadline_ms);
    hairpin_probe(o, s, deadline_ms);
    check_inbound(o, s->info.reflector, s->info.address, &s->in4, cap, deadline_ms);
    check_inbound6(o, s, deadline_ms);
    portmap_probe(o, s, deadline_ms);
    compare_declared(s);
    if (url_endpoint(s->info.frontend, endpoint, sizeof(endpoint)) == 0)
        add_rtt(s, "frontend", endpoint);
    if (url_endpoint(s->info.broker, endpoint, sizeof(endpoint)) == 0)
        add_rtt(s, "broker", endpoint);
    add_rtt(s, "reflector", s->info.reflector);
    if (first_address(s, AF_INET6) != NULL)
        add_rtt(s, "reflector", s->info.reflector6);
    add_proxy_rtts(s);
    for (int i = 0; i < s->nrtt; i++) {
        const char *local = first_address(s, family_of_endpoint(s->rtt[i].endpoint));
        probe_progress(o, "round trip to the %s %s", s->rtt[i].name, s->rtt[i].endpoint);
        measure_rtt(&s->rtt[i], local != NULL ? local : s->info.address, deadline_ms);
    }
    if (o->report)
        report_observation(s);
}
