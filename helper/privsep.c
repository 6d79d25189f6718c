/* The main process's side of the privileged process; see privsep.h. */
#include "privsep.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlist.h"
#include "log.h"
#include "monotonic.h"
#include "privsep_msg.h"
#include "proc.h"

/* How often timed-out requests are looked for while any is pending. */
#define SWEEP_MS 100
#define READS_PER_WAKE 64
/* How long a lost process may take to become a zombie after its socket
   closed (the kernel closes its files before it reports the exit). */
#define REAP_AT_LOSS_MS 100

enum kind { K_WATCH, K_INJECT };

/* A request whose outcome is still to come.  Requests go to the
   privileged process one at a time, in order (it serves them in turn, each
   bounded by its iptables command's timeout): the others wait in
   ps->unsent, so that a slow acknowledgement delays traversals but never
   the main process's loop. */
struct entry {
    struct dlink link; /* in ps->unsent until sent; in ps->ready while listed */
    uint32_t id;       /* 0: a free entry */
    enum kind kind;
    int sent;
    int acked;    /* the privileged process took it: an outcome will come */
    int tell_ack; /* acked, acked_cb not called yet */
    int listed;   /* in ps->ready */
    int ready;    /* the outcome is in (or the request failed) */
    privsep_acked_fn acked_cb;
    traverse_syn_fn syn_cb;
    traverse_done_fn done_cb;
    void *arg;
    union privsep_msg req;
    size_t req_size;
    uint64_t queued_ms;
    unsigned timeout_ms;
    uint64_t deadline_ms;
    int status;
    uint16_t len;
    uint8_t pkt[TRAVERSE_PACKET_MAX];
    char why[PRIVSEP_WHY_MAX];
};

struct privsep {
    uv_loop_t *loop;
    struct proc child;
    struct imsg_chan ch;
    int started, closed, lost, lost_told, free_asked;
    unsigned handles; /* open libuv handles; the last close may free */
    uv_poll_t poll;
    uv_timer_t timer;
    uint32_t next_id;
    struct entry entries[PRIVSEP_PENDING_MAX];
    unsigned npending;
    struct dlist unsent;    /* requests not sent yet, oldest first */
    struct entry *inflight; /* sent, its acknowledgement not in yet */
    uint64_t ack_deadline_ms;
    int writable_wait;  /* the socket was full: watched for writing */
    struct dlist ready; /* acknowledgements and outcomes in, callbacks to call */
    privsep_lost_fn lost_fn;
    void *lost_arg;
    char lost_why[PRIVSEP_WHY_MAX];
};

struct privsep *privsep_fork(const struct helper_config *cfg, char *err, size_t errlen)
{
    struct privsep *ps = calloc(1, sizeof(*ps));
    const struct proc_spec spec = {
        .name = "qcg-helper-priv", .exec_arg = NULL, .give_fd = -1, .deathsig = SIGTERM};

    if (ps == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    switch (proc_start(&ps->child, &spec, err, errlen)) {
    case 1:
        free(ps);
        privsep_child_main(cfg);
    case 0:
        break;
    default:
        free(ps);
        return NULL;
    }
    imsg_chan_init(&ps->ch, ps->child.fd, privsep_types, PRIVSEP_TO_MAIN, NULL,
                   "the privileged process");
    ps->next_id = 1;
    return ps;
}

pid_t privsep_pid(const struct privsep *ps)
{
    return ps->child.pid;
}

void privsep_on_lost(struct privsep *ps, privsep_lost_fn fn, void *arg)
{
    ps->lost_fn = fn;
    ps->lost_arg = arg;
}

static void on_timer(uv_timer_t *t);

/* The timer runs the callbacks, the lost callback and the timeouts. */
static void kick(struct privsep *ps, unsigned ms)
{
    if (ps->started && !ps->closed)
        uv_timer_start(&ps->timer, on_timer, ms, 0);
}

static void list_entry(struct privsep *ps, struct entry *e)
{
    if (!e->listed) {
        e->listed = 1;
        dlist_append(&ps->ready, &e->link);
    }
}

/* The outcome is in, or the request failed (before or after its
   acknowledgement): its callback is due. */
static void make_ready(struct privsep *ps, struct entry *e, int status, const char *why)
{
    if (!e->sent && !e->listed)
        dlist_remove(&ps->unsent, &e->link);
    if (ps->inflight == e)
        ps->inflight = NULL;
    e->sent = 1;
    e->ready = 1;
    e->status = status;
    e->len = 0;
    snprintf(e->why, sizeof(e->why), "%s", why);
    list_entry(ps, e);
}

/* The socket closed, or an error on it, or we killed the process (killed:
   what says why): everything pending fails with how the process ended,
   once; nothing is asked of it any more. */
static void lose(struct privsep *ps, const char *what, int killed)
{
    char how[PRIVSEP_WHY_MAX - 40];

    if (ps->lost)
        return;
    ps->lost = 1;
    if (proc_wait(&ps->child, REAP_AT_LOSS_MS) && !killed)
        proc_how(&ps->child, how, sizeof(how));
    else
        snprintf(how, sizeof(how), "%s", what);
    snprintf(ps->lost_why, sizeof(ps->lost_why), "the privileged process (pid %d) %s",
             (int)ps->child.pid, how);
    if (ps->started && !ps->closed) {
        log_error("%s: traversing is no longer available", ps->lost_why);
        uv_poll_stop(&ps->poll);
    }
    for (size_t i = 0; i < PRIVSEP_PENDING_MAX; i++) {
        struct entry *e = &ps->entries[i];
        if (e->id != 0 && !e->ready)
            make_ready(ps, e, -EPIPE, ps->lost_why);
    }
    kick(ps, 0); /* callbacks and the lost callback from the loop */
}

/* The process left a request (named what) unanswered for ms: killed, as
   every later one would wait as long. */
static void kill_silent(struct privsep *ps, const char *what, unsigned ms)
{
    char text[100];

    snprintf(text, sizeof(text), "did not answer %s within %u ms: killed", what, ms);
    kill(ps->child.pid, SIGKILL);
    lose(ps, text, 1);
}

static struct entry *entry_find(struct privsep *ps, uint32_t id)
{
    for (size_t i = 0; i < PRIVSEP_PENDING_MAX; i++)
        if (ps->entries[i].id == id)
            return &ps->entries[i];
    return NULL;
}

static uint32_t new_id(struct privsep *ps)
{
    uint32_t id = ps->next_id++;

    if (ps->next_id == 0)
        ps->next_id = 1;
    return id;
}

static struct entry *entry_new(struct privsep *ps, enum kind kind, unsigned timeout_ms, void *arg)
{
    struct entry *e = entry_find(ps, 0);

    if (e == NULL)
        return NULL;
    memset(e, 0, sizeof(*e));
    e->id = new_id(ps);
    e->kind = kind;
    e->arg = arg;
    e->timeout_ms = timeout_ms;
    ps->npending++;
    return e;
}

static void entry_free(struct privsep *ps, struct entry *e)
{
    explicit_bzero(e, sizeof(*e));
    ps->npending--;
}

static void pump(struct privsep *ps);

/* The acknowledgement of the request in flight: its rules are in place (an
   outcome will come, within its timeout from now) or it was refused. */
static void take_ack(struct privsep *ps, struct entry *e, const union privsep_msg *m)
{
    ps->inflight = NULL;
    if (m->status.status != 0) {
        make_ready(ps, e, m->status.status, m->status.why);
    } else {
        e->acked = 1;
        e->deadline_ms = monotonic_ms() + e->timeout_ms + PRIVSEP_GRACE_MS;
        if (e->acked_cb != NULL) {
            e->tell_ack = 1;
            list_entry(ps, e);
        }
    }
    pump(ps);
}

/* An acknowledgement, an outcome (SYN, DONE) or a late answer. */
static void take_async(struct privsep *ps, const union privsep_msg *m)
{
    struct entry *e = entry_find(ps, m->h.id);
    enum kind want = m->h.type == PRIVSEP_SYN ? K_WATCH : K_INJECT;

    if (m->h.type == PRIVSEP_ACK && m->h.id != 0 && e != NULL && e == ps->inflight) {
        take_ack(ps, e, m);
        return;
    }
    if (m->h.type != PRIVSEP_SYN && m->h.type != PRIVSEP_DONE) {
        log_debug("a late %s for request %u (its wait was over)",
                  imsg_name(privsep_types, m->h.type), m->h.id);
        return;
    }
    if (m->h.id == 0 || e == NULL || !e->acked || e->ready || e->kind != want) {
        log_debug("a %s for request %u nobody waits for (timed out?)",
                  imsg_name(privsep_types, m->h.type), m->h.id);
        return;
    }
    if (m->h.type == PRIVSEP_SYN) {
        make_ready(ps, e, m->syn.status, m->syn.why);
        if (m->syn.status == 0) {
            memcpy(e->pkt, m->syn.pkt, m->syn.len);
            e->len = m->syn.len;
        }
    } else {
        make_ready(ps, e, m->status.status, m->status.why);
    }
}

/* One message from the socket: 1 and *m filled, 0 when there is none now,
   -1 when the socket is gone (lost).  A malformed one is logged by the
   channel and dropped. */
static int receive(struct privsep *ps, union privsep_msg *m)
{
    char why[PRIVSEP_WHY_MAX];
    int fd;

    for (;;) {
        errno = 0; /* a hang-up sets none */
        int rc = imsg_recv(&ps->ch, m, sizeof(*m), &fd, why, sizeof(why));
        if (rc == IMSG_NONE)
            return 0;
        if (rc == IMSG_CLOSED) {
            lose(ps, errno == 0 ? "closed its socket" : strerror(errno), 0);
            return -1;
        }
        if (rc > 0)
            return 1;
    }
}

/* Calls what is due: acknowledgements (the entry stays for its outcome)
   and outcomes (each entry once; a callback may ask again). */
static void deliver(struct privsep *ps)
{
    while (ps->ready.head != NULL) {
        struct entry *e = dlist_entry(ps->ready.head, struct entry, link);

        dlist_remove(&ps->ready, &e->link);
        e->listed = 0;
        if (e->tell_ack) {
            e->tell_ack = 0;
            if (e->ready && e->status < 0) {
                e->acked = 0; /* failed before anyone was told: as a refusal */
            } else {
                if (e->ready)
                    list_entry(ps, e); /* its outcome came too: next */
                e->acked_cb(e->arg, 0, NULL);
                continue;
            }
        }
        if (!e->ready)
            continue;
        struct entry copy = *e;
        entry_free(ps, e);
        if (!copy.acked && copy.acked_cb != NULL)
            copy.acked_cb(copy.arg, copy.status, copy.why);
        else if (copy.kind == K_WATCH)
            copy.syn_cb(copy.arg, copy.status, copy.status == 0 ? copy.pkt : NULL, copy.len,
                        copy.why);
        else
            copy.done_cb(copy.arg, copy.status, copy.why);
        explicit_bzero(&copy, sizeof(copy));
    }
}

/* What the privileged process has sent, taken in (at most READS_PER_WAKE). */
static void read_answers(struct privsep *ps)
{
    union privsep_msg m;

    for (int i = 0; i < READS_PER_WAKE && !ps->lost && !ps->closed; i++) {
        if (receive(ps, &m) <= 0)
            break;
        take_async(ps, &m);
    }
}

static void on_timer(uv_timer_t *t)
{
    struct privsep *ps = t->data;
    char why[PRIVSEP_WHY_MAX];

    /* An answer already in the socket is no timeout (libuv runs timers
       before it polls: a loop held up elsewhere finds both due). */
    read_answers(ps);
    uint64_t now = monotonic_ms();
    /* Each of its commands is bounded well below PRIVSEP_ACK_MS. */
    if (ps->inflight != NULL && !ps->lost && now >= ps->ack_deadline_ms)
        kill_silent(ps, imsg_name(privsep_types, ps->inflight->req.h.type), PRIVSEP_ACK_MS);
    for (size_t i = 0; i < PRIVSEP_PENDING_MAX; i++) {
        struct entry *e = &ps->entries[i];
        if (e->id != 0 && !e->sent && now >= e->queued_ms + PRIVSEP_ACK_MS) {
            /* Behind slow ones: the caller's own wait is over by now. */
            snprintf(why, sizeof(why),
                     "waited %u ms behind other requests to the privileged process",
                     PRIVSEP_ACK_MS);
            make_ready(ps, e, -ETIMEDOUT, why);
            continue;
        }
        if (e->id == 0 || !e->acked || e->ready || now < e->deadline_ms)
            continue;
        snprintf(why, sizeof(why), "the privileged process did not answer within %u ms",
                 e->timeout_ms + PRIVSEP_GRACE_MS);
        log_warnx("request %u: %s", e->id, why);
        make_ready(ps, e, -ETIMEDOUT, why);
    }
    deliver(ps);
    if (ps->lost && !ps->lost_told && !ps->closed) {
        ps->lost_told = 1;
        if (ps->lost_fn != NULL)
            ps->lost_fn(ps->lost_arg, ps->lost_why);
    }
    if (ps->npending > 0 && !ps->closed)
        uv_timer_start(&ps->timer, on_timer, SWEEP_MS, 0);
}

static void on_readable(uv_poll_t *h, int status, int events)
{
    struct privsep *ps = h->data;

    if (status < 0) {
        lose(ps, uv_strerror(status), 0);
        return;
    }
    if (events & UV_WRITABLE) {
        ps->writable_wait = 0;
        uv_poll_start(&ps->poll, UV_READABLE, on_readable);
        pump(ps);
    }
    read_answers(ps);
    deliver(ps);
}

/* Sends the oldest unsent request when none is in flight. */
static void pump(struct privsep *ps)
{
    while (ps->inflight == NULL && ps->unsent.head != NULL && !ps->lost && !ps->closed &&
           !ps->writable_wait) {
        struct entry *e = dlist_entry(ps->unsent.head, struct entry, link);

        if (imsg_send(&ps->ch, &e->req, e->req_size, -1, 0) < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                ps->writable_wait = 1;
                uv_poll_start(&ps->poll, UV_READABLE | UV_WRITABLE, on_readable);
            } else {
                lose(ps, strerror(errno), 0);
            }
            return;
        }
        dlist_remove(&ps->unsent, &e->link);
        e->sent = 1;
        ps->inflight = e;
        ps->ack_deadline_ms = monotonic_ms() + PRIVSEP_ACK_MS;
    }
}

/* Sends req and waits for the answer to it (want, or an ACK refusing it),
   at most timeout_ms.  Outcomes of other requests arriving meanwhile are
   kept for the loop.  0 and *ans, or -1 with why.  A process that does not
   answer in time is killed: each later call would block the loop as long. */
static int round_trip(struct privsep *ps, void *req, size_t size, uint32_t want, uint32_t id,
                      unsigned timeout_ms, union privsep_msg *ans, char *why, size_t whylen)
{
    uint64_t deadline = monotonic_ms() + timeout_ms;
    const char *what = imsg_name(privsep_types, ((const struct imsg_hdr *)req)->type);
    int sent = 0, rc = -1;

    while (!ps->lost) {
        uint64_t now = monotonic_ms();
        struct pollfd p = {.fd = ps->ch.fd, .events = sent ? POLLIN : POLLOUT};

        if (now >= deadline) {
            kill_silent(ps, what, timeout_ms);
            break;
        }
        if (poll(&p, 1, (int)(deadline - now)) <= 0)
            continue; /* EINTR, or the deadline */
        if (!sent) {
            if (imsg_send(&ps->ch, req, size, -1, 0) == 0)
                sent = 1;
            else if (errno != EAGAIN)
                lose(ps, strerror(errno), 0);
            continue;
        }
        int got = receive(ps, ans);
        if (got <= 0)
            continue;
        if (ans->h.id == id && (ans->h.type == want || ans->h.type == PRIVSEP_ACK)) {
            rc = 0;
            break;
        }
        take_async(ps, ans);
    }
    if (rc < 0 && ps->lost)
        snprintf(why, whylen, "%s", ps->lost_why);
    if (ps->ready.head != NULL || ps->lost)
        kick(ps, 0);
    return rc;
}

int privsep_start(struct privsep *ps, uv_loop_t *loop, char *why, size_t whylen)
{
    struct privsep_bare start = {.h = {.type = PRIVSEP_START, .id = 0}};
    union privsep_msg ans;

    ps->loop = loop;
    if (round_trip(ps, &start, sizeof(start), PRIVSEP_READY, 0, PRIVSEP_READY_MS, &ans, why,
                   whylen) < 0)
        return -1;
    if (ans.h.type != PRIVSEP_READY || ans.status.status != 0) {
        snprintf(why, whylen, "%s", ans.status.why);
        return -1;
    }
    if (uv_poll_init(loop, &ps->poll, ps->ch.fd) < 0) {
        snprintf(why, whylen, "cannot watch the privileged process's socket");
        return -1;
    }
    ps->poll.data = ps;
    uv_timer_init(loop, &ps->timer);
    ps->timer.data = ps;
    ps->handles = 2;
    ps->started = 1;
    uv_poll_start(&ps->poll, UV_READABLE, on_readable);
    return 0;
}

/* Why nothing can be asked now, or NULL. */
static int unavailable(struct privsep *ps, char *why, size_t whylen)
{
    if (ps->closed || !ps->started) {
        snprintf(why, whylen, "traversing is closed");
        return 1;
    }
    if (ps->lost) {
        snprintf(why, whylen, "traversing is no longer available: %s", ps->lost_why);
        return 1;
    }
    return 0;
}

/* Queues a plan's request (sent once those before it are acknowledged). */
static int ask(struct privsep *ps, struct entry *e, const void *req, size_t size)
{
    memcpy(&e->req, req, size);
    e->req_size = size;
    e->queued_ms = monotonic_ms();
    dlist_append(&ps->unsent, &e->link);
    pump(ps);
    if (!uv_is_active((uv_handle_t *)&ps->timer))
        kick(ps, SWEEP_MS);
    return 0;
}

/* The entry of a new plan, or NULL with why. */
static struct entry *plan_new(struct privsep *ps, enum kind kind, unsigned timeout_ms,
                              privsep_acked_fn acked_cb, void *arg, char *why, size_t whylen)
{
    struct entry *e;

    if (unavailable(ps, why, whylen))
        return NULL;
    if ((e = entry_new(ps, kind, timeout_ms, arg)) == NULL)
        snprintf(why, whylen, "%d traversals in progress already", PRIVSEP_PENDING_MAX);
    else
        e->acked_cb = acked_cb;
    return e;
}

/* An address into a message's 16 bytes; its family. */
static uint8_t put_addr(const struct rawpkt_addr *a, uint8_t out[PRIVSEP_ADDR_LEN])
{
    memset(out, 0, PRIVSEP_ADDR_LEN);
    memcpy(out, &a->u, a->family == AF_INET6 ? 16 : 4);
    return (uint8_t)a->family;
}

int privsep_watch_syn(struct privsep *ps, struct rawpkt_addr dst, uint16_t dport,
                      unsigned timeout_ms, privsep_acked_fn acked_cb, traverse_syn_fn cb, void *arg,
                      char *why, size_t whylen)
{
    struct privsep_watch_syn w;
    struct entry *e = plan_new(ps, K_WATCH, timeout_ms, acked_cb, arg, why, whylen);

    if (e == NULL)
        return -1;
    e->syn_cb = cb;
    memset(&w, 0, sizeof(w));
    w.h.type = PRIVSEP_WATCH_SYN;
    w.h.id = e->id;
    w.family = put_addr(&dst, w.dst);
    w.dport = dport;
    w.timeout_ms = timeout_ms;
    return ask(ps, e, &w, sizeof(w));
}

int privsep_inject(struct privsep *ps, const uint8_t *syn, size_t len, struct rawpkt_addr pub,
                   uint16_t pub_port, uint16_t allowed_port, unsigned timeout_ms,
                   traverse_done_fn cb, void *arg, char *why, size_t whylen)
{
    struct privsep_inject in;
    struct entry *e;

    if (len < PRIVSEP_SYN_MIN || len > TRAVERSE_PACKET_MAX) {
        snprintf(why, whylen, "a SYN of %zu bytes (%d to %d)", len, PRIVSEP_SYN_MIN,
                 TRAVERSE_PACKET_MAX);
        return -1;
    }
    if ((e = plan_new(ps, K_INJECT, timeout_ms, NULL, arg, why, whylen)) == NULL)
        return -1;
    e->done_cb = cb;
    memset(&in, 0, sizeof(in));
    in.h.type = PRIVSEP_INJECT;
    in.h.id = e->id;
    in.family = put_addr(&pub, in.pub);
    in.pub_port = pub_port;
    in.allowed_port = allowed_port;
    in.timeout_ms = timeout_ms;
    in.len = (uint16_t)len;
    memcpy(in.syn, syn, len);
    return ask(ps, e, &in, sizeof(in));
}

int privsep_rules(struct privsep *ps, unsigned *rules, char *why, size_t whylen)
{
    struct privsep_bare req = {.h = {.type = PRIVSEP_RULES}};
    union privsep_msg ans;

    if (unavailable(ps, why, whylen))
        return -1;
    req.h.id = new_id(ps);
    if (round_trip(ps, &req, sizeof(req), PRIVSEP_RULES_OK, req.h.id, PRIVSEP_ACK_MS, &ans, why,
                   whylen) < 0)
        return -1;
    if (ans.h.type != PRIVSEP_RULES_OK) {
        snprintf(why, whylen, "%s", ans.status.why); /* an ACK refusing it */
        return -1;
    }
    *rules = ans.rules.rules;
    return 0;
}

static void maybe_free(struct privsep *ps)
{
    if (ps->free_asked && ps->handles == 0)
        free(ps);
}

static void on_closed(uv_handle_t *h)
{
    struct privsep *ps = h->data;

    ps->handles--;
    maybe_free(ps);
}

void privsep_close(struct privsep *ps)
{
    if (ps == NULL || ps->closed)
        return;
    /* Closed first: a callback asking again is refused. */
    ps->closed = 1;
    for (size_t i = 0; i < PRIVSEP_PENDING_MAX; i++) {
        struct entry *e = &ps->entries[i];
        if (e->id != 0 && !e->ready)
            make_ready(ps, e, -ECANCELED, "traversing is closing");
    }
    deliver(ps);
    if (ps->started) {
        uv_poll_stop(&ps->poll);
        uv_timer_stop(&ps->timer);
        uv_close((uv_handle_t *)&ps->poll, on_closed);
        uv_close((uv_handle_t *)&ps->timer, on_closed);
    }
    /* The privileged process reads the end of the socket: it removes its
       rules and chains and exits. */
    close(ps->child.fd);
    ps->child.fd = ps->ch.fd = -1;
}

void privsep_free(struct privsep *ps)
{
    char how[120];

    if (ps == NULL)
        return;
    privsep_close(ps);
    if (!ps->child.reaped) {
        if (proc_wait(&ps->child, PRIVSEP_EXIT_MS)) {
            proc_how(&ps->child, how, sizeof(how));
            if (ps->started)
                log_info("the privileged process (pid %d) %s", (int)ps->child.pid, how);
            else
                log_debug("the privileged process (pid %d) %s", (int)ps->child.pid, how);
        } else {
            log_warnx("the privileged process (pid %d) did not exit within %d ms: killed",
                      (int)ps->child.pid, PRIVSEP_EXIT_MS);
        }
    }
    proc_stop(&ps->child, 0, NULL, 0); /* kills and reaps one still there */
    ps->free_asked = 1;
    maybe_free(ps);
}
