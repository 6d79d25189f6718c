/* Hair-pinning: a connection from this node to its own public mapping (the
   reflector's first observation), and whether the NAT turns it back in to
   the local port.  Most stateful NATs (Linux MASQUERADE, enterprise
   firewalls) do not do it for a dynamic mapping, and qcg-connect does not
   need it: same-site pairs connect on the site's own addresses.  It is
   reported because admins comparing with other tools (tailscale netcheck)
   expect it. */
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "probe.h"

#define HAIRPIN_CONNECT_MS 2000
#define HAIRPIN_ACCEPT_MS 500

void hairpin_probe(const struct probe_opts *o, struct probe_site *s, double deadline_ms)
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
    int left = probe_left_ms(deadline_ms);
    if (left == 0) {
        snprintf(s->hairpin_why, sizeof(s->hairpin_why), "not tried: --timeout reached");
        return;
    }
    int bound = left < HAIRPIN_CONNECT_MS ? left : HAIRPIN_CONNECT_MS;
    probe_progress(o, "connecting to this node's own public mapping %s:%d", m->addr, m->port);
    int lfd =
        probe_listen(s->info.address, m->local_port, NULL, s->hairpin_why, sizeof(s->hairpin_why));
    if (lfd < 0)
        return;
    enum probe_outcome outcome;
    char why[160];
    int fd = probe_connect(s->info.address, 0, m->addr, m->port, bound, NULL, &outcome, why,
                           sizeof(why));
    switch (outcome) {
    case PROBE_CONNECTED: {
        /* Connected: to this node's listener, or to whatever else answers
           there (a port forward to another host, the router itself)? */
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
                     "%s:%d accepted the connection, but it did not come back to local port %d: "
                     "something else answers there",
                     m->addr, m->port, m->local_port);
        }
        close(fd);
        break;
    }
    case PROBE_RESET:
    case PROBE_ICMP:
        s->hairpin = 0;
        if (outcome == PROBE_RESET)
            snprintf(s->hairpin_why, sizeof(s->hairpin_why),
                     "a connection to %s:%d (local port %d's mapping) was refused by a TCP reset",
                     m->addr, m->port, m->local_port);
        else /* why: "connect ADDR:PORT: ICMP port unreachable from ..." */
            snprintf(s->hairpin_why, sizeof(s->hairpin_why),
                     "a connection to %s:%d (local port %d's mapping) got an %.60s", m->addr,
                     m->port, m->local_port,
                     strstr(why, "ICMP") ? strstr(why, "ICMP") : "ICMP error");
        break;
    case PROBE_NO_ANSWER:
        s->hairpin = 0;
        snprintf(s->hairpin_why, sizeof(s->hairpin_why),
                 "a connection to %s:%d (local port %d's mapping) got no answer in %d ms", m->addr,
                 m->port, m->local_port, bound);
        break;
    case PROBE_LOCAL_ERROR:
        snprintf(s->hairpin_why, sizeof(s->hairpin_why), "not measured: %s", why);
        break;
    }
    close(lfd);
}
