/* Hop count to the reflector by TTL-limited connects; see punch_hops.h. */
#include "punch_hops.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "sockaddr_text.h"
#include "sock_error.h"

/* One connect with one TTL; freed in its close callback, which also closes
   the socket (with a reset: no TIME_WAIT, nothing for the reflector to read). */
struct hop_step {
    uv_poll_t poll;
    struct punch_hops *m;
    int fd;
};

struct punch_hops {
    uv_loop_t *loop;
    struct sockaddr_storage local, to; /* one family, the port of local 0 */
    socklen_t len;
    punch_hops_fn cb;
    void *arg;
    int ttl;          /* checking: the hop count, the check's TTL */
    bool checking;    /* counted: one connect with TTL hops under PUNCH_MIN_TTL */
    unsigned rtt_ms;  /* to the reflector, once counted */
    unsigned icmp_ms; /* how long the last time-exceeded took, 0: none came */
    bool over;
    int handles; /* the timer and a step's poll; the last close frees */
    uint64_t step_start;
    struct hop_step *cur;
    uv_timer_t timer;
};

/* One result per family, for the reflector address a helper uses in it (a
   dual-stack node punches through both). */
static struct kept {
    struct sockaddr_storage to;
    int hops;
    unsigned rtt_ms;
    char note[PUNCH_HOPS_NOTE_MAX];
    uint64_t when;
    bool valid;
} kept[2];

static struct kept *kept_for(const struct sockaddr_storage *to)
{
    return &kept[to->ss_family == AF_INET6];
}

int punch_ttl_for_hops(int hops)
{
    return hops >= 2 && hops <= PUNCH_HOPS_MAX ? hops : 0;
}

int punch_first_ttl(int hops, const char *note)
{
    return note != NULL && note[0] != '\0' ? 0 : punch_ttl_for_hops(hops);
}

int punch_set_ttl(int fd, int family, int ttl)
{
    if (family == AF_INET6)
        return setsockopt(fd, IPPROTO_IPV6, IPV6_UNICAST_HOPS, &ttl, sizeof(ttl));
    return setsockopt(fd, IPPROTO_IP, IP_TTL, &ttl, sizeof(ttl));
}

int punch_set_min_ttl(int fd, int family, int ttl)
{
    if (family == AF_INET6)
        return setsockopt(fd, IPPROTO_IPV6, IPV6_MINHOPCOUNT, &ttl, sizeof(ttl));
    return setsockopt(fd, IPPROTO_IP, IP_MINTTL, &ttl, sizeof(ttl));
}

int punch_hops_cached(uv_loop_t *loop, const struct sockaddr_storage *to, int *hops,
                      unsigned *rtt_ms, char *note)
{
    /* Both made by address_sockaddr: zeroed around the address and port. */
    const struct kept *k = kept_for(to);

    if (!k->valid || memcmp(&k->to, to, sizeof(*to)) != 0 ||
        uv_now(loop) - k->when > PUNCH_HOPS_KEEP_MS)
        return -1;
    *hops = k->hops;
    *rtt_ms = k->rtt_ms;
    if (note != NULL)
        snprintf(note, PUNCH_HOPS_NOTE_MAX, "%s", k->note);
    return 0;
}

static void release(struct punch_hops *m)
{
    if (--m->handles == 0)
        free(m);
}

static void on_timer_closed(uv_handle_t *h)
{
    release(h->data);
}

static void on_step_closed(uv_handle_t *h)
{
    struct hop_step *st = h->data;
    struct linger now = {.l_onoff = 1, .l_linger = 0};

    setsockopt(st->fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
    close(st->fd);
    release(st->m);
    free(st);
}

static void step_end(struct punch_hops *m)
{
    uv_timer_stop(&m->timer);
    if (m->cur == NULL)
        return;
    uv_poll_stop(&m->cur->poll);
    uv_close((uv_handle_t *)&m->cur->poll, on_step_closed);
    m->cur = NULL;
}

static void finish(struct punch_hops *m, int hops, unsigned rtt_ms, const char *why)
{
    step_end(m);
    m->over = true;
    uv_close((uv_handle_t *)&m->timer, on_timer_closed);
    if (hops >= 0) {
        struct kept *k = kept_for(&m->to);
        k->to = m->to;
        k->hops = hops;
        k->rtt_ms = rtt_ms;
        snprintf(k->note, sizeof(k->note), "%s", why != NULL ? why : "");
        k->when = uv_now(m->loop);
        k->valid = true;
    }
    m->cb(m->arg, hops, rtt_ms, why);
}

static void step(struct punch_hops *m);
static uint64_t check_wait_ms(const struct punch_hops *m);
static void check_floor(struct punch_hops *m, int hops, unsigned rtt_ms);

static void on_step(uv_poll_t *h, int status, int events)
{
    struct hop_step *st = h->data;
    struct punch_hops *m = st->m;
    /* The router's ICMP error, from the error queue (IP_RECVERR): over IPv6
       it is what wakes us, since the kernel takes the time-exceeded of a SYN
       still inside connect() (a fast path) as a soft error and says nothing
       until the SYN's retransmission a second later. */
    int err = sock_queued_error(st->fd);
    char why[96];

    if (err <= 0)
        err = sock_error(st->fd, status);
    (void)events;
    if (err == EINPROGRESS || st != m->cur)
        return;
    uv_update_time(m->loop);
    unsigned rtt = (unsigned)(uv_now(m->loop) - m->step_start);
    if (m->checking) {
        /* The floor let router hops's error through (the connect ended, or
           the error was queued): it comes with TTL >= PUNCH_MIN_TTL. */
        if (err == EHOSTUNREACH || err == ENETUNREACH) {
            snprintf(why, sizeof(why),
                     "router %d's ICMP errors arrive with TTL %d or more, which would end the "
                     "punch",
                     m->ttl, PUNCH_MIN_TTL);
            log_info("punch: %s", why);
            finish(m, m->ttl, m->rtt_ms, why);
            return;
        }
        finish(m, m->ttl, m->rtt_ms, NULL);
        return;
    }
    if (err == 0 || err == ECONNREFUSED) {
        /* The reflector's host answered: every router before it let it pass. */
        char to[INET6_ADDRSTRLEN + 8];
        sockaddr_text(&m->to, m->len, to, sizeof(to));
        log_debug("punch: %d routers to %s (TTL %d reached it in %u ms)", m->ttl - 1, to, m->ttl,
                  rtt);
        check_floor(m, m->ttl - 1, rtt);
        return;
    }
    if (err == EHOSTUNREACH || err == ENETUNREACH) {
        /* Time exceeded at router ttl (or a router said the way is shut:
           the next TTL tells them apart). */
        m->icmp_ms = rtt > 0 ? rtt : 1;
        step_end(m);
        m->ttl++;
        step(m);
        return;
    }
    snprintf(why, sizeof(why), "connect with TTL %d: %s", m->ttl, strerror(err));
    finish(m, -1, 0, why);
}

/* A router that sends no ICMP (or the first step, from the loop). */
static void on_timer(uv_timer_t *t)
{
    struct punch_hops *m = t->data;

    if (m->checking) {
        /* No error within the wait: the floor keeps it out. */
        finish(m, m->ttl, m->rtt_ms, NULL);
        return;
    }
    if (m->cur != NULL) {
        step_end(m);
        m->ttl++;
        m->icmp_ms = 0;
    }
    step(m);
}

/* A step could not start: the count fails, or, in its check, stands
   without it (as before there was one). */
static void step_failed(struct punch_hops *m, const char *why)
{
    if (m->checking)
        finish(m, m->ttl, m->rtt_ms, NULL);
    else
        finish(m, -1, 0, why);
}

static void step(struct punch_hops *m)
{
    char why[96];

    if (m->ttl > PUNCH_HOPS_MAX) {
        snprintf(why, sizeof(why), "the reflector is not reached within %d hops", PUNCH_HOPS_MAX);
        finish(m, -1, 0, why);
        return;
    }
    int fd = socket(m->to.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0)
        (void)setsockopt(fd, m->to.ss_family == AF_INET6 ? IPPROTO_IPV6 : IPPROTO_IP,
                         m->to.ss_family == AF_INET6 ? IPV6_RECVERR : IP_RECVERR, &one,
                         sizeof(one));
    if (fd < 0 || bind(fd, (struct sockaddr *)&m->local, m->len) < 0 ||
        punch_set_ttl(fd, m->to.ss_family, m->ttl) < 0 ||
        (m->checking && punch_set_min_ttl(fd, m->to.ss_family, PUNCH_MIN_TTL) < 0) ||
        (connect(fd, (struct sockaddr *)&m->to, m->len) < 0 && errno != EINPROGRESS)) {
        snprintf(why, sizeof(why), "connect with TTL %d: %s", m->ttl, strerror(errno));
        if (fd >= 0)
            close(fd);
        step_failed(m, why);
        return;
    }
    struct hop_step *st = calloc(1, sizeof(*st));
    if (st == NULL || uv_poll_init_socket(m->loop, &st->poll, fd) < 0) {
        free(st);
        close(fd);
        step_failed(m, "cannot watch the socket");
        return;
    }
    st->m = m;
    st->fd = fd;
    st->poll.data = st;
    m->cur = st;
    m->handles++;
    uv_update_time(m->loop);
    m->step_start = uv_now(m->loop);
    uv_poll_start(&st->poll, UV_WRITABLE, on_step);
    uv_timer_start(&m->timer, on_timer, m->checking ? check_wait_ms(m) : PUNCH_HOPS_STEP_MS, 0);
}

/* The floor's check waits three times what the count's time-exceeded took
   from that router, and a little: an error later than that is taken as
   kept out (as before the check: the punch then fails as it would have). */
static uint64_t check_wait_ms(const struct punch_hops *m)
{
    uint64_t ms = 3 * (uint64_t)m->icmp_ms + 20;

    return ms < PUNCH_HOPS_STEP_MS ? ms : PUNCH_HOPS_STEP_MS;
}

/* hops counted: where the first SYN would be TTL-limited and router hops
   answered the count, one more connect with TTL hops under the opener's
   floor tells whether its error would still get in.  IPv6 only: Linux
   holds an ICMPv6 error's own hop limit against the floor, but an ICMP
   error's quoted header (our SYN's TTL where it expired, 1) over IPv4, so
   there the floor keeps every time-exceeded out. */
static void check_floor(struct punch_hops *m, int hops, unsigned rtt_ms)
{
    step_end(m);
    if (punch_ttl_for_hops(hops) == 0 || m->icmp_ms == 0 || m->to.ss_family != AF_INET6) {
        finish(m, hops, rtt_ms, NULL);
        return;
    }
    m->checking = true;
    m->rtt_ms = rtt_ms;
    m->ttl = hops;
    step(m);
}

struct punch_hops *punch_hops_start(uv_loop_t *loop, const struct sockaddr_storage *local,
                                    const struct sockaddr_storage *to, punch_hops_fn cb, void *arg,
                                    char *why, size_t whylen)
{
    if (local->ss_family != to->ss_family ||
        (to->ss_family != AF_INET && to->ss_family != AF_INET6)) {
        snprintf(why, whylen, "the node's address and the reflector's differ in family");
        return NULL;
    }
    struct punch_hops *m = calloc(1, sizeof(*m));

    if (m == NULL) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    m->loop = loop;
    m->local = *local;
    m->to = *to;
    m->len = to->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    m->cb = cb;
    m->arg = arg;
    m->ttl = 1;
    m->handles = 1;
    uv_timer_init(loop, &m->timer);
    m->timer.data = m;
    /* The first step from the loop: the callback never comes from here. */
    uv_timer_start(&m->timer, on_timer, 0, 0);
    return m;
}

void punch_hops_cancel(struct punch_hops *h)
{
    if (h == NULL || h->over)
        return;
    step_end(h);
    h->over = true;
    uv_close((uv_handle_t *)&h->timer, on_timer_closed);
}
