/* qcg-probe's PUNCHING (local protocol 9): the first SYN each family's
   punches send, and the hop count to the reflector it comes from.  A family
   with no kept hop count is measured now (punch_hops.h), once for every
   request that waits meanwhile; the result is kept for the punches too.
   The reflector's addresses are those of the last SITE answer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "address.h"
#include "local_internal.h"
#include "log.h"
#include "punch_hops.h"
#include "qcgconn.h"

struct punching_ask {
    struct dlink link;
    struct conn *c;
    uint32_t rid;
};

/* A measurement's callback argument: which family of whose. */
struct punching_run {
    struct local_server *srv;
    int fam;
};

struct punching {
    char reflector[2][LOCAL_ENDPOINT_MAX]; /* from SITE: IPv4, IPv6 */
    int site_seen;                         /* a SITE was answered */
    struct punch_hops *run[2];             /* measuring */
    struct punching_run arg[2];
    struct local_punching answer; /* of the measurement under way */
    struct dlist asks;            /* waiting for it */
};

static struct punching *punching_of(struct local_server *srv)
{
    if (srv->punching == NULL)
        srv->punching = calloc(1, sizeof(*srv->punching));
    return srv->punching;
}

void punching_site_seen(struct local_server *srv, const struct local_site *st)
{
    struct punching *p = punching_of(srv);

    if (p == NULL)
        return;
    snprintf(p->reflector[LOCAL_PUNCH_IPV4], sizeof(p->reflector[0]), "%s", st->reflector);
    snprintf(p->reflector[LOCAL_PUNCH_IPV6], sizeof(p->reflector[1]), "%s", st->reflector6);
    p->site_seen = 1;
}

/* note: "" or why the first SYN goes without the TTL limit (punch_hops.h). */
static void family_hops(struct local_punch_family *f, int hops, unsigned rtt_ms, int measured,
                        const char *note)
{
    f->hops = hops;
    f->first_ttl = (uint32_t)punch_first_ttl(hops, note);
    f->rtt_ms = rtt_ms;
    f->measured = (uint32_t)measured;
    snprintf(f->why, sizeof(f->why), "%s", note != NULL ? note : "");
}

static void answer_all(struct local_server *srv)
{
    struct punching *p = srv->punching;

    while (p->asks.head != NULL) {
        struct punching_ask *a = dlist_entry(p->asks.head, struct punching_ask, link);
        dlist_remove(&p->asks, &a->link);
        send_msg(a->c, LOCAL_PUNCHING_OK, a->rid, &p->answer, sizeof(p->answer), 0);
        conn_request_done(a->c, LOCAL_PUNCHING);
        free(a);
    }
}

static void on_hops(void *arg, int hops, unsigned rtt_ms, const char *why)
{
    struct punching_run *m = arg;
    struct punching *p = m->srv->punching;
    struct local_punch_family *f = &p->answer.family[m->fam];

    p->run[m->fam] = NULL;
    if (hops >= 0)
        family_hops(f, hops, rtt_ms, 1, why);
    else
        snprintf(f->why, sizeof(f->why), "%s", why);
    log_info("PUNCHING: %s hops to the reflector %s: %d%s%s", m->fam ? "IPv6" : "IPv4",
             f->reflector, hops, hops < 0 ? ": " : "", hops < 0 ? why : "");
    if (p->run[0] == NULL && p->run[1] == NULL)
        answer_all(m->srv);
}

/* What one family can tell now; 1 when it must be measured. */
static int family_now(struct local_server *srv, int fam, struct local_punch_family *f)
{
    const struct helper_config *cfg = srv->cfg;
    struct punching *p = srv->punching;
    int af = fam == LOCAL_PUNCH_IPV6 ? AF_INET6 : AF_INET, port, hops;
    char host[QCG_ADDR_MAX], why[160], note[PUNCH_HOPS_NOTE_MAX];
    struct sockaddr_storage to;
    unsigned rtt_ms;

    memset(f, 0, sizeof(*f));
    f->hops = -1;
    snprintf(f->reflector, sizeof(f->reflector), "%s", p->reflector[fam]);
    for (int i = 0; i < cfg->naddrs && f->address[0] == '\0'; i++)
        if (address_family(cfg->addrs[i]) == af)
            snprintf(f->address, sizeof(f->address), "%s", cfg->addrs[i]);
    if (f->address[0] == '\0') {
        snprintf(f->why, sizeof(f->why), "this node has no %s address", fam ? "IPv6" : "IPv4");
        return 0;
    }
    if (!p->site_seen) {
        snprintf(f->why, sizeof(f->why),
                 "no SITE answered yet: the reflector's addresses come with its answer");
        return 0;
    }
    if (f->reflector[0] == '\0' ||
        hostport_parse(f->reflector, false, host, sizeof(host), &port, why, sizeof(why)) < 0 ||
        address_sockaddr(host, (uint16_t)port, &to) == 0 || to.ss_family != af) {
        snprintf(f->why, sizeof(f->why), "the broker names no %s reflector", fam ? "IPv6" : "IPv4");
        return 0;
    }
    if (cfg->first_ttl != 0) {
        snprintf(f->why, sizeof(f->why), "not measured: punch-ttl is not auto");
        return 0;
    }
    if (punch_hops_cached(srv->loop, &to, &hops, &rtt_ms, note) == 0) {
        family_hops(f, hops, rtt_ms, 0, note);
        return 0;
    }
    return 1;
}

/* Starts the measurement of fam, or says in the answer why it cannot. */
static void measure(struct local_server *srv, int fam)
{
    struct punching *p = srv->punching;
    struct local_punch_family *f = &p->answer.family[fam];
    struct sockaddr_storage local, to;
    char host[QCG_ADDR_MAX], why[160];
    int port;

    if (hostport_parse(f->reflector, false, host, sizeof(host), &port, why, sizeof(why)) < 0 ||
        address_sockaddr(host, (uint16_t)port, &to) == 0 ||
        address_sockaddr(f->address, 0, &local) == 0) {
        snprintf(f->why, sizeof(f->why), "cannot read the reflector's or the node's address");
        return;
    }
    p->arg[fam] = (struct punching_run){srv, fam};
    p->run[fam] = punch_hops_start(srv->loop, &local, &to, on_hops, &p->arg[fam], why, sizeof(why));
    if (p->run[fam] == NULL)
        snprintf(f->why, sizeof(f->why), "%s", why);
}

int on_punching(struct conn *c, uint32_t rid)
{
    struct local_server *srv = c->srv;
    struct punching *p = punching_of(srv);
    struct punching_ask *a = calloc(1, sizeof(*a));

    if (p == NULL || a == NULL) {
        free(a);
        send_error(c, rid, QCG_ESYS, 0, "out of memory");
        return 0;
    }
    a->c = c;
    a->rid = rid;
    conn_request_begun(c, LOCAL_PUNCHING);
    dlist_append(&p->asks, &a->link);
    if (p->run[0] != NULL || p->run[1] != NULL)
        return 1; /* answered with the measurement under way */
    memset(&p->answer, 0, sizeof(p->answer));
    p->answer.punch_ttl = srv->cfg->first_ttl;
    int need[2];
    for (int fam = 0; fam < 2; fam++)
        need[fam] = family_now(srv, fam, &p->answer.family[fam]);
    for (int fam = 0; fam < 2; fam++)
        if (need[fam])
            measure(srv, fam);
    if (p->run[0] == NULL && p->run[1] == NULL) {
        answer_all(srv);
        return 0;
    }
    return 1;
}

void punching_stop(struct local_server *srv)
{
    struct punching *p = srv->punching;

    if (p == NULL)
        return;
    for (int fam = 0; fam < 2; fam++) {
        punch_hops_cancel(p->run[fam]);
        p->run[fam] = NULL;
    }
    /* Their connections are closing: nothing is sent, the memory goes. */
    answer_all(srv);
}

void punching_free(struct local_server *srv)
{
    free(srv->punching);
    srv->punching = NULL;
}
