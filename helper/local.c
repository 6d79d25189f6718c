/* The Unix socket server: a connection per process (or status tool), every
   message checked before use, then dispatched through a table.

   A connection has many LOOKUPs (and REPORTs) in flight at once: each is
   answered with its request id when its upstream call ends, in any order.
   PUBLISH, WITHDRAW and qcg-probe's SITE, PROBE and OBSERVED change or ask
   about the connection as a whole: reading stops until each is answered.
   Requests are never refused for being too many: a connection with
   max-requests in flight, or whose replies wait unsent, is not read, and
   neither is the next request of a uid with max-requests-per-uid on the
   thread pool; the requests wait in the kernel. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "local_internal.h"
#include "log.h"
#include "qcgconn.h"
#include "shares.h"

#define LISTEN_BACKLOG 128

void conn_unref(struct conn *c)
{
    if (--c->refs > 0)
        return;
    if (c->share != NULL)
        share_leave(c->srv->shares, c->share);
    explicit_bzero(&c->me, sizeof(c->me));
    explicit_bzero(&c->in, sizeof(c->in));
    free(c);
}

static void on_conn_closed(uv_handle_t *h)
{
    conn_unref(h->data);
}

void conn_close(struct conn *c)
{
    struct local_server *srv = c->srv;

    if (c->closing)
        return;
    c->closing = 1;
    c->reading = 0; /* uv_close stops it */
    dlist_remove(&srv->conns, &c->link);
    srv->nclients--;
    log_debug("pid %d: disconnected", (int)c->pid);
    if (c->held) {
        dlist_remove(&c->share->waiting, &c->wait);
        c->held = 0;
    }
    penalty_drop(c);
    /* With a PUBLISH in flight, its completion releases the contact. */
    if (!c->publishing)
        release_contact(c);
    uv_close((uv_handle_t *)&c->pipe, on_conn_closed);
}

static void on_unaccepted_closed(uv_handle_t *h)
{
    free(h->data);
}

static void on_connection(uv_stream_t *server, int status)
{
    struct local_server *srv = server->data;
    struct ucred cred;
    socklen_t len = sizeof(cred);
    uv_os_fd_t fd;

    if (status < 0) {
        log_warnx("accept: %s", uv_strerror(status));
        return;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        log_warnx("out of memory for a new client");
        return;
    }
    uv_pipe_init(srv->loop, &c->pipe, 0);
    c->pipe.data = c;
    if (uv_accept(server, (uv_stream_t *)&c->pipe) < 0 ||
        uv_fileno((uv_handle_t *)&c->pipe, &fd) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        log_warn("cannot accept a client");
        uv_close((uv_handle_t *)&c->pipe, on_unaccepted_closed);
        return;
    }
    c->srv = srv;
    c->refs = 1;
    c->id = ++srv->next_id;
    c->pid = cred.pid;
    c->uid = cred.uid;
    c->share = share_join(srv->shares, cred.uid);
    if (c->share == NULL) {
        log_warnx("pid %d uid %d: out of memory for a new client", (int)c->pid, (int)c->uid);
        uv_close((uv_handle_t *)&c->pipe, on_unaccepted_closed);
        return;
    }
    dlist_append(&srv->conns, &c->link);
    srv->nclients++;
    log_debug("pid %d uid %d: connected", (int)c->pid, (int)c->uid);

    /* The helper's own probe endpoints (responder.h) are served like any
       process, whatever allow-uids says. */
    if (cred.pid != getpid() && !helper_uid_allowed(srv->cfg, cred.uid)) {
        refusal_log(c, &srv->conn_refused_log, "connection refused: uid not in allow-uids",
                    "allow-uids");
        send_error(c, 0, QCG_EDENIED, 1, "uid %d may not use this helper", (int)c->uid);
        return;
    }
    if (srv->nclients - srv->refusals_held > (unsigned)srv->cfg->max_clients) {
        char what[96];
        snprintf(what, sizeof(what), "connection refused: more than %d connections",
                 srv->cfg->max_clients);
        refusal_log(c, &srv->conn_refused_log, what, "max-clients");
        send_error(c, 0, QCG_ENOHELPER, 1, "the helper serves at most %d clients (max-clients)",
                   srv->cfg->max_clients);
        return;
    }
    if (c->share->conns > (unsigned)srv->cfg->max_clients_per_uid) {
        char what[96];
        snprintf(what, sizeof(what), "connection refused: more than %d connections of this uid",
                 srv->cfg->max_clients_per_uid);
        refusal_log(c, &srv->conn_refused_log, what, "max-clients-per-uid");
        /* After a delay: dialled again at once, it would cost the helper
           an accept and a refusal per dial (local_penalty.c). */
        refuse_conn_later(c, QCG_ENOHELPER,
                          "the helper serves at most %d clients of uid %d (max-clients-per-uid)",
                          srv->cfg->max_clients_per_uid, (int)c->uid);
        return;
    }
    update_reading(c);
}

struct local_server *local_server_new(uv_loop_t *loop, const struct helper_config *cfg,
                                      struct contacts *cs, struct upstream *up, char *err,
                                      size_t errlen)
{
    struct local_server *srv = calloc(1, sizeof(*srv));
    int rc;

    if (srv == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    srv->loop = loop;
    srv->cfg = cfg;
    srv->cs = cs;
    srv->up = up;
    srv->shares = shares_new();
    if (srv->shares == NULL) {
        snprintf(err, errlen, "out of memory");
        free(srv);
        return NULL;
    }
    if (local_socket_prepare(cfg->socket, err, errlen) < 0) {
        shares_free(srv->shares);
        free(srv);
        return NULL;
    }
    uv_pipe_init(loop, &srv->listener, 0);
    srv->listener.data = srv;
    if ((rc = uv_pipe_bind(&srv->listener, cfg->socket)) < 0) {
        local_socket_bind_error(cfg->socket, rc, uv_strerror(rc), err, errlen);
        goto fail;
    }
    if (local_socket_claim(cfg->socket, cfg->mode, &srv->dev, &srv->ino, err, errlen) < 0)
        goto fail;
    if ((rc = uv_listen((uv_stream_t *)&srv->listener, LISTEN_BACKLOG, on_connection)) < 0) {
        snprintf(err, errlen, "socket: cannot listen on %s: %s", cfg->socket, uv_strerror(rc));
        unlink(cfg->socket);
        goto fail;
    }
    turns_start(srv);
    penalty_start(srv);
    return srv;
fail:
    /* The handle must be closed by the loop before its memory goes. */
    srv->closing = 1;
    uv_close((uv_handle_t *)&srv->listener, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    shares_free(srv->shares);
    free(srv);
    return NULL;
}

void local_server_close(struct local_server *srv)
{
    if (srv->closing)
        return;
    srv->closing = 1;
    uv_close((uv_handle_t *)&srv->listener, NULL);
    turns_stop(srv);
    penalty_stop(srv);
    local_socket_release(srv->cfg->socket, srv->dev, srv->ino);
    while (srv->conns.head != NULL)
        conn_close(dlist_entry(srv->conns.head, struct conn, link));
    punching_stop(srv);
}

void local_server_free(struct local_server *srv)
{
    if (srv == NULL)
        return;
    punching_free(srv);
    shares_free(srv->shares);
    free(srv);
}

/* The live connection that publishes (job, rank): accepted (its PUBLISH
   answered ok), or with pending set, one whose PUBLISH is still on its way. */
static struct conn *find_publisher(struct local_server *srv, const char *job, int32_t rank,
                                   int pending)
{
    for (struct dlink *l = srv->conns.head; l != NULL; l = l->next) {
        struct conn *c = dlist_entry(l, struct conn, link);
        if (c->hello && (c->published || (pending && c->publishing)) && !c->closing &&
            c->me.rank == rank && strcmp(c->me.job, job) == 0)
            return c;
    }
    return NULL;
}

struct conn *publisher(struct local_server *srv, const char *job, int32_t rank)
{
    return find_publisher(srv, job, rank, 0);
}

int local_server_publishes(struct local_server *srv, const char *job, int32_t rank, char *why,
                           size_t whylen)
{
    if (publisher(srv, job, rank) != NULL)
        return 1;
    if (find_publisher(srv, job, rank, 1) != NULL) {
        snprintf(why, whylen, "the PUBLISH of job %s rank %d on this node is not answered yet", job,
                 rank);
        return 2;
    }
    snprintf(why, whylen, "no live process on this node publishes job %s rank %d", job, rank);
    return 0;
}

int local_server_published_port(struct local_server *srv, const char *job, int32_t rank)
{
    struct conn *c = publisher(srv, job, rank);

    return c == NULL ? 0 : (int)c->me.port;
}

void local_server_set_attempts(struct local_server *srv, struct attempts *as)
{
    srv->attempts = as;
}

void local_server_set_intercept(struct local_server *srv, int can_intercept, int nfqueue,
                                const char *why)
{
    srv->can_intercept = can_intercept;
    srv->nfqueue = nfqueue;
    snprintf(srv->intercept, sizeof(srv->intercept), "%s", why);
}

void local_conn_hold(struct conn *c)
{
    c->refs++;
}

void local_conn_drop(struct conn *c)
{
    conn_unref(c);
}

int local_conn_alive(const struct conn *c)
{
    return !c->closing;
}

void local_conn_error(struct conn *c, uint32_t rid, int code, const char *msg)
{
    send_error(c, rid, code, 0, "%s", msg);
}
