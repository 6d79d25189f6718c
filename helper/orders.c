/* The broker's orders for this node; see orders.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "address.h"
#include "backoff.h"
#include "dlist.h"
#include "hex.h"
#include "log.h"
#include "ratelimit.h"
#include "orders.h"
#include "punch.h"
#include "responder.h"
#include "shortage.h"
#include "sock_error.h"
#include "stall_timer.h"
#include "qcgconn.h"
#include "privsep.h"

#define PROXY_TOKEN_FIELD 128
#define PROXY_PREAMBLE_SIZE (4 + PROXY_TOKEN_FIELD)
#define PROXY_PAIRED 0x01
/* A process busy writing to us: how often, and how many times, to retry. */
#define DELIVER_RETRY_MS 10
#define DELIVER_TRIES 200
/* How often held orders look at their PUBLISH's answer. */
#define HOLD_CHECK_MS 10
/* A connect this node lacks a port or descriptor for is tried again after
   this backoff (doubling, jittered), within the order's own bound: ports
   towards the proxy's one address and port free up as pairs end. */
#define SHORT_RETRY_MIN_MS 20
#define SHORT_RETRY_MAX_MS 500

enum action_state { A_SHORT, A_CONNECT, A_PREAMBLE, A_PAIR, A_DELIVER, A_PUNCH, A_INJECT };
enum action_kind { K_CONNECT_BACK, K_PROXY, K_PUNCH, K_INJECT };

struct action {
    struct orders *o;
    struct dlink link; /* in the orders' active list */
    struct command cmd;
    enum action_kind kind;
    int proxy;   /* proxy-connect */
    int polling; /* the poll handle is initialised (it needs the socket) */
    struct punch *punch;
    int injecting; /* the traverse engine may still call back */
    int fd;
    enum action_state state;
    uv_poll_t poll;
    uv_timer_t timer;
    int handles; /* open handles; the last close frees */
    size_t sent;
    uint8_t preamble[PROXY_PREAMBLE_SIZE];
    unsigned tries;
    unsigned shortages; /* connects this node lacked a port or descriptor for */
    uint64_t start_ms;
    struct stall_deadline deadline; /* A_CONNECT to A_PAIR: core/stall.h */
};

/* An order waiting for the answer to its target's PUBLISH, or for a slot. */
struct held {
    struct dlink link;
    struct command cmd;
    uint64_t until_ms;
};

struct orders {
    uv_loop_t *loop;
    struct local_server *srv;
    const struct helper_config *cfg;
    struct privsep *ps;
    struct responders *responders; /* probe-listen */
    uv_async_t async;
    struct dlist active; /* of struct action */
    unsigned nactive;
    struct dlist held; /* of struct held, oldest first */
    unsigned nheld;
    uv_timer_t hold_timer;
    struct ratelimit hold_log;
    struct ratelimit fail_log; /* actions that failed */
    struct dlist waiting;      /* of struct held, oldest first */
    unsigned nwaiting;
    uv_timer_t wait_timer;

    pthread_mutex_t lock; /* guards the fields below */
    int closed;
    size_t head, count;
    struct command queue[ORDERS_QUEUED_MAX];
};

static void on_async(uv_async_t *h);
static void on_wait_timer(uv_timer_t *t);

struct orders *orders_new(uv_loop_t *loop, struct local_server *srv,
                          const struct helper_config *cfg, struct privsep *ps, char *err,
                          size_t errlen)
{
    struct orders *o = calloc(1, sizeof(*o));

    if (o == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    o->loop = loop;
    o->srv = srv;
    o->cfg = cfg;
    o->ps = ps;
    pthread_mutex_init(&o->lock, NULL);
    if (uv_async_init(loop, &o->async, on_async) < 0) {
        snprintf(err, errlen, "cannot create the orders' wake-up");
        pthread_mutex_destroy(&o->lock);
        free(o);
        return NULL;
    }
    o->async.data = o;
    uv_timer_init(loop, &o->hold_timer);
    o->hold_timer.data = o;
    uv_timer_init(loop, &o->wait_timer);
    o->wait_timer.data = o;
    return o;
}

void orders_push(struct orders *o, const struct command *cmd)
{
    pthread_mutex_lock(&o->lock);
    if (o->closed || o->count == ORDERS_QUEUED_MAX) {
        int closed = o->closed;

        pthread_mutex_unlock(&o->lock);
        if (!closed)
            log_warnx("%s for job %s rank %d dropped: %d orders already waiting", cmd->kind,
                      cmd->job, cmd->rank, ORDERS_QUEUED_MAX);
        return;
    }
    o->queue[(o->head + o->count) % ORDERS_QUEUED_MAX] = *cmd;
    o->count++;
    /* Under the lock: orders_close cannot have closed the handle yet. */
    uv_async_send(&o->async);
    pthread_mutex_unlock(&o->lock);
}

static void on_closed(uv_handle_t *h)
{
    struct action *a = h->data;

    if (--a->handles > 0)
        return;
    if (a->fd >= 0)
        close(a->fd);
    explicit_bzero(a, sizeof(*a));
    free(a);
}

static const char *what(const struct action *a)
{
    return a->cmd.kind;
}

static void finish(struct action *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Ends the action; fmt (NULL on success) says why it failed. */
static void finish(struct action *a, const char *fmt, ...)
{
    struct orders *o = a->o;

    if (fmt != NULL) {
        char why[300];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
        unsigned left_out;
        /* The initiator falls back and says why; a storm's fallbacks are
           many, so a few lines per 10 s with the count of the others. */
        if (ratelimit_burst_ok(&o->fail_log, uv_now(o->loop), 10000, 5, &left_out))
            log_warnx("%s for job %s rank %d (initiator rank %d) failed after %llu ms: %s (%u "
                      "such lines left out)",
                      what(a), a->cmd.job, a->cmd.rank, a->cmd.peer_rank,
                      (unsigned long long)(uv_now(o->loop) - a->start_ms), why, left_out);
    }
    dlist_remove(&o->active, &a->link);
    o->nactive--;
    if (a->punch != NULL) {
        punch_cancel(a->punch);
        a->punch = NULL;
    }
    uv_timer_stop(&a->timer);
    if (a->polling) {
        uv_poll_stop(&a->poll);
        uv_close((uv_handle_t *)&a->poll, on_closed);
    }
    uv_close((uv_handle_t *)&a->timer, on_closed);
    /* A slot is free: the waiting orders get it from the loop, not from
       inside whatever ended this action. */
    if (o->waiting.head != NULL && !o->closed)
        uv_timer_start(&o->wait_timer, on_wait_timer, 0, 0);
}

static void on_timer(uv_timer_t *t);

/* The deadline of a connect or a pairing: time this helper did not run
   (stopped, starved) does not count against the peer (core/stall.h). */
static void arm_deadline(struct action *a, uint64_t ms)
{
    stall_timer_start(&a->timer, &a->deadline, on_timer, ms);
}

static void on_wait_timer(uv_timer_t *t);

/* The socket is ready for the process: hand it over on its control
   connection, or retry shortly while that connection is busy. */
static void deliver(struct action *a)
{
    struct local_incoming in;
    char why[200] = "";
    pid_t pid = 0;

    if (a->polling)
        uv_poll_stop(&a->poll);
    memset(&in, 0, sizeof(in));
    in.peer_rank = a->cmd.peer_rank;
    in.technique = a->kind == K_PROXY   ? QCG_TECH_PROXY
                   : a->kind == K_PUNCH ? QCG_TECH_HOLEPUNCH
                                        : QCG_TECH_REVERSED;
    in.role = a->kind == K_CONNECT_BACK ? LOCAL_ROLE_HELLO : LOCAL_ROLE_ACCEPT;
    if (a->kind == K_CONNECT_BACK)
        snprintf(in.token, sizeof(in.token), "%s", a->cmd.token);
    int rc = local_server_deliver(a->o->srv, a->cmd.job, a->cmd.rank, &in, a->fd, &pid, why,
                                  sizeof(why));
    explicit_bzero(&in, sizeof(in));
    if (rc == 0) {
        log_info("%s for job %s rank %d (initiator rank %d): connected to %s port %d in %llu ms, "
                 "handed to pid %d",
                 what(a), a->cmd.job, a->cmd.rank, a->cmd.peer_rank, a->cmd.address, a->cmd.port,
                 (unsigned long long)(uv_now(a->o->loop) - a->start_ms), (int)pid);
        finish(a, NULL);
        return;
    }
    if (rc < 0) {
        finish(a, "%s", why);
        return;
    }
    if (++a->tries > DELIVER_TRIES) {
        finish(a, "pid %d does not read its control connection", (int)pid);
        return;
    }
    a->state = A_DELIVER;
    uv_timer_start(&a->timer, on_timer, DELIVER_RETRY_MS, 0);
}

static void on_io(uv_poll_t *h, int status, int events);

static void send_preamble(struct action *a)
{
    while (a->sent < sizeof(a->preamble)) {
        ssize_t n = send(a->fd, a->preamble + a->sent, sizeof(a->preamble) - a->sent, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n < 0) {
            finish(a, "the proxy at %s port %d: send: %s", a->cmd.address, a->cmd.port,
                   strerror(errno));
            return;
        }
        a->sent += (size_t)n;
    }
    explicit_bzero(a->preamble, sizeof(a->preamble));
    a->state = A_PAIR;
    uv_poll_start(&a->poll, UV_READABLE, on_io);
    arm_deadline(a, PROXY_PAIR_TIMEOUT_MS);
}

static void on_connected(struct action *a)
{
    int soerr = 0;
    socklen_t len = sizeof(soerr);

    if (getsockopt(a->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
        soerr = errno;
    if (soerr == EINPROGRESS)
        return;
    if (soerr != 0) {
        finish(a, "connect to %s port %d: %s", a->cmd.address, a->cmd.port, strerror(soerr));
        return;
    }
    if (!a->proxy) {
        deliver(a);
        return;
    }
    memcpy(a->preamble, "QCGP", 4);
    memcpy(a->preamble + 4, a->cmd.token, strlen(a->cmd.token));
    a->state = A_PREAMBLE;
    uv_poll_start(&a->poll, UV_WRITABLE, on_io);
    send_preamble(a);
}

static void on_paired(struct action *a)
{
    uint8_t byte;
    ssize_t n = recv(a->fd, &byte, 1, 0);

    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n == 0)
        finish(a,
               "the proxy at %s port %d closed the connection before pairing (token "
               "refused, or the initiator never came)",
               a->cmd.address, a->cmd.port);
    else if (n < 0)
        finish(a, "the proxy at %s port %d: %s", a->cmd.address, a->cmd.port, strerror(errno));
    else if (byte != PROXY_PAIRED)
        finish(a, "the proxy at %s port %d answered 0x%02x, not the paired byte", a->cmd.address,
               a->cmd.port, byte);
    else
        deliver(a);
}

static void on_io(uv_poll_t *h, int status, int events)
{
    struct action *a = h->data;

    (void)events;
    if (status < 0) {
        finish(a, "%s port %d: %s", a->cmd.address, a->cmd.port,
               strerror(sock_error(a->fd, status)));
        return;
    }
    switch (a->state) {
    case A_SHORT:
        break;
    case A_CONNECT:
        on_connected(a);
        break;
    case A_PREAMBLE:
        send_preamble(a);
        break;
    case A_PAIR:
        on_paired(a);
        break;
    case A_DELIVER:
    case A_PUNCH:
    case A_INJECT:
        break;
    }
}

static void connect_out(struct action *a);

static void on_timer(uv_timer_t *t)
{
    struct action *a = t->data;

    if ((a->state == A_CONNECT || a->state == A_PREAMBLE || a->state == A_PAIR) &&
        stall_timer_postponed(&a->timer, &a->deadline, on_timer))
        return;
    switch (a->state) {
    case A_SHORT:
        connect_out(a);
        break;
    case A_DELIVER:
        deliver(a);
        break;
    case A_PAIR:
        finish(a,
               "no pairing at the proxy at %s port %d within %d s (the initiator never "
               "came)",
               a->cmd.address, a->cmd.port, PROXY_PAIR_TIMEOUT_MS / 1000);
        break;
    case A_PUNCH:
    case A_INJECT:
        break; /* their own modules time out */
    default:
        finish(a, "connect to %s port %d: no answer within %d ms", a->cmd.address, a->cmd.port,
               CONNECT_BACK_TIMEOUT_MS);
        break;
    }
}

static socklen_t make_addr(const char *address, int port, struct sockaddr_storage *sa)
{
    return address_sockaddr(address, (uint16_t)port, sa);
}

static struct action *action_new(struct orders *o, const struct command *cmd)
{
    struct action *a = calloc(1, sizeof(*a));

    if (a == NULL) {
        log_warnx("%s for job %s rank %d refused: out of memory", cmd->kind, cmd->job, cmd->rank);
        return NULL;
    }
    a->o = o;
    a->cmd = *cmd;
    a->kind = strcmp(cmd->kind, "proxy-connect") == 0 ? K_PROXY
              : strcmp(cmd->kind, "punch") == 0       ? K_PUNCH
              : strcmp(cmd->kind, "inject") == 0      ? K_INJECT
                                                      : K_CONNECT_BACK;
    a->proxy = a->kind == K_PROXY;
    a->start_ms = uv_now(o->loop);
    a->fd = -1;
    return a;
}

/* Lists the action and opens its timer (its poll handle is open already when
   it has a socket). */
static void action_add(struct orders *o, struct action *a)
{
    uv_timer_init(o->loop, &a->timer);
    a->timer.data = a;
    a->handles = 1;
    if (a->polling) {
        a->poll.data = a;
        a->handles++;
    }
    dlist_append(&o->active, &a->link);
    o->nactive++;
}

static void on_punched(void *arg, const struct punch_result *r)
{
    struct action *a = arg;

    a->punch = NULL;
    if (r->status != 0) {
        finish(a, "%s", r->why);
        return;
    }
    a->fd = r->fd;
    log_info("punch for job %s rank %d (initiator rank %d): connected from port %u (seen as "
             "%s) to %s in %u ms%s",
             a->cmd.job, a->cmd.rank, a->cmd.peer_rank, r->local_port, r->own_text, r->peer_text,
             r->setup_ms, strchr(r->peer_addr, ':') != NULL ? ", over IPv6" : "");
    deliver(a);
}

static void start_punch(struct orders *o, struct action *a)
{
    struct punch_params p;
    char why[200] = "";

    punch_params_for_node(&p, a->cmd.address, a->cmd.port, a->cmd.token,
                          (const char(*)[QCG_ADDR_MAX])o->cfg->addrs, o->cfg->naddrs, o->cfg->ports,
                          o->cfg->first_ttl);
    a->state = A_PUNCH;
    action_add(o, a);
    a->punch = punch_start(o->loop, &p, on_punched, a, why, sizeof(why));
    explicit_bzero(&p, sizeof(p));
    if (a->punch == NULL)
        finish(a, "%s", why);
}

static int unhex(const char *hex, uint8_t *out, size_t max)
{
    size_t n = strlen(hex) / 2;

    if (n > max || hex_decode(hex, n, out, false) < 0)
        return -1;
    return (int)n;
}

static void on_injected(void *arg, int status, const char *why)
{
    struct action *a = arg;

    a->injecting = 0;
    if (status < 0) {
        finish(a, "%s", why);
        return;
    }
    log_info("inject for job %s rank %d (initiator rank %d at %s port %d): handshake completed "
             "in %llu ms",
             a->cmd.job, a->cmd.rank, a->cmd.peer_rank, a->cmd.address, a->cmd.port,
             (unsigned long long)(uv_now(a->o->loop) - a->start_ms));
    finish(a, NULL);
}

/* Only towards the port the process of that job published here, and only
   this once (an order's sequence number is executed once). */
static void start_inject(struct orders *o, struct action *a)
{
    uint8_t pkt[QCG_PACKET_MAX];
    struct rawpkt_addr pub;
    char why[200] = "";
    int port = local_server_published_port(o->srv, a->cmd.job, a->cmd.rank);
    int len = unhex(a->cmd.packet, pkt, sizeof(pkt));

    a->state = A_INJECT;
    action_add(o, a);
    if (o->ps == NULL) {
        finish(a, "refused: this helper cannot inject (no privileges, or intercept = no)");
        return;
    }
    if (len <= 0 || rawpkt_addr_parse(a->cmd.address, &pub) < 0 || port <= 0) {
        finish(a, "refused: %s", port <= 0 ? "nothing published" : "malformed packet or address");
        return;
    }
    if (privsep_inject(o->ps, pkt, (size_t)len, pub, (uint16_t)a->cmd.port, (uint16_t)port,
                       ORDER_INJECT_TIMEOUT_MS, on_injected, a, why, sizeof(why)) < 0) {
        finish(a, "refused: %s", why);
        return;
    }
    a->injecting = 1;
}

/* How long an order may wait for a local port or descriptor: as long as
   its peer waits for it (the initiator's reversed attempt, its proxy wait). */
static uint64_t short_bound_ms(const struct action *a)
{
    return a->proxy ? PROXY_PAIR_TIMEOUT_MS : CONNECT_BACK_TIMEOUT_MS;
}

/* The order's TCP connect (connect-back, proxy-connect).  A connect this
   node lacks a port or descriptor for (every local port towards the proxy's
   one address and port taken by the node's other relayed pairs, under a
   storm) is tried again shortly: dropped, it left the initiator waiting at
   the proxy for a side that never came. */
static void connect_out(struct action *a)
{
    struct orders *o = a->o;
    struct sockaddr_storage sa;
    socklen_t salen = make_addr(a->cmd.address, a->cmd.port, &sa);

    a->fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (a->fd < 0 || (connect(a->fd, (struct sockaddr *)&sa, salen) < 0 && errno != EINPROGRESS)) {
        int err = errno;
        uint64_t waited = uv_now(o->loop) - a->start_ms;

        if (a->fd >= 0)
            close(a->fd);
        a->fd = -1;
        if (local_shortage(err) && waited < short_bound_ms(a)) {
            unsigned ms = backoff_ms(a->shortages++, SHORT_RETRY_MIN_MS, SHORT_RETRY_MAX_MS);

            log_debug("%s for job %s rank %d (initiator rank %d): connect to %s port %d: %s "
                      "(this node is short of ports or descriptors): again in %u ms",
                      what(a), a->cmd.job, a->cmd.rank, a->cmd.peer_rank, a->cmd.address,
                      a->cmd.port, strerror(err), ms);
            a->state = A_SHORT;
            uv_timer_start(&a->timer, on_timer, ms, 0);
            return;
        }
        finish(a, "connect to %s port %d: %s%s", a->cmd.address, a->cmd.port, strerror(err),
               local_shortage(err) ? " (this node was short of ports or descriptors all along)"
                                   : "");
        return;
    }
    if (uv_poll_init_socket(o->loop, &a->poll, a->fd) < 0) {
        finish(a, "cannot watch the socket");
        return;
    }
    a->poll.data = a;
    a->polling = 1;
    a->handles++;
    a->state = A_CONNECT;
    uv_poll_start(&a->poll, UV_WRITABLE, on_io);
    arm_deadline(a, CONNECT_BACK_TIMEOUT_MS);
}

static void start(struct orders *o, const struct command *cmd);

/* The job's orders in progress (active) or held. */
enum order_list { L_ACTIVE, L_HELD, L_WAITING };

static unsigned job_orders(const struct orders *o, const char *job, enum order_list which)
{
    unsigned n = 0;
    const struct dlink *l = which == L_ACTIVE ? o->active.head
                            : which == L_HELD ? o->held.head
                                              : o->waiting.head;

    for (; l != NULL; l = l->next) {
        const struct command *c = which == L_ACTIVE ? &dlist_entry(l, struct action, link)->cmd
                                                    : &dlist_entry(l, struct held, link)->cmd;
        n += strcmp(c->job, job) == 0;
    }
    return n;
}

/* A refusal one job can repeat at will: logged at most every 10 s. */
static void refuse_share(struct orders *o, const struct command *cmd, const char *why)
{
    unsigned left_out;

    if (ratelimit_ok(&o->hold_log, uv_now(o->loop), 10000, &left_out))
        log_warnx("%s for job %s rank %d (initiator rank %d) refused: %s (%u such lines left "
                  "out)",
                  cmd->kind, cmd->job, cmd->rank, cmd->peer_rank, why, left_out);
}

static void on_hold_timer(uv_timer_t *t)
{
    struct orders *o = t->data;
    uint64_t now = uv_now(o->loop);
    struct dlink *l = o->held.head;

    while (l != NULL) {
        struct held *h = dlist_entry(l, struct held, link);
        char why[200] = "";
        int st = local_server_publishes(o->srv, h->cmd.job, h->cmd.rank, why, sizeof(why));

        l = l->next;
        if (st == 2 && now < h->until_ms)
            continue;
        dlist_remove(&o->held, &h->link);
        o->nheld--;
        if (st == 1)
            start(o, &h->cmd);
        else
            log_warnx("%s for job %s rank %d (initiator rank %d) refused: %s", h->cmd.kind,
                      h->cmd.job, h->cmd.rank, h->cmd.peer_rank,
                      st == 2 ? "its PUBLISH was not answered in time"
                              : "its PUBLISH was refused, "
                                "or the process left");
        explicit_bzero(h, sizeof(*h));
        free(h);
    }
    if (o->held.head != NULL)
        uv_timer_start(&o->hold_timer, on_hold_timer, HOLD_CHECK_MS, 0);
}

/* Keeps cmd on list (hold or wait) for ms: false when the list, or the
   job's part of it, is full. */
static bool park(struct orders *o, enum order_list which, const struct command *cmd, uint64_t ms)
{
    struct dlist *list = which == L_HELD ? &o->held : &o->waiting;
    unsigned *n = which == L_HELD ? &o->nheld : &o->nwaiting;
    unsigned max = which == L_HELD ? ORDERS_HELD_MAX : ORDERS_WAITING_MAX;
    unsigned job_max = which == L_HELD ? ORDERS_JOB_HELD_MAX : ORDERS_JOB_WAITING_MAX;
    struct held *h;

    if (*n >= max || job_orders(o, cmd->job, which) >= job_max ||
        (h = calloc(1, sizeof(*h))) == NULL)
        return false;
    h->cmd = *cmd;
    h->until_ms = uv_now(o->loop) + ms;
    dlist_append(list, &h->link);
    (*n)++;
    return true;
}

/* The broker has the PUBLISH of the order's rank and may have sent the order
   before its answer reached us; a local process whose PUBLISH it refuses
   (a wrong secret) must not get the socket, so the order waits for the
   answer. */
static void hold(struct orders *o, const struct command *cmd)
{
    if (!park(o, L_HELD, cmd, ORDER_HOLD_MS)) {
        refuse_share(o, cmd,
                     "too many orders (of the job, or in all) wait for their PUBLISH's "
                     "answer");
        return;
    }
    log_debug("%s for job %s rank %d waits for the answer to its PUBLISH", cmd->kind, cmd->job,
              cmd->rank);
    if (!uv_is_active((uv_handle_t *)&o->hold_timer))
        uv_timer_start(&o->hold_timer, on_hold_timer, HOLD_CHECK_MS, 0);
}

static bool has_slot(const struct orders *o, const char *job)
{
    return o->nactive < ORDERS_ACTIVE_MAX && job_orders(o, job, L_ACTIVE) < ORDERS_JOB_ACTIVE_MAX;
}

/* No slot now: the order waits for one (finish() calls the waiting in). */
static void wait_slot(struct orders *o, const struct command *cmd)
{
    if (!park(o, L_WAITING, cmd, ORDER_WAIT_MS)) {
        refuse_share(o, cmd,
                     o->nactive >= ORDERS_ACTIVE_MAX
                         ? "too many orders in progress and waiting"
                         : "the job has its share of the orders in progress and waiting");
        return;
    }
    log_debug("%s for job %s rank %d waits for a slot (%u in progress)", cmd->kind, cmd->job,
              cmd->rank, o->nactive);
    if (!uv_is_active((uv_handle_t *)&o->wait_timer))
        uv_timer_start(&o->wait_timer, on_wait_timer, ORDER_WAIT_MS, 0);
}

/* Starts the waiting orders that have a slot now, oldest first, and drops
   the ones that waited too long; a job at its share lets the others by. */
static void on_wait_timer(uv_timer_t *t)
{
    struct orders *o = t->data;
    uint64_t now = uv_now(o->loop);
    struct dlink *l = o->waiting.head;

    while (l != NULL && o->nactive < ORDERS_ACTIVE_MAX) {
        struct held *h = dlist_entry(l, struct held, link);

        l = l->next;
        if (now < h->until_ms && !has_slot(o, h->cmd.job))
            continue;
        dlist_remove(&o->waiting, &h->link);
        o->nwaiting--;
        if (now < h->until_ms)
            start(o, &h->cmd);
        else
            refuse_share(o, &h->cmd, "no slot among the orders in progress within 10 s");
        explicit_bzero(h, sizeof(*h));
        free(h);
    }
    if (o->waiting.head != NULL) {
        const struct held *h = dlist_entry(o->waiting.head, struct held, link);
        uv_timer_start(&o->wait_timer, on_wait_timer, h->until_ms > now ? h->until_ms - now : 1, 0);
    }
}

static void start(struct orders *o, const struct command *cmd)
{
    struct sockaddr_storage sa;
    socklen_t salen;
    char why[200] = "";

    /* A test endpoint publishes the rank itself: no process is expected. */
    if (strcmp(cmd->kind, "probe-listen") == 0) {
        if (o->responders != NULL)
            responders_start(o->responders, cmd);
        else
            log_warnx("probe-listen for job %s rank %d dropped: no probe endpoints here", cmd->job,
                      cmd->rank);
        return;
    }
    salen = make_addr(cmd->address, cmd->port, &sa);

    /* Only for a process that is here and published: the order could be
       stale (it exited) or meant for a rank this node never had. */
    int published = local_server_publishes(o->srv, cmd->job, cmd->rank, why, sizeof(why));
    if (published == 2) {
        hold(o, cmd);
        return;
    }
    if (published != 1) {
        log_warnx("%s for job %s rank %d (initiator rank %d) refused: %s", cmd->kind, cmd->job,
                  cmd->rank, cmd->peer_rank, why);
        return;
    }
    if (!has_slot(o, cmd->job)) {
        wait_slot(o, cmd);
        return;
    }
    if (salen == 0)
        return; /* upstream.c checked the address */
    struct action *a = action_new(o, cmd);
    if (a == NULL)
        return;
    log_info("%s for job %s rank %d (initiator rank %d): %s %s port %d", cmd->kind, cmd->job,
             cmd->rank, cmd->peer_rank,
             a->kind == K_INJECT  ? "SYN from"
             : a->kind == K_PUNCH ? "through the reflector at"
                                  : "connecting to",
             cmd->address, cmd->port);
    if (a->kind == K_PUNCH) {
        start_punch(o, a);
        return;
    }
    if (a->kind == K_INJECT) {
        start_inject(o, a);
        return;
    }
    action_add(o, a);
    connect_out(a);
}

static void on_async(uv_async_t *h)
{
    struct orders *o = h->data;

    /* Bounded: at most what was queued. */
    for (int i = 0; i < ORDERS_QUEUED_MAX; i++) {
        struct command cmd;

        pthread_mutex_lock(&o->lock);
        if (o->count == 0 || o->closed) {
            pthread_mutex_unlock(&o->lock);
            return;
        }
        cmd = o->queue[o->head];
        explicit_bzero(&o->queue[o->head], sizeof(cmd));
        o->head = (o->head + 1) % ORDERS_QUEUED_MAX;
        o->count--;
        pthread_mutex_unlock(&o->lock);
        start(o, &cmd);
        explicit_bzero(&cmd, sizeof(cmd));
    }
}

void orders_set_responders(struct orders *o, struct responders *rs)
{
    o->responders = rs;
}

/* Frees a list of orders that never started, and closes its timer. */
static void held_clear(struct dlist *list, unsigned *n, uv_timer_t *timer)
{
    while (list->head != NULL) {
        struct held *h = dlist_entry(list->head, struct held, link);
        dlist_remove(list, &h->link);
        explicit_bzero(h, sizeof(*h));
        free(h);
    }
    *n = 0;
    uv_close((uv_handle_t *)timer, NULL);
}

void orders_close(struct orders *o)
{
    pthread_mutex_lock(&o->lock);
    if (o->closed) {
        pthread_mutex_unlock(&o->lock);
        return;
    }
    o->closed = 1;
    explicit_bzero(o->queue, sizeof(o->queue));
    o->count = 0;
    uv_close((uv_handle_t *)&o->async, NULL);
    pthread_mutex_unlock(&o->lock);
    held_clear(&o->held, &o->nheld, &o->hold_timer);
    held_clear(&o->waiting, &o->nwaiting, &o->wait_timer);
    while (o->active.head != NULL) {
        struct action *a = dlist_entry(o->active.head, struct action, link);
        log_info("%s for job %s rank %d abandoned: the helper is stopping", what(a), a->cmd.job,
                 a->cmd.rank);
        finish(a, NULL);
    }
}

void orders_free(struct orders *o)
{
    if (o == NULL)
        return;
    pthread_mutex_destroy(&o->lock);
    free(o);
}
