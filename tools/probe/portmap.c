/* Port-mapping protocols on the default gateway: NAT-PMP (RFC 6886) and PCP
   (RFC 6887) on UDP 5351, UPnP IGD found by SSDP (UDP 1900, unicast to the
   gateway and multicast).  qcg-connect never asks a router to open a port;
   this is reported because a router that offers them opens ports on request
   of any host of its site (a finding for the admin), and because other
   connectivity tools report it. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "probe.h"

#define PORTMAP_PORT 5351 /* NAT-PMP and PCP share it */
#define SSDP_PORT 1900
#define SSDP_GROUP "239.255.255.250"
#define SSDP_MX_S 1
/* A device may wait up to MX seconds before it answers (UPnP 1.1, 1.3.3). */
#define PORTMAP_WAIT_MS (SSDP_MX_S * 1000 + 300)
/* NAT-PMP and PCP are sent again at these times (RFC 6886 3.1: from 250 ms
   on, doubling), in case a datagram is lost. */
static const int resend_ms[] = {0, 250, 750};

/* The interface that holds `address`, into ifname.  0 or -1. */
static int interface_of(const char *address, char *ifname, size_t len)
{
    struct ifaddrs *all, *i;
    struct in_addr want;
    int rc = -1;

    if (inet_pton(AF_INET, address, &want) != 1 || getifaddrs(&all) < 0)
        return -1;
    for (i = all; i != NULL && rc < 0; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET)
            continue;
        if (((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == want.s_addr &&
            strlen(i->ifa_name) < len) {
            snprintf(ifname, len, "%s", i->ifa_name);
            rc = 0;
        }
    }
    freeifaddrs(all);
    return rc;
}

/* The default gateway this node's address leaves through: the default
   route (/proc/net/route) of the address's interface with the lowest
   metric, else the lowest-metric one of any interface.  0, or -1 when there
   is none. */
static int default_gateway(const char *address, char *out, size_t len)
{
    char line[256], ifname[IF_NAMESIZE] = "";
    unsigned long best_metric = 0;
    int best_rank = -1; /* 1: on the address's interface, 0: elsewhere */
    FILE *f = fopen("/proc/net/route", "r");

    if (f == NULL)
        return -1;
    (void)interface_of(address, ifname, sizeof(ifname));
    while (fgets(line, sizeof(line), f) != NULL) {
        char iface[64];
        unsigned long dest, gw, refcnt, use, metric;
        unsigned flags;
        /* Iface Destination Gateway Flags RefCnt Use Metric Mask ... */
        if (sscanf(line, "%63s %lx %lx %x %lu %lu %lu", iface, &dest, &gw, &flags, &refcnt, &use,
                   &metric) != 7)
            continue;                      /* the header line */
        if (dest != 0 || (flags & 3) != 3) /* RTF_UP | RTF_GATEWAY, to 0.0.0.0 */
            continue;
        int rank = strcmp(iface, ifname) == 0 ? 1 : 0;
        if (rank < best_rank || (rank == best_rank && metric >= best_metric))
            continue;
        struct in_addr a = {.s_addr = (in_addr_t)gw}; /* network order already */
        if (inet_ntop(AF_INET, &a, out, (socklen_t)len) == NULL)
            continue;
        best_rank = rank;
        best_metric = metric;
    }
    fclose(f);
    return best_rank >= 0 ? 0 : -1;
}

/* Printable ASCII of what a device sent, for a terminal and for JSON. */
static void printable(char *dst, size_t dlen, const char *src, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && src[i] != '\0' && k + 1 < dlen; i++)
        dst[k++] = src[i] >= 0x20 && src[i] < 0x7f ? src[i] : '?';
    dst[k] = '\0';
}

static const char *natpmp_result(unsigned r)
{
    static const char *const names[] = {"success",          "unsupported version",
                                        "not authorized",   "network failure",
                                        "out of resources", "unsupported opcode"};
    return r < sizeof(names) / sizeof(names[0]) ? names[r] : "unknown result";
}

static const char *pcp_result(unsigned r)
{
    static const char *const names[] = {"success",
                                        "unsupported version",
                                        "not authorized",
                                        "malformed request",
                                        "unsupported opcode",
                                        "unsupported option",
                                        "malformed option",
                                        "network failure",
                                        "no resources",
                                        "unsupported protocol",
                                        "user exceeded quota",
                                        "cannot provide external",
                                        "address mismatch",
                                        "excessive remote peers"};
    return r < sizeof(names) / sizeof(names[0]) ? names[r] : "unknown result";
}

int portmap_parse(enum portmap_protocol proto, const unsigned char *b, size_t n, char *detail,
                  size_t dlen)
{
    switch (proto) {
    case PORTMAP_NATPMP:
        /* version 0, opcode 128 (the answer to 0), result; on success epoch
           and the external address (12 bytes); an error answer may be 8. */
        if (n >= 4 && b[0] == 0 && b[1] == 128) {
            unsigned r = (unsigned)b[2] << 8 | b[3];
            char ext[INET_ADDRSTRLEN];
            if (r == 0 && n >= 12 && inet_ntop(AF_INET, b + 8, ext, sizeof(ext)) != NULL) {
                snprintf(detail, dlen, "external address %s", ext);
                return 1;
            }
            snprintf(detail, dlen, "answered: result %u (%s)", r, natpmp_result(r));
            return 0;
        }
        /* A PCP-only server answers a version-0 request in PCP's format. */
        if (n >= 4 && b[0] == 2 && (b[1] & 0x80)) {
            snprintf(detail, dlen, "a PCP server answered: NAT-PMP is not offered (%s)",
                     pcp_result(b[3]));
            return 0;
        }
        return -1;
    case PORTMAP_PCP:
        /* version 2, the R bit with opcode ANNOUNCE (0), result in byte 3;
           every PCP response is at least 24 bytes. */
        if (n >= 24 && b[0] == 2 && b[1] == 0x80) {
            if (b[3] == 0) {
                snprintf(detail, dlen, "answered ANNOUNCE (success)");
                return 1;
            }
            snprintf(detail, dlen, "answered ANNOUNCE: result %u (%s)", b[3], pcp_result(b[3]));
            return 0;
        }
        /* A NAT-PMP-only server answers with its own "unsupported version". */
        if (n >= 4 && b[0] == 0 && (b[1] & 0x80)) {
            snprintf(detail, dlen, "a NAT-PMP server answered: PCP is not offered (%s)",
                     natpmp_result((unsigned)b[2] << 8 | b[3]));
            return 0;
        }
        return -1;
    case PORTMAP_UPNP: {
        static const char ok[] = "HTTP/1.1 200";
        char text[1024], loc[200];
        if (n < sizeof(ok) - 1 || memcmp(b, ok, sizeof(ok) - 1) != 0)
            return -1;
        size_t len = n < sizeof(text) - 1 ? n : sizeof(text) - 1;
        memcpy(text, b, len);
        text[len] = '\0';
        char *at = strcasestr(text, "\nlocation:");
        if (at == NULL) {
            snprintf(detail, dlen, "an Internet gateway device answered (no LOCATION)");
            return 1;
        }
        at += strlen("\nlocation:");
        at += strspn(at, " \t");
        printable(loc, sizeof(loc), at, strcspn(at, "\r\n"));
        snprintf(detail, dlen, "an Internet gateway device at %s", loc);
        return 1;
    }
    }
    return -1;
}

/* A PCP ANNOUNCE request (RFC 6887 7.1, 14.1): version 2, opcode 0,
   lifetime 0, the client's address as an IPv4-mapped IPv6 address. */
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

/* A UDP socket on the node's address; connected to addr:port when addr is
   not NULL (then an ICMP port unreachable comes back as ECONNREFUSED).  -1
   on error. */
static int udp_socket(const char *local, const char *addr, int port)
{
    struct sockaddr_in from, to;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    if (probe_sockaddr(local, 0, &from) < 0 ||
        bind(fd, (struct sockaddr *)&from, sizeof(from)) < 0 ||
        (addr != NULL && (probe_sockaddr(addr, port, &to) < 0 ||
                          connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0))) {
        close(fd);
        return -1;
    }
    return fd;
}

/* M-SEARCH for an IGD: unicast to the gateway (UPnP 1.1: HOST names it, no
   MX) and to the SSDP group (MX seconds to answer in). */
static void ssdp_search(int fd, const char *local, const char *gateway)
{
    static const char st[] = "ST: urn:schemas-upnp-org:device:InternetGatewayDevice:1\r\n";
    char msg[512];
    struct sockaddr_in to;
    struct in_addr ifaddr;
    unsigned char ttl = 2;

    int n = snprintf(msg, sizeof(msg),
                     "M-SEARCH * HTTP/1.1\r\nHOST: %s:%d\r\nMAN: \"ssdp:discover\"\r\n%s\r\n",
                     gateway, SSDP_PORT, st);
    if (probe_sockaddr(gateway, SSDP_PORT, &to) == 0)
        (void)sendto(fd, msg, (size_t)n, 0, (struct sockaddr *)&to, sizeof(to));
    if (inet_pton(AF_INET, local, &ifaddr) == 1)
        (void)setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &ifaddr, sizeof(ifaddr));
    (void)setsockopt(fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof(ttl));
    n = snprintf(msg, sizeof(msg),
                 "M-SEARCH * HTTP/1.1\r\nHOST: %s:%d\r\nMAN: \"ssdp:discover\"\r\nMX: %d\r\n%s\r\n",
                 SSDP_GROUP, SSDP_PORT, SSDP_MX_S, st);
    if (probe_sockaddr(SSDP_GROUP, SSDP_PORT, &to) == 0)
        (void)sendto(fd, msg, (size_t)n, 0, (struct sockaddr *)&to, sizeof(to));
}

static void portmap_set(struct probe_portmap *pm, int offered, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void portmap_set(struct probe_portmap *pm, int offered, const char *fmt, ...)
{
    va_list ap;
    pm->offered = offered;
    va_start(ap, fmt);
    vsnprintf(pm->detail, sizeof(pm->detail), fmt, ap);
    va_end(ap);
}

void portmap_probe(const struct probe_opts *o, struct probe_site *s, double deadline_ms)
{
    static const char *const names[PROBE_PORTMAP_PROTOCOLS] = {"nat-pmp", "pcp", "upnp"};
    static const unsigned char natpmp[2] = {0, 0}; /* external address request */
    unsigned char pcp[24], buf[1500];
    int fd[PROBE_PORTMAP_PROTOCOLS];
    bool settled[PROBE_PORTMAP_PROTOCOLS] = {false};

    for (int i = 0; i < PROBE_PORTMAP_PROTOCOLS; i++) {
        snprintf(s->portmap[i].name, sizeof(s->portmap[i].name), "%s", names[i]);
        s->portmap[i].answered = false;
        portmap_set(&s->portmap[i], -1, "not asked");
    }
    if (default_gateway(s->info.address, s->gateway, sizeof(s->gateway)) < 0) {
        s->gateway[0] = '\0';
        for (int i = 0; i < PROBE_PORTMAP_PROTOCOLS; i++)
            portmap_set(&s->portmap[i], -1, "not asked: this node has no default gateway");
        return;
    }
    int left = probe_left_ms(deadline_ms);
    if (left == 0) {
        for (int i = 0; i < PROBE_PORTMAP_PROTOCOLS; i++)
            portmap_set(&s->portmap[i], -1, "not asked: --timeout reached");
        return;
    }
    int wait = left < PORTMAP_WAIT_MS ? left : PORTMAP_WAIT_MS;
    probe_progress(o, "asking the gateway %s for NAT-PMP, PCP and UPnP", s->gateway);
    fd[PORTMAP_NATPMP] = udp_socket(s->info.address, s->gateway, PORTMAP_PORT);
    fd[PORTMAP_PCP] = udp_socket(s->info.address, s->gateway, PORTMAP_PORT);
    /* Not connected: an IGD may answer from any port and address. */
    fd[PORTMAP_UPNP] = udp_socket(s->info.address, NULL, 0);
    size_t pcplen = pcp_announce(s->info.address, pcp);
    for (int i = 0; i < PROBE_PORTMAP_PROTOCOLS; i++) {
        if (fd[i] < 0) {
            portmap_set(&s->portmap[i], -1, "not asked: no UDP socket on %s: %s", s->info.address,
                        strerror(errno));
            settled[i] = true;
        }
    }
    if (fd[PORTMAP_UPNP] >= 0)
        ssdp_search(fd[PORTMAP_UPNP], s->info.address, s->gateway);

    double start = probe_now_ms(), until = start + wait;
    size_t sent = 0;
    for (;;) {
        /* (Re)send NAT-PMP and PCP at their times. */
        while (sent < sizeof(resend_ms) / sizeof(resend_ms[0]) &&
               probe_now_ms() - start >= resend_ms[sent]) {
            if (!settled[PORTMAP_NATPMP])
                (void)send(fd[PORTMAP_NATPMP], natpmp, sizeof(natpmp), 0);
            if (!settled[PORTMAP_PCP])
                (void)send(fd[PORTMAP_PCP], pcp, pcplen, 0);
            sent++;
        }
        struct pollfd p[PROBE_PORTMAP_PROTOCOLS];
        int np = 0, map[PROBE_PORTMAP_PROTOCOLS];
        for (int i = 0; i < PROBE_PORTMAP_PROTOCOLS; i++) {
            if (!settled[i]) {
                p[np] = (struct pollfd){.fd = fd[i], .events = POLLIN};
                map[np++] = i;
            }
        }
        int remaining = probe_left_ms(until);
        if (np == 0 || remaining == 0)
            break;
        if (sent < sizeof(resend_ms) / sizeof(resend_ms[0])) {
            int next = resend_ms[sent] - (int)(probe_now_ms() - start);
            remaining = next < remaining ? (next > 0 ? next : 0) : remaining;
        }
        int rc = poll(p, (nfds_t)np, remaining);
        if (rc < 0 && errno != EINTR)
            break;
        for (int k = 0; rc > 0 && k < np; k++) {
            if (p[k].revents == 0)
                continue;
            int i = map[k];
            struct sockaddr_in from;
            socklen_t flen = sizeof(from);
            char who[INET_ADDRSTRLEN] = "?";
            ssize_t n = recvfrom(fd[i], buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen);
            if (n < 0) {
                if (errno == EAGAIN || errno == EINTR)
                    continue;
                /* An ICMP error to a connected socket: nothing listens, or
                   the gateway cannot be reached. */
                portmap_set(&s->portmap[i], 0, "%s:%d/udp: %s", s->gateway, PORTMAP_PORT,
                            errno == ECONNREFUSED ? "closed (port unreachable)" : strerror(errno));
                settled[i] = true;
                continue;
            }
            char detail[sizeof(s->portmap[i].detail)];
            int verdict =
                portmap_parse((enum portmap_protocol)i, buf, (size_t)n, detail, sizeof(detail));
            if (verdict < 0)
                continue; /* not an answer of that protocol: keep waiting */
            settled[i] = true;
            s->portmap[i].answered = true;
            inet_ntop(AF_INET, &from.sin_addr, who, sizeof(who));
            if (i == PORTMAP_UPNP && strcmp(who, s->gateway) != 0)
                portmap_set(&s->portmap[i], verdict, "%s (from %s, not the gateway)", detail, who);
            else
                portmap_set(&s->portmap[i], verdict, "%s", detail);
        }
    }
    for (int i = 0; i < PROBE_PORTMAP_PROTOCOLS; i++) {
        if (!settled[i])
            portmap_set(&s->portmap[i], 0, "no answer from %s in %d ms%s", s->gateway, wait,
                        i == PORTMAP_UPNP ? " (M-SEARCH to it and to the SSDP group)" : "");
        if (fd[i] >= 0)
            close(fd[i]);
    }
}
