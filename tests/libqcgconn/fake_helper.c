/* A fake qcg-helper; see fake_helper.h.  One thread, one poll loop; the test
   thread's calls take the same mutex, so writes never interleave. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fake_helper.h"
#include "fdpass.h"
#include "internal.h"

#define MAX_CONNS 64
#define MAX_ERRORS 8
#define MAX_PLANS 16
#define MAX_HELD 32

struct conn {
    int fd;
    struct lmsg_reader rd;
    int said_hello;
    int32_t rank;
    char job[LOCAL_JOB_MAX];
    int published;
    uint16_t port;
};

struct fake_helper {
    pthread_t thread;
    pthread_mutex_t lock;
    int listen_fd;
    int stop_pipe[2];
    char path[108];
    uint16_t port_low, port_high;
    struct conn conns[MAX_CONNS];
    struct {
        int32_t rank, code;
        char msg[LOCAL_MESSAGE_MAX];
    } errors[MAX_ERRORS];
    struct {
        int used;
        int32_t rank, code;
        uint32_t tried, only;
        struct local_plan plan;
        char msg[LOCAL_MESSAGE_MAX];
    } plans[MAX_PLANS];
    int garbage_hello;
    int32_t refuse_code;
    uint16_t mute_type;      /* the next request of this type is never answered */
    unsigned busy_publishes; /* the next ones answered BUSY */
    /* LOOKUPs held back until `hold` of them are here, then answered last
       first. */
    unsigned hold, nheld;
    unsigned stall_ms; /* every LOOKUP answered this late, the helper stuck meanwhile */
    struct {
        int conn;
        uint32_t id;
        struct local_lookup lookup;
    } held[MAX_HELD];
    unsigned lookups, withdraws, reports, connections, hellos, publishes;
    unsigned last_tried, last_only;
};

static void reply(struct conn *c, uint16_t type, uint32_t id, const void *payload)
{
    if (lmsg_send(c->fd, type, id, payload, now_us() + 1000000u) < 0)
        fprintf(stderr, "fake helper: send failed\n");
}

static void reply_error(struct conn *c, uint32_t id, int32_t code, const char *msg)
{
    struct local_error e = {.code = code};

    snprintf(e.message, sizeof(e.message), "%s", msg);
    reply(c, LOCAL_ERROR, id, &e);
}

static struct conn *find_published(struct fake_helper *fh, const char *job, int32_t rank)
{
    for (int i = 0; i < MAX_CONNS; i++) {
        struct conn *c = &fh->conns[i];

        if (c->fd >= 0 && c->published && c->rank == rank && strcmp(c->job, job) == 0)
            return c;
    }
    return NULL;
}

static void drop(struct conn *c)
{
    close(c->fd);
    lmsg_reader_reset(&c->rd);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    lmsg_reader_init(&c->rd);
}

/* The answer to one LOOKUP of c: a plan set by the test, an error set by
   it, or direct to the published rank. */
static void answer_lookup(struct fake_helper *fh, struct conn *c, uint32_t id,
                          const struct local_lookup *lk)
{
    struct local_plan plan = {.technique = QCG_TECH_DIRECT};
    struct conn *target;
    char msg[LOCAL_MESSAGE_MAX];

    for (int i = 0; i < MAX_PLANS; i++) {
        if (!fh->plans[i].used || fh->plans[i].rank != lk->to_rank ||
            fh->plans[i].tried != lk->tried_mask || fh->plans[i].only != lk->only)
            continue;
        if (fh->plans[i].code != 0)
            reply_error(c, id, fh->plans[i].code, fh->plans[i].msg);
        else
            reply(c, LOCAL_PLAN, id, &fh->plans[i].plan);
        return;
    }
    for (int i = 0; i < MAX_ERRORS; i++) {
        if (fh->errors[i].code != 0 && fh->errors[i].rank == lk->to_rank) {
            reply_error(c, id, fh->errors[i].code, fh->errors[i].msg);
            return;
        }
    }
    target = find_published(fh, c->job, lk->to_rank);
    if (target == NULL) {
        snprintf(msg, sizeof(msg), "rank %d of job %s is not published", lk->to_rank, c->job);
        reply_error(c, id, QCG_ENOTFOUND, msg);
        return;
    }
    plan.port = target->port;
    strcpy(plan.cluster, "c1");
    strcpy(plan.node, "n1");
    strcpy(plan.address, "127.0.0.1");
    reply(c, LOCAL_PLAN, id, &plan);
}

/* 0 keeps the connection, -1 closes it. */
static int handle(struct fake_helper *fh, struct conn *c)
{
    const struct local_header *h = &c->rd.hdr;
    const union local_payload *p = &c->rd.payload;

    if (!c->said_hello && h->type != LOCAL_HELLO) {
        reply_error(c, h->request_id, QCG_EPROTO, "HELLO first");
        return -1;
    }
    if (fh->mute_type != 0 && h->type == fh->mute_type) {
        fh->mute_type = 0;
        return 0;
    }
    switch (h->type) {
    case LOCAL_HELLO: {
        struct local_hello_ok ok = {
            .version = LOCAL_VERSION, .port_low = fh->port_low, .port_high = fh->port_high};

        if (fh->garbage_hello) {
            struct local_header bad = {.magic = 0xdeadbeef, .type = LOCAL_HELLO_OK};

            fh->garbage_hello = 0;
            if (write(c->fd, &bad, sizeof(bad)) < 0)
                return -1;
            return -1;
        }
        if (fh->refuse_code != 0) {
            reply_error(c, 0, fh->refuse_code, "uid 4242 may not use this helper");
            fh->refuse_code = 0;
            return -1;
        }
        c->said_hello = 1;
        fh->hellos++;
        c->rank = p->hello.rank;
        strcpy(c->job, p->hello.job);
        strcpy(ok.cluster, "c1");
        strcpy(ok.node, "n1");
        strcpy(ok.address, "127.0.0.1");
        reply(c, LOCAL_HELLO_OK, h->request_id, &ok);
        return 0;
    }
    case LOCAL_PUBLISH: {
        struct conn *other = find_published(fh, c->job, c->rank);

        fh->publishes++;
        if (fh->busy_publishes > 0) {
            fh->busy_publishes--;
            reply_error(c, h->request_id, LOCAL_ERETRY, "rank being withdrawn; retry");
            return 0;
        }
        if (other != NULL && other != c) {
            reply_error(c, h->request_id, QCG_EBUSY, "rank held by another process");
            return 0;
        }
        if (p->publish.port < fh->port_low || p->publish.port > fh->port_high) {
            reply_error(c, h->request_id, QCG_EINVAL, "port outside the node's range");
            return 0;
        }
        c->published = 1;
        c->port = p->publish.port;
        reply(c, LOCAL_OK, h->request_id, NULL);
        return 0;
    }
    case LOCAL_WITHDRAW:
        fh->withdraws++;
        c->published = 0;
        reply(c, LOCAL_OK, h->request_id, NULL);
        return 0;
    case LOCAL_LOOKUP:
        fh->lookups++;
        fh->last_tried = p->lookup.tried_mask;
        fh->last_only = p->lookup.only;
        if (fh->stall_ms > 0)
            usleep(fh->stall_ms * 1000u);
        if (fh->hold > 0) {
            fh->held[fh->nheld].conn = (int)(c - fh->conns);
            fh->held[fh->nheld].id = h->request_id;
            fh->held[fh->nheld].lookup = p->lookup;
            if (++fh->nheld == fh->hold) {
                while (fh->nheld > 0) {
                    fh->nheld--;
                    answer_lookup(fh, &fh->conns[fh->held[fh->nheld].conn], fh->held[fh->nheld].id,
                                  &fh->held[fh->nheld].lookup);
                }
                fh->hold = 0;
            }
            return 0;
        }
        answer_lookup(fh, c, h->request_id, &p->lookup);
        return 0;
    case LOCAL_REPORT:
        fh->reports++;
        return 0; /* no reply, as the real helper */
    default:
        reply_error(c, h->request_id, QCG_EPROTO, "unexpected message");
        return -1;
    }
}

static void *run(void *arg)
{
    struct fake_helper *fh = arg;

    for (;;) {
        struct pollfd pfd[MAX_CONNS + 2];
        int map[MAX_CONNS + 2], n = 0;

        pthread_mutex_lock(&fh->lock);
        pfd[n] = (struct pollfd){.fd = fh->stop_pipe[0], .events = POLLIN};
        map[n++] = -1;
        pfd[n] = (struct pollfd){.fd = fh->listen_fd, .events = POLLIN};
        map[n++] = -2;
        for (int i = 0; i < MAX_CONNS; i++) {
            if (fh->conns[i].fd >= 0) {
                pfd[n] = (struct pollfd){.fd = fh->conns[i].fd, .events = POLLIN};
                map[n++] = i;
            }
        }
        pthread_mutex_unlock(&fh->lock);
        if (poll(pfd, (nfds_t)n, 1000) < 0 && errno != EINTR)
            break;
        if (pfd[0].revents)
            break;
        pthread_mutex_lock(&fh->lock);
        if (pfd[1].revents & POLLIN) {
            int fd = accept4(fh->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

            if (fd >= 0)
                fh->connections++;
            for (int i = 0; fd >= 0 && i < MAX_CONNS; i++) {
                if (fh->conns[i].fd < 0) {
                    fh->conns[i].fd = fd;
                    fd = -1;
                }
            }
            if (fd >= 0)
                close(fd);
        }
        for (int k = 2; k < n; k++) {
            struct conn *c = &fh->conns[map[k]];

            if (pfd[k].revents == 0 || c->fd != pfd[k].fd)
                continue;
            /* Bounded: each message is handled or the connection dropped. */
            for (int m = 0; m < 16 && c->fd >= 0; m++) {
                int rc = lmsg_read(c->fd, &c->rd);

                if (rc == 0)
                    break;
                if (rc < 0 || handle(fh, c) < 0) {
                    drop(c);
                    break;
                }
                lmsg_reader_reset(&c->rd);
            }
        }
        pthread_mutex_unlock(&fh->lock);
    }
    return NULL;
}

struct fake_helper *fake_helper_new(const char *path, uint16_t port_low, uint16_t port_high)
{
    struct fake_helper *fh = calloc(1, sizeof(*fh));
    struct sockaddr_un sun = {.sun_family = AF_UNIX};

    if (fh == NULL)
        return NULL;
    pthread_mutex_init(&fh->lock, NULL);
    fh->port_low = port_low;
    fh->port_high = port_high;
    for (int i = 0; i < MAX_CONNS; i++) {
        fh->conns[i].fd = -1;
        lmsg_reader_init(&fh->conns[i].rd);
    }
    snprintf(fh->path, sizeof(fh->path), "%s", path);
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
    unlink(path);
    fh->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fh->listen_fd < 0 || bind(fh->listen_fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 ||
        listen(fh->listen_fd, 64) < 0 || pipe(fh->stop_pipe) < 0 ||
        pthread_create(&fh->thread, NULL, run, fh) != 0) {
        perror("fake helper");
        exit(1);
    }
    return fh;
}

void fake_helper_free(struct fake_helper *fh)
{
    if (write(fh->stop_pipe[1], "x", 1) < 0)
        perror("fake helper stop");
    pthread_join(fh->thread, NULL);
    for (int i = 0; i < MAX_CONNS; i++) {
        if (fh->conns[i].fd >= 0)
            drop(&fh->conns[i]);
    }
    close(fh->listen_fd);
    close(fh->stop_pipe[0]);
    close(fh->stop_pipe[1]);
    unlink(fh->path);
    pthread_mutex_destroy(&fh->lock);
    free(fh);
}

/* A counter or a last value, read under the lock. */
static unsigned read_locked(struct fake_helper *fh, const unsigned *p)
{
    unsigned v;

    pthread_mutex_lock(&fh->lock);
    v = *p;
    pthread_mutex_unlock(&fh->lock);
    return v;
}

void fake_helper_set_error(struct fake_helper *fh, int32_t rank, int32_t code, const char *msg)
{
    pthread_mutex_lock(&fh->lock);
    for (int i = 0; i < MAX_ERRORS; i++) {
        if (fh->errors[i].code == 0 || fh->errors[i].rank == rank) {
            fh->errors[i].rank = rank;
            fh->errors[i].code = code;
            snprintf(fh->errors[i].msg, sizeof(fh->errors[i].msg), "%s", msg);
            break;
        }
    }
    pthread_mutex_unlock(&fh->lock);
}

void fake_helper_set_plan(struct fake_helper *fh, int32_t rank, uint32_t tried,
                          const struct local_plan *plan, int32_t code, const char *msg)
{
    fake_helper_set_plan_only(fh, rank, tried, 0, plan, code, msg);
}

void fake_helper_set_plan_only(struct fake_helper *fh, int32_t rank, uint32_t tried, uint32_t only,
                               const struct local_plan *plan, int32_t code, const char *msg)
{
    pthread_mutex_lock(&fh->lock);
    for (int i = 0; i < MAX_PLANS; i++) {
        if (fh->plans[i].used &&
            (fh->plans[i].rank != rank || fh->plans[i].tried != tried || fh->plans[i].only != only))
            continue;
        fh->plans[i].used = 1;
        fh->plans[i].rank = rank;
        fh->plans[i].tried = tried;
        fh->plans[i].only = only;
        fh->plans[i].code = plan != NULL ? 0 : code;
        if (plan != NULL)
            fh->plans[i].plan = *plan;
        snprintf(fh->plans[i].msg, sizeof(fh->plans[i].msg), "%s", msg != NULL ? msg : "");
        break;
    }
    pthread_mutex_unlock(&fh->lock);
}

uint32_t fake_helper_last_tried(struct fake_helper *fh)
{
    return read_locked(fh, &fh->last_tried);
}

uint32_t fake_helper_last_only(struct fake_helper *fh)
{
    return read_locked(fh, &fh->last_only);
}

int fake_helper_incoming(struct fake_helper *fh, int32_t rank, int32_t peer_rank,
                         uint32_t technique, int fd)
{
    return fake_helper_incoming_role(fh, rank, peer_rank, technique, LOCAL_ROLE_ACCEPT, "", fd);
}

int fake_helper_incoming_role(struct fake_helper *fh, int32_t rank, int32_t peer_rank,
                              uint32_t technique, uint32_t role, const char *token, int fd)
{
    struct {
        struct local_header h;
        struct local_incoming in;
    } msg;
    int rc = -1;

    memset(&msg, 0, sizeof(msg));
    msg.h.magic = LOCAL_MAGIC;
    msg.h.type = LOCAL_INCOMING;
    msg.h.length = sizeof(msg.in);
    msg.in.peer_rank = peer_rank;
    msg.in.technique = technique;
    msg.in.role = role;
    snprintf(msg.in.token, sizeof(msg.in.token), "%s", token);
    pthread_mutex_lock(&fh->lock);
    for (int i = 0; i < MAX_CONNS; i++) {
        struct conn *c = &fh->conns[i];

        /* The control connection: the one that said HELLO first for rank. */
        if (c->fd >= 0 && c->said_hello && c->rank == rank) {
            rc = fdpass_send(c->fd, &msg, sizeof(msg), fd) == (ssize_t)sizeof(msg) ? 0 : -1;
            break;
        }
    }
    pthread_mutex_unlock(&fh->lock);
    return rc;
}

void fake_helper_garbage_next_hello(struct fake_helper *fh)
{
    pthread_mutex_lock(&fh->lock);
    fh->garbage_hello = 1;
    pthread_mutex_unlock(&fh->lock);
}

void fake_helper_mute_next(struct fake_helper *fh, uint16_t type)
{
    pthread_mutex_lock(&fh->lock);
    fh->mute_type = type;
    pthread_mutex_unlock(&fh->lock);
}

void fake_helper_busy_publishes(struct fake_helper *fh, unsigned n)
{
    pthread_mutex_lock(&fh->lock);
    fh->busy_publishes = n;
    pthread_mutex_unlock(&fh->lock);
}

unsigned fake_helper_hellos(struct fake_helper *fh)
{
    return read_locked(fh, &fh->hellos);
}

unsigned fake_helper_publishes(struct fake_helper *fh)
{
    return read_locked(fh, &fh->publishes);
}

void fake_helper_refuse_next_hello(struct fake_helper *fh, int32_t code)
{
    pthread_mutex_lock(&fh->lock);
    fh->refuse_code = code;
    pthread_mutex_unlock(&fh->lock);
}

unsigned fake_helper_lookups(struct fake_helper *fh)
{
    return read_locked(fh, &fh->lookups);
}

unsigned fake_helper_reports(struct fake_helper *fh)
{
    return read_locked(fh, &fh->reports);
}

unsigned fake_helper_withdraws(struct fake_helper *fh)
{
    return read_locked(fh, &fh->withdraws);
}

int fake_helper_published(struct fake_helper *fh, int32_t rank)
{
    int yes = 0;

    pthread_mutex_lock(&fh->lock);
    for (int i = 0; i < MAX_CONNS; i++)
        yes = yes || (fh->conns[i].fd >= 0 && fh->conns[i].published && fh->conns[i].rank == rank);
    pthread_mutex_unlock(&fh->lock);
    return yes;
}

unsigned fake_helper_connections(struct fake_helper *fh)
{
    return read_locked(fh, &fh->connections);
}

void fake_helper_hold_lookups(struct fake_helper *fh, unsigned n)
{
    pthread_mutex_lock(&fh->lock);
    fh->hold = n <= MAX_HELD ? n : MAX_HELD;
    fh->nheld = 0;
    pthread_mutex_unlock(&fh->lock);
}

void fake_helper_stall_lookups(struct fake_helper *fh, unsigned ms)
{
    pthread_mutex_lock(&fh->lock);
    fh->stall_ms = ms;
    pthread_mutex_unlock(&fh->lock);
}

int fake_helper_drop_rank(struct fake_helper *fh, int32_t rank)
{
    int rc = -1;

    pthread_mutex_lock(&fh->lock);
    for (int i = 0; i < MAX_CONNS; i++) {
        if (fh->conns[i].fd >= 0 && fh->conns[i].said_hello && fh->conns[i].rank == rank) {
            drop(&fh->conns[i]);
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&fh->lock);
    return rc;
}
