/* qcg_connect_*: the connect state machine.  Operations talk to the helper
   on their context's one connection, each LOOKUP under a request id of its
   own (the helper answers them in any order; ctx_read_helper hands each
   reply to its operation's inbox).  Each operation has an epoll descriptor
   that stays the same for the whole operation while the sockets it watches
   change:

     PLAN (-> BACKOFF -> PLAN while the rank is not published;
           -> NOHELPER -> PLAN while the helper is away: its restart)
       direct:     TCP connect -> TLS handshake (tls_psk.h) -> DONE
       traversing: the same; our helper watches for our SYN and hands it
                   over (an ERROR from it ends the attempt early)
       reversed:   REVERSED (the peer's helper calls our listener; the
                   accept side verifies its hello and hands it to us) -> DONE
       holepunch:  PUNCH (our helper punches and hands us the socket)
                   -> TLS handshake -> DONE
       proxy:      TCP connect to the proxy -> preamble -> paired byte
                   -> TLS handshake -> DONE

   An attempt that fails before the handshake (or does not get there within
   its technique's time) is recorded, reported to the helper (the broker
   remembers outcomes per cluster pair) and the helper is asked again with
   the techniques tried: the broker plans the next one.  An operation of
   qcg_connect_start_only asks for its one technique and never for another:
   the attempt's failure, or the broker's reason why the technique cannot
   work, ends it.  The caller sees one
   connect that succeeds, or one error naming every attempt.  A timerfd in
   the same epoll set wakes the caller for lookup retries, at an attempt's
   deadline and at the operation's deadline. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "address.h"
#include "backoff.h"
#include "internal.h"
#include "progress.h"
#include "technique.h"
#include "tls_psk.h"

enum op_state {
    OP_PLAN,
    OP_BACKOFF,
    OP_TCP,
    OP_PROXY_SEND,
    OP_PROXY_WAIT,
    OP_HS, /* the TLS handshake as the client */
    OP_REVERSED,
    OP_PUNCH,
    OP_NOHELPER, /* the helper is away: LOOKUP again once it is back */
    OP_DONE,
    OP_FAILED
};

struct qcg_connect_op {
    qcg_ctx *ctx;
    qcg_connect_op *next; /* in ctx->ops while listed */
    bool listed;
    int32_t rank;
    enum op_state state;
    int result;    /* the error once OP_FAILED */
    int sys_errno; /* the errno behind it, or 0 (qcg_connect_errno) */
    int epfd;
    int timerfd;
    int watched;       /* the socket in epfd besides the timer, or -1 */
    int helper_polled; /* traversing: the helper connection in epfd beside the TCP socket, or -1 */
    int tcp;
    uint64_t start_us, retry_at_us;
    /* The operation's bound: timeout_ms without progress, at most
       QCG_CONNECT_CAP_FACTOR times it in all; the current attempt's: its
       technique's, within the operation's (core/progress.h; what counts as
       progress: libqcgconn/README.md, "Deadlines"). */
    struct progress whole, attempt;
    unsigned backoffs; /* lookups asked again so far */
    unsigned lookups;
    uint32_t lookup_id; /* of the LOOKUP whose answers we take, or 0 */
    struct op_msg inbox[OP_INBOX];
    unsigned inbox_len;
    bool inbox_overflow;
    struct local_plan plan;
    uint32_t technique;   /* of the plan being executed */
    uint32_t tried_mask;  /* 1 << technique of each failed attempt */
    unsigned proxy_fails; /* proxy attempts failed so far (PROXY_ATTEMPTS) */
    int proxy_code;       /* ... the last one's error */
    uint32_t only;        /* qcg_connect_start_only's technique, else QCG_TECH_NONE */
    struct waiter waiter; /* reversed: listed in the context while waiting */
    bool waiting;
    uint8_t preamble[PROXY_PREAMBLE_SIZE];
    size_t psent;
    struct tls_hs *tls;      /* OP_HS */
    uint64_t hs_bytes;       /* ... its bytes moved when last looked at */
    struct qcg_tls *session; /* OP_DONE: encrypted, not handed out yet */
    unsigned encryption;     /* OP_DONE: QCG_CONN_* */
    int timeout_ms;
    char last_answer[LOCAL_MESSAGE_MAX]; /* the helper's last "not found", or short_of's */
    bool short_of;                       /* the last attempt lacked a local resource */
    bool same_plan; /* after the backoff, the same proxy plan again, not a LOOKUP */
    /* The helper's last answer to a LOOKUP when it was one to ask again
       (QCG_ENOTFOUND: not published; QCG_EUPSTREAM, QCG_EBUSY: the grid
       services unreachable or busy), 0 after a plan: a timeout says so. */
    int last_refusal;
    int short_errno;              /* ... which one (EMFILE, EADDRNOTAVAIL...) */
    char history[QCG_ERRMSG_MAX]; /* "reversed: why; proxy: why; " */
    char note[QCG_ERRMSG_MAX];    /* why IPv6 was left for IPv4, reported with the success */
    bool v4_fallback;             /* this direct attempt is the IPv4 one behind IPv6 */
    char err[QCG_ERRMSG_MAX];
};

/* Step results. */
#define STEP_MORE 1
#define STEP_WAIT 0

/* A relay is the last technique, and its failures pass: a token the proxy
   did not get within its hello timeout (an initiator starved of CPU under a
   storm), a target's helper short of ports.  So a connect asks for it again,
   with new tokens, before it gives up. */
#define PROXY_ATTEMPTS 2

static int fail(qcg_connect_op *op, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Appends src to the string in dst[size], truncating. */
static void append(char *dst, size_t size, const char *src)
{
    size_t used = strlen(dst), n = strlen(src);

    if (used + 1 >= size)
        return;
    if (n > size - used - 1)
        n = size - used - 1;
    memcpy(dst + used, src, n);
    dst[used + n] = '\0';
}

static const char *tech_name(uint32_t t);

/* The operation's error: the failed attempts first, then what ended it.
   With one technique only, the one attempt's name leads (the broker's reason
   before any attempt is given as it is). */
static int fail(qcg_connect_op *op, int code, const char *fmt, ...)
{
    char last[QCG_ERRMSG_MAX];
    va_list ap;

    op->sys_errno = take_cause();
    va_start(ap, fmt);
    vsnprintf(last, sizeof(last), fmt, ap);
    va_end(ap);
    op->err[0] = '\0';
    append(op->err, sizeof(op->err), op->history);
    if (op->only != QCG_TECH_NONE && op->technique != QCG_TECH_NONE) {
        append(op->err, sizeof(op->err), tech_name(op->technique));
        append(op->err, sizeof(op->err), ": ");
    }
    append(op->err, sizeof(op->err), last);
    op->state = OP_FAILED;
    op->result = code;
    return code;
}

static const char *tech_name(uint32_t t)
{
    return technique_name((enum technique)t);
}

/* What the plan tries, as tried masks and reports count it: hole punching
   over IPv6 apart (its failure leaves the IPv4 punch to try), the
   reflector's family being the punch's. */
static uint32_t attempt_of(const struct local_plan *plan)
{
    if (plan->technique == QCG_TECH_HOLEPUNCH && address_family(plan->address) == AF_INET6)
        return TECH_PUNCH6;
    return plan->technique;
}

/* The attempt's name in errors and notes: the punch's family once it
   matters (an IPv6 punch, or the IPv4 one after it). */
static const char *attempt_label(const qcg_connect_op *op)
{
    uint32_t a = attempt_of(&op->plan);

    if (a == TECH_PUNCH6)
        return "holepunch over IPv6";
    if (a == QCG_TECH_HOLEPUNCH && (op->tried_mask & (1u << TECH_PUNCH6)))
        return "holepunch over IPv4";
    return tech_name(a);
}

/* Makes fd (or nothing, -1) the socket epfd watches, for events. */
static int watch(qcg_connect_op *op, int fd, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.fd = fd};

    if (op->watched >= 0 && op->watched != fd) {
        epoll_ctl(op->epfd, EPOLL_CTL_DEL, op->watched, NULL);
        op->watched = -1;
    }
    if (fd < 0)
        return 0;
    if (epoll_ctl(op->epfd, op->watched == fd ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) < 0)
        return fail(op, QCG_ESYS, "epoll: %s", keep_errno(errno));
    op->watched = fd;
    return 0;
}

/* When the operation ends if nothing moves before. */
static uint64_t op_due(const qcg_connect_op *op)
{
    return progress_due(&op->whole);
}

/* When the current attempt ends if nothing moves before. */
static uint64_t attempt_due(const qcg_connect_op *op)
{
    uint64_t a = progress_due(&op->attempt), w = op_due(op);

    return a < w ? a : w;
}

/* Whether the attempt's own bound (not the operation's) has run out: the
   next technique is asked for. */
static bool attempt_over(const qcg_connect_op *op)
{
    return now_us() >= progress_due(&op->attempt) && progress_due(&op->attempt) < op_due(op);
}

/* Something moved toward the connection: both bounds start again. */
static void moved(qcg_connect_op *op)
{
    uint64_t now = now_us();

    progress_mark(&op->whole, now);
    progress_mark(&op->attempt, now);
}

void connect_progress(qcg_connect_op *op)
{
    moved(op);
}

/* How a bound ended its wait, for messages: "within 5000 ms" when nothing
   moved after its start, else the silence and the time in all, or the cap. */
static const char *wait_text(const struct progress *w, char *buf, size_t len)
{
    uint64_t now = now_us();

    if (progress_capped(w) && now >= w->cap_us)
        snprintf(buf, len, "within %u ms, its cap, though it was moving",
                 progress_elapsed_ms(w, now));
    else if (w->last_us == w->start_us)
        snprintf(buf, len, "within %u ms", (unsigned)(w->idle_us / 1000u));
    else
        snprintf(buf, len, "for %u ms since its last progress (%u ms in all)",
                 (unsigned)(w->idle_us / 1000u), progress_elapsed_ms(w, now));
    return buf;
}

static const char *bound_text(const qcg_connect_op *op, char *buf, size_t len)
{
    return wait_text(&op->whole, buf, len);
}

/* Arms the timer at at_us (CLOCK_MONOTONIC, capped by the deadline). */
static int arm_timer(qcg_connect_op *op, uint64_t at_us)
{
    struct itimerspec its;

    if (at_us > op_due(op))
        at_us = op_due(op);
    memset(&its, 0, sizeof(its));
    its.it_value.tv_sec = (time_t)(at_us / 1000000u);
    its.it_value.tv_nsec = (long)(at_us % 1000000u) * 1000;
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
        its.it_value.tv_nsec = 1;
    if (timerfd_settime(op->timerfd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
        return fail(op, QCG_ESYS, "timerfd: %s", keep_errno(errno));
    return 0;
}

void connect_wake(qcg_connect_op *op)
{
    op->waiting = false;
    (void)arm_timer(op, 1);
}

/* Takes a finished operation out of its context's list: it needs nothing of
   the context any more (it may be freed after qcg_close). */
static void op_unlist(qcg_connect_op *op)
{
    if (!op->listed)
        return;
    for (qcg_connect_op **pp = &op->ctx->ops; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == op) {
            *pp = op->next;
            break;
        }
    }
    op->listed = false;
}

/* Forgets the helper's answers to the current LOOKUP: later ones are
   dropped as nobody's. */
static void inbox_close(qcg_connect_op *op)
{
    for (unsigned i = 0; i < op->inbox_len; i++) {
        if (op->inbox[i].fd >= 0)
            close(op->inbox[i].fd);
    }
    op->inbox_len = 0;
    op->inbox_overflow = false;
    op->lookup_id = 0;
}

int connect_deliver(qcg_ctx *ctx, struct lmsg_reader *r)
{
    qcg_connect_op *op = ctx->ops;
    struct op_msg *m;

    while (op != NULL && (op->lookup_id == 0 || op->lookup_id != r->hdr.request_id))
        op = op->next;
    if (op == NULL)
        return -1;
    if (op->inbox_len == OP_INBOX || (r->hdr.type != LOCAL_PLAN && r->hdr.type != LOCAL_ERROR &&
                                      r->hdr.type != LOCAL_INCOMING)) {
        op->inbox_overflow = true;
    } else {
        m = &op->inbox[op->inbox_len++];
        memset(m, 0, sizeof(*m));
        m->type = r->hdr.type;
        m->fd = r->fd;
        r->fd = -1;
        memcpy(&m->u, &r->payload, local_payload_size[r->hdr.type]);
    }
    (void)arm_timer(op, 1);
    return 0;
}

void connect_helper_lost(qcg_ctx *ctx, int fd)
{
    /* fd is closed: the kernel dropped it from every epoll set, and its
       number may be reused.  The LOOKUPs sent on it are lost (lookup_id 0:
       asked again once the helper is back; ids are never reused, so the new
       helper's replies cannot be taken for theirs). */
    for (qcg_connect_op *op = ctx->ops; op != NULL; op = op->next) {
        op->helper_polled = -1;
        if (op->watched == fd)
            op->watched = -1;
        op->lookup_id = 0;
        (void)arm_timer(op, 1);
    }
}

void connect_helper_back(qcg_ctx *ctx)
{
    for (qcg_connect_op *op = ctx->ops; op != NULL; op = op->next) {
        if (op->state == OP_NOHELPER) {
            /* The helper answers again: progress for those waiting on it. */
            moved(op);
            (void)arm_timer(op, 1);
        }
    }
}

static uint32_t remaining_ms(const qcg_connect_op *op)
{
    uint64_t now = now_us(), due = op_due(op);

    return now >= due ? 0 : (uint32_t)((due - now) / 1000u);
}

static int watch_helper(qcg_connect_op *op);

/* Waits for the helper to come back (its restart), bounded by the
   operation's deadline; step_nohelper asks it again. */
static int wait_helper(qcg_connect_op *op)
{
    inbox_close(op);
    op->state = OP_NOHELPER;
    op->technique = QCG_TECH_NONE;
    if (arm_timer(op, 1) < 0)
        return op->result;
    return STEP_MORE;
}

/* Sends a LOOKUP and waits for the plan (or for the helper, if it is away). */
static int ask_helper(qcg_connect_op *op)
{
    struct local_lookup lk = {.to_rank = op->rank,
                              .timeout_ms = remaining_ms(op),
                              .tried_mask = op->tried_mask,
                              .only = op->only};

    inbox_close(op);
    if (!helper_ready(op->ctx))
        return wait_helper(op);
    op->lookups++;
    op->lookup_id = ctx_next_id(op->ctx);
    if (ctx_send(op->ctx, LOCAL_LOOKUP, op->lookup_id, &lk) < 0)
        return wait_helper(op);
    op->state = OP_PLAN;
    op->technique = QCG_TECH_NONE;
    if (watch_helper(op) < 0 || arm_timer(op, op_due(op)) < 0)
        return op->result;
    return STEP_MORE;
}

/* Tells the helper how the attempt ended (no reply: fire and forget). */
static void report(qcg_connect_op *op, bool ok, const char *why)
{
    struct local_report r;

    /* Lost with the helper, if it is away: a report is advice. */
    if (!helper_ready(op->ctx) || op->technique <= QCG_TECH_NONE || op->technique > QCG_TECH_PROXY)
        return;
    memset(&r, 0, sizeof(r));
    r.to_rank = op->rank;
    r.technique = attempt_of(&op->plan);
    r.ok = ok ? 1 : 0;
    r.setup_ms = progress_elapsed_ms(&op->attempt, now_us());
    snprintf(r.why, sizeof(r.why), "%s", why);
    (void)ctx_send(op->ctx, LOCAL_REPORT, 0, &r);
}

/* Stops watching the helper connection beside the TCP socket. */
static void unpoll_helper(qcg_connect_op *op)
{
    if (op->helper_polled >= 0) {
        epoll_ctl(op->epfd, EPOLL_CTL_DEL, op->helper_polled, NULL);
        op->helper_polled = -1;
    }
}

/* Watches the helper connection alone: an answer is due. */
static int watch_helper(qcg_connect_op *op)
{
    return op->ctx->helper_fd < 0 ? wait_helper(op) : watch(op, op->ctx->helper_fd, EPOLLIN);
}

/* Watches the helper connection beside the TCP socket. */
static int poll_helper(qcg_connect_op *op)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = op->ctx->helper_fd};

    /* No helper (it went away): the TCP attempt goes on alone. */
    if (op->ctx->helper_fd < 0)
        return 0;
    if (epoll_ctl(op->epfd, EPOLL_CTL_ADD, op->ctx->helper_fd, &ev) < 0)
        return fail(op, QCG_ESYS, "epoll: %s", keep_errno(errno));
    op->helper_polled = op->ctx->helper_fd;
    return 0;
}

/* Ends the current attempt's resources. */
static void attempt_cleanup(qcg_connect_op *op)
{
    if (op->waiting) {
        accept_unwait(op->ctx, &op->waiter);
        op->waiting = false;
    }
    if (op->waiter.fd >= 0) {
        qcg_tls_free(op->waiter.session);
        op->waiter.session = NULL;
        close(op->waiter.fd);
        op->waiter.fd = -1;
    }
    tls_hs_free(op->tls);
    op->tls = NULL;
    watch(op, -1, 0);
    unpoll_helper(op);
    if (op->tcp >= 0) {
        close(op->tcp);
        op->tcp = -1;
    }
}

static int attempt_failed(qcg_connect_op *op, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The attempt with the current plan failed: record why and ask the helper
   for the next technique (with the failed ones excluded), while there is
   time and a helper connection to ask on. */
static int attempt_failed(qcg_connect_op *op, int code, const char *fmt, ...)
{
    char why[QCG_ERRMSG_MAX];
    va_list ap;
    int err = take_cause();

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    attempt_cleanup(op);
    if (op->only != QCG_TECH_NONE) {
        /* No other technique to ask for: this attempt's failure is the answer. */
        report(op, false, why);
        keep_cause(err);
        return fail(op, code, "%s", why);
    }
    append(op->history, sizeof(op->history), op->v4_fallback ? "IPv4 direct" : attempt_label(op));
    append(op->history, sizeof(op->history), ": ");
    append(op->history, sizeof(op->history), why);
    append(op->history, sizeof(op->history), "; ");
    if (attempt_of(&op->plan) == QCG_TECH_PROXY) {
        op->proxy_code = code;
        op->proxy_fails++;
    }
    if (attempt_of(&op->plan) != QCG_TECH_PROXY || op->proxy_fails >= PROXY_ATTEMPTS)
        op->tried_mask |= 1u << attempt_of(&op->plan);
    report(op, false, why);
    if (now_us() >= op_due(op)) {
        char bound[96];

        return fail(op, QCG_ETIMEDOUT, "no time left for another technique (%s)",
                    bound_text(op, bound, sizeof(bound)));
    }
    return ask_helper(op);
}

/* How long an attempt of technique t may take before the next one is asked
   for (capped by the operation's deadline). */
static void attempt_begin(qcg_connect_op *op, unsigned ms)
{
    /* A plan's attempt runs: an earlier want of ports or descriptors no
       longer explains a timeout. */
    uint64_t now = now_us();

    op->short_of = false;
    progress_mark(&op->whole, now);
    progress_start(&op->attempt, now, ms, (uint64_t)ms * QCG_CONNECT_CAP_FACTOR, op->whole.cap_us);
}

/* Asks again after a backoff (20 ms doubling up to 500 ms, jittered): the rank is
   not published yet, or (lacked) this node lacked a port or descriptor;
   last_answer says which for the timeout's message. */
static int back_off(qcg_connect_op *op, bool lacked)
{
    op->retry_at_us =
        now_us() +
        backoff_ms(op->backoffs++, LOOKUP_BACKOFF_MIN_MS, LOOKUP_BACKOFF_MAX_MS) * 1000ull;
    op->state = OP_BACKOFF;
    op->short_of = lacked;
    inbox_close(op);
    if (watch(op, -1, 0) < 0 || arm_timer(op, op->retry_at_us) < 0)
        return op->result;
    return STEP_MORE;
}

/* The attempt could not even start for want of a local resource: not the
   technique's failure (nothing is reported to the broker, which would avoid
   it between the two clusters for everyone), so it is tried again after a
   backoff, while time remains.  A proxy plan is tried again as it is: the
   peer's helper has its order and waits at the proxy with the other token,
   and a new LOOKUP would send it another order, whose wait at the proxy
   would hold one of its node's ports for nothing (under a storm, where
   nodes run out of ports towards the proxy, that fed the shortage). */
static int short_of(qcg_connect_op *op, const char *call, int err)
{
    snprintf(op->last_answer, sizeof(op->last_answer),
             "%s: %s (this node is short of ports or descriptors)", call, strerror(err));
    op->short_errno = err;
    op->same_plan = op->technique == QCG_TECH_PROXY;
    attempt_cleanup(op);
    op->technique = QCG_TECH_NONE;
    return back_off(op, true);
}

static int start_tcp(qcg_connect_op *op);
static int to_ipv4(qcg_connect_op *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Direct over IPv6 failed and the plan has the peer's IPv4 address behind
   it: that one, in the same attempt.  Not reported as direct's failure (the
   broker would avoid direct between the two sites); said with the
   success, and in the error if IPv4 fails too. */
static int to_ipv4(qcg_connect_op *op, const char *fmt, ...)
{
    char why[QCG_ERRMSG_MAX / 4], line[QCG_ERRMSG_MAX / 2];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    attempt_cleanup(op);
    snprintf(line, sizeof(line), "IPv6 direct to rank %d failed: %s; ", op->rank, why);
    append(op->history, sizeof(op->history), line);
    snprintf(op->note, sizeof(op->note), "%sIPv4 direct to %s port %u", line,
             op->plan.fallback_address, op->plan.port);
    memcpy(op->plan.address, op->plan.fallback_address, sizeof(op->plan.address));
    op->plan.fallback_address[0] = '\0';
    op->v4_fallback = true;
    moved(op);
    return start_tcp(op);
}

/* Starts a non-blocking TCP connection to the plan's address. */
static int start_tcp(qcg_connect_op *op)
{
    const struct local_plan *p = &op->plan;
    struct sockaddr_storage sa;
    socklen_t len = address_sockaddr(p->address, p->port, &sa);

    if (len == 0)
        return fail(op, QCG_EPROTO, "the %s plan for rank %d has an invalid address '%s'",
                    tech_name(op->technique), op->rank, p->address);
    if (p->port == 0)
        return fail(op, QCG_EPROTO, "the %s plan for rank %d has port 0", tech_name(op->technique),
                    op->rank);

    op->tcp = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (op->tcp < 0 && local_shortage(errno))
        return short_of(op, "socket", errno);
    if (op->tcp < 0)
        return fail(op, QCG_ESYS, "socket: %s", keep_errno(errno));
    int rc = connect(op->tcp, (struct sockaddr *)&sa, len);
    int err = rc < 0 ? errno : 0;

    /* No port or descriptor yet: not a start, so no progress either. */
    if (rc < 0 && err != EINPROGRESS && local_shortage(err))
        return short_of(op, "connect", err);
    attempt_begin(op, op->technique == QCG_TECH_TRAVERSING ? TRAVERSING_TIMEOUT_MS
                      : op->technique == QCG_TECH_PROXY    ? (unsigned)op->timeout_ms
                      : p->fallback_address[0] != '\0'     ? DIRECT_V6_TIMEOUT_MS
                                                           : DIRECT_TIMEOUT_MS);
    if (rc < 0 && err != EINPROGRESS) {
        if (op->technique == QCG_TECH_PROXY)
            return attempt_failed(op, QCG_EPEER, "connect to the proxy at %s port %u: %s",
                                  p->address, p->port, keep_errno(err));
        if (p->fallback_address[0] != '\0')
            return to_ipv4(op, "connect to %s port %u: %s", p->address, p->port, keep_errno(err));
        return attempt_failed(op, QCG_EPEER, "connect to %s port %u: %s", p->address, p->port,
                              keep_errno(err));
    }
    op->state = OP_TCP;
    if (watch(op, op->tcp, EPOLLOUT) < 0 || arm_timer(op, attempt_due(op)) < 0)
        return op->result;
    /* Traversing: the helper's ERROR (it could not hand our SYN over) wakes
       us too. */
    if (op->technique == QCG_TECH_TRAVERSING && poll_helper(op) < 0)
        return op->result;
    return STEP_MORE;
}

/* Waits on our listener for the peer's helper to call back with the token. */
static int start_reversed(qcg_connect_op *op)
{
    qcg_ctx *ctx = op->ctx;
    uint64_t now = now_us();

    if (op->plan.token[0] == '\0' || strlen(op->plan.token) >= HS_TOKEN_MAX)
        return fail(op, QCG_EPROTO, "the reversed plan for rank %d has no valid token", op->rank);
    if (ctx->listen_fd < 0 || !ctx->accepting)
        return fail(op, QCG_ENOHELPER,
                    "a reversed connection needs this process's listener, "
                    "which is not published");
    memset(&op->waiter, 0, sizeof(op->waiter));
    op->waiter.op = op;
    op->waiter.rank = op->rank;
    memcpy(op->waiter.token, op->plan.token, strlen(op->plan.token) + 1);
    op->waiting = true;
    op->state = OP_REVERSED;
    (void)now;
    attempt_begin(op, REVERSED_TIMEOUT_MS);
    /* The accept side's descriptors wake us: the peer's connection and its
       hello arrive there. */
    if (watch(op, ctx->io_epfd, EPOLLIN) < 0 || arm_timer(op, attempt_due(op)) < 0)
        return op->result;
    accept_wait_token(ctx, &op->waiter);
    return STEP_MORE;
}

/* Our helper punches (or fails) and answers on our connection. */
static int start_punch(qcg_connect_op *op)
{
    attempt_begin(op, HOLEPUNCH_TIMEOUT_MS);
    op->state = OP_PUNCH;
    if (watch_helper(op) < 0 || arm_timer(op, attempt_due(op)) < 0)
        return op->result;
    return STEP_MORE;
}

/* The plan says how to reach the peer.  The helper connection stays open
   for the next technique and for the report. */
static int start_plan(qcg_connect_op *op)
{
    op->technique = op->plan.technique;
    switch (op->plan.technique) {
    case QCG_TECH_DIRECT:
    case QCG_TECH_TRAVERSING:
        watch(op, -1, 0);
        return start_tcp(op);
    case QCG_TECH_REVERSED:
        return start_reversed(op);
    case QCG_TECH_HOLEPUNCH:
        return start_punch(op);
    case QCG_TECH_PROXY:
        if (op->plan.token[0] == '\0' || strlen(op->plan.token) >= PROXY_TOKEN_FIELD)
            return fail(op, QCG_EPROTO, "the proxy plan for rank %d has no valid token", op->rank);
        watch(op, -1, 0);
        return start_tcp(op);
    default:
        return fail(op, QCG_ETECHNIQUE,
                    "rank %d needs technique %s, not supported by this library version", op->rank,
                    tech_name(op->plan.technique));
    }
}

static int build_hello(qcg_connect_op *op);

/* During a holepunch or traversing attempt the helper speaks again under
   the LOOKUP's id: the punched socket, or why its side failed. */
static int on_attempt_message(qcg_connect_op *op, struct op_msg *m)
{
    if (m->type == LOCAL_ERROR)
        return attempt_failed(op, QCG_EPEER, "%s",
                              m->u.error.message[0] ? m->u.error.message
                                                    : "our helper's side failed, without a reason");
    if (m->type != LOCAL_INCOMING || op->state != OP_PUNCH || m->fd < 0)
        return fail(op, QCG_EPROTO, "the helper sent message type %u during a %s attempt", m->type,
                    tech_name(op->technique));
    op->tcp = m->fd;
    m->fd = -1;
    moved(op);
    if (set_nonblocking(op->tcp, true) < 0)
        return fail(op, QCG_ESYS, "socket options: %s", keep_errno(errno));
    return build_hello(op);
}

/* The helper's answer to our LOOKUP. */
static int on_answer(qcg_connect_op *op, struct op_msg *m)
{
    int code;

    if (op->state == OP_PUNCH || op->state == OP_TCP)
        return on_attempt_message(op, m);
    if (m->type == LOCAL_ERROR) {
        code = local_error_code(m->u.error.code);
        if (code == QCG_ENOTFOUND || code == QCG_EUPSTREAM || code == QCG_EBUSY) {
            /* Not published yet (the peer may still be starting), or the
               services are restarting or over their rate (LOCAL_ERETRY,
               from an older helper or service QCG_EBUSY): asked again
               while the operation has time. */
            snprintf(op->last_answer, sizeof(op->last_answer), "%s", m->u.error.message);
            op->last_refusal = code;
            return back_off(op, false);
        }
        /* Nothing left after the relay failed: the relay's failure is the
           answer, not a grid without the technique (a caller may try again;
           the BTL does, within its connect timeout). */
        if (code == QCG_ETECHNIQUE && (op->tried_mask & (1u << QCG_TECH_PROXY)))
            code = op->proxy_code;
        /* The helper's or the broker's reason verbatim (qcg-probe shows it);
           an empty one still says who answered what. */
        if (m->u.error.message[0] == '\0')
            return fail(op, code, "our helper answered the lookup of rank %d with: %s", op->rank,
                        qcg_strerror(code));
        return fail(op, code, "%s", m->u.error.message);
    }
    if (m->type != LOCAL_PLAN)
        return fail(op, QCG_EPROTO, "helper answered LOOKUP with message type %u", m->type);
    op->plan = m->u.plan;
    op->v4_fallback = false;
    op->note[0] = '\0';
    op->last_refusal = 0;
    moved(op);
    if (op->only != QCG_TECH_NONE && op->plan.technique != op->only)
        return fail(op, QCG_EPROTO, "asked for %s only, the broker planned %s", tech_name(op->only),
                    tech_name(op->plan.technique));
    /* A plan for a technique already tried would loop: the helper or the
       broker misbehaves. */
    if (op->plan.technique < 32 && (op->tried_mask & (1u << attempt_of(&op->plan))))
        return fail(op, QCG_EPROTO, "the broker planned %s again after it failed",
                    attempt_label(op));
    /* The IPv4 punch after the IPv6 one: the success says why, the
       family first (a long reason is what a short report cuts). */
    if (attempt_of(&op->plan) == QCG_TECH_HOLEPUNCH && (op->tried_mask & (1u << TECH_PUNCH6))) {
        size_t n;

        snprintf(op->note, sizeof(op->note), "holepunch over IPv4 after ");
        append(op->note, sizeof(op->note), op->history);
        n = strlen(op->note);
        if (n >= 2 && strcmp(op->note + n - 2, "; ") == 0)
            op->note[n - 2] = '\0';
    }
    /* Only traversing and hole punching hear from the helper again. */
    if (op->plan.technique != QCG_TECH_TRAVERSING && op->plan.technique != QCG_TECH_HOLEPUNCH)
        inbox_close(op);
    return start_plan(op);
}

/* Takes the next answer from the inbox (read from the helper connection
   first, whoever it was for). */
static int step_helper(qcg_connect_op *op)
{
    struct op_msg m;
    int rc;

    helper_tick(op->ctx);
    if (op->inbox_overflow)
        return fail(op, QCG_EPROTO, "the helper sent more answers to one LOOKUP than it may");
    if (op->inbox_len == 0) {
        /* The helper went away with our LOOKUP (or the punch it was doing
           for us): asked again once it is back (a LOOKUP is idempotent). */
        if (op->lookup_id == 0 && (op->state == OP_PLAN || op->state == OP_PUNCH)) {
            attempt_cleanup(op);
            return wait_helper(op);
        }
        return STEP_WAIT;
    }
    m = op->inbox[0];
    memmove(&op->inbox[0], &op->inbox[1], (op->inbox_len - 1) * sizeof(op->inbox[0]));
    op->inbox_len--;
    rc = on_answer(op, &m);
    if (m.fd >= 0)
        close(m.fd);
    return rc;
}

static int step_punch(qcg_connect_op *op)
{
    int rc = step_helper(op);

    if (rc != STEP_WAIT || op->state != OP_PUNCH)
        return rc;
    if (attempt_over(op)) {
        char bound[96];

        return attempt_failed(op, QCG_ETIMEDOUT, "our helper did not punch through %s",
                              wait_text(&op->attempt, bound, sizeof(bound)));
    }
    return STEP_WAIT;
}

static int step_backoff(qcg_connect_op *op)
{
    if (now_us() < op->retry_at_us)
        return STEP_WAIT;
    if (op->same_plan) {
        op->same_plan = false;
        return start_plan(op);
    }
    return ask_helper(op);
}

/* Moves the reconnection on; asks again once the helper takes requests.
   Meanwhile the operation wakes for the helper connection (its HELLO and
   re-PUBLISH answers) and for the next reconnection attempt. */
static int step_nohelper(qcg_connect_op *op)
{
    qcg_ctx *ctx = op->ctx;

    helper_tick(ctx);
    if (helper_ready(ctx))
        return ask_helper(op);
    if (watch(op, ctx->helper_fd, EPOLLIN) < 0)
        return op->result;
    return STEP_WAIT;
}

/* The handshake as the client: encrypted or not as our policy says for
   the peer's cluster. */
static int build_hello(qcg_connect_op *op)
{
    struct tls_self self;
    char why[256];

    ctx_tls_self(op->ctx, &self);
    op->tls = tls_hs_client(&self, op->tcp, op->rank, NULL, (uint16_t)op->technique,
                            tls_policy_encrypts(&self, op->plan.cluster), why, sizeof(why));
    if (op->tls == NULL)
        return fail(op, QCG_ESYS, "handshake: %s", why);
    op->hs_bytes = 0;
    op->state = OP_HS;
    return STEP_MORE;
}

static int step_tcp(qcg_connect_op *op)
{
    struct pollfd p = {.fd = op->tcp, .events = POLLOUT};
    socklen_t len = sizeof(int);
    int soerr = 0;

    if (op->helper_polled >= 0) {
        int rc = step_helper(op);

        if (rc != STEP_WAIT || op->state != OP_TCP)
            return rc;
    }
    if (poll(&p, 1, 0) <= 0) {
        char bound[96];

        if (attempt_over(op) && op->plan.fallback_address[0] != '\0')
            return to_ipv4(op, "no connection to %s port %u %s", op->plan.address, op->plan.port,
                           wait_text(&op->attempt, bound, sizeof(bound)));
        if (attempt_over(op))
            return attempt_failed(op, QCG_ETIMEDOUT, "no connection to %s port %u %s",
                                  op->plan.address, op->plan.port,
                                  wait_text(&op->attempt, bound, sizeof(bound)));
        return STEP_WAIT;
    }
    if (getsockopt(op->tcp, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
        soerr = errno;
    if (soerr != 0 && op->technique == QCG_TECH_PROXY)
        return attempt_failed(op, QCG_EPEER, "connect to the proxy at %s port %u: %s",
                              op->plan.address, op->plan.port, keep_errno(soerr));
    if (soerr != 0 && op->plan.fallback_address[0] != '\0')
        return to_ipv4(op, "connect to %s port %u: %s", op->plan.address, op->plan.port,
                       keep_errno(soerr));
    if (soerr != 0)
        return attempt_failed(op, QCG_EPEER, "connect to %s port %u: %s", op->plan.address,
                              op->plan.port, keep_errno(soerr));
    moved(op);
    if (op->technique == QCG_TECH_PROXY) {
        memset(op->preamble, 0, sizeof(op->preamble));
        memcpy(op->preamble, PROXY_MAGIC, 4);
        memcpy(op->preamble + 4, op->plan.token, strlen(op->plan.token));
        op->psent = 0;
        op->state = OP_PROXY_SEND;
        return STEP_MORE;
    }
    return build_hello(op);
}

/* "QCGP" and our side's token, then the proxy's one byte once the peer
   presented the other side's token. */
static int step_proxy_send(qcg_connect_op *op)
{
    while (op->psent < sizeof(op->preamble)) {
        ssize_t n =
            send(op->tcp, op->preamble + op->psent, sizeof(op->preamble) - op->psent, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return watch(op, op->tcp, EPOLLOUT) < 0 ? op->result : STEP_WAIT;
        if (n < 0)
            return attempt_failed(op, QCG_EPEER, "the proxy at %s port %u: send: %s",
                                  op->plan.address, op->plan.port, keep_errno(errno));
        op->psent += (size_t)n;
        moved(op);
    }
    op->state = OP_PROXY_WAIT;
    return watch(op, op->tcp, EPOLLIN) < 0 ? op->result : STEP_MORE;
}

static int step_proxy_wait(qcg_connect_op *op)
{
    uint8_t byte;
    ssize_t n = recv(op->tcp, &byte, 1, 0);

    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return STEP_WAIT;
    if (n == 0)
        return attempt_failed(op, QCG_EPEER,
                              "the proxy at %s port %u closed the connection before pairing "
                              "(token refused, or rank %d never came)",
                              op->plan.address, op->plan.port, op->rank);
    if (n < 0)
        return attempt_failed(op, QCG_EPEER, "the proxy at %s port %u: %s", op->plan.address,
                              op->plan.port, keep_errno(errno));
    if (byte != PROXY_PAIRED)
        return attempt_failed(op, QCG_EPROTO,
                              "the proxy at %s port %u answered 0x%02x, not "
                              "the paired byte",
                              op->plan.address, op->plan.port, byte);
    explicit_bzero(op->preamble, sizeof(op->preamble));
    moved(op);
    return build_hello(op);
}

/* Where the handshake's peer sits, for messages. */
static void path(const qcg_connect_op *op, char *buf, size_t len)
{
    if (op->technique == QCG_TECH_PROXY)
        snprintf(buf, len, "rank %d via the proxy at %s port %u", op->rank, op->plan.address,
                 op->plan.port);
    else
        snprintf(buf, len, "rank %d at %s port %u", op->rank, op->plan.address, op->plan.port);
}

static int step_hs(qcg_connect_op *op)
{
    char where[160];
    int rc = tls_hs_step(op->tls);

    if (op->tls != NULL && tls_hs_bytes(op->tls) != op->hs_bytes) {
        op->hs_bytes = tls_hs_bytes(op->tls);
        moved(op);
    }
    /* Over IPv6 with IPv4 behind it, a handshake that stalls or fails
       (a middlebox, another process at that address) moves to IPv4 as a
       failed connect does. */
    bool v4_behind = op->plan.fallback_address[0] != '\0';

    if ((rc == TLS_WANT_READ || rc == TLS_WANT_WRITE) && v4_behind && attempt_over(op)) {
        char bound[96];

        path(op, where, sizeof(where));
        return to_ipv4(op, "handshake with %s: no answer %s", where,
                       wait_text(&op->attempt, bound, sizeof(bound)));
    }
    switch (rc) {
    case TLS_WANT_READ:
        return watch(op, op->tcp, EPOLLIN) < 0 ? op->result : STEP_WAIT;
    case TLS_WANT_WRITE:
        return watch(op, op->tcp, EPOLLOUT) < 0 ? op->result : STEP_WAIT;
    case TLS_DONE:
        rc = tls_hs_take(op->tls, &op->session, &op->encryption);
        op->tls = NULL;
        if (rc < 0)
            return fail(op, rc, "handshake: out of memory");
        op->state = OP_DONE;
        return STEP_MORE;
    default:
        path(op, where, sizeof(where));
        if (v4_behind)
            return to_ipv4(op, "handshake with %s: %s", where, tls_hs_why(op->tls));
        return fail(op, rc < 0 ? rc : QCG_EPROTO, "%s: %s", where, tls_hs_why(op->tls));
    }
}

/* The accept side verified the peer's hello and answered it for us. */
static int step_reversed(qcg_connect_op *op)
{
    (void)accept_pump(op->ctx);
    if (op->waiter.fd >= 0) {
        op->tcp = op->waiter.fd;
        op->session = op->waiter.session;
        op->encryption = op->waiter.encryption;
        op->waiter.fd = -1;
        op->waiter.session = NULL;
        watch(op, -1, 0);
        op->state = OP_DONE;
        return STEP_MORE;
    }
    if (now_us() >= attempt_due(op)) {
        char bound[96];

        return attempt_failed(op, QCG_ETIMEDOUT,
                              "rank %d did not connect back %s (its helper "
                              "could not reach %s port %u, or is down)",
                              op->rank, wait_text(&op->attempt, bound, sizeof(bound)),
                              op->ctx->address, op->ctx->listen_port);
    }
    return STEP_WAIT;
}

/* When a waiting operation wakes next if nothing comes: what its state
   waits for. */
static uint64_t wake_due(const qcg_connect_op *op)
{
    if (op->inbox_len > 0)
        return 1;
    if (op->state == OP_BACKOFF)
        return op->retry_at_us;
    if (op->state == OP_NOHELPER)
        return op->ctx->helper_at_us;
    /* An attempt's own bound; a handshake's only over IPv6 with IPv4
       behind it (otherwise it has the whole operation's). */
    if (op->state == OP_TCP || op->state == OP_PUNCH || op->state == OP_REVERSED ||
        (op->state == OP_HS && op->plan.fallback_address[0] != '\0'))
        return attempt_due(op);
    return op_due(op);
}

static int step(qcg_connect_op *op)
{
    switch (op->state) {
    case OP_PLAN:
        return step_helper(op);
    case OP_BACKOFF:
        return step_backoff(op);
    case OP_TCP:
        return step_tcp(op);
    case OP_PROXY_SEND:
        return step_proxy_send(op);
    case OP_PROXY_WAIT:
        return step_proxy_wait(op);
    case OP_HS:
        return step_hs(op);
    case OP_REVERSED:
        return step_reversed(op);
    case OP_PUNCH:
        return step_punch(op);
    case OP_NOHELPER:
        return step_nohelper(op);
    case OP_DONE:
    case OP_FAILED:
        break;
    }
    return STEP_WAIT;
}

/* Why the operation ran out of time, from the state it was in: the step
   that made no progress, where, and the bound. */
static int timed_out(qcg_connect_op *op)
{
    char where[160], bound[96], tech[24] = "";

    path(op, where, sizeof(where));
    bound_text(op, bound, sizeof(bound));
    /* fail() names an `only` operation's technique itself. */
    if (op->only == QCG_TECH_NONE && op->technique != QCG_TECH_NONE)
        snprintf(tech, sizeof(tech), "%s: ", tech_name(op->technique));
    switch (op->state) {
    case OP_PLAN:
    case OP_BACKOFF:
        if (op->short_of) {
            keep_cause(op->short_errno);
            return fail(op, QCG_ESYS, "no connection to rank %d %s: %s", op->rank, bound,
                        op->last_answer);
        }
        /* After a relay failed, its error: the broker's "retry" since (a
           proxy late with its beats) is not the grid services failing. */
        if (op->last_refusal == QCG_EUPSTREAM || op->last_refusal == QCG_EBUSY)
            return fail(op, op->proxy_fails > 0 ? op->proxy_code : QCG_EUPSTREAM,
                        "no plan for rank %d %s (%u lookups): %s", op->rank, bound, op->lookups,
                        op->last_answer);
        /* The cause's code, as above: a caller tells "no such process
           (any more)" from a slow path without reading the text. */
        if (op->last_refusal == QCG_ENOTFOUND)
            return fail(op, QCG_ENOTFOUND, "rank %d not published %s (%u lookups; helper: %s)",
                        op->rank, bound, op->lookups, op->last_answer);
        return fail(op, QCG_ETIMEDOUT, "no plan for rank %d %s: our helper did not answer",
                    op->rank, bound);
    case OP_TCP:
        if (op->technique == QCG_TECH_PROXY)
            return fail(op, QCG_ETIMEDOUT, "%sTCP connect to the proxy at %s port %u: no answer %s",
                        tech, op->plan.address, op->plan.port, bound);
        return fail(op, QCG_ETIMEDOUT, "%sTCP connect to rank %d at %s port %u: no answer %s", tech,
                    op->rank, op->plan.address, op->plan.port, bound);
    case OP_PROXY_SEND:
        return fail(op, QCG_ETIMEDOUT, "%sthe proxy at %s port %u took no preamble %s", tech,
                    op->plan.address, op->plan.port, bound);
    case OP_PROXY_WAIT:
        return fail(op, QCG_ETIMEDOUT, "%srank %d did not come to the proxy at %s port %u %s", tech,
                    op->rank, op->plan.address, op->plan.port, bound);
    case OP_REVERSED:
        return fail(op, QCG_ETIMEDOUT, "%srank %d did not connect back %s", tech, op->rank, bound);
    case OP_PUNCH:
        return fail(op, QCG_ETIMEDOUT, "%sno connection to rank %d %s", tech, op->rank, bound);
    case OP_NOHELPER: {
        char gone[QCG_ERRMSG_MAX / 2];

        helper_gone_text(op->ctx, gone, sizeof(gone));
        return fail(op, QCG_ENOHELPER, "no connection to rank %d %s: %s", op->rank, bound, gone);
    }
    default:
        return fail(op, QCG_ETIMEDOUT, "%shandshake with %s: no answer %s", tech, where, bound);
    }
}

static void op_free(qcg_connect_op *op)
{
    attempt_cleanup(op);
    inbox_close(op);
    op_unlist(op);
    qcg_tls_free(op->session);
    if (op->epfd >= 0)
        close(op->epfd);
    if (op->timerfd >= 0)
        close(op->timerfd);
    explicit_bzero(op, sizeof(*op));
    free(op);
}

int connect_end_all(qcg_ctx *ctx)
{
    int n = 0;

    for (qcg_connect_op *op; (op = ctx->ops) != NULL; n++) {
        attempt_cleanup(op);
        inbox_close(op);
        fail(op, QCG_EINVAL, "its context was closed before it finished");
        op_unlist(op);
        op->ctx = NULL;
        /* A caller that polls it wakes to the error. */
        (void)arm_timer(op, 1);
    }
    return n;
}

/* Both starts: every technique in the broker's order, or `only` that one. */
static int connect_start(qcg_ctx *ctx, int rank, uint32_t only, int timeout_ms,
                         qcg_connect_op **opp)
{
    struct epoll_event ev = {.events = EPOLLIN};
    qcg_connect_op *op;
    int rc;

    if (opp != NULL)
        *opp = NULL;
    if (ctx == NULL || opp == NULL || rank < 0 || timeout_ms <= 0) {
        if (ctx != NULL)
            ctx_seterr(ctx, "connect: need a rank >= 0 and a timeout > 0 ms");
        return QCG_EINVAL;
    }
    ctx_clearerr(ctx);
    /* Every context listens: a reversed connection calls it back. */
    if (!ctx->published && (rc = qcg_listen(ctx)) < 0)
        return rc;

    op = calloc(1, sizeof(*op));
    if (op == NULL)
        return QCG_ENOMEM;
    op->ctx = ctx;
    op->next = ctx->ops;
    ctx->ops = op;
    op->listed = true;
    op->rank = rank;
    op->only = only;
    op->timeout_ms = timeout_ms;
    op->epfd = op->timerfd = op->watched = op->helper_polled = op->tcp = -1;
    op->waiter.fd = -1;
    op->start_us = now_us();
    progress_start(&op->whole, op->start_us, (uint64_t)timeout_ms,
                   (uint64_t)timeout_ms * QCG_CONNECT_CAP_FACTOR, 0);

    op->epfd = epoll_create1(EPOLL_CLOEXEC);
    op->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    ev.data.fd = op->timerfd;
    if (op->epfd < 0 || op->timerfd < 0 ||
        epoll_ctl(op->epfd, EPOLL_CTL_ADD, op->timerfd, &ev) < 0) {
        ctx_seterr(ctx, "connect: %s", keep_errno(errno));
        rc = QCG_ESYS;
        goto fail;
    }
    if (ask_helper(op) < 0) {
        keep_cause(op->sys_errno);
        ctx_seterr(ctx, "%s", op->err);
        rc = op->result;
        goto fail;
    }
    *opp = op;
    return 0;
fail:
    op_free(op);
    return rc;
}

QCG_EXPORT int qcg_connect_start(qcg_ctx *ctx, int rank, int timeout_ms, qcg_connect_op **opp)
{
    return connect_start(ctx, rank, QCG_TECH_NONE, timeout_ms, opp);
}

QCG_EXPORT int qcg_connect_start_only(qcg_ctx *ctx, int rank, enum qcg_technique technique,
                                      int timeout_ms, qcg_connect_op **opp)
{
    if (technique < QCG_TECH_DIRECT || technique > QCG_TECH_PROXY) {
        if (opp != NULL)
            *opp = NULL;
        if (ctx != NULL)
            ctx_seterr(ctx, "connect: technique %d is not one of direct..proxy", (int)technique);
        return QCG_EINVAL;
    }
    return connect_start(ctx, rank, (uint32_t)technique, timeout_ms, opp);
}

QCG_EXPORT int qcg_connect_pollfd(const qcg_connect_op *op)
{
    return op == NULL ? QCG_EINVAL : op->epfd;
}

QCG_EXPORT int qcg_connect_errno(const qcg_connect_op *op)
{
    return op == NULL ? 0 : op->sys_errno;
}

QCG_EXPORT int qcg_connect_finish_sized(qcg_connect_op *op, struct qcg_conn_info *info,
                                        size_t info_size)
{
    uint64_t expirations;
    int rc, fd;

    if (op == NULL)
        return QCG_EINVAL;
    if (op->state == OP_FAILED)
        return op->result;
    if (op->state == OP_DONE && op->tcp < 0)
        return QCG_EINVAL; /* the socket was already returned */
    if (op->ctx != NULL && (rc = ctx_check_info(op->ctx, info, info_size)) < 0)
        return rc;
    if (read(op->timerfd, &expirations, sizeof(expirations)) < 0) {
        /* EAGAIN: the timer has not fired. */
    }
    /* Bounded: every step either advances the state or waits. */
    for (int i = 0; i < 64; i++) {
        rc = step(op);
        if (rc != STEP_MORE)
            break;
    }
    if (op->state != OP_DONE && op->state != OP_FAILED && progress_over(&op->whole, now_us())) {
        attempt_cleanup(op);
        timed_out(op);
    }
    if (op->state == OP_FAILED) {
        attempt_cleanup(op);
        keep_cause(op->sys_errno);
        ctx_seterr(op->ctx, "%s", op->err);
        op_unlist(op);
        return op->result;
    }
    if (op->state != OP_DONE) {
        /* A wake-up (an answer, a claim, the helper lost) took the timer:
           it goes back to what this state waits for. */
        (void)arm_timer(op, wake_due(op));
        return QCG_EAGAIN;
    }

    /* The caller gets an ordinary blocking socket. */
    fd = op->tcp;
    watch(op, -1, 0);
    report(op, true, op->note);
    unpoll_helper(op);
    inbox_close(op);
    op_unlist(op);
    if (set_nonblocking(fd, false) < 0 ||
        conn_set_options(fd, strcmp(op->plan.cluster, op->ctx->cluster) != 0) < 0) {
        rc = fail(op, QCG_ESYS, "socket options: %s", keep_errno(errno));
        keep_cause(op->sys_errno);
        ctx_seterr(op->ctx, "%s", op->err);
        return rc;
    }
    op->tcp = -1;
    conn_info_out(info, info_size, op->rank, op->technique, op->start_us, op->encryption,
                  op->session);
    op->session = NULL;
    return fd;
}

QCG_EXPORT void qcg_connect_free(qcg_connect_op *op)
{
    if (op != NULL)
        op_free(op);
}

QCG_EXPORT int qcg_connect_sized(qcg_ctx *ctx, int rank, int timeout_ms, struct qcg_conn_info *info,
                                 size_t info_size)
{
    qcg_connect_op *op;
    int rc;

    rc = qcg_connect_start(ctx, rank, timeout_ms, &op);
    if (rc < 0)
        return rc;
    /* Bounded by the operation's deadline, after which finish fails. */
    for (;;) {
        struct pollfd p = {.fd = qcg_connect_pollfd(op), .events = POLLIN};

        rc = qcg_connect_finish_sized(op, info, info_size);
        if (rc != QCG_EAGAIN)
            break;
        if (poll(&p, 1, (int)remaining_ms(op) + 10) < 0 && errno != EINTR) {
            ctx_seterr(ctx, "poll: %s", keep_errno(errno));
            rc = QCG_ESYS;
            break;
        }
    }
    qcg_connect_free(op);
    return rc;
}
