/* The privileged process: the packet engine and the message list, nothing
   else; see privsep.h and privsep_msg.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "monotonic.h"
#include "nfq.h"
#include "privdrop.h"
#include "privsep.h"
#include "privsep_msg.h"
#include "proc.h"

/* Its thread pool: only the engine's batched rule deletions use it, one at
   a time. */
#define CHILD_THREADS "1"
#define KEEP_CAPS ((1ull << CAP_NET_ADMIN) | (1ull << CAP_NET_RAW))
/* Answers that wait for room in the socket: every plan's outcome and an
   acknowledgement or two. */
#define OUT_MAX (PRIVSEP_PENDING_MAX + 16)
/* Datagrams read per wake-up, so that the engine's packets get their turn. */
#define READS_PER_WAKE 64
/* A privileged process whose main process was just killed still holds the
   queue while it removes its rules (~50 ms): a helper started again at
   once waits this long for it. */
#define BIND_WAIT_MS 500
#define BIND_RETRY_MS 25

struct child;

/* A plan in progress, the callback's argument. */
struct slot {
    struct child *c;
    uint32_t id;
    int used;
};

struct child {
    uv_loop_t loop;
    struct imsg_chan ch;
    uv_poll_t poll;
    int poll_events;
    uv_signal_t term;
    struct traverse_config tc;
    struct privsep_limits lim;
    struct traverse *t;
    int started, stopping, exit_code;
    struct slot slots[PRIVSEP_PENDING_MAX];
    union privsep_msg *out; /* a ring of OUT_MAX */
    size_t out_size[OUT_MAX];
    size_t out_head, out_count;
    struct ratelimit dropped_rl;
};

static void stop(struct child *c, int code, const char *why);
static void on_poll(uv_poll_t *h, int status, int events);

/* Readable always, writable while answers wait. */
static void set_poll(struct child *c)
{
    int events = UV_READABLE | (c->out_count > 0 ? UV_WRITABLE : 0);

    if (c->stopping || events == c->poll_events)
        return;
    c->poll_events = events;
    uv_poll_start(&c->poll, events, on_poll);
}

/* Sends what waits, in order; stops at a full socket. */
static void flush(struct child *c)
{
    while (c->out_count > 0 && c->ch.fd >= 0) {
        if (imsg_send(&c->ch, &c->out[c->out_head], c->out_size[c->out_head], -1, 0) < 0) {
            if (errno == EAGAIN)
                return;
            /* The main process is gone: reading tells it too. */
            c->out_count = 0;
            break;
        }
        c->out_head = (c->out_head + 1) % OUT_MAX;
        c->out_count--;
    }
}

static void send_answer(struct child *c, const void *msg, size_t size)
{
    char line[160];

    if (c->ch.fd < 0)
        return;
    if (c->out_count == OUT_MAX) {
        snprintf(line, sizeof(line), "an answer dropped: %d wait for the main process to read them",
                 OUT_MAX);
        imsg_warn_limited(&c->dropped_rl, line);
        return;
    }
    size_t tail = (c->out_head + c->out_count) % OUT_MAX;
    memcpy(&c->out[tail], msg, size);
    c->out_size[tail] = size;
    c->out_count++;
    flush(c);
    set_poll(c);
}

static void send_status(struct child *c, uint32_t type, uint32_t id, int status, const char *why)
{
    struct privsep_status m;

    memset(&m, 0, sizeof(m));
    m.h.type = type;
    m.h.id = id;
    m.status = status;
    snprintf(m.why, sizeof(m.why), "%s", why);
    send_answer(c, &m, sizeof(m));
}

static struct slot *slot_get(struct child *c, uint32_t id)
{
    for (size_t i = 0; i < PRIVSEP_PENDING_MAX; i++) {
        struct slot *s = &c->slots[i];
        if (!s->used) {
            s->used = 1;
            s->c = c;
            s->id = id;
            return s;
        }
    }
    return NULL;
}

static void on_syn(void *arg, int status, const uint8_t *pkt, size_t len, const char *why)
{
    struct slot *s = arg;
    struct privsep_syn m;

    memset(&m, 0, sizeof(m));
    m.h.type = PRIVSEP_SYN;
    m.h.id = s->id;
    m.status = status;
    if (status == 0 && len <= sizeof(m.pkt)) {
        memcpy(m.pkt, pkt, len);
        m.len = (uint16_t)len;
    } else if (status == 0) {
        m.status = -EMSGSIZE;
    }
    snprintf(m.why, sizeof(m.why), "%s", why != NULL ? why : "");
    s->used = 0;
    send_answer(s->c, &m, sizeof(m));
}

static void on_done(void *arg, int status, const char *why)
{
    struct slot *s = arg;

    s->used = 0;
    send_status(s->c, PRIVSEP_DONE, s->id, status, why != NULL ? why : "");
}

/* A request that is not served: the main process hears why at once.
   logged: the channel logged it already (a malformed message). */
static void refuse(struct child *c, uint32_t id, int status, bool logged, const char *why)
{
    char line[PRIVSEP_WHY_MAX + 60];

    if (!logged) {
        snprintf(line, sizeof(line), "refused a request of the main process: %s", why);
        imsg_warn_limited(&c->ch.refused, line);
    }
    send_status(c, PRIVSEP_ACK, id, status, why);
}

static void serve_start(struct child *c)
{
    char err[PRIVSEP_WHY_MAX] = "";
    uint64_t end = monotonic_ms() + BIND_WAIT_MS;

    c->started = 1;
    while ((c->t = traverse_new(&c->loop, &c->tc, err, sizeof(err))) == NULL &&
           strncmp(err, NFQ_BIND_FAILED, strlen(NFQ_BIND_FAILED)) == 0 && monotonic_ms() < end) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = BIND_RETRY_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    send_status(c, PRIVSEP_READY, 0, c->t != NULL ? 0 : -EIO, err);
    if (c->t == NULL)
        stop(c, 1, "the packet engine did not start");
}

/* A slot for the plan of request id, or NULL (refused: too many). */
static struct slot *plan_slot(struct child *c, uint32_t id)
{
    struct slot *s = slot_get(c, id);
    char why[PRIVSEP_WHY_MAX];

    if (s == NULL) {
        snprintf(why, sizeof(why), "%d traversals in progress already", PRIVSEP_PENDING_MAX);
        refuse(c, id, -EBUSY, false, why);
    }
    return s;
}

/* The engine took the plan (rc 0: its outcome comes later) or not. */
static void plan_acked(struct child *c, struct slot *s, int rc, const char *why)
{
    if (rc < 0)
        s->used = 0;
    send_status(c, PRIVSEP_ACK, s->id, rc < 0 ? -EINVAL : 0, rc < 0 ? why : "");
}

static void serve_watch(struct child *c, const struct privsep_watch_syn *w)
{
    struct rawpkt_addr dst = privsep_addr(w->family, w->dst);
    char why[PRIVSEP_WHY_MAX] = "";
    struct slot *s = plan_slot(c, w->h.id);

    if (s != NULL)
        plan_acked(
            c, s,
            traverse_watch_syn(c->t, dst, w->dport, w->timeout_ms, on_syn, s, why, sizeof(why)),
            why);
}

static void serve_inject(struct child *c, const struct privsep_inject *in)
{
    struct rawpkt_addr pub = privsep_addr(in->family, in->pub);
    char why[PRIVSEP_WHY_MAX] = "";
    struct slot *s = plan_slot(c, in->h.id);

    if (s != NULL)
        plan_acked(c, s,
                   traverse_inject(c->t, in->syn, in->len, pub, in->pub_port, in->allowed_port,
                                   in->timeout_ms, on_done, s, why, sizeof(why)),
                   why);
}

static void serve(struct child *c, const union privsep_msg *m)
{
    char why[PRIVSEP_WHY_MAX];
    uint32_t id = m->h.id;

    if (m->h.type == PRIVSEP_START) {
        if (c->started)
            refuse(c, id, -EALREADY, false, "START again");
        else
            serve_start(c);
        return;
    }
    if (c->t == NULL) {
        snprintf(why, sizeof(why), "%s before START", imsg_name(privsep_types, m->h.type));
        refuse(c, id, -ENOTCONN, false, why);
        return;
    }
    switch (m->h.type) {
    case PRIVSEP_WATCH_SYN:
        serve_watch(c, &m->watch);
        break;
    case PRIVSEP_INJECT:
        serve_inject(c, &m->inject);
        break;
    case PRIVSEP_RULES: {
        struct privsep_rules_ok ok = {.h = {.type = PRIVSEP_RULES_OK, .id = id},
                                      .rules = traverse_rules(c->t)};
        send_answer(c, &ok, sizeof(ok));
        break;
    }
    default:
        break; /* the channel let no other type through */
    }
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    struct child *c = h->data;
    union privsep_msg m;
    char why[PRIVSEP_WHY_MAX];
    int fd;

    if (status < 0) {
        stop(c, 1, uv_strerror(status));
        return;
    }
    if (events & UV_WRITABLE) {
        flush(c);
        set_poll(c);
    }
    for (int i = 0; i < READS_PER_WAKE && (events & UV_READABLE) && !c->stopping; i++) {
        /* A refused datagram too short for a header leaves id 0. */
        memset(&m.h, 0, sizeof(m.h));
        errno = 0; /* a hang-up sets none */
        int rc = imsg_recv(&c->ch, &m, sizeof(m), &fd, why, sizeof(why));
        if (rc == IMSG_NONE)
            break;
        if (rc == IMSG_CLOSED) {
            stop(c, 0, errno == 0 ? "the main process closed its socket" : strerror(errno));
            break;
        }
        if (rc == IMSG_REFUSED)
            refuse(c, m.h.id, -EBADMSG, true, why);
        else
            serve(c, &m);
    }
}

static void on_term(uv_signal_t *h, int signum)
{
    (void)signum;
    stop(h->data, 0, "SIGTERM");
}

/* Removes the rules and chains, closes everything; uv_run then returns. */
static void stop(struct child *c, int code, const char *why)
{
    if (c->stopping)
        return;
    /* Before START there is nothing to remove (a second helper refused
       its socket ends here). */
    if (c->t != NULL)
        log_info("stopping (%s): removing the rules and chains", why);
    else
        log_debug("stopping (%s)", why);
    c->exit_code = code;
    if (c->t != NULL)
        traverse_close(c->t); /* the plans' callbacks answer -ECANCELED */
    flush(c);
    c->stopping = 1;
    uv_close((uv_handle_t *)&c->poll, NULL);
    uv_close((uv_handle_t *)&c->term, NULL);
    if (c->t != NULL)
        traverse_free(c->t);
    c->t = NULL;
}

/* The node's first address of each family: what traversing uses (the
   first IPv4 one is `address` itself when the node has one). */
static void node_addresses(const struct helper_config *cfg, struct rawpkt_addr *node,
                           struct rawpkt_addr *node6)
{
    const char *one[1] = {cfg->address};
    int n = cfg->naddrs > 0 ? cfg->naddrs : 1;

    memset(node, 0, sizeof(*node));
    memset(node6, 0, sizeof(*node6));
    for (int i = 0; i < n; i++) {
        struct rawpkt_addr a;
        if (rawpkt_addr_parse(cfg->naddrs > 0 ? cfg->addrs[i] : one[0], &a) < 0)
            fatalx("the node's address %s is not an IP address",
                   cfg->naddrs > 0 ? cfg->addrs[i] : one[0]);
        struct rawpkt_addr *slot = a.family == AF_INET6 ? node6 : node;
        if (slot->family == 0)
            *slot = a;
    }
}

/* Everything before the loop; exits on failure (the main process sees the
   socket close before READY). */
static void setup(struct child *c, const struct helper_config *cfg)
{
    char err[256];

    signal(SIGINT, SIG_IGN); /* the terminal's ^C is for the main process */
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    log_init("helper-priv", log_get_level(), cfg->syslog);
    imsg_chan_init(&c->ch, PROC_FD_CHAN, privsep_types, PRIVSEP_TO_PRIVILEGED, &c->lim,
                   "the main process");
    if (privdrop(KEEP_CAPS, NULL, err, sizeof(err)) < 0)
        fatalx("cannot limit the capabilities: %s", err);
    if (chdir("/") < 0)
        log_warn("chdir /");
    setenv("UV_THREADPOOL_SIZE", CHILD_THREADS, 1);
    c->tc.queue_num = (uint16_t)cfg->nfqueue;
    node_addresses(cfg, &c->tc.node, &c->tc.node6);
    c->lim.node = c->tc.node;
    c->lim.node6 = c->tc.node6;
    c->lim.port_low = (uint16_t)cfg->ports[0];
    c->lim.port_high = (uint16_t)cfg->ports[1];
    c->out = calloc(OUT_MAX, sizeof(*c->out));
    if (c->out == NULL || uv_loop_init(&c->loop) < 0)
        fatalx("out of memory");
    if (fcntl(c->ch.fd, F_SETFL, O_NONBLOCK) < 0 || uv_poll_init(&c->loop, &c->poll, c->ch.fd) < 0)
        fatalx("cannot watch the socket");
    c->poll.data = c;
    set_poll(c);
    uv_signal_init(&c->loop, &c->term);
    c->term.data = c;
    uv_signal_start(&c->term, on_term, SIGTERM);
}

_Noreturn void privsep_child_main(const struct helper_config *cfg)
{
    static struct child c; /* one per process; its plans hold pointers to it */

    memset(&c, 0, sizeof(c));
    setup(&c, cfg);
    log_debug("pid %d, parent %d: CAP_NET_ADMIN and CAP_NET_RAW only, queue %u; waiting for "
              "START",
              (int)getpid(), (int)getppid(), c.tc.queue_num);
    uv_run(&c.loop, UV_RUN_DEFAULT);
    close(c.ch.fd);
    uv_loop_close(&c.loop);
    free(c.out);
    log_debug("exiting (%d)", c.exit_code);
    exit(c.exit_code);
}
