/* What this site's router offers besides NAT and filtering: hair-pinning (a
   connection from inside to the site's own public mapping comes back in) and
   port-mapping protocols (NAT-PMP, PCP, UPnP IGD) on the default gateway.
   qcg-connect uses neither: same-site pairs connect on the site's own
   addresses, and no inbound port is ever opened.  They are reported because
   an admin comparing with other tools (tailscale netcheck) expects them, and
   because a router that offers UPnP opens ports on request of any host of the
   site, which an admin may want to know. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "probe.h"

#define HAIRPIN_CONNECT_MS 2000
#define HAIRPIN_ACCEPT_MS 500
#define PORTMAP_WAIT_MS 800
#define NATPMP_PORT 5351 /* NAT-PMP and PCP share it (RFC 6886, 6887) */
#define SSDP_PORT 1900
#define SSDP_GROUP "239.255.255.250"

/* The default gateway of this node's IPv4 routing table (/proc/net/route).
   0, or -1 when there is none. */
static int default_gateway(char *out, size_t len)
{
    char line[256];
    int found = -1;
    FILE *f = fopen("/proc/net/route", "r");
    if (f == NULL)
        return -1;
    while (found < 0 && fgets(line, sizeof(line), f) != NULL) {
        char ifname[64];
        unsigned long dest, gw;
        unsigned flags;
        if (sscanf(line, "%63s %lx %lx %x", ifname, &dest, &gw, &flags) != 4)
            continue; /* the header line */
        /* RTF_UP (1) and RTF_GATEWAY (2), destination 0.0.0.0 */
        if (dest != 0 || (flags & 3) != 3)
            continue;
        struct in_addr a = {.s_addr = (in_addr_t)gw}; /* already in network order */
        if (inet_ntop(AF_INET, &a, out, (socklen_t)len) != NULL)
            found = 0;
    }
    fclose(f);
    return found;
}

void router_hairpin(const struct probe_opts *o, struct probe_site *s, double deadline_ms)
{
    const struct probe_mapping *m = s->nmap > 0 ? &s->map[0] : NULL;

    s->hairpin = -1;
    if (strcmp(s->mapping, "none") == 0) {
        snprintf(s->hairpin_why, sizeof(s->hairpin_why),
                 "no NAT: the node's own address is its public one");
        return;
    }
    if (m == NULL || !m->ok) {
        snprintf(s->hairpin_why, sizeof(s->hairpin_why), "no mapping observed to connect back to");
        return;
    }
    probe_progress(o, "connecting to this node's own public mapping %s:%d", m->addr, m->port);
    int lfd =
        probe_listen(s->info.address, m->local_port, NULL, s->hairpin_why, sizeof(s->hairpin_why));
    if (lfd < 0)
        return;
    int left = probe_left_ms(deadline_ms);
    enum probe_outcome outcome;
    char why[160];
    int fd = probe_connect(s->info.address, 0, m->addr, m->port,
                           left < HAIRPIN_CONNECT_MS ? left : HAIRPIN_CONNECT_MS, NULL, &outcome,
                           why, sizeof(why));
    if (outcome == PROBE_CONNECTED) {
        /* Connected: to this node's listener, or to something else answering
           on the router's public address? */
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        int afd = poll(&p, 1, HAIRPIN_ACCEPT_MS) > 0 ? accept4(lfd, NULL, NULL, SOCK_CLOEXEC) : -1;
        s->hairpin = afd >= 0 ? 1 : 0;
        if (afd >= 0) {
            snprintf(s->hairpin_why, sizeof(s->hairpin_why),
                     "a connection to %s:%d came back to local port %d", m->addr, m->port,
                     m->local_port);
            close(afd);
        } else {
            snprintf(s->hairpin_why, sizeof(s->hairpin_why),
                     "%s:%d accepted, but not on this node's port %d: the router itself "
                     "answers there",
                     m->addr, m->port, m->local_port);
        }
        close(fd);
    } else if (outcome == PROBE_REFUSED) {
        s->hairpin = 0;
        snprintf(s->hairpin_why, sizeof(s->hairpin_why),
                 "a connection to %s:%d (local port %d's mapping) was refused", m->addr, m->port,
                 m->local_port);
    } else if (outcome == PROBE_NO_ANSWER) {
        s->hairpin = 0;
        snprintf(s->hairpin_why, sizeof(s->hairpin_why),
                 "a connection to %s:%d (local port %d's mapping) got no answer in %d ms", m->addr,
                 m->port, m->local_port, HAIRPIN_CONNECT_MS);
    } else {
        snprintf(s->hairpin_why, sizeof(s->hairpin_why), "%s", why);
    }
    close(lfd);
}

/* --- port-mapping protocols ----------------------------------------------- */

enum { PM_NATPMP, PM_PCP, PM_UPNP, PM_UPNP_GROUP, PM_SOCKETS };

/* A UDP socket from this node's address to addr:port (connected, so that an
   ICMP port unreachable comes back as ECONNREFUSED).  -1 on error. */
static int udp_to(const char *local, const char *addr, int port)
{
    struct sockaddr_in from, to;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    if (probe_sockaddr(local, 0, &from) < 0 ||
        bind(fd, (struct sockaddr *)&from, sizeof(from)) < 0 ||
        probe_sockaddr(addr, port, &to) < 0 ||
        connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A PCP ANNOUNCE request (RFC 6887 7.1, 8.1): version 2, opcode 0, lifetime
   0, the client's address as an IPv4-mapped IPv6 address. */
static size_t pcp_announce(const char *local, unsigned char out[24])
{
    struct in_addr a;
    memset(out, 0, 24);
    out[0] = 2;
    out[18] = out[19] = 0xff;
    if (inet_pton(AF_INET, local, &a) == 1)
        memcpy(out + 20, &a, 4);
    return 24;
}

/* What one answer says; true when it is a positive answer of its protocol. */
static bool portmap_answer(int which, const unsigned char *b, ssize_t n, char *detail, size_t dlen)
{
    if (which == PM_NATPMP) {
        /* version 0, opcode 128 (reply to 0), result, epoch, external address */
        if (n < 12 || b[0] != 0 || b[1] != 128)
            return false;
        unsigned result = (unsigned)b[2] << 8 | b[3];
        char ext[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, b + 8, ext, sizeof(ext));
        /* RFC 6886 3.5 */
        static const char *const results[] = {"success",          "unsupported version",
                                              "not authorized",   "network failure",
                                              "out of resources", "unsupported opcode"};
        if (result == 0)
            snprintf(detail, dlen, "external address %s", ext);
        else
            snprintf(detail, dlen, "answered, result %u (%s)", result,
                     result < sizeof(results) / sizeof(results[0]) ? results[result] : "unknown");
        return true;
    }
    if (which == PM_PCP) {
        /* version 2, R bit + opcode ANNOUNCE; a NAT-PMP-only server answers
           version 0 (unsupported version). */
        if (n < 24 || b[0] != 2 || b[1] != 0x80)
            return false;
        snprintf(detail, dlen, "answered ANNOUNCE, result %u%s", b[3],
                 b[3] == 0 ? " (success)" : "");
        return true;
    }
    /* SSDP: "HTTP/1.1 200 OK" with the device's LOCATION. */
    if (n < 12 || memcmp(b, "HTTP/1.1 200", 12) != 0)
        return false;
    char text[1024];
    size_t len = (size_t)n < sizeof(text) - 1 ? (size_t)n : sizeof(text) - 1;
    memcpy(text, b, len);
    text[len] = '\0';
    char *loc = strcasestr(text, "\nlocation:");
    if (loc != NULL) {
        loc += 10;
        loc += strspn(loc, " \t");
        loc[strcspn(loc, "\r\n")] = '\0';
        snprintf(detail, dlen, "an Internet gateway device at %.200s", loc);
    } else {
        snprintf(detail, dlen, "an Internet gateway device answered");
    }
    return true;
}

void router_portmap(const struct probe_opts *o, struct probe_site *s, double deadline_ms)
{
    static const char msearch[] = "M-SEARCH * HTTP/1.1\r\n"
                                  "HOST: 239.255.255.250:1900\r\n"
                                  "MAN: \"ssdp:discover\"\r\n"
                                  "MX: 1\r\n"
                                  "ST: urn:schemas-upnp-org:device:InternetGatewayDevice:1\r\n"
                                  "\r\n";
    static const unsigned char natpmp[2] = {0, 0}; /* external address request */
    static const char *const names[] = {"nat-pmp", "pcp", "upnp"};
    unsigned char pcp[24], buf[1500];
    int fd[PM_SOCKETS];
    bool closed[PM_SOCKETS] = {false};

    for (int i = 0; i < PROBE_PORTMAP_PROTOCOLS; i++) {
        snprintf(s->portmap[i].name, sizeof(s->portmap[i].name), "%s", names[i]);
        s->portmap[i].offered = false;
        s->portmap[i].detail[0] = '\0';
    }
    if (default_gateway(s->gateway, sizeof(s->gateway)) < 0) {
        s->gateway[0] = '\0';
        for (int i = 0; i < PROBE_PORTMAP_PROTOCOLS; i++)
            snprintf(s->portmap[i].detail, sizeof(s->portmap[i].detail),
                     "no default gateway to ask");
        return;
    }
    probe_progress(o, "asking the gateway %s for NAT-PMP, PCP and UPnP", s->gateway);
    fd[PM_NATPMP] = udp_to(s->info.address, s->gateway, NATPMP_PORT);
    fd[PM_PCP] = udp_to(s->info.address, s->gateway, NATPMP_PORT);
    fd[PM_UPNP] = udp_to(s->info.address, s->gateway, SSDP_PORT);
    fd[PM_UPNP_GROUP] = udp_to(s->info.address, SSDP_GROUP, SSDP_PORT);
    if (fd[PM_NATPMP] >= 0)
        (void)send(fd[PM_NATPMP], natpmp, sizeof(natpmp), 0);
    if (fd[PM_PCP] >= 0)
        (void)send(fd[PM_PCP], pcp, pcp_announce(s->info.address, pcp), 0);
    for (int i = PM_UPNP; i <= PM_UPNP_GROUP; i++)
        if (fd[i] >= 0)
            (void)send(fd[i], msearch, sizeof(msearch) - 1, 0);

    int left = probe_left_ms(deadline_ms);
    double until = probe_now_ms() + (left < PORTMAP_WAIT_MS ? left : PORTMAP_WAIT_MS);
    for (;;) {
        struct pollfd p[PM_SOCKETS];
        int np = 0, map[PM_SOCKETS];
        for (int i = 0; i < PM_SOCKETS; i++) {
            int proto = i == PM_UPNP_GROUP ? PM_UPNP : i;
            if (fd[i] < 0 || closed[i] || s->portmap[proto].offered)
                continue;
            p[np] = (struct pollfd){.fd = fd[i], .events = POLLIN};
            map[np++] = i;
        }
        int wait = probe_left_ms(until);
        if (np == 0 || wait == 0 || poll(p, (nfds_t)np, wait) <= 0)
            break;
        for (int k = 0; k < np; k++) {
            if (p[k].revents == 0)
                continue;
            int i = map[k], proto = i == PM_UPNP_GROUP ? PM_UPNP : i;
            ssize_t n = recv(fd[i], buf, sizeof(buf), 0);
            if (n < 0 && errno == ECONNREFUSED) {
                closed[i] = true; /* ICMP port unreachable: nothing listens */
                continue;
            }
            if (n > 0)
                s->portmap[proto].offered = portmap_answer(proto, buf, n, s->portmap[proto].detail,
                                                           sizeof(s->portmap[proto].detail));
        }
    }
    for (int i = 0; i < PROBE_PORTMAP_PROTOCOLS; i++) {
        struct probe_portmap *pm = &s->portmap[i];
        if (pm->offered)
            continue;
        bool refused =
            closed[i] && (i != PM_UPNP || closed[PM_UPNP_GROUP] || fd[PM_UPNP_GROUP] < 0);
        int port = i == PM_UPNP ? SSDP_PORT : NATPMP_PORT;
        if (fd[i] < 0)
            snprintf(pm->detail, sizeof(pm->detail), "could not ask %s:%d", s->gateway, port);
        else if (refused)
            snprintf(pm->detail, sizeof(pm->detail), "%s:%d/udp is closed (port unreachable)",
                     s->gateway, port);
        else if (i == PM_UPNP && closed[PM_UPNP])
            snprintf(pm->detail, sizeof(pm->detail),
                     "%s:%d/udp is closed (port unreachable); no answer to the SSDP multicast "
                     "in %d ms",
                     s->gateway, port, PORTMAP_WAIT_MS);
        else
            snprintf(pm->detail, sizeof(pm->detail), "no answer from %s:%d/udp in %d ms",
                     s->gateway, port, PORTMAP_WAIT_MS);
    }
    for (int i = 0; i < PM_SOCKETS; i++)
        if (fd[i] >= 0)
            close(fd[i]);
}
