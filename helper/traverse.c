/* Traversing TCP, the packet side; see traverse.h and traverse_rules.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/netfilter.h>

#include "dlist.h"
#include "log.h"
#include "monotonic.h"
#include "nfq.h"
#include "rawpkt.h"
#include "ratelimit.h"
#include "traverse.h"
#include "traverse_rules.h"

#define WHY_MAX 200
#define RULES_PER_PLAN 3
/* How long the initiator's guard (traverse.h) holds after its SYN left: as
   long as its connect waits (libqcgconn's TRAVERSING_TIMEOUT_MS). */
#define GUARD_MS 5000
/* Rules of finished plans are deleted in batches: every deletion costs a
   kernel grace period (~15 ms) and holds up rule additions meanwhile, so
   they wait for this much quiet (no plan starting or ending)... */
#define DEL_IDLE_MS 100
/* ... but never longer than this. */
#define DEL_DEFER_MAX_MS 1000

enum plan_kind { PLAN_WATCH, PLAN_INJECT, PLAN_GUARD };

/* A SYN shipped to a watch: its retransmission must not take the watch of
   another connect towards the same listener. */
struct shipped {
    struct rawpkt_addr dst;
    uint16_t dport, sport;
    uint32_t seq;
};
#define SHIPPED_KEPT 1024

/* One planned connection: a SYN to watch for, or a SYN injected and its
   handshake to complete. */
struct plan {
    struct traverse *t;
    struct dlink link; /* in t->plans while it runs */
    enum plan_kind kind;
    struct rawpkt_addr peer; /* watch: the destination; inject: the initiator's public address */
    uint16_t peer_port;
    uint16_t port; /* inject: our listener's port */
    struct tvrule rules[RULES_PER_PLAN];
    int nrules;
    uv_timer_t timer;
    traverse_syn_fn syn_cb;
    traverse_done_fn done_cb;
    void *arg;
    uint64_t start_ms;
    int have_isn;     /* inject: our SYN/ACK was seen (and sent as a SYN) */
    uint32_t our_isn; /* ... its sequence number */
    unsigned synacks; /* ... how many times */
};

struct traverse {
    uv_loop_t *loop;
    struct traverse_config cfg;
    struct nfq_queue *q;
    int raw;            /* IPPROTO_RAW socket for injection */
    int raw6;           /* ... IPv6's, when the node has an IPv6 address (else -1) */
    struct dlist plans; /* of struct plan */
    unsigned next_id;
    unsigned nrules;
    struct tvrule *dels; /* rules of finished plans, to delete */
    size_t ndels, dels_cap;
    uint64_t oldest_del_ms, last_activity_ms;
    uv_timer_t del_timer;
    int deleting;     /* a batch is on the thread pool */
    unsigned pending; /* batches and handles to finish before the memory goes */
    int closed, free_asked;
    int icmp_guard[2];           /* IPv4, IPv6: the kernel has the u32 match (traverse_rules.h) */
    struct ratelimit refused_rl; /* "refused a SYN to inject": an order can repeat */
    struct ratelimit timeout_rl; /* watches and injections that timed out */
    struct shipped shipped[SHIPPED_KEPT]; /* the last SYNs shipped, a ring */
    unsigned next_shipped;
};

/* A batch of deletions on the thread pool. */
struct del_batch {
    uv_work_t req;
    struct traverse *t;
    uint16_t queue;
    struct tvrule rules[TVRULES_BATCH_MAX];
    size_t n, removed;
    char err[WHY_MAX];
};

/* At most one line a second about refused injections, one every 10 s about
   timeouts. */
#define REFUSED_LOG_MS 1000
#define TIMEOUT_LOG_MS 10000

static void on_packet(void *arg, uint32_t id, unsigned hook, const uint8_t *pkt, size_t len);

/* This node's address of a family, or NULL when it has none. */
static const struct rawpkt_addr *own(const struct traverse *t, int family)
{
    const struct rawpkt_addr *a = family == AF_INET6 ? &t->cfg.node6 : &t->cfg.node;

    return a->family == family ? a : NULL;
}

/* IPPROTO_RAW sockets imply the header included, for IPv6 too (Linux):
   the packets go out as built. */
static int raw_socket(int family, char *err, size_t errlen)
{
    int fd = socket(family, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);

    if (fd < 0)
        snprintf(err, errlen, "raw %s socket: %s%s", family == AF_INET6 ? "IPv6" : "IPv4",
                 strerror(errno), errno == EPERM ? " (needs CAP_NET_RAW)" : "");
    return fd;
}

struct traverse *traverse_new(uv_loop_t *loop, const struct traverse_config *cfg, char *err,
                              size_t errlen)
{
    struct traverse *t = calloc(1, sizeof(*t));

    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->loop = loop;
    t->cfg = *cfg;
    t->next_id = 1;
    t->raw6 = -1;
    t->raw = raw_socket(AF_INET, err, errlen);
    if (t->raw < 0 ||
        (own(t, AF_INET6) != NULL && (t->raw6 = raw_socket(AF_INET6, err, errlen)) < 0)) {
        if (t->raw >= 0)
            close(t->raw);
        free(t);
        return NULL;
    }
    /* The queue first: a second helper configured with our queue number
       fails here, before it could sweep our chains. */
    t->q = nfq_queue_open(loop, cfg->queue_num, on_packet, t, err, errlen);
    if (t->q == NULL)
        goto fail;
    if (tvrules_setup(cfg->queue_num, t->raw6 >= 0, t->icmp_guard, err, errlen) < 0) {
        /* The queue's memory goes with the loop's close callback. */
        nfq_queue_close(t->q);
        goto fail;
    }
    uv_timer_init(loop, &t->del_timer);
    t->del_timer.data = t;
    log_info("traversing TCP ready on queue %u, %s%s", cfg->queue_num,
             t->raw6 >= 0 ? "IPv4 and IPv6" : "IPv4 only (no IPv6 address)",
             t->icmp_guard[0] && (t->raw6 < 0 || t->icmp_guard[1])
                 ? ""
                 : " (no u32 match in this kernel: an ICMP error from a rejecting "
                   "firewall ends a traversal)");
    return t;
fail:
    close(t->raw);
    if (t->raw6 >= 0)
        close(t->raw6);
    free(t);
    return NULL;
}

static void maybe_free(struct traverse *t)
{
    if (t->free_asked && t->pending == 0) {
        free(t->dels);
        free(t);
    }
}

static void schedule_deletions(struct traverse *t);

static void on_batch_deleted(uv_work_t *req, int status)
{
    struct del_batch *d = req->data;
    struct traverse *t = d->t;

    /* After close the sweep removed everything, whatever this batch did. */
    if (!t->closed) {
        t->nrules -= (unsigned)d->removed;
        if (status < 0 || d->removed < d->n)
            log_warnx("%zu of %zu rules of queue %u not removed: %s", d->n - d->removed, d->n,
                      d->queue, status < 0 ? uv_strerror(status) : d->err);
    }
    t->deleting = 0;
    t->pending--;
    free(d);
    schedule_deletions(t);
    maybe_free(t);
}

static void delete_batch_work(uv_work_t *req)
{
    struct del_batch *d = req->data;
    char err[WHY_MAX];

    if (tvrules_apply(d->queue, d->rules, d->n, 0, d->err, sizeof(d->err)) == 0) {
        d->removed = d->n;
        return;
    }
    /* All or none failed: one rule already gone?  Then one by one. */
    for (size_t i = 0; i < d->n; i++)
        if (tvrules_apply(d->queue, &d->rules[i], 1, 0, err, sizeof(err)) == 0)
            d->removed++;
}

static void start_batch(struct traverse *t)
{
    struct del_batch *d = calloc(1, sizeof(*d));

    if (d == NULL) {
        log_error("out of memory: %zu rules stay until close", t->ndels);
        return;
    }
    d->t = t;
    d->queue = t->cfg.queue_num;
    d->n = t->ndels < TVRULES_BATCH_MAX ? t->ndels : TVRULES_BATCH_MAX;
    memcpy(d->rules, t->dels, d->n * sizeof(d->rules[0]));
    d->req.data = d;
    if (uv_queue_work(t->loop, &d->req, delete_batch_work, on_batch_deleted) < 0) {
        log_error("cannot queue the deletion of %zu rules", d->n);
        free(d);
        return;
    }
    t->ndels -= d->n;
    memmove(t->dels, t->dels + d->n, t->ndels * sizeof(t->dels[0]));
    t->oldest_del_ms = uv_now(t->loop);
    t->deleting = 1;
    t->pending++;
}

static void on_del_timer(uv_timer_t *h)
{
    struct traverse *t = h->data;
    uint64_t now = uv_now(t->loop);

    if (t->deleting || t->ndels == 0)
        return;
    if (t->ndels < TVRULES_BATCH_MAX && now < t->last_activity_ms + DEL_IDLE_MS &&
        now < t->oldest_del_ms + DEL_DEFER_MAX_MS) {
        schedule_deletions(t);
        return;
    }
    start_batch(t);
}

/* Arms the timer for the next batch (nothing while one runs: its end calls
   us again). */
static void schedule_deletions(struct traverse *t)
{
    uint64_t now = uv_now(t->loop), due;

    if (t->closed || t->deleting || t->ndels == 0)
        return;
    due = t->last_activity_ms + DEL_IDLE_MS;
    if (due > t->oldest_del_ms + DEL_DEFER_MAX_MS)
        due = t->oldest_del_ms + DEL_DEFER_MAX_MS;
    if (t->ndels >= TVRULES_BATCH_MAX)
        due = now;
    uv_timer_start(&t->del_timer, on_del_timer, due > now ? due - now : 0, 0);
}

/* Hands the plan's rules to the batched deletion. */
static void remove_rules(struct plan *p)
{
    struct traverse *t = p->t;

    if (p->nrules == 0)
        return;
    if (t->ndels + (size_t)p->nrules > t->dels_cap) {
        size_t cap = t->dels_cap ? 2 * t->dels_cap : TVRULES_BATCH_MAX;
        struct tvrule *n = realloc(t->dels, cap * sizeof(*n));

        if (n == NULL) {
            log_error("out of memory: %d rules stay until close", p->nrules);
            p->nrules = 0;
            return;
        }
        t->dels = n;
        t->dels_cap = cap;
    }
    if (t->ndels == 0)
        t->oldest_del_ms = uv_now(t->loop);
    memcpy(t->dels + t->ndels, p->rules, (size_t)p->nrules * sizeof(p->rules[0]));
    t->ndels += (size_t)p->nrules;
    p->nrules = 0;
    t->last_activity_ms = uv_now(t->loop);
    schedule_deletions(t);
}

/* Adds the plan's rules in one transaction (blocking, ~3 ms, so that they
   are in place when the call returns). */
static int add_rules(struct plan *p, char *why, size_t whylen)
{
    struct traverse *t = p->t;

    for (int i = 0; i < p->nrules; i++)
        p->rules[i].id = t->next_id++;
    t->last_activity_ms = uv_now(t->loop);
    if (tvrules_apply(t->cfg.queue_num, p->rules, (size_t)p->nrules, 1, why, whylen) < 0) {
        p->nrules = 0;
        return -1;
    }
    t->nrules += (unsigned)p->nrules;
    return 0;
}

static void on_plan_closed(uv_handle_t *h)
{
    free(h->data);
}

/* Ends a plan: detaches it, removes its rules, then calls back (the callback
   may start new plans or close everything). */
static void finish(struct plan *p, int status, const uint8_t *pkt, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void finish(struct plan *p, int status, const uint8_t *pkt, size_t len, const char *fmt, ...)
{
    struct traverse *t = p->t;
    char why[WHY_MAX] = "";
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    dlist_remove(&t->plans, &p->link);
    remove_rules(p);
    uv_timer_stop(&p->timer);
    uv_close((uv_handle_t *)&p->timer, on_plan_closed);
    if (p->kind == PLAN_WATCH)
        p->syn_cb(p->arg, status, pkt, len, why);
    else if (p->kind == PLAN_INJECT)
        p->done_cb(p->arg, status, why);
}

static void on_timeout(uv_timer_t *h)
{
    struct plan *p = h->data;
    char a[RAWPKT_ADDR_TEXT];
    unsigned long long ms = (unsigned long long)(uv_now(p->t->loop) - p->start_ms);

    unsigned left_out;
    /* The connect that asked falls back and says why; in a storm many do,
       so one line per TIMEOUT_LOG_MS here. */
    bool log = ratelimit_ok(&p->t->timeout_rl, monotonic_ms(), TIMEOUT_LOG_MS, &left_out);

    rawpkt_addr_text(&p->peer, a);
    if (p->kind == PLAN_GUARD) {
        finish(p, 0, NULL, 0, "%s", "");
    } else if (p->kind == PLAN_WATCH) {
        if (log)
            log_warnx("no SYN towards %s port %u within %llu ms (%u such lines left out)", a,
                      p->peer_port, ms, left_out);
        finish(p, -ETIMEDOUT, NULL, 0, "no SYN towards %s port %u within %llu ms", a, p->peer_port,
               ms);
    } else {
        if (log)
            log_warnx("port %u: no SYN/ACK from %s port %u within %llu ms (%u SYN/ACKs of ours "
                      "sent as SYNs; %u such lines left out)",
                      p->port, a, p->peer_port, ms, p->synacks, left_out);
        finish(p, -ETIMEDOUT, NULL, 0,
               "no SYN/ACK from %s port %u within %llu ms (%u SYN/ACKs of ours "
               "sent as SYNs)",
               a, p->peer_port, ms, p->synacks);
    }
}

static struct plan *plan_new(struct traverse *t, enum plan_kind kind, struct rawpkt_addr peer,
                             uint16_t peer_port, void *arg)
{
    struct plan *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return NULL;
    p->t = t;
    p->kind = kind;
    p->peer = peer;
    p->peer_port = peer_port;
    p->arg = arg;
    p->start_ms = uv_now(t->loop);
    uv_timer_init(t->loop, &p->timer);
    p->timer.data = p;
    return p;
}

/* The oldest running plan of this kind for the peer's address and port
   (and, for an injection, our port; one at most, as its start refuses
   twins). */
static struct plan *find_plan(struct traverse *t, enum plan_kind kind,
                              const struct rawpkt_addr *peer, uint16_t peer_port, uint16_t port)
{
    for (struct dlink *l = t->plans.head; l != NULL; l = l->next) {
        struct plan *p = dlist_entry(l, struct plan, link);
        if (p->kind == kind && rawpkt_addr_same(&p->peer, peer) && p->peer_port == peer_port &&
            (kind == PLAN_WATCH || p->port == port))
            return p;
    }
    return NULL;
}

/* Links a plan whose rules are in place and starts its clock. */
static void plan_start(struct plan *p, unsigned timeout_ms)
{
    struct traverse *t = p->t;

    dlist_append(&t->plans, &p->link);
    uv_timer_start(&p->timer, on_timeout, timeout_ms, 0);
}

static void plan_discard(struct plan *p)
{
    uv_close((uv_handle_t *)&p->timer, on_plan_closed);
}

int traverse_watch_syn(struct traverse *t, struct rawpkt_addr dst, uint16_t dport,
                       unsigned timeout_ms, traverse_syn_fn cb, void *arg, char *why, size_t whylen)
{
    char a[RAWPKT_ADDR_TEXT];
    struct plan *p;

    rawpkt_addr_text(&dst, a);
    if (t->closed) {
        snprintf(why, whylen, "traversing is closed");
        return -1;
    }
    /* Our SYN leaves from our address of its family: none, no traversal. */
    if (own(t, dst.family) == NULL) {
        snprintf(why, whylen, "this node has no %s address to traverse to %s from",
                 dst.family == AF_INET6 ? "IPv6" : "IPv4", a);
        return -1;
    }
    /* Several watches for one destination are fine: the ranks of a node
       that connect to one peer at once.  Each SYN goes to the oldest
       (find_plan); SYNs towards one listener are of one job and one target
       rank, so which connect's SYN a watch ships does not matter, and
       every one is shipped. */
    p = plan_new(t, PLAN_WATCH, dst, dport, arg);
    if (p == NULL) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    p->syn_cb = cb;
    p->nrules = 1;
    p->rules[0] = (struct tvrule){.inbound = 0, .synack = 0, .dst = dst, .dport = dport};
    /* The guard, in the same transaction: in place before the SYN leaves. */
    p->rules[p->nrules++] = (struct tvrule){.kind = TVR_GUARD_RST, .dst = dst, .dport = dport};
    if (t->icmp_guard[dst.family == AF_INET6])
        p->rules[p->nrules++] = (struct tvrule){.kind = TVR_GUARD_ICMP, .dst = dst, .dport = dport};
    if (add_rules(p, why, whylen) < 0) {
        log_warnx("cannot watch for a SYN towards %s port %u: %s", a, dport, why);
        plan_discard(p);
        return -1;
    }
    plan_start(p, timeout_ms);
    log_debug("watching for a SYN towards %s port %u (rule id %u)", a, dport, p->rules[0].id);
    return 0;
}

/* Sends a packet of the family of our address `node` to it. */
static int inject(struct traverse *t, const struct rawpkt_addr *node, const uint8_t *pkt,
                  size_t len, char *why, size_t whylen)
{
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr = node->u.v4};
    struct sockaddr_in6 to6 = {.sin6_family = AF_INET6, .sin6_addr = node->u.v6};
    int v6 = node->family == AF_INET6;

    /* IPPROTO_RAW implies the header included: the kernel fills in only the
       IPv4 checksum (we set it anyway) and routes to our own address through
       loopback. */
    if (sendto(v6 ? t->raw6 : t->raw, pkt, len, 0,
               v6 ? (struct sockaddr *)&to6 : (struct sockaddr *)&to,
               v6 ? sizeof(to6) : sizeof(to)) != (ssize_t)len) {
        snprintf(why, whylen, "raw send: %s", strerror(errno));
        return -1;
    }
    return 0;
}

int traverse_inject(struct traverse *t, const uint8_t *syn, size_t len, struct rawpkt_addr pub,
                    uint16_t pub_port, uint16_t allowed_port, unsigned timeout_ms,
                    traverse_done_fn cb, void *arg, char *why, size_t whylen)
{
    uint8_t pkt[TRAVERSE_PACKET_MAX];
    struct rawpkt_tcp s;
    char a[RAWPKT_ADDR_TEXT];
    const struct rawpkt_addr *node = own(t, pub.family);
    struct plan *p;
    unsigned left_out;

    rawpkt_addr_text(&pub, a);
    if (t->closed) {
        snprintf(why, whylen, "traversing is closed");
        return -1;
    }
    if (len > sizeof(pkt)) {
        snprintf(why, whylen, "a SYN of %zu bytes (at most %d)", len, TRAVERSE_PACKET_MAX);
        goto refused;
    }
    /* The SYN's family is the initiator's address's, and ours must have it:
       rawpkt_check_syn then holds it to our own address of that family. */
    if (node == NULL) {
        snprintf(why, whylen, "this node has no %s address",
                 pub.family == AF_INET6 ? "IPv6" : "IPv4");
        goto refused;
    }
    if (rawpkt_parse(syn, len, &s, why, whylen) < 0 ||
        rawpkt_check_syn(&s, node, allowed_port, why, whylen) < 0)
        goto refused;
    if (pub_port == 0) {
        snprintf(why, whylen, "no public port for the initiator");
        goto refused;
    }
    if (find_plan(t, PLAN_INJECT, &pub, pub_port, allowed_port) != NULL) {
        snprintf(why, whylen, "already traversing from %s port %u to port %u", a, pub_port,
                 allowed_port);
        goto refused;
    }
    memcpy(pkt, syn, s.total);
    rawpkt_set_source(pkt, s.total, &pub, pub_port);

    p = plan_new(t, PLAN_INJECT, pub, pub_port, arg);
    if (p == NULL) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    p->port = allowed_port;
    p->done_cb = cb;
    p->nrules = 2;
    /* Our SYN/ACK leaving, and the initiator's SYN/ACK arriving. */
    p->rules[0] = (struct tvrule){.inbound = 0,
                                  .synack = 1,
                                  .src = *node,
                                  .sport = allowed_port,
                                  .dst = pub,
                                  .dport = pub_port};
    p->rules[1] = (struct tvrule){.inbound = 1,
                                  .synack = 1,
                                  .src = pub,
                                  .sport = pub_port,
                                  .dst = *node,
                                  .dport = allowed_port};
    if (add_rules(p, why, whylen) < 0) {
        log_warnx("cannot traverse from %s port %u to port %u: %s", a, pub_port, allowed_port, why);
        plan_discard(p);
        return -1;
    }
    if (inject(t, node, pkt, s.total, why, whylen) < 0) {
        log_warnx("cannot traverse from %s port %u to port %u: %s", a, pub_port, allowed_port, why);
        remove_rules(p);
        plan_discard(p);
        return -1;
    }
    plan_start(p, timeout_ms);
    log_debug("injected the SYN of %s port %u (seq %u) to port %u", a, pub_port, s.seq,
              allowed_port);
    return 0;
refused:
    if (ratelimit_ok(&t->refused_rl, monotonic_ms(), REFUSED_LOG_MS, &left_out))
        log_warnx("refused a SYN to inject (from %s port %u, port %u allowed): %s (%u more not "
                  "logged)",
                  a, pub_port, allowed_port, why, left_out);
    return -1;
}

static bool was_shipped(const struct traverse *t, const struct rawpkt_tcp *s)
{
    for (int i = 0; i < SHIPPED_KEPT; i++) {
        const struct shipped *k = &t->shipped[i];
        if (rawpkt_addr_same(&k->dst, &s->dst) && k->dport == s->dport && k->sport == s->sport &&
            k->seq == s->seq)
            return true;
    }
    return false;
}

/* The watch's guard rules outlive it: they go to a plan of their own that
   ends GUARD_MS later (without memory the guard ends with the watch). */
static void keep_guard(struct plan *w)
{
    if (w->nrules < 2)
        return;
    struct plan *g = plan_new(w->t, PLAN_GUARD, w->peer, w->peer_port, NULL);
    if (g == NULL)
        return;
    g->nrules = w->nrules - 1;
    memcpy(g->rules, w->rules + 1, (size_t)g->nrules * sizeof(g->rules[0]));
    w->nrules = 1;
    plan_start(g, GUARD_MS);
}

/* The initiator's SYN left (accepted first: our own NAT must see it). */
static void on_local_syn(struct traverse *t, uint32_t id, const struct rawpkt_tcp *s,
                         const uint8_t *pkt)
{
    struct plan *p = find_plan(t, PLAN_WATCH, &s->dst, s->dport, 0);

    nfq_queue_verdict(t->q, id, 1, NULL, 0);
    if (p != NULL && was_shipped(t, s)) {
        log_debug("a retransmitted SYN from port %u towards port %u: accepted", s->sport, s->dport);
        return;
    }
    if (p == NULL) {
        log_debug("a SYN towards port %u nobody watches for: accepted", s->dport);
        return;
    }
    t->shipped[t->next_shipped++ % SHIPPED_KEPT] =
        (struct shipped){.dst = s->dst, .dport = s->dport, .sport = s->sport, .seq = s->seq};
    if (s->total > TRAVERSE_PACKET_MAX) {
        finish(p, -EMSGSIZE, NULL, 0, "the SYN is %zu bytes (at most %d)", s->total,
               TRAVERSE_PACKET_MAX);
        return;
    }
    log_debug("SYN from port %u towards port %u after %llu ms (seq %u)", s->sport, s->dport,
              (unsigned long long)(uv_now(t->loop) - p->start_ms), s->seq);
    keep_guard(p);
    finish(p, 0, pkt, s->total, "%s", "");
}

/* Our listener's SYN/ACK leaving: sent as a plain SYN, so that the firewall
   sees an outbound SYN and the initiator's NAT a simultaneous open. */
static void on_our_synack(struct traverse *t, uint32_t id, const struct rawpkt_tcp *s,
                          const uint8_t *pkt, size_t len)
{
    uint8_t out[TRAVERSE_PACKET_MAX];
    struct plan *p = find_plan(t, PLAN_INJECT, &s->dst, s->dport, s->sport);

    if (p == NULL || s->total > sizeof(out)) {
        log_debug("a SYN/ACK from port %u of no plan: accepted as is", s->sport);
        nfq_queue_verdict(t->q, id, 1, NULL, 0);
        return;
    }
    (void)len;
    memcpy(out, pkt, s->total);
    rawpkt_synack_to_syn(out, s->total);
    nfq_queue_verdict(t->q, id, 1, out, s->total);
    p->have_isn = 1;
    p->our_isn = s->seq;
    p->synacks++;
    log_debug("port %u: our SYN/ACK (seq %u) sent as a SYN, %llu ms after the injection", p->port,
              s->seq, (unsigned long long)(uv_now(t->loop) - p->start_ms));
}

/* The initiator's SYN/ACK arriving: let it in (our listener answers it with
   the ACK the initiator is waiting for), then inject the third ACK "from"
   the initiator so that our listener's connection is established at once. */
static void on_their_synack(struct traverse *t, uint32_t id, const struct rawpkt_tcp *s)
{
    uint8_t ack[TRAVERSE_PACKET_MAX];
    char why[WHY_MAX];
    struct plan *p = find_plan(t, PLAN_INJECT, &s->src, s->sport, s->dport);
    size_t n;

    nfq_queue_verdict(t->q, id, 1, NULL, 0);
    if (p == NULL) {
        log_debug("a SYN/ACK to port %u of no plan: accepted", s->dport);
        return;
    }
    if (!p->have_isn || s->ack != p->our_isn + 1) {
        log_warnx("port %u: a SYN/ACK acknowledging %u, not our SYN (%s%u): ignored", p->port,
                  s->ack, p->have_isn ? "" : "not seen yet, ", p->our_isn + 1);
        return;
    }
    n = rawpkt_build_ack(s, ack, sizeof(ack));
    if (n == 0 || inject(t, &s->dst, ack, n, why, sizeof(why)) < 0) {
        log_warnx("port %u: cannot inject the third ACK: %s", p->port, n ? why : "no room");
        finish(p, -EIO, NULL, 0, "cannot inject the third ACK: %s", n ? why : "no room");
        return;
    }
    log_debug("port %u: third ACK injected (seq %u ack %u) %llu ms after the SYN", p->port,
              s->seq + 1, s->ack, (unsigned long long)(uv_now(t->loop) - p->start_ms));
    finish(p, 0, NULL, 0, "%s", "");
}

static void on_packet(void *arg, uint32_t id, unsigned hook, const uint8_t *pkt, size_t len)
{
    struct traverse *t = arg;
    struct rawpkt_tcp s;
    char why[WHY_MAX];

    /* Whatever we do not understand goes on unchanged, as if we were not
       there (--queue-bypass semantics). */
    if (rawpkt_parse(pkt, len, &s, why, sizeof(why)) < 0) {
        log_warnx("queue %u: a packet of %zu bytes we cannot parse (%s): accepted",
                  t->cfg.queue_num, len, why);
        nfq_queue_verdict(t->q, id, 1, NULL, 0);
        return;
    }
    uint8_t synack = s.flags & (RAWPKT_SYN | RAWPKT_ACK | RAWPKT_RST);
    const struct rawpkt_addr *node = own(t, s.src.family);

    if (hook == NF_INET_LOCAL_OUT && synack == RAWPKT_SYN)
        on_local_syn(t, id, &s, pkt);
    else if (hook == NF_INET_LOCAL_OUT && synack == (RAWPKT_SYN | RAWPKT_ACK) && node != NULL &&
             rawpkt_addr_same(&s.src, node))
        on_our_synack(t, id, &s, pkt, len);
    else if (hook == NF_INET_PRE_ROUTING && synack == (RAWPKT_SYN | RAWPKT_ACK) && node != NULL &&
             rawpkt_addr_same(&s.dst, node))
        on_their_synack(t, id, &s);
    else {
        log_debug("queue %u: unexpected packet (hook %u, flags 0x%02x): accepted", t->cfg.queue_num,
                  hook, s.flags);
        nfq_queue_verdict(t->q, id, 1, NULL, 0);
    }
}

static void on_del_timer_closed(uv_handle_t *h)
{
    struct traverse *t = h->data;

    t->pending--;
    maybe_free(t);
}

void traverse_close(struct traverse *t)
{
    if (t == NULL || t->closed)
        return;
    /* Closed first: a callback starting a new plan is refused. */
    t->closed = 1;
    while (t->plans.head != NULL)
        finish(dlist_entry(t->plans.head, struct plan, link), -ECANCELED, NULL, 0,
               "traversing is closing");
    /* The deletions still running find their rule gone; the sweep removes
       everything whatever they do (iptables serialises the two). */
    if (tvrules_sweep(t->cfg.queue_num) > 0)
        log_warnx("the chains of queue %u were not fully removed", t->cfg.queue_num);
    t->nrules = 0;
    t->ndels = 0;
    uv_timer_stop(&t->del_timer);
    t->pending++;
    uv_close((uv_handle_t *)&t->del_timer, on_del_timer_closed);
    nfq_queue_close(t->q);
    t->q = NULL;
    close(t->raw);
    t->raw = -1;
    if (t->raw6 >= 0)
        close(t->raw6);
    t->raw6 = -1;
    log_info("traversing TCP on queue %u closed", t->cfg.queue_num);
}

void traverse_free(struct traverse *t)
{
    if (t == NULL)
        return;
    traverse_close(t);
    t->free_asked = 1;
    maybe_free(t);
}

unsigned traverse_rules(const struct traverse *t)
{
    return t->nrules;
}
