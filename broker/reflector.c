/* The broker's reflector: MAP, PUNCH and DIAL on one thread of its own,
   on the event engine (util/engine.h); see reflector.h. */
#include "reflector.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "address.h"
#include "dlist.h"
#include "engine.h"
#include "htable.h"
#include "log.h"
#include "monotonic.h"
#include "punch_auth.h"
#include "ratelimit.h"
#include "refusal.h"
#include "sockaddr_text.h"
#include "tally.h"

#define REFLECTOR_ACCEPTS_PER_EVENT 64
#define REFLECTOR_PURGE_BATCH 64
#define ANSWER_MAX 400
#define ADDR_MAX 64
#define LOG_WINDOW_MS 1000

enum conn_state { C_READ, C_EARLY, C_WAIT, C_DIAL, C_WRITE, C_LINGER };

struct expected;

/* One client: the engine's (its socket, its address's count until it shows
   a valid token, its deadline) and, for a DIAL, the socket we dial from. */
struct conn {
    struct engine_conn ec; /* first: the engine frees a conn */
    struct reflector *r;
    struct engine_watch dial; /* watched while dial_watched */
    int dial_fd;
    bool dial_watched;
    enum conn_state state;
    int dead;
    char addr[ADDR_MAX]; /* observed, without port (a v4-mapped one as IPv4) */
    int port;
    char line[REFLECTOR_LINE_MAX + 1];
    size_t got;
    char out[ANSWER_MAX];
    size_t outlen, sent;
    /* PUNCH: the pair's entry while waiting, our side, what we said */
    struct expected *e;
    int side;
    int local_port;
    int dial_port;
    /* C_EARLY: the PUNCH of a valid token whose pair is not expected yet */
    struct reflector_request early;
    unsigned char early_pair[TOKEN_PAIR_LEN]; /* its token's pair, checked once */
    /* PEER is tagged with this key when the token came with a proof */
    unsigned char answer_key[PUNCH_AUTH_KEY_LEN];
    bool tagged;
    struct dlink early_link; /* in the reflector's early list (C_EARLY) */
};

struct expected {
    unsigned char pair[TOKEN_PAIR_LEN];
    struct reflector_side sides[2];
    uint64_t forget_at; /* unix seconds */
    unsigned char used[2];
    struct conn *waiting[2];
    char failed[320]; /* once set, the sides still to come get this FAIL */
    char
        owner[sizeof(((struct reflector_side *)0)->cluster)]; /* charged: the initiator's cluster */
    char job[TOKEN_JOB_TAG_TEXT]; /* and its pair id's job tag (token.h) */
};

struct reflector {
    struct engine *engine;
    int port;
    struct proxy_key key;
    reflector_observe_fn observe;
    void *arg;
    struct reflector_tuning t;
    pthread_t thread;

    pthread_mutex_t lock; /* guards table (and entries), clusters, expect_log */
    struct htable *table;
    struct tally *clusters; /* expected entries per owner */
    struct tally *jobs;     /* ... and per job tag: half of a cluster's share */
    struct ratelimit expect_log;
    uint64_t seed;
    struct ratelimit fail_log;

    struct dlist held; /* of struct conn in C_EARLY */

    atomic_ullong maps, punches, paired, punch_failed, dials, refused, misdeclared;
    atomic_ullong refused_address, cut, expect_refused;
    atomic_int early; /* connections in C_EARLY */
};

static struct conn *early_of(struct dlink *link)
{
    return dlist_entry_or_null(link, struct conn, early_link);
}

static uint64_t now_ms(const struct reflector *r)
{
    return engine_now(r->engine);
}

static void count(atomic_ullong *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static void pair_text(const unsigned char pair[TOKEN_PAIR_LEN], char out[9])
{
    snprintf(out, 9, "%02x%02x%02x%02x", pair[0], pair[1], pair[2], pair[3]);
}

/* ---- the expected table ---- */

static bool expected_eq(const void *entry, const void *key)
{
    return memcmp(((const struct expected *)entry)->pair, key, TOKEN_PAIR_LEN) == 0;
}

static uint64_t expected_hash(const struct reflector *r, const unsigned char *pair)
{
    return htable_hash(pair, TOKEN_PAIR_LEN, r->seed);
}

/* Forgets entries past forget_at that no connection waits on.  Lock held. */
static size_t purge(struct reflector *r, uint64_t now)
{
    size_t total = 0;

    /* The table may not change while iterated: collect, remove, repeat. */
    for (;;) {
        struct expected *old[REFLECTOR_PURGE_BATCH];
        size_t n = 0, i = 0;
        struct expected *e;

        while (n < REFLECTOR_PURGE_BATCH && (e = htable_next(r->table, &i)) != NULL)
            if (e->forget_at < now && e->waiting[0] == NULL && e->waiting[1] == NULL)
                old[n++] = e;
        for (size_t k = 0; k < n; k++) {
            htable_remove(r->table, expected_hash(r, old[k]->pair), old[k]->pair);
            tally_give(r->clusters, old[k]->owner);
            tally_give(r->jobs, old[k]->job);
            free(old[k]);
        }
        total += n;
        if (n < REFLECTOR_PURGE_BATCH)
            return total;
    }
}

/* A plan not taken: a line at most REFLECTOR_LOG_BURST a second (one job's
   lookups can make many).  Lock held. */
static void expect_refused(struct reflector *r, const char *id, const char *why)
{
    unsigned left_out = 0;
    count(&r->expect_refused);
    if (!ratelimit_burst_ok(&r->expect_log, monotonic_ms(), LOG_WINDOW_MS, REFLECTOR_LOG_BURST,
                            &left_out))
        return;
    if (left_out)
        log_warnx("pair %s not expected: %s (%u more not logged)", id, why, left_out);
    else
        log_warnx("pair %s not expected: %s", id, why);
}

int reflector_expect(struct reflector *r, const unsigned char pair[TOKEN_PAIR_LEN],
                     const struct reflector_side sides[2], uint64_t expiry)
{
    uint64_t forget = expiry + REFLECTOR_TOKEN_SKEW;
    char id[9], why[160], owner[sizeof(sides[0].cluster)];
    int rc = 0;

    pair_text(pair, id);
    pthread_mutex_lock(&r->lock);
    struct expected *e = htable_find(r->table, expected_hash(r, pair), pair);
    if (e != NULL) {
        /* A plan made again for the same pair: newer sides, later expiry. */
        memcpy(e->sides, sides, sizeof(e->sides));
        if (forget > e->forget_at)
            e->forget_at = forget;
        goto out;
    }
    snprintf(owner, sizeof(owner), "%.*s", (int)sizeof(owner) - 1, sides[0].cluster);
    /* (A cluster at its share waits for the thread's purge, once a second:
       its flood must not make every refusal a walk of the whole table.) */
    if (htable_count(r->table) >= r->t.expected_max)
        purge(r, (uint64_t)time(NULL));
    if (htable_count(r->table) >= r->t.expected_max) {
        snprintf(why, sizeof(why), "%u punches already expected", r->t.expected_max);
        expect_refused(r, id, why);
        rc = -1;
        goto out;
    }
    if (tally_count(r->clusters, owner) >= r->t.expected_per_cluster) {
        snprintf(why, sizeof(why), "cluster %s has %u punches expected already, its share", owner,
                 r->t.expected_per_cluster);
        expect_refused(r, id, why);
        rc = -1;
        goto out;
    }
    char job[TOKEN_JOB_TAG_TEXT];
    unsigned per_job = r->t.expected_per_cluster > 1 ? r->t.expected_per_cluster / 2 : 1;
    token_pair_tag(pair, job);
    if (tally_count(r->jobs, job) >= per_job) {
        snprintf(why, sizeof(why), "job tag %s has %u punches expected already, its share", job,
                 per_job);
        expect_refused(r, id, why);
        rc = -1;
        goto out;
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL || !tally_take(r->clusters, owner, r->t.expected_per_cluster)) {
        free(e);
        expect_refused(r, id, "out of memory");
        rc = -1;
        goto out;
    }
    if (!tally_take(r->jobs, job, per_job)) {
        tally_give(r->clusters, owner);
        free(e);
        expect_refused(r, id, "out of memory");
        rc = -1;
        goto out;
    }
    memcpy(e->job, job, sizeof(job));
    if (htable_insert(r->table, expected_hash(r, pair), e) < 0) {
        tally_give(r->clusters, owner);
        tally_give(r->jobs, job);
        free(e);
        expect_refused(r, id, "out of memory");
        rc = -1;
        goto out;
    }
    memcpy(e->owner, owner, sizeof(owner));
    memcpy(e->pair, pair, TOKEN_PAIR_LEN);
    memcpy(e->sides, sides, sizeof(e->sides));
    for (int i = 0; i < 2; i++) {
        e->sides[i].cluster[sizeof(e->sides[i].cluster) - 1] = '\0';
        e->sides[i].node[sizeof(e->sides[i].node) - 1] = '\0';
    }
    e->forget_at = forget;
    log_debug("pair %s expected: %s/%s%s and %s/%s%s until %llu", id, sides[0].cluster,
              sides[0].node, sides[0].preserving ? " (preserving)" : "", sides[1].cluster,
              sides[1].node, sides[1].preserving ? " (preserving)" : "",
              (unsigned long long)expiry);
out:
    pthread_mutex_unlock(&r->lock);
    if (rc == 0 && atomic_load(&r->early) > 0)
        engine_wake(r->engine);
    return rc;
}

/* ---- connections ---- */

/* A connection held for its plan leaves that state (answered, closed or
   retried): the count of held ones follows. */
static void leave_early(struct reflector *r, struct conn *c)
{
    if (c->state == C_EARLY) {
        atomic_fetch_sub(&r->early, 1);
        dlist_remove(&r->held, &c->early_link);
        c->state = C_READ;
    }
}

/* c has shown a valid token, or goes: it no longer counts against its
   address's connections without one. */
static void authenticated(struct conn *c)
{
    engine_conn_trusted(&c->ec);
}

/* The socket of a DIAL, when there is one. */
static void dial_close(struct conn *c)
{
    if (c->dial_watched)
        engine_watch_close(&c->dial);
    c->dial_watched = false;
    if (c->dial_fd >= 0)
        close(c->dial_fd);
    c->dial_fd = -1;
}

static void conn_close(struct reflector *r, struct conn *c)
{
    leave_early(r, c);
    if (c->dead)
        return;
    c->dead = 1;
    if (c->e != NULL && c->e->waiting[c->side] == c) {
        pthread_mutex_lock(&r->lock);
        c->e->waiting[c->side] = NULL;
        pthread_mutex_unlock(&r->lock);
    }
    c->e = NULL;
    dial_close(c);
    engine_conn_close(&c->ec);
}

static void conn_send(struct reflector *r, struct conn *c);

/* The one answer of this connection; then half-close and linger. */
static void answer(struct reflector *r, struct conn *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void answer(struct reflector *r, struct conn *c, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (c->dead)
        return;
    if (c->e != NULL && c->e->waiting[c->side] == c) {
        pthread_mutex_lock(&r->lock);
        c->e->waiting[c->side] = NULL;
        pthread_mutex_unlock(&r->lock);
    }
    c->e = NULL;
    dial_close(c);
    engine_conn_first_done(&c->ec);
    va_start(ap, fmt);
    n = vsnprintf(c->out, sizeof(c->out) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n > sizeof(c->out) - 2)
        n = (int)sizeof(c->out) - 2;
    c->out[n++] = '\n';
    c->outlen = (size_t)n;
    c->sent = 0;
    c->state = C_WRITE;
    conn_send(r, c);
}

static void fail(struct reflector *r, struct conn *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* FAIL with a reason, and a log line with the client's address. */
static void fail(struct reflector *r, struct conn *c, const char *fmt, ...)
{
    char why[360];
    va_list ap;
    unsigned left_out = 0;

    leave_early(r, c);
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    /* Anyone can make refusals: a burst is logged in full, a flood not. */
    if (ratelimit_burst_ok(&r->fail_log, now_ms(r), LOG_WINDOW_MS, REFLECTOR_LOG_BURST,
                           &left_out)) {
        if (left_out)
            log_warnx("refused %s:%d: %s (%u more refusals not logged)", c->addr, c->port, why,
                      left_out);
        else
            log_warnx("refused %s:%d: %s", c->addr, c->port, why);
    }
    answer(r, c, "FAIL %s", why);
}

static void conn_send(struct reflector *r, struct conn *c)
{
    while (c->sent < c->outlen) {
        ssize_t n = send(c->ec.w.fd, c->out + c->sent, c->outlen - c->sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* Rare (one short line): only then is writability watched, so
               that a connection costs no change of its watch otherwise. */
            engine_watch_want(&c->ec.w, UV_WRITABLE);
            return;
        }
        if (n < 0) {
            log_debug("%s:%d: send: %s", c->addr, c->port, strerror(errno));
            conn_close(r, c);
            return;
        }
        c->sent += (size_t)n;
    }
    /* The client reads to our FIN; lingering until its own keeps a reset (from
       bytes we did not read) from destroying the answer in flight. */
    shutdown(c->ec.w.fd, SHUT_WR);
    c->state = C_LINGER;
    engine_conn_deadline(&c->ec, r->t.linger_ms);
    engine_watch_want(&c->ec.w, UV_READABLE);
}

static void observe(struct reflector *r, const char *cluster, const char *node,
                    const char *local_addr, int local_port, const struct conn *c)
{
    if (r->observe == NULL)
        return;
    struct reflector_observation o = {cluster, node, local_addr, local_port, c->addr, c->port};
    r->observe(r->arg, &o);
}

/* ---- requests ---- */

static void do_map(struct reflector *r, struct conn *c)
{
    count(&r->maps);
    observe(r, NULL, NULL, NULL, 0, c);
    answer(r, c, "MAPPED %s %d", c->addr, c->port);
}

/* open, reset, icmp or timeout; NULL for an error of our own.  Host and
   network unreachable are ICMP errors too (the kernel queued them). */
static const char *dial_result(int fd, int err, struct refusal *rf)
{
    if (err == 0)
        return "open";
    if (err == ETIMEDOUT)
        return "timeout";
    if (refusal_read(fd, err, rf) != REFUSAL_NONE)
        return refusal_word(rf->kind);
    if (err == EHOSTUNREACH || err == ENETUNREACH || err == EHOSTDOWN)
        return "icmp"; /* reported at connect, before an error was queued */
    return NULL;
}

static void dial_done(struct reflector *r, struct conn *c, int err)
{
    struct refusal rf = {0};
    const char *res = dial_result(c->dial_fd, err, &rf);
    if (res == NULL) {
        fail(r, c, "dial to %s port %d: %s", c->addr, c->dial_port, strerror(err));
        return;
    }
    log_debug("dial %s port %d: %s%s%s%s%s", c->addr, c->dial_port, res,
              rf.kind == REFUSAL_ICMP ? " " : "", refusal_icmp_text(&rf),
              rf.from[0] ? " from " : "", rf.from);
    answer(r, c, "DIALED %s %d %s", c->addr, c->dial_port, res);
}

static void dial_io(struct engine_watch *w, int status, int events);

static void do_dial(struct reflector *r, struct conn *c, int port)
{
    struct sockaddr_storage to;

    count(&r->dials);
    observe(r, NULL, NULL, NULL, 0, c);
    c->dial_port = port;
    /* From the caller's address as shown (a v4-mapped one as IPv4): an IPv4
       caller is dialled over IPv4, which works where v4-mapped does not
       (net.ipv6.bindv6only, IPv6 disabled). */
    socklen_t tolen = address_sockaddr(c->addr, (uint16_t)port, &to);
    if (tolen == 0) {
        fail(r, c, "dial: no address to dial");
        return;
    }
    c->dial_fd = socket(to.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->dial_fd < 0) {
        fail(r, c, "dial: socket: %s", strerror(errno));
        return;
    }
    /* Without it an ICMP port unreachable reads as a reset. */
    (void)refusal_watch(c->dial_fd);
    if (connect(c->dial_fd, (struct sockaddr *)&to, tolen) == 0) {
        dial_done(r, c, 0);
        return;
    }
    if (errno != EINPROGRESS) {
        dial_done(r, c, errno);
        return;
    }
    if (engine_watch_init(r->engine, &c->dial, c->dial_fd, &c->ec) < 0) {
        fail(r, c, "dial: cannot watch its socket");
        return;
    }
    c->dial_watched = true;
    c->dial.owner = c;
    c->dial.on_io = dial_io;
    engine_watch_want(&c->dial, UV_WRITABLE);
    c->state = C_DIAL;
    engine_conn_deadline(&c->ec, r->t.dial_timeout_ms);
}

static void dial_io(struct engine_watch *w, int status, int events)
{
    struct conn *c = w->owner;
    struct reflector *r = c->r;
    int err = 0;

    (void)status;
    (void)events;
    if (c->dead)
        return;
    socklen_t len = sizeof(err);

    if (c->state != C_DIAL || c->dial_fd < 0)
        return;
    if (getsockopt(c->dial_fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err == EINPROGRESS)
        return;
    dial_done(r, c, err);
}

/* Both sides are here: PEER to each, at once. */
static void pair_up(struct reflector *r, struct expected *e, struct conn *a, struct conn *b)
{
    struct conn *c[2];
    char id[9];

    c[a->side] = a;
    c[b->side] = b;
    pair_text(e->pair, id);
    e->waiting[0] = e->waiting[1] = NULL;
    a->e = b->e = NULL;
    count(&r->paired);
    log_info("pair %s: %s/%s at %s:%d (local port %d) <-> %s/%s at %s:%d (local port %d)", id,
             e->sides[0].cluster, e->sides[0].node, c[0]->addr, c[0]->port, c[0]->local_port,
             e->sides[1].cluster, e->sides[1].node, c[1]->addr, c[1]->port, c[1]->local_port);
    for (int i = 0; i < 2; i++) {
        char peer[ANSWER_MAX], tag[PUNCH_AUTH_TAG_TEXT] = "";
        snprintf(peer, sizeof(peer), "PEER %s %d %s %d", c[1 - i]->addr, c[1 - i]->port, c[i]->addr,
                 c[i]->port);
        if (c[i]->tagged)
            punch_auth_tag(c[i]->answer_key, peer, tag);
        answer(r, c[i], "%s%s%s", peer, tag[0] ? " " : "", tag);
    }
}

/* first: the request as it came (counted), not its retry from C_EARLY. */
static void do_punch(struct reflector *r, struct conn *c, const struct reflector_request *req,
                     bool first)
{
    unsigned char pair[TOKEN_PAIR_LEN];
    uint64_t expiry = 0, now = (uint64_t)time(NULL);
    int side = 0;
    char id[9], why[320];
    struct reflector_side me;

    if (first)
        count(&r->punches);
    /* A proof instead of the MAC: the answer is tagged (punch_auth.h). */
    char token[TOKEN_TEXT_LEN + 1];
    const char *bad = NULL;
    int auth = punch_auth_check(&r->key, req->token, token, sizeof(token), c->answer_key, &bad);
    if (auth < 0) {
        count(&r->refused);
        fail(r, c, "%s token", bad);
        return;
    }
    c->tagged = auth == 1;
    int rc = token_check(&r->key, token, now, REFLECTOR_TOKEN_SKEW, pair, &side, &expiry);
    if (rc != TOKEN_OK) {
        count(&r->refused);
        fail(r, c, "%s token", token_error(rc));
        return;
    }
    authenticated(c);
    pair_text(pair, id);
    const char *side_name = side == TOKEN_SIDE_INITIATOR ? "initiator" : "target";

    pthread_mutex_lock(&r->lock);
    struct expected *e = htable_find(r->table, expected_hash(r, pair), pair);
    if (e == NULL && first && atomic_load(&r->early) < REFLECTOR_EARLY_MAX) {
        /* The broker's plan for this pair may still be on its way to us
           (reflector_expect, from another thread or process) while the
           token it issued has already reached the helper: wait for it a
           little, the connection held. */
        pthread_mutex_unlock(&r->lock);
        c->early = *req;
        memcpy(c->early_pair, pair, TOKEN_PAIR_LEN);
        c->state = C_EARLY;
        dlist_append(&r->held, &c->early_link);
        engine_conn_deadline(&c->ec, REFLECTOR_EARLY_WAIT_MS);
        atomic_fetch_add(&r->early, 1);
        log_debug("pair %s: a PUNCH before its plan: held up to %u ms", id,
                  REFLECTOR_EARLY_WAIT_MS);
        return;
    }
    if (e == NULL || e->forget_at < now) {
        pthread_mutex_unlock(&r->lock);
        count(&r->refused);
        fail(r, c, "pair %s: no punch expected", id);
        return;
    }
    if (e->used[side]) {
        pthread_mutex_unlock(&r->lock);
        count(&r->refused);
        fail(r, c, "pair %s: the %s's token was already used", id, side_name);
        return;
    }
    e->used[side] = 1;
    if (expiry + REFLECTOR_TOKEN_SKEW > e->forget_at)
        e->forget_at = expiry + REFLECTOR_TOKEN_SKEW;
    me = e->sides[side];
    c->side = side;
    c->local_port = req->port;
    struct conn *peer = e->waiting[1 - side];

    if (e->failed[0] != '\0') {
        snprintf(why, sizeof(why), "%s", e->failed);
        pthread_mutex_unlock(&r->lock);
        count(&r->punch_failed);
        fail(r, c, "%s", why);
        return;
    }
    if (me.preserving && c->port != req->port) {
        /* Declared port-preserving, observed otherwise: fail both sides now
           rather than let them punch into a mapping that does not exist. */
        snprintf(e->failed, sizeof(e->failed),
                 "pair %s: misconfiguration: cluster %s node %s is declared port-preserving "
                 "but local port %d was observed as %s:%d",
                 id, me.cluster, me.node, req->port, c->addr, c->port);
        snprintf(why, sizeof(why), "%s", e->failed);
        e->waiting[1 - side] = NULL;
        pthread_mutex_unlock(&r->lock);
        count(&r->misdeclared);
        count(&r->punch_failed);
        log_warnx("misconfiguration: cluster %s node %s declared port-preserving: local port %d "
                  "observed as %s:%d (pair %s)",
                  me.cluster, me.node, req->port, c->addr, c->port, id);
        observe(r, me.cluster, me.node, req->local_addr, req->port, c);
        if (peer != NULL) {
            peer->e = NULL;
            count(&r->punch_failed);
            fail(r, peer, "%s", why);
        }
        fail(r, c, "%s", why);
        return;
    }
    if (peer == NULL && e->used[1 - side]) {
        snprintf(e->failed, sizeof(e->failed), "pair %s: the other side came and is gone", id);
        snprintf(why, sizeof(why), "%s", e->failed);
        pthread_mutex_unlock(&r->lock);
        count(&r->punch_failed);
        fail(r, c, "%s", why);
        return;
    }
    if (peer == NULL) {
        e->waiting[side] = c;
        c->e = e;
    }
    pthread_mutex_unlock(&r->lock);

    observe(r, me.cluster, me.node, req->local_addr, req->port, c);
    if (peer != NULL) {
        pair_up(r, e, c, peer);
        return;
    }
    log_debug("pair %s: %s/%s (%s) at %s:%d waits for the other side", id, me.cluster, me.node,
              side_name, c->addr, c->port);
    c->state = C_WAIT;
    engine_conn_deadline(&c->ec, r->t.pair_wait_ms);
}

static void line_done(struct reflector *r, struct conn *c, size_t len)
{
    struct reflector_request req;
    char why[160];

    engine_conn_first_done(&c->ec);
    if (reflector_parse(c->line, len, &req, why, sizeof(why)) < 0) {
        count(&r->refused);
        fail(r, c, "%s", why);
        return;
    }
    switch (req.verb) {
    case REFLECTOR_MAP:
        do_map(r, c);
        break;
    case REFLECTOR_DIAL:
        do_dial(r, c, req.port);
        break;
    case REFLECTOR_PUNCH:
        do_punch(r, c, &req, true);
        break;
    }
    explicit_bzero(&req, sizeof(req));
    explicit_bzero(c->line, sizeof(c->line));
}

static void conn_read(struct reflector *r, struct conn *c, int status)
{
    for (int i = 0; i < 4; i++) {
        ssize_t n = recv(c->ec.w.fd, c->line + c->got, sizeof(c->line) - c->got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            log_debug("%s:%d closed after %zu bytes without a request", c->addr, c->port, c->got);
            conn_close(r, c);
            return;
        }
        char *nl = memchr(c->line + c->got, '\n', (size_t)n);
        c->got += (size_t)n;
        if (nl != NULL) {
            size_t len = (size_t)(nl - c->line);
            if (len + 1 != c->got) {
                count(&r->refused);
                fail(r, c, "bytes after the request line");
                return;
            }
            line_done(r, c, len);
            return;
        }
        if (c->got == sizeof(c->line)) {
            count(&r->refused);
            fail(r, c, "line longer than %d bytes", REFLECTOR_LINE_MAX);
            return;
        }
    }
    if (status < 0) {
        log_debug("%s:%d failed after %zu bytes without a newline", c->addr, c->port, c->got);
        conn_close(r, c);
    }
}

static void conn_io(struct engine_watch *w, int status, int events)
{
    struct conn *c = w->owner;
    struct reflector *r = c->r;
    char junk[512];
    ssize_t n;

    (void)events;
    if (c->dead)
        return;
    switch (c->state) {
    case C_READ:
        conn_read(r, c, status);
        break;
    case C_EARLY:
    case C_WAIT:
    case C_DIAL:
        /* Nothing may come while we work on the answer: a byte is a protocol
           error, a close ends the request. */
        n = recv(c->ec.w.fd, junk, sizeof(junk), MSG_DONTWAIT);
        if (n > 0) {
            count(&r->refused);
            if (c->state == C_WAIT)
                count(&r->punch_failed);
            fail(r, c, "bytes after the request line");
        } else if (n == 0 || status < 0 || (errno != EAGAIN && errno != EINTR)) {
            log_info("%s:%d left while %s", c->addr, c->port,
                     c->state == C_WAIT ? "waiting for its peer" : "we dialled");
            if (c->state == C_WAIT)
                count(&r->punch_failed);
            conn_close(r, c);
        }
        break;
    case C_WRITE:
        if (status < 0)
            conn_close(r, c);
        else
            conn_send(r, c);
        break;
    case C_LINGER:
        for (int i = 0; i < 8; i++) {
            n = recv(c->ec.w.fd, junk, sizeof(junk), MSG_DONTWAIT);
            if (n > 0)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
            break;
        }
        if (n <= 0)
            conn_close(r, c);
        break;
    }
}

/* ---- accept, deadlines, loop ---- */

/* A connection refused for the cap or a shortage: logged at most once a
   second. */
static void refuse(struct reflector *r, const char *addr, const char *why)
{
    count(&r->refused);
    engine_refused_log(r->engine, addr, why);
}

static void refused(void *arg, enum engine_refusal kind, const struct sockaddr_storage *ss,
                    socklen_t len, const char *source)
{
    struct reflector *r = arg;
    char addr[ADDR_MAX], why[160];
    int port = 0;

    sockaddr_host(ss, len, addr, sizeof(addr), &port);
    if (kind == ENGINE_REFUSED_ADDRESS) {
        snprintf(why, sizeof(why), "%u connections from %s without a token already",
                 r->t.conns_per_address, source);
        count(&r->refused_address);
    } else {
        snprintf(why, sizeof(why), "%u connections already", r->t.conns_max);
    }
    refuse(r, addr, why);
}

/* All taken: the oldest one still sending its line makes room, so that
   idle clients cannot lock new ones out. */
static void cut(void *arg, struct engine_conn *oldest)
{
    struct reflector *r = arg;
    struct conn *c = (struct conn *)oldest;
    char why[160];

    snprintf(why, sizeof(why), "no request line yet, cut for a new connection (%u at once)",
             r->t.conns_max);
    count(&r->cut);
    refuse(r, c->addr, why);
    conn_close(r, c);
}

static void conn_deadline(struct engine_conn *ec);

static void accepted(void *arg, int fd, const struct sockaddr_storage *ss, socklen_t len,
                     const char *source)
{
    struct reflector *r = arg;
    char addr[ADDR_MAX];
    int port = 0;

    sockaddr_host(ss, len, addr, sizeof(addr), &port);
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        refuse(r, addr, "out of memory");
        close(fd);
        return;
    }
    c->r = r;
    c->ec.w.owner = c;
    c->ec.w.on_io = conn_io;
    c->ec.on_deadline = conn_deadline;
    c->dial_fd = -1;
    snprintf(c->addr, sizeof(c->addr), "%s", addr);
    c->port = port;
    c->state = C_READ;
    if (engine_conn_open(r->engine, &c->ec, fd, source) < 0) {
        refuse(r, addr, "out of memory");
        close(fd);
        free(c);
    }
}

/* The PUNCHes held for their plan, again: those whose pair is expected now
   go on as if they had just come. */
static void retry_early(struct reflector *r)
{
    struct conn *c = early_of(r->held.head), *next;

    for (; c != NULL; c = next) {
        next = early_of(c->early_link.next);
        /* The token is checked again by do_punch: expired meanwhile, it fails. */
        pthread_mutex_lock(&r->lock);
        bool planned =
            htable_find(r->table, expected_hash(r, c->early_pair), c->early_pair) != NULL;
        pthread_mutex_unlock(&r->lock);
        if (!planned)
            continue;
        leave_early(r, c);
        struct reflector_request req = c->early;
        do_punch(r, c, &req, false);
    }
}

static void after_io(void *arg)
{
    struct reflector *r = arg;

    if (atomic_load(&r->early) > 0)
        retry_early(r);
}

static void conn_deadline(struct engine_conn *ec)
{
    struct conn *c = (struct conn *)ec;
    struct reflector *r = c->r;

    if (c->dead)
        return;
    switch (c->state) {
    case C_READ:
        count(&r->refused);
        fail(r, c, "no request line within %u ms", r->t.read_timeout_ms);
        break;
    case C_EARLY:
        count(&r->refused);
        fail(r, c, "no punch expected for this token's pair (waited %u ms for the plan)",
             REFLECTOR_EARLY_WAIT_MS);
        break;
    case C_WAIT:
        count(&r->punch_failed);
        fail(r, c, "the other side did not come within %u ms", r->t.pair_wait_ms);
        break;
    case C_DIAL:
        dial_done(r, c, ETIMEDOUT);
        break;
    case C_WRITE:
    case C_LINGER:
        conn_close(r, c);
        break;
    }
}

static void tick(void *arg)
{
    struct reflector *r = arg;

    pthread_mutex_lock(&r->lock);
    size_t gone = purge(r, (uint64_t)time(NULL));
    pthread_mutex_unlock(&r->lock);
    if (gone)
        log_debug("forgot %zu expired punches", gone);
}

static void *run(void *arg)
{
    struct reflector *r = arg;

    engine_run(r->engine);
    /* Stopping: the clients still waiting hear why, best effort. */
    struct engine_conn *ec;
    while ((ec = engine_oldest(r->engine)) != NULL) {
        struct conn *c = (struct conn *)ec;
        if (c->state == C_READ || c->state == C_WAIT || c->state == C_DIAL) {
            const char bye[] = "FAIL the reflector is stopping\n";
            ssize_t rc = send(c->ec.w.fd, bye, sizeof(bye) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)rc;
        }
        conn_close(r, c);
    }
    return NULL;
}

static const struct engine_ops reflector_ops = {
    .refused = refused,
    .cut = cut,
    .accepted = accepted,
    .tick = tick,
    .after_io = after_io,
};

/* ---- start, stop ---- */

static int parse_listen(const char *listen, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[HOSTPORT_MAX], why[200];
    int port;
    if (hostport_parse(listen, true, host, sizeof(host), &port, why, sizeof(why)) < 0)
        return -1;
    *len = address_sockaddr(host, (uint16_t)port, ss);
    return 0;
}

static void reflector_free(struct reflector *r)
{
    engine_free(r->engine); /* the connections' memory too */
    if (r->table != NULL) {
        size_t i = 0;
        struct expected *e;
        while ((e = htable_next(r->table, &i)) != NULL)
            free(e);
        htable_free(r->table);
    }
    tally_free(r->clusters);
    tally_free(r->jobs);
    pthread_mutex_destroy(&r->lock);
    explicit_bzero(&r->key, sizeof(r->key));
    free(r);
}

static void tuning_defaults(struct reflector_tuning *t, const struct reflector_tuning *given)
{
    static const struct reflector_tuning none;
    if (given == NULL)
        given = &none;
    t->read_timeout_ms =
        given->read_timeout_ms ? given->read_timeout_ms : REFLECTOR_READ_TIMEOUT_MS;
    t->pair_wait_ms = given->pair_wait_ms ? given->pair_wait_ms : REFLECTOR_PAIR_WAIT_MS;
    t->dial_timeout_ms =
        given->dial_timeout_ms ? given->dial_timeout_ms : REFLECTOR_DIAL_TIMEOUT_MS;
    t->linger_ms = given->linger_ms ? given->linger_ms : REFLECTOR_LINGER_MS;
    t->conns_max = given->conns_max ? given->conns_max : REFLECTOR_CONNS_MAX;
    t->expected_max = given->expected_max ? given->expected_max : REFLECTOR_EXPECTED_MAX;
    t->conns_per_address =
        given->conns_per_address ? given->conns_per_address : REFLECTOR_CONNS_PER_ADDRESS;
    t->expected_per_cluster = given->expected_per_cluster ? given->expected_per_cluster
                              : t->expected_max / 8       ? t->expected_max / 8
                                                          : 1;
}

/* Every connection the reflector lets in at once (`reflector-connections`)
   may arrive together, e.g. a large job's punches: a queue that holds them
   costs nothing, since the engine takes them as they come.  The kernel keeps
   at most net.core.somaxconn of it. */
#define LISTEN_BACKLOG_MIN 128
#define LISTEN_BACKLOG_MAX 65535
int reflector_backlog(unsigned conns_max)
{
    unsigned want = conns_max ? conns_max : REFLECTOR_CONNS_MAX;
    return want < LISTEN_BACKLOG_MIN   ? LISTEN_BACKLOG_MIN
           : want > LISTEN_BACKLOG_MAX ? LISTEN_BACKLOG_MAX
                                       : (int)want;
}

int reflector_listen(const char *where, unsigned conns_max, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sslen = 0;
    int one = 1;

    if (where == NULL || parse_listen(where, &ss, &sslen) < 0) {
        snprintf(err, errlen, "reflector: listen address \"%s\" is not ADDR:PORT",
                 where ? where : "");
        return -1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "reflector: %s", strerror(errno));
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* An IPv6 address takes IPv6 only, whatever net.ipv6.bindv6only says:
       the reflector listens where it is configured, an IPv4 address on a
       socket of its own. */
    if ((ss.ss_family == AF_INET6 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0) ||
        bind(fd, (struct sockaddr *)&ss, sslen) < 0 ||
        listen(fd, reflector_backlog(conns_max)) < 0) {
        snprintf(err, errlen, "reflector: cannot listen on %s: %s", where, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* A listening IP socket's port; -1 when fd is none. */
static int listener_port(int fd)
{
    struct sockaddr_storage bound;
    socklen_t blen = sizeof(bound);

    if (getsockname(fd, (struct sockaddr *)&bound, &blen) < 0 ||
        (bound.ss_family != AF_INET && bound.ss_family != AF_INET6))
        return -1;
    return ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                             : ((struct sockaddr_in *)&bound)->sin_port);
}

struct reflector *reflector_start_on(int listen_fd, int listen_fd2, const struct proxy_key *key,
                                     reflector_observe_fn observe_fn, void *arg,
                                     const struct reflector_tuning *tuning, char *err,
                                     size_t errlen)
{
    struct reflector *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        snprintf(err, errlen, "reflector: out of memory");
        close(listen_fd);
        if (listen_fd2 >= 0)
            close(listen_fd2);
        return NULL;
    }
    pthread_mutex_init(&r->lock, NULL);
    r->key = *key;
    r->observe = observe_fn;
    r->arg = arg;
    tuning_defaults(&r->t, tuning);
    if (getrandom(&r->seed, sizeof(r->seed), 0) != (ssize_t)sizeof(r->seed))
        r->seed = (uint64_t)monotonic_ms() ^ (uint64_t)getpid();
    r->table = htable_new(expected_eq);
    r->clusters = tally_new();
    r->jobs = tally_new();
    int bad = (r->port = listener_port(listen_fd)) < 0           ? listen_fd
              : listen_fd2 >= 0 && listener_port(listen_fd2) < 0 ? listen_fd2
                                                                 : -1;
    if (r->table == NULL || r->clusters == NULL || r->jobs == NULL) {
        snprintf(err, errlen, "reflector: out of memory");
    } else if (bad >= 0) {
        snprintf(err, errlen, "reflector: descriptor %d is not an IP socket", bad);
    } else {
        struct engine_config ec = {
            .listen_fd = listen_fd,
            .listen_fd2 = listen_fd2,
            .accepts_per_run = REFLECTOR_ACCEPTS_PER_EVENT,
            .conns_max = r->t.conns_max,
            .per_address = r->t.conns_per_address,
            .first_ms = r->t.read_timeout_ms,
            .shed = &r->refused,
            .ops = &reflector_ops,
            .arg = r,
        };
        char why[200];
        r->engine = engine_new(&ec, why, sizeof(why)); /* closes both on failure */
        listen_fd = listen_fd2 = -1;
        if (r->engine == NULL)
            snprintf(err, errlen, "reflector: %s", why);
    }
    if (r->engine == NULL) {
        if (listen_fd >= 0)
            close(listen_fd);
        if (listen_fd2 >= 0)
            close(listen_fd2);
        reflector_free(r);
        return NULL;
    }
    int rc = pthread_create(&r->thread, NULL, run, r);
    if (rc != 0) {
        snprintf(err, errlen, "reflector: cannot start its thread: %s", strerror(rc));
        reflector_free(r);
        return NULL;
    }
    return r;
}

struct reflector *reflector_start_tuned(const char *where, const struct proxy_key *key,
                                        reflector_observe_fn observe_fn, void *arg,
                                        const struct reflector_tuning *tuning, char *err,
                                        size_t errlen)
{
    int fd = reflector_listen(where, tuning ? tuning->conns_max : 0, err, errlen);
    if (fd < 0)
        return NULL;
    struct reflector *r = reflector_start_on(fd, -1, key, observe_fn, arg, tuning, err, errlen);
    if (r != NULL)
        log_info("reflector listening on %s (port %d)", where, r->port);
    return r;
}

struct reflector *reflector_start(const char *listen, const struct proxy_key *key,
                                  reflector_observe_fn observe_fn, void *arg, char *err,
                                  size_t errlen)
{
    return reflector_start_tuned(listen, key, observe_fn, arg, NULL, err, errlen);
}

int reflector_port(const struct reflector *r)
{
    return r->port;
}

void reflector_stop(struct reflector *r)
{
    if (r == NULL)
        return;
    engine_stop(r->engine);
    pthread_join(r->thread, NULL);
    reflector_free(r);
}

void reflector_counters(struct reflector *r, struct reflector_counters *c)
{
    c->maps = atomic_load(&r->maps);
    c->punches = atomic_load(&r->punches);
    c->paired = atomic_load(&r->paired);
    c->punch_failed = atomic_load(&r->punch_failed);
    c->dials = atomic_load(&r->dials);
    c->refused = atomic_load(&r->refused);
    c->misdeclared = atomic_load(&r->misdeclared);
    c->refused_address = atomic_load(&r->refused_address);
    c->cut = atomic_load(&r->cut);
    c->expect_refused = atomic_load(&r->expect_refused);
}
