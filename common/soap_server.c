/*
 * The mutual-TLS gSOAP server shared by the broker and the frontend.
 *
 * One accept loop (soap_server_run) and one detached thread per connection.
 * The loop never waits for a slot: it takes every connection into the
 * handshake stage (bounded in total and per address) or closes it at once,
 * and cuts off (shutdown) the handshakes past their deadline, so that idle
 * or slow clients cannot stop it from accepting (soap_server.h).  gSOAP's
 * defaults are unsafe (no timeouts, 2 GB messages, gzip bombs): every limit
 * of docs/design.md ("Facts we rely on", gSOAP) is set on the master context
 * and inherited by the per-connection copies.
 */
#include "soap_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backlog.h"
#include "crl.h"
#include "daemon.h"
#include "dlist.h"
#include "htable.h"
#include "log.h"
#include "monotonic.h"
#include "proto.h"
#include "ratelimit.h"
#include "soapH.h"
#include "soap_server_internal.h"
#include "soap_util.h"
#include "tls_peer_note.h"
#include "sockaddr_text.h"
#include "source_group.h"
#include "tally.h"
#include "x509_text.h"

/* Generated from qcg.wsdl into the qcgsoap library. */
const char *qcg_wsdl_text(void);

#define SERVER_IO_TIMEOUT 10       /* seconds a send or recv may stall */
#define SERVER_TRANSFER_TIMEOUT 30 /* seconds for a whole message */
#define SERVER_RECV_MAXLENGTH (1024 * 1024)
#define SERVER_MAXLENGTH (64 * 1024)
#define SERVER_MAXOCCURS 1000
#define SERVER_MAXLEVEL 32
#define SERVER_MAX_KEEP_ALIVE 10000 /* requests per connection before it is recycled */
/* How long run() waits for connection threads after a stop: long enough for a
   stalled peer to hit the I/O timeout, bounded so a stop always completes. */
#define SERVER_DRAIN_SECONDS (SERVER_IO_TIMEOUT + 5)

/* "PEER: " (when peer is not NULL) and fmt as a warn line of func (the
   logger's prefix: the caller's, not this function's) through rate limiter
   rl (burst lines a window), the first after a flood with the count left
   out ("N more WHAT not logged").  The limiter is asked first: under a flood
   the lines not logged cost no formatting. */
static void limited_text(const char *func, struct ratelimit *rl, uint64_t window_ms, unsigned burst,
                         const char *what, const char *peer, const char *fmt, va_list ap)
{
    unsigned left_out;
    if (!ratelimit_burst_ok(rl, monotonic_ms(), window_ms, burst, &left_out))
        return;
    char line[320];
    int n = peer != NULL ? snprintf(line, sizeof(line), "%s: ", peer) : 0;
    if (n < 0 || (size_t)n >= sizeof(line))
        n = 0;
    vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    if (left_out > 0)
        log_emit(LOG_LEVEL_WARN, func, 0, "%s (%u more %s not logged)", line, left_out, what);
    else
        log_emit(LOG_LEVEL_WARN, func, 0, "%s", line);
}

/* "PEER: WHY" for a connection refused before it was served: at most ten
   lines a second (a burst of refusals is seen in full, a flood is not
   written out).  Called with server->lock held. */
#define REFUSED_LINES_PER_SECOND 10
static void refused(struct soap_server *srv, const char *peer, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refused(struct soap_server *srv, const char *peer, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    limited_text(__func__, &srv->refused_rl, 1000, REFUSED_LINES_PER_SECOND, "refusals", peer, fmt,
                 ap);
    va_end(ap);
}

/* What the accept loop itself lacks (descriptors, memory, a thread):
   counted in *count (srv->stage_counts, for --stats), logged one line in
   10 s, however fast a flood makes it fail.  Accept thread only. */
#define ACCEPT_FAILURE_LOG_MS 10000
static void accept_failed(struct soap_server *srv, unsigned long long *count, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void accept_failed(struct soap_server *srv, unsigned long long *count, const char *fmt, ...)
{
    pthread_mutex_lock(&srv->lock);
    (*count)++;
    pthread_mutex_unlock(&srv->lock);
    va_list ap;
    va_start(ap, fmt);
    limited_text(__func__, &srv->accept_rl, ACCEPT_FAILURE_LOG_MS, 1, "such failures", NULL, fmt,
                 ap);
    va_end(ap);
}

/* The listen backlog (backlog.h): slots and handshakes. */
static int listen_backlog(const struct soap_server *srv)
{
    return backlog_for((long)srv->max_connections + srv->max_handshakes);
}

static struct conn *conn_of(struct soap *soap)
{
    return soap ? (struct conn *)soap->user : NULL;
}

/* Requests must arrive uncompressed: gSOAP would otherwise inflate a gzip body
   before any size limit applies (a gzip bomb). */
static int parse_header(struct soap *soap, const char *key, const char *val)
{
    struct conn *c = conn_of(soap);
    if (strcasecmp(key, "Content-Encoding") == 0 && strcasecmp(val, "identity") != 0) {
        log_warnx("%s: refused a request with Content-Encoding \"%.32s\"", c ? c->peer : "?", val);
        return 415; /* HTTP Unsupported Media Type */
    }
    return c->server->orig_parsehdr(soap, key, val);
}

/* A refused handshake: the client's last flight (TLS 1.3: Certificate and
   Finished, then its first request) is unread in our buffer, and a close
   with unread data is a reset, which overtakes the alert that says why
   (`certificate revoked`): the client's write fails with EPIPE and it never
   reads the alert.  So, while the handshake runs, gSOAP's shutdown keeps
   the reading side open (a shut reading side resets on new data too), and
   its close half-closes, reads what comes for a moment, then closes. */
#define LINGER_MS 1000
static void linger(struct conn *c, int fd)
{
    shutdown(fd, SHUT_WR);
    uint64_t end = monotonic_ms() + LINGER_MS;
    char sink[4096];
    for (;;) {
        uint64_t now = monotonic_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        pthread_mutex_lock(&c->server->lock);
        bool cut = c->expired || c->server->stop;
        pthread_mutex_unlock(&c->server->lock);
        if (cut || now >= end || poll(&p, 1, (int)(end - now)) != 1 ||
            recv(fd, sink, sizeof(sink), MSG_DONTWAIT) <= 0)
            break;
    }
}

static int shutdown_socket(struct soap *soap, SOAP_SOCKET fd, int how)
{
    struct conn *c = conn_of(soap);
    return c->server->orig_shutdownsocket(soap, fd, c->in_handshake ? SHUT_WR : how);
}

/* Closing goes through here so that a stop never shuts down a descriptor
   number that was already closed and reused. */
static int close_socket(struct soap *soap, SOAP_SOCKET fd)
{
    struct conn *c = conn_of(soap);
    if (c->in_handshake)
        linger(c, fd);
    pthread_mutex_lock(&c->server->lock);
    if (c->fd == fd)
        c->fd = -1;
    int rc = c->server->orig_closesocket(soap, fd);
    pthread_mutex_unlock(&c->server->lock);
    return rc;
}

/* After each request: end keep-alive once the server is stopping. */
static int serve_loop(struct soap *soap)
{
    struct conn *c = conn_of(soap);
    if (c && c->server->stop)
        soap->keep_alive = 0;
    /* Each request's data is freed before the next one on the connection. */
    soap_destroy(soap);
    soap_end(soap);
    return SOAP_OK;
}

/* GET /?wsdl (or /wsdl): the service description, generated from
   qcg_service.h, of the operations this daemon performs. */
static int serve_get(struct soap *soap)
{
    const char *q = strchr(soap->path, '?');
    if (!((q && strcmp(q + 1, "wsdl") == 0) || strcmp(soap->path, "/wsdl") == 0))
        return 404;
    struct conn *c = conn_of(soap);
    const char *wsdl = c != NULL && c->server->wsdl != NULL ? c->server->wsdl : qcg_wsdl_text();
    soap->http_content = "text/xml; charset=utf-8";
    if (soap_response(soap, SOAP_FILE) || soap_send_raw(soap, wsdl, strlen(wsdl)) ||
        soap_end_send(soap))
        return soap_closesock(soap);
    return SOAP_OK;
}

static void peer_text(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);

    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
        sockaddr_text(&ss, sl, buf, len);
    else
        snprintf(buf, len, "?:0");
}

/* The group fd's peer is counted under (an IPv6 /prefix6: source_group.h),
   as a tally key and as a range. */
static void source_of(int fd, int prefix6, char key[TALLY_KEY_MAX], struct addr_range *range)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    struct source_group g = {.family = 0};

    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
        source_group_of(&ss, sl, (unsigned)prefix6, &g);
    source_group_text(&g, key, TALLY_KEY_MAX);
    range->family = g.family;
    range->bits = g.prefix;
    memcpy(range->addr, g.addr, sizeof(range->addr));
}

/* A TCP connection closed before its first byte is a reachability check
   (qcg-probe's round trip, a load balancer's health check), not a failed
   handshake: it is logged at debug level only. */
static bool closed_before_tls(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char byte;
    if (poll(&p, 1, timeout_ms) != 1)
        return false;
    return recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static bool stage_host_eq(const void *entry, const void *key)
{
    return strcmp(((const struct stage_host *)entry)->host, key) == 0;
}

static uint64_t stage_host_hash(const struct soap_server *srv, const char *host)
{
    return htable_hash(host, strlen(host), srv->seed);
}

/* How many connections `host` has in the stage.  Called with srv->lock held. */
static int stage_count(const struct soap_server *srv, const char *host)
{
    const struct stage_host *h = htable_find(srv->stage_hosts, stage_host_hash(srv, host), host);
    return h ? h->count : 0;
}

/* Into the stage, counted against its address; -1 when memory runs out.
   Called with srv->lock held. */
static int stage(struct soap_server *srv, struct conn *c)
{
    uint64_t hash = stage_host_hash(srv, c->host);
    struct stage_host *h = htable_find(srv->stage_hosts, hash, c->host);
    if (h == NULL) {
        h = calloc(1, sizeof(*h));
        if (h == NULL)
            return -1;
        snprintf(h->host, sizeof(h->host), "%s", c->host);
        if (htable_insert(srv->stage_hosts, hash, h) < 0) {
            free(h);
            return -1;
        }
    }
    h->count++;
    h->known = h->known || c->known;
    c->stage_host = h;
    dlist_append(&srv->stage, &c->in_stage);
    c->staged = true;
    c->deadline_ms = monotonic_ms() + (uint64_t)srv->handshake_ms;
    srv->handshaking++;
    return 0;
}

static void unstage(struct soap_server *srv, struct conn *c)
{
    if (c->staged) {
        dlist_remove(&srv->stage, &c->in_stage);
        srv->handshaking--;
        c->staged = false;
        struct stage_host *h = c->stage_host;
        c->stage_host = NULL;
        if (--h->count == 0) {
            htable_remove(srv->stage_hosts, stage_host_hash(srv, h->host), h->host);
            free(h);
        }
    }
}

#define STAGE_YIELD_SHARE 5 /* 1/5 of the deadline: 1 s of the default 5 s */

/* Whether the group `key` (also as `range`) is known: named, or within (or
   holding) a prefix named.  Called with srv->lock held. */
static bool known_group(const struct soap_server *srv, const char *key,
                        const struct addr_range *range)
{
    if (tally_count(srv->known, key) > 0)
        return true;
    for (int i = 0; i < srv->nknown_prefixes; i++)
        if (range->family != 0 && addr_range_overlap(&srv->known_prefixes[i], range))
            return true;
    return false;
}

/* The staged connections of a group just known count as known ones.
   Called with srv->lock held. */
static void stage_mark_known(struct soap_server *srv, const struct addr_range *prefix,
                             const char *key)
{
    for (struct dlink *l = srv->stage.head; l != NULL; l = l->next) {
        struct conn *c = dlist_entry(l, struct conn, in_stage);
        if (!c->known &&
            (key != NULL ? strcmp(c->host, key) == 0
                         : c->group.family != 0 && addr_range_overlap(prefix, &c->group))) {
            c->known = true;
            c->stage_host->known = true;
        }
    }
}

/* The group key as known (one a client authenticated from, or one named).
   Called with srv->lock held. */
static bool know_key(struct soap_server *srv, const char *key)
{
    if (tally_count(srv->known, key) > 0)
        return true;
    if (tally_holders(srv->known) >= SOAP_SERVER_KNOWN_MAX || !tally_take(srv->known, key, 1))
        return false;
    stage_mark_known(srv, NULL, key);
    return true;
}

/* The stage is full and a connection from an address holding `same` of it
   arrives: the staged connection that gives way, or NULL (the newcomer is
   refused).  First the oldest of the address holding the most, when that is
   more than the newcomer's would: many addresses sharing the stage cannot
   keep a new one out.  Else the oldest if it has waited STAGE_YIELD_SHARE of
   the deadline: a handshake takes a few round trips, so only idle or slow
   clients give way, and an attacker with more addresses than the stage has
   slots must renew them all that often to keep the stage full.  A stranger
   (`known` false) never makes a known address's handshake give way, by
   either rule: a frontend's handshake over a slow link, or on a loaded
   host, may well take a second.  Called with srv->lock held. */
static struct conn *stage_victim(struct soap_server *srv, int same, bool known)
{
    const struct stage_host *most = NULL, *h;
    size_t it = 0;
    while ((h = htable_next(srv->stage_hosts, &it)) != NULL)
        if ((most == NULL || h->count > most->count) && (known || !h->known))
            most = h;
    if (most != NULL && most->count > same + 1) {
        for (struct dlink *l = srv->stage.head; l != NULL; l = l->next) {
            struct conn *c = dlist_entry(l, struct conn, in_stage);
            if (c->stage_host == most)
                return c;
        }
    }
    struct conn *oldest = NULL;
    for (struct dlink *l = srv->stage.head; l != NULL && oldest == NULL; l = l->next) {
        struct conn *c = dlist_entry(l, struct conn, in_stage);
        if (known || !c->known)
            oldest = c;
    }
    uint64_t waited = (uint64_t)srv->handshake_ms / STAGE_YIELD_SHARE;
    if (oldest != NULL &&
        oldest->deadline_ms - (uint64_t)srv->handshake_ms + waited <= monotonic_ms())
        return oldest;
    return NULL;
}

/* The stage is full and a newcomer comes from a known address (one a
   client authenticated from before, or one the daemon named: a registered
   frontend, a node of a registered cluster): the oldest handshake from an
   address not known gives way at once, so that strangers, however many
   their addresses, never keep a known client out (issue 32; as sshd's
   MaxStartups spares established users).  NULL when the stage holds known
   addresses only.  Called with srv->lock held. */
static struct conn *stage_victim_known(struct soap_server *srv)
{
    for (struct dlink *l = srv->stage.head; l != NULL; l = l->next) {
        struct conn *c = dlist_entry(l, struct conn, in_stage);
        if (!c->expired && !c->known)
            return c;
    }
    return NULL;
}

/* Shuts a staged connection down for a newcomer; its thread then ends.
   Called with srv->lock held. */
static void stage_cut(struct soap_server *srv, struct conn *victim, const char *newcomer)
{
    refused(srv, victim->peer, "cut: %d TLS handshakes in progress, %d from %s; %s takes its place",
            srv->handshaking, victim->stage_host->count, victim->host, newcomer);
    if (victim->fd >= 0)
        shutdown(victim->fd, SHUT_RDWR);
    victim->expired = true;
    victim->cut = true;
    srv->stage_counts.cut++;
    unstage(srv, victim);
}

/* The peer's certificate kept for the reloads to come (soap_server_revoke.c);
   -1 when a CRL loaded since the handshake revokes it. */
static int keep_cert(struct soap_server *srv, struct conn *c)
{
    X509 *cert = SSL_get1_peer_certificate(c->soap->ssl);
    pthread_mutex_lock(&srv->lock);
    c->cert = cert;
    int rc = soap_server_revoked_now(c) ? -1 : 0;
    pthread_mutex_unlock(&srv->lock);
    return rc;
}

/* Out of the handshake stage into a slot of authenticated work: false (and
   logged) when its identity holds its bound already, when it expired
   meanwhile, or when no slot frees within SOAP_SERVER_SLOT_WAIT_S. */
static bool take_slot(struct soap_server *srv, struct conn *c)
{
    bool ok = false;
    pthread_mutex_lock(&srv->lock);
    unstage(srv, c);
    int same = 0;
    for (struct dlink *l = srv->conns.head; l != NULL; l = l->next) {
        const struct conn *o = dlist_entry(l, struct conn, link);
        same += o->authenticated && strcmp(o->identity.name, c->identity.name) == 0;
    }
    if (c->cut) {
        log_debug("%s: its handshake was cut for a newcomer", c->peer);
    } else if (c->expired) {
        refused(srv, c->peer, "refused: TLS handshake not done within %d ms", srv->handshake_ms);
    } else if (same >= srv->max_per_identity) {
        refused(srv, c->peer, "refused: %s %s holds %d connections already",
                role_name(c->identity.role), c->identity.name, same);
    } else {
        c->authenticated = true;
        know_key(srv, c->host);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += SOAP_SERVER_SLOT_WAIT_S;
        bool warned = false;
        while (srv->served >= srv->max_connections && !srv->stop) {
            if (!warned) {
                log_warnx("%d connections served: %s %s waits for a slot", srv->served,
                          role_name(c->identity.role), c->identity.name);
                warned = true;
            }
            if (pthread_cond_timedwait(&srv->changed, &srv->lock, &until) == ETIMEDOUT)
                break;
        }
        if (srv->served < srv->max_connections && !srv->stop) {
            srv->served++;
            c->serving = true;
            ok = true;
        } else if (!srv->stop) {
            refused(srv, c->peer, "refused: no slot of %d freed within %d s", srv->max_connections,
                    SOAP_SERVER_SLOT_WAIT_S);
        }
    }
    pthread_mutex_unlock(&srv->lock);
    return ok;
}

/* gSOAP closes the socket of a failed handshake itself: in_handshake
   makes that close linger. */
static int accept_tls(struct conn *c)
{
    c->in_handshake = true;
    int rc = soap_ssl_accept(c->soap);
    c->in_handshake = false;
    return rc;
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    struct soap *soap = c->soap;
    struct soap_server *srv = c->server;
    char msg[256];

    uint64_t now = monotonic_ms();
    int first_byte_ms = c->deadline_ms > now ? (int)(c->deadline_ms - now) : 0;
    if (closed_before_tls(soap->socket, first_byte_ms)) {
        log_debug("%s: closed before the TLS handshake (a reachability check)", c->peer);
    } else if (accept_tls(c) != SOAP_OK) {
        soap_error_text(soap, msg, sizeof(msg));
        pthread_mutex_lock(&srv->lock);
        if (c->cut)
            log_debug("%s: its handshake was cut for a newcomer", c->peer);
        else if (c->expired)
            refused(srv, c->peer, "refused: TLS handshake not done within %d ms",
                    srv->handshake_ms);
        else {
            char who[320];
            tls_refused_take(who, sizeof(who));
            refused(srv, c->peer, "TLS handshake failed: %s%s", msg, who);
        }
        pthread_mutex_unlock(&srv->lock);
    } else if (identity_check_usage(soap->ssl, false, msg, sizeof(msg)) < 0) {
        pthread_mutex_lock(&srv->lock);
        refused(srv, c->peer, "refused: %s", msg);
        pthread_mutex_unlock(&srv->lock);
    } else if (identity_from_ssl(soap->ssl, &c->identity) < 0) {
        /* Not rate-limited: only holders of a grid CA certificate get here. */
        log_warnx("%s: refused: the certificate does not name a qcg role and name", c->peer);
    } else if (keep_cert(srv, c) < 0) {
        char serial[80] = "?";
        if (c->cert != NULL)
            x509_serial_text(c->cert, serial, sizeof(serial));
        pthread_mutex_lock(&srv->lock);
        refused(srv, c->peer,
                "refused: %s %s (serial %s): certificate revoked by the CRL loaded "
                "during its handshake",
                role_name(c->identity.role), c->identity.name, serial);
        pthread_mutex_unlock(&srv->lock);
    } else if (take_slot(srv, c)) {
        if (log_get_level() >= LOG_LEVEL_DEBUG) {
            /* The serial tells which of a renewed service's certificates it used. */
            char serial[80] = "?";
            const X509 *peer_cert = SSL_get0_peer_certificate(soap->ssl);
            if (peer_cert != NULL)
                x509_serial_text(peer_cert, serial, sizeof(serial));
            log_debug("%s: connection from %s %s (certificate serial %s)", c->peer,
                      role_name(c->identity.role), c->identity.name, serial);
        }
        int rc = soap_serve(soap);
        if (soap->recv_maxlength && soap->count > soap->recv_maxlength) {
            /* gSOAP reports this as a plain end of file. */
            log_warnx("%s: %s %s: request larger than %llu bytes refused", c->peer,
                      role_name(c->identity.role), c->identity.name,
                      (unsigned long long)soap->recv_maxlength);
        } else if (rc == SOAP_FAULT) {
            /* A fault answer (already logged by soap_qcg_fault) ends the
               connection: gSOAP does not keep it alive after one. */
            log_debug("%s: connection closed after a fault", c->peer);
        } else if (rc != SOAP_OK && rc != SOAP_EOF) {
            soap_error_text(soap, msg, sizeof(msg));
            log_info("%s: %s %s: request refused: %s", c->peer, role_name(c->identity.role),
                     c->identity.name, msg);
        }
    }
    soap_destroy(soap);
    soap_end(soap);
    soap_free(soap);

    pthread_mutex_lock(&srv->lock);
    unstage(srv, c);
    if (c->serving)
        srv->served--;
    dlist_remove(&srv->conns, &c->link);
    srv->active--;
    pthread_cond_broadcast(&srv->changed);
    pthread_mutex_unlock(&srv->lock);
    X509_free(c->cert);
    free(c);
    return NULL;
}

struct soap_server *soap_server_new(const struct soap_server_config *cfg, char *err, size_t errlen)
{
    char msg[256];
    if (cfg->tls.ca == NULL || cfg->tls.certkey == NULL) {
        snprintf(err, errlen, "TLS: the CA file and the certificate/key file are required");
        return NULL;
    }
    if (access(cfg->tls.ca, R_OK) < 0) {
        snprintf(err, errlen, "CA file %s: %s", cfg->tls.ca, strerror(errno));
        return NULL;
    }
    if (access(cfg->tls.certkey, R_OK) < 0) {
        snprintf(err, errlen, "certificate file %s: %s", cfg->tls.certkey, strerror(errno));
        return NULL;
    }
    if (cfg->port < 0 || cfg->port > 65535) {
        snprintf(err, errlen, "port %d is not in 0..65535", cfg->port);
        return NULL;
    }
    soap_tls_init_once();

    struct soap_server *srv = calloc(1, sizeof(*srv));
    if (srv == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
#define OR_DEFAULT(v, d) ((v) > 0 ? (v) : (d))
    srv->max_connections = OR_DEFAULT(cfg->max_connections, SOAP_SERVER_MAX_CONNECTIONS);
    srv->max_per_identity = OR_DEFAULT(cfg->max_per_identity, SOAP_SERVER_MAX_PER_IDENTITY);
    srv->max_handshakes = OR_DEFAULT(cfg->max_handshakes, SOAP_SERVER_MAX_HANDSHAKES);
    srv->per_address = OR_DEFAULT(cfg->handshakes_per_address, SOAP_SERVER_HANDSHAKES_PER_ADDRESS);
    srv->ipv6_prefix = OR_DEFAULT(cfg->ipv6_prefix, SOAP_SERVER_IPV6_PREFIX);
    srv->handshake_ms = OR_DEFAULT(cfg->handshake_ms, SOAP_SERVER_HANDSHAKE_MS);
#undef OR_DEFAULT
    srv->user = cfg->user;
    srv->role = cfg->role;
    srv->wsdl = served_wsdl(cfg->role, qcg_wsdl_text());
    srv->stage_hosts = htable_new(stage_host_eq);
    srv->known = tally_new();
    if (srv->wsdl == NULL || srv->stage_hosts == NULL || srv->known == NULL) {
        snprintf(err, errlen, "out of memory");
        htable_free(srv->stage_hosts);
        tally_free(srv->known);
        free(srv->wsdl);
        free(srv);
        return NULL;
    }
    /* Seeded: an address cannot be chosen to collide with others. */
    if (getrandom(&srv->seed, sizeof(srv->seed), 0) != (ssize_t)sizeof(srv->seed))
        srv->seed = monotonic_ms();
    pthread_mutex_init(&srv->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&srv->changed, &attr);
    pthread_condattr_destroy(&attr);

    struct soap *m = soap_new1(SOAP_IO_KEEPALIVE | SOAP_XML_STRICT | SOAP_C_UTFSTRING);
    if (m == NULL) {
        snprintf(err, errlen, "out of memory");
        soap_server_free(srv);
        return NULL;
    }
    srv->master = m;
    m->user = NULL; /* set per connection */
    m->recv_timeout = SERVER_IO_TIMEOUT;
    m->send_timeout = SERVER_IO_TIMEOUT;
    m->transfer_timeout = SERVER_TRANSFER_TIMEOUT;
    m->recv_maxlength = SERVER_RECV_MAXLENGTH;
    m->maxlength = SERVER_MAXLENGTH;
    m->maxoccurs = SERVER_MAXOCCURS;
    m->maxlevel = SERVER_MAXLEVEL;
    m->max_keep_alive = SERVER_MAX_KEEP_ALIVE;
    m->accept_timeout = 1;
    m->socket_flags = MSG_NOSIGNAL;
    m->bind_flags = SO_REUSEADDR;
    m->fget = serve_get;
    m->fserveloop = serve_loop;
    srv->orig_parsehdr = m->fparsehdr;
    srv->orig_closesocket = m->fclosesocket;
    srv->orig_shutdownsocket = m->fshutdownsocket;

    m->fsslverify = tls_note_refusals(m->fsslverify);
    if (soap_ssl_server_context(m,
                                SOAP_SSL_REQUIRE_CLIENT_AUTHENTICATION |
                                    SOAP_SSL_NO_DEFAULT_CA_PATH | SOAP_TLSv1_2 | SOAP_TLSv1_3,
                                cfg->tls.certkey, NULL, cfg->tls.ca, NULL, NULL, NULL,
                                "qcg-connect")) {
        soap_error_text(m, msg, sizeof(msg));
        snprintf(err, errlen, "TLS setup with %s and %s: %s", cfg->tls.certkey, cfg->tls.ca, msg);
        soap_server_free(srv);
        return NULL;
    }
    if (soap_tls_peer_policy(m, false, &cfg->tls, err, errlen) < 0) {
        soap_server_free(srv);
        return NULL;
    }

    const char *host = cfg->listen_addr && cfg->listen_addr[0] ? cfg->listen_addr : NULL;
    srv->backlog = listen_backlog(srv);
    if (!soap_valid_socket(soap_bind(m, host, cfg->port, srv->backlog))) {
        soap_error_text(m, msg, sizeof(msg));
        snprintf(err, errlen, "cannot listen on %s:%d: %s", host ? host : "*", cfg->port, msg);
        soap_server_free(srv);
        return NULL;
    }
    soap_server_watch_crl(srv);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(m->master, (struct sockaddr *)&ss, &sl) == 0)
        srv->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                   : ((struct sockaddr_in *)&ss)->sin_port);
    else
        srv->port = cfg->port;
    return srv;
}

/* Shuts down the handshakes past their deadline (their threads then end);
   returns how long the loop may sleep before the next one is due (<= 1 s). */
static int expire_handshakes(struct soap_server *srv)
{
    uint64_t now = monotonic_ms();
    int wait = 1000;
    pthread_mutex_lock(&srv->lock);
    /* Every handshake gets the same time: the stage is in deadline order. */
    for (struct dlink *l = srv->stage.head; l != NULL; l = l->next) {
        struct conn *c = dlist_entry(l, struct conn, in_stage);
        if (c->deadline_ms > now) {
            if (c->deadline_ms - now < (uint64_t)wait)
                wait = (int)(c->deadline_ms - now);
            break;
        }
        if (!c->expired && c->fd >= 0)
            shutdown(c->fd, SHUT_RDWR);
        if (!c->expired)
            srv->stage_counts.expired++;
        c->expired = true;
    }
    pthread_mutex_unlock(&srv->lock);
    return wait;
}

static void accept_one(struct soap_server *srv)
{
    struct soap *m = srv->master;
    SOAP_SOCKET s = soap_accept(m);
    if (!soap_valid_socket(s)) {
        if (m->errnum != 0 && !srv->stop) {
            char msg[256];
            soap_error_text(m, msg, sizeof(msg));
            struct soap_stage_counts *n = &srv->stage_counts;
            int e = m->errnum;
            accept_failed(srv,
                          e == EMFILE || e == ENFILE    ? &n->accept_failed_descriptors
                          : e == ENOBUFS || e == ENOMEM ? &n->accept_failed_memory
                                                        : &n->accept_failed_other,
                          "accept: %s", msg);
            /* e.g. EMFILE: do not spin while descriptors are short. */
            struct timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000000L};
            nanosleep(&ts, NULL);
        }
        return;
    }

    m->socket = SOAP_INVALID_SOCKET; /* the copy's below, or closed */
    char peer[64], host[TALLY_KEY_MAX];
    struct addr_range group;
    peer_text(s, peer, sizeof(peer));
    source_of(s, srv->ipv6_prefix, host, &group);

    pthread_mutex_lock(&srv->lock);
    int same = stage_count(srv, host);
    struct conn *victim = NULL;
    bool known = known_group(srv, host, &group);
    if (same < srv->per_address && srv->handshaking >= srv->max_handshakes &&
        ((known && (victim = stage_victim_known(srv)) != NULL) ||
         (victim = stage_victim(srv, same, known)) != NULL))
        stage_cut(srv, victim, peer);
    if (same >= srv->per_address || srv->handshaking >= srv->max_handshakes) {
        if (same >= srv->per_address) {
            srv->stage_counts.refused_address++;
            refused(srv, peer, "refused: %d TLS handshakes in progress from %s", same, host);
        } else {
            srv->stage_counts.refused_full++;
            refused(srv, peer, "refused: %d TLS handshakes in progress", srv->handshaking);
        }
        pthread_mutex_unlock(&srv->lock);
        close(s);
        return;
    }
    pthread_mutex_unlock(&srv->lock);

    struct conn *c = calloc(1, sizeof(*c));
    struct soap *copy = c ? soap_copy(m) : NULL;
    if (copy == NULL) {
        accept_failed(srv, &srv->stage_counts.accept_failed_memory,
                      "%s: out of memory: connection dropped", peer);
        close(s);
        free(c);
        return;
    }
    c->server = srv;
    c->soap = copy;
    c->fd = s;
    memcpy(c->peer, peer, sizeof(peer));
    memcpy(c->host, host, sizeof(host));
    c->group = group;
    copy->socket = s;
    copy->user = c;
    copy->fparsehdr = parse_header;
    copy->fclosesocket = close_socket;
    copy->fshutdownsocket = shutdown_socket;

    pthread_mutex_lock(&srv->lock);
    /* Again: a soap_server_know since the check above does not see c. */
    c->known = known_group(srv, host, &group);
    if (stage(srv, c) < 0) {
        pthread_mutex_unlock(&srv->lock);
        accept_failed(srv, &srv->stage_counts.accept_failed_memory,
                      "%s: out of memory: connection dropped", peer);
        soap_destroy(copy);
        soap_end(copy);
        soap_free(copy); /* closes the socket */
        free(c);
        return;
    }
    dlist_append(&srv->conns, &c->link);
    srv->active++;
    pthread_mutex_unlock(&srv->lock);

    pthread_attr_t attr;
    pthread_t tid;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&tid, &attr, conn_main, c);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        accept_failed(srv, &srv->stage_counts.accept_failed_thread, "%s: cannot start a thread: %s",
                      peer, strerror(rc));
        pthread_mutex_lock(&srv->lock);
        unstage(srv, c);
        dlist_remove(&srv->conns, &c->link);
        srv->active--;
        pthread_mutex_unlock(&srv->lock);
        soap_destroy(copy);
        soap_end(copy);
        soap_free(copy); /* closes the socket */
        free(c);
    }
}

/* Bounded wait for the connection threads; 0 when all have ended. */
static int drain(struct soap_server *srv, int seconds)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += seconds;
    pthread_mutex_lock(&srv->lock);
    /* Wake connections idle in keep-alive or stalled mid-message. */
    for (struct dlink *l = srv->conns.head; l != NULL; l = l->next) {
        const struct conn *c = dlist_entry(l, struct conn, link);
        if (c->fd >= 0)
            shutdown(c->fd, SHUT_RDWR);
    }
    while (srv->active > 0) {
        if (pthread_cond_timedwait(&srv->changed, &srv->lock, &deadline) == ETIMEDOUT)
            break;
    }
    int left = srv->active;
    pthread_mutex_unlock(&srv->lock);
    return left;
}

int soap_server_run(struct soap_server *srv)
{
    char capped[96];
    backlog_capped_text(srv->backlog, capped, sizeof(capped));
    log_info("serving on port %d (at most %d connections, %d per certificate; %d TLS "
             "handshakes, %d per address, %d ms each; listen backlog %d%s)",
             srv->port, srv->max_connections, srv->max_per_identity, srv->max_handshakes,
             srv->per_address, srv->handshake_ms, srv->backlog, capped);
    while (!srv->stop) {
        struct pollfd p = {.fd = srv->master->master, .events = POLLIN};
        if (poll(&p, 1, expire_handshakes(srv)) == 1 && !srv->stop)
            accept_one(srv);
    }
    char why[160];
    daemon_stop_cause(why, sizeof(why));
    log_info("stopping (%s): closing connections", why);
    if (srv->on_stop)
        srv->on_stop(srv->on_stop_arg);
    int left = drain(srv, SERVER_DRAIN_SECONDS);
    if (left > 0) {
        log_warnx("%d connections still busy after %d s", left, SERVER_DRAIN_SECONDS);
        return -1;
    }
    return 0;
}

void soap_server_stop(struct soap_server *srv)
{
    if (srv)
        srv->stop = 1;
}

void soap_server_on_revoked(struct soap_server *srv,
                            void (*fn)(void *user, const struct identity *id))
{
    srv->on_revoked = fn;
}

void soap_server_on_stop(struct soap_server *srv, void (*fn)(void *), void *arg)
{
    srv->on_stop = fn;
    srv->on_stop_arg = arg;
}

void soap_server_free(struct soap_server *srv)
{
    if (srv == NULL)
        return;
    srv->stop = 1;
    soap_server_unwatch_crl(srv);
    if (drain(srv, SERVER_DRAIN_SECONDS) > 0) {
        /* Threads still use the master's TLS context and our lock: leaking is
           the only safe choice left. */
        log_warnx("connections still busy: server state not freed");
        return;
    }
    if (srv->master) {
        soap_destroy(srv->master);
        soap_end(srv->master);
        soap_free(srv->master);
    }
    /* Every connection has left the stage: its table is empty. */
    htable_free(srv->stage_hosts);
    tally_free(srv->known);
    pthread_cond_destroy(&srv->changed);
    pthread_mutex_destroy(&srv->lock);
    free(srv->wsdl);
    free(srv);
}

/* A prefix no wider than an address group is that group, held by key as
   an authenticated one is; a wider one joins the short list of prefixes. */
int soap_server_know(struct soap_server *srv, const char *prefix, char *why, size_t whylen)
{
    struct addr_range r = {.family = 0};
    char text[QCG_ADDR_MAX + 4];
    if (addr_range_parse(prefix, &r, why, whylen) < 0)
        return -1;
    addr_range_format(&r, text, sizeof(text));
    if (r.bits < (r.family == AF_INET ? 8 : 16)) {
        snprintf(why, whylen, "known range %s is wider than /%d", text,
                 r.family == AF_INET ? 8 : 16);
        return -1;
    }
    int rc = 0;
    pthread_mutex_lock(&srv->lock);
    if (r.bits >= (r.family == AF_INET ? 32 : srv->ipv6_prefix)) {
        struct sockaddr_storage ss = {.ss_family = (sa_family_t)r.family};
        if (r.family == AF_INET)
            memcpy(&((struct sockaddr_in *)&ss)->sin_addr, r.addr, 4);
        else
            memcpy(&((struct sockaddr_in6 *)&ss)->sin6_addr, r.addr, 16);
        char key[TALLY_KEY_MAX];
        tally_source_key_prefix(&ss, sizeof(ss), (unsigned)srv->ipv6_prefix, key);
        if (!know_key(srv, key)) {
            snprintf(why, whylen, "%d known addresses already: %s not added", SOAP_SERVER_KNOWN_MAX,
                     text);
            rc = -1;
        }
    } else {
        bool held = false;
        for (int i = 0; i < srv->nknown_prefixes && !held; i++)
            held = memcmp(&srv->known_prefixes[i], &r, sizeof(r)) == 0;
        if (!held && srv->nknown_prefixes >= SOAP_SERVER_KNOWN_PREFIXES_MAX) {
            snprintf(why, whylen, "%d known ranges already: %s not added",
                     SOAP_SERVER_KNOWN_PREFIXES_MAX, text);
            rc = -1;
        } else if (!held) {
            srv->known_prefixes[srv->nknown_prefixes++] = r;
            stage_mark_known(srv, &r, NULL);
        }
    }
    pthread_mutex_unlock(&srv->lock);
    return rc;
}

int soap_server_port(const struct soap_server *srv)
{
    return srv->port;
}

void *soap_server_state(struct soap *soap)
{
    struct conn *c = conn_of(soap);
    return c ? c->server->user : NULL;
}

enum served_role soap_server_role(struct soap *soap)
{
    struct conn *c = conn_of(soap);
    return c ? c->server->role : SERVED_BROKER;
}

void soap_server_counts(struct soap_server *srv, struct soap_stage_counts *out)
{
    memset(out, 0, sizeof(*out));
    if (srv == NULL)
        return;
    pthread_mutex_lock(&srv->lock);
    *out = srv->stage_counts;
    pthread_mutex_unlock(&srv->lock);
}

void soap_server_stage_counts(struct soap *soap, struct soap_stage_counts *out)
{
    struct conn *c = conn_of(soap);

    soap_server_counts(c != NULL ? c->server : NULL, out);
}

const struct identity *soap_caller(struct soap *soap)
{
    static const struct identity nobody = {.role = QCG_ROLE_NONE};
    struct conn *c = conn_of(soap);
    return c ? &c->identity : &nobody;
}

int soap_qcg_fault(struct soap *soap, const char *subcode, const char *fmt, ...)
{
    char text[512], code[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    snprintf(code, sizeof(code), "qcg:%s", subcode);
    struct conn *c = conn_of(soap);
    log_debug("%s %s: fault %s: %s", c ? role_name(c->identity.role) : "?",
              c ? c->identity.name : "?", code, text);
    /* Copies in the context's memory: freed with the request by soap_end. */
    return soap_sender_fault_subcode(soap, soap_strdup(soap, code), soap_strdup(soap, text), NULL);
}

int soap_qcg_fault_take(struct soap *soap, char **subcode, char **text)
{
    const char *code = soap_fault_subcode(soap), *t = soap_fault_string(soap);

    if (code != NULL && strncmp(code, "qcg:", 4) == 0)
        code += 4;
    *subcode = soap_strdup(soap, code != NULL ? code : "fault");
    *text = soap_strdup(soap, t != NULL ? t : "");
    /* The fault's structure stays in soap's memory until soap_end. */
    soap->fault = NULL;
    soap->error = SOAP_OK;
    return SOAP_OK;
}

int soap_check_version(struct soap *soap, int version)
{
    if (version == QCG_PROTOCOL_VERSION)
        return 0;
    return soap_qcg_fault(soap, "version",
                          "protocol version mismatch: server speaks %d, client speaks %d",
                          QCG_PROTOCOL_VERSION, version);
}
