/*
 * gSOAP clients towards an upstream service: mutual TLS (the server's
 * certificate must name the host dialled, be a TLS server's, and be of the
 * role and cluster expected), the same size limits as the server,
 * keep-alive, and a small pool for daemons that call upstream from several
 * threads.
 */
#include "soap_client.h"

#include <errno.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "address.h"
#include "crl.h"
#include "identity.h"
#include "log.h"
#include "soapH.h"
#include "soap_util.h"
#include "tls_peer_note.h"

#define CLIENT_RECV_MAXLENGTH (1024 * 1024)
/* Keepalive of the connections to the upstream service (see below). */
#define CLIENT_KEEPALIVE_IDLE_S 5
#define CLIENT_KEEPALIVE_INTVL_S 5
#define CLIENT_KEEPALIVE_CNT 3
#define CLIENT_MAXLENGTH (64 * 1024)
#define CLIENT_MAXOCCURS 1000
#define CLIENT_MAXLEVEL 32
/* A long-poll answer may take the whole wait; the receive timeout gets this
   much on top (docs/architecture.md: waitSeconds + 10). */
#define CLIENT_WAIT_MARGIN 10

/* What a client context remembers of its configuration (soap->user). */
struct client_info {
    char *url;
    int io_timeout;
    enum qcg_role expect_role;
    char *expect_cluster; /* NULL: any */
    SOAP_SOCKET (*orig_open)(struct soap *, const char *, const char *, int);
};

/* Whether the server just reached is the one we meant; 0, or -1 with the
   reason in why. */
static int check_server(struct soap *soap, const struct client_info *info, char *why, size_t len)
{
    char usage[200], who[2 * QCG_NAME_MAX + 16];
    struct identity id;
    const char *want = info->expect_role != QCG_ROLE_NONE ? role_name(info->expect_role) : "server";
    if (identity_check_usage(soap->ssl, true, usage, sizeof(usage)) < 0) {
        snprintf(why, len, "refusing the %s at %s: %s", want, info->url, usage);
        return -1;
    }
    if (info->expect_role == QCG_ROLE_NONE)
        return 0;
    if (identity_from_ssl(soap->ssl, &id) < 0) {
        snprintf(why, len, "the %s at %s presents a certificate that names no qcg role", want,
                 info->url);
        return -1;
    }
    bool cluster_ok = info->expect_cluster == NULL || strcmp(id.cluster, info->expect_cluster) == 0;
    if (id.role == info->expect_role && cluster_ok)
        return 0;
    identity_text(&id, who, sizeof(who));
    if (info->expect_cluster != NULL)
        snprintf(why, len, "the %s at %s presents a certificate of %s, not of a %s of cluster %s",
                 want, info->url, who, want, info->expect_cluster);
    else
        snprintf(why, len, "the %s at %s presents a certificate of %s, not of a %s", want,
                 info->url, who, want);
    return -1;
}

/* gSOAP's connect (TCP and the TLS handshake), then check_server: a
   connection to the wrong service is closed before any request is sent. */
static SOAP_SOCKET open_checked(struct soap *soap, const char *endpoint, const char *host, int port)
{
    struct client_info *info = soap->user;
    SOAP_SOCKET s = info->orig_open(soap, endpoint, host, port);
    if (!soap_valid_socket(s) || soap->ssl == NULL)
        return s;
    char why[512];
    if (check_server(soap, info, why, sizeof(why)) == 0)
        return s;
    soap->socket = s;
    soap->keep_alive = 0;
    soap->fclose(soap);
    soap->socket = SOAP_INVALID_SOCKET;
    soap_set_sender_error(soap, soap_strdup(soap, why), NULL, SOAP_SSL_ERROR);
    return SOAP_INVALID_SOCKET;
}

static void set_timeouts(struct soap *soap, int io_timeout, int wait)
{
    int recv = wait > 0 ? wait + CLIENT_WAIT_MARGIN : io_timeout;
    if (recv < io_timeout)
        recv = io_timeout;
    soap->send_timeout = io_timeout;
    soap->recv_timeout = recv;
    /* The whole exchange: sending, the server's wait, receiving. */
    soap->transfer_timeout = recv + 2 * io_timeout;
}

/* gSOAP compares the dialled host with the certificate's IP entries as
   text, and OpenSSL writes an IPv6 one in full ("0:0:0:0:0:0:0:1"), so
   https://[::1]:7700/ never matched a certificate for ::1.  For an IPv6
   literal, OpenSSL checks the address itself during the handshake
   (binary, any spelling) and gSOAP's text check is off. */
static int check_ipv6_host(struct soap *soap, const char *url, char *err, size_t errlen)
{
    char host[256], why[200];
    int port;
    if (url_hostport(url, host, sizeof(host), &port, why, sizeof(why)) < 0 ||
        address_family(host) != AF_INET6)
        return 0;
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_CTX_get0_param(soap->ctx), host) != 1) {
        snprintf(err, errlen, "TLS setup: cannot check the certificate against %s", host);
        return -1;
    }
    soap->ssl_flags |= SOAP_SSL_SKIP_HOST_CHECK;
    return 0;
}

struct soap *soap_client_new(const struct soap_client_config *cfg, char *err, size_t errlen)
{
    char msg[256];
    if (cfg->url == NULL || strncmp(cfg->url, "https://", 8) != 0) {
        snprintf(err, errlen, "upstream URL \"%.100s\" does not start with https://",
                 cfg->url ? cfg->url : "");
        return NULL;
    }
    if (cfg->tls.ca == NULL || cfg->tls.certkey == NULL) {
        snprintf(err, errlen, "TLS: the CA file and the certificate/key file are required");
        return NULL;
    }
    soap_tls_init_once();

    struct client_info *info = calloc(1, sizeof(*info));
    struct soap *soap = soap_new1(SOAP_IO_KEEPALIVE | SOAP_XML_STRICT | SOAP_C_UTFSTRING);
    if (info == NULL || soap == NULL || (info->url = strdup(cfg->url)) == NULL) {
        snprintf(err, errlen, "out of memory");
        free(info);
        if (soap)
            soap_free(soap);
        return NULL;
    }
    info->io_timeout = cfg->io_timeout > 0 ? cfg->io_timeout : 10;
    info->expect_role = cfg->expect_role;
    if (cfg->expect_cluster != NULL &&
        (info->expect_cluster = strdup(cfg->expect_cluster)) == NULL) {
        snprintf(err, errlen, "out of memory");
        free(info->url);
        free(info);
        soap_free(soap);
        return NULL;
    }
    info->orig_open = soap->fopen;
    soap->fopen = open_checked;
    soap->user = info;
    soap->connect_timeout = cfg->connect_timeout > 0 ? cfg->connect_timeout : 10;
    /* A NAT or stateful firewall on the way that forgot this connection
       drops what the server sends until we send: probing an idle connection
       maps it again within seconds (a long-poll waits for orders without
       sending), and finds a dead path in idle + intvl x cnt. */
    soap->tcp_keep_alive = 1;
    soap->tcp_keep_idle = CLIENT_KEEPALIVE_IDLE_S;
    soap->tcp_keep_intvl = CLIENT_KEEPALIVE_INTVL_S;
    soap->tcp_keep_cnt = CLIENT_KEEPALIVE_CNT;
    set_timeouts(soap, info->io_timeout, 0);
    soap->recv_maxlength = CLIENT_RECV_MAXLENGTH;
    soap->maxlength = CLIENT_MAXLENGTH;
    soap->maxoccurs = CLIENT_MAXOCCURS;
    soap->maxlevel = CLIENT_MAXLEVEL;
    soap->socket_flags = MSG_NOSIGNAL;

    /* No files for gSOAP: the certificate, key and CAs of every handshake
       come from the process's set for cfg->tls (tls_reload.h), read from
       the files only if there is none yet.  A context made after a refused
       reload (a pool growing) then works with the set in force, not with
       the broken files. */
    if (soap_ssl_client_context(
            soap, SOAP_SSL_DEFAULT | SOAP_SSL_NO_DEFAULT_CA_PATH | SOAP_TLSv1_2 | SOAP_TLSv1_3,
            NULL, NULL, NULL, NULL, NULL)) {
        soap_error_text(soap, msg, sizeof(msg));
        snprintf(err, errlen, "TLS setup: %s", msg);
        soap_client_free(soap);
        return NULL;
    }
    if (soap_tls_peer_policy(soap, true, &cfg->tls, err, errlen) < 0 ||
        check_ipv6_host(soap, cfg->url, err, errlen) < 0) {
        soap_client_free(soap);
        return NULL;
    }
    return soap;
}

void soap_client_free(struct soap *soap)
{
    if (soap == NULL)
        return;
    struct client_info *info = soap->user;
    soap_destroy(soap);
    soap_end(soap);
    soap_free(soap);
    if (info) {
        free(info->url);
        free(info->expect_cluster);
        free(info);
    }
}

const char *soap_client_url(struct soap *soap)
{
    struct client_info *info = soap ? soap->user : NULL;
    return info ? info->url : NULL;
}

void soap_client_set_wait(struct soap *soap, int wait_seconds)
{
    struct client_info *info = soap->user;
    set_timeouts(soap, info ? info->io_timeout : 10, wait_seconds);
}

void soap_client_reset(struct soap *soap)
{
    soap_destroy(soap);
    soap_end(soap);
}

/* "qcg:denied" -> "denied".  gSOAP rewrites the prefix to the one our
   namespace table gives urn:qcg-connect:1, or to the quoted URI when the
   namespace is unknown; both are accepted, anything else is no qcg subcode. */
static const char *qcg_subcode(const char *code)
{
    static const char *const prefixes[] = {"qcg:", "\"urn:qcg-connect:1\":"};
    if (code == NULL)
        return "";
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        size_t n = strlen(prefixes[i]);
        if (strncmp(code, prefixes[i], n) == 0)
            return code + n;
    }
    return "";
}

static __thread bool cert_refused;

bool soap_call_cert_refused(void)
{
    return cert_refused;
}

bool soap_call_unknown_op(enum call_status st, const char *subcode, const char *msg)
{
    /* gSOAP's own fault for a method it has no handler for. */
    return st == CALL_FAULT && (subcode == NULL || subcode[0] == '\0') &&
           strstr(msg, "not implemented") != NULL;
}

enum call_status soap_call_status(struct soap *soap, int rc, char *subcode, size_t subcode_len,
                                  char *msg, size_t msg_len)
{
    cert_refused = false;
    if (subcode && subcode_len)
        subcode[0] = '\0';
    if (msg && msg_len)
        msg[0] = '\0';
    if (rc == SOAP_OK)
        return CALL_OK;

    char text[512];
    /* gSOAP's own faults (SOAP-ENV:Client, e.g. an operation an older
       server does not know, or SOAP-ENV:Server) are answers too. */
    if (rc == SOAP_FAULT || rc == SOAP_CLI_FAULT || rc == SOAP_SVR_FAULT) {
        const char *code = soap_fault_subcode(soap);
        const char *s = soap_fault_string(soap);
        if (subcode && subcode_len)
            snprintf(subcode, subcode_len, "%s", qcg_subcode(code));
        snprintf(text, sizeof(text), "%s", s ? s : "fault without a reason");
        for (char *p = text; *p; p++)
            if ((unsigned char)*p < 0x20)
                *p = ' ';
        if (msg && msg_len)
            snprintf(msg, msg_len, "%s", text);
        return CALL_FAULT;
    }

    /* Everything else leaves the connection in an unknown state: the caller
       reconnects and retries later.  A server that refused our certificate
       said why in its alert (TLS 1.3: after our handshake was done, so the
       call fails at its first read or write, with an error that says
       nothing): that is the reason. */
    int alert = tls_alert_take();
    cert_refused = tls_alert_refuses_cert(alert);
    if (cert_refused)
        snprintf(text, sizeof(text),
                 "the server refused this service's certificate (TLS alert: %s)",
                 SSL_alert_desc_string_long(alert));
    else if (rc == SOAP_EOF && soap->errnum == 0)
        snprintf(text, sizeof(text), "connection closed or timed out");
    else
        soap_error_text(soap, text, sizeof(text));
    if (msg && msg_len)
        snprintf(msg, msg_len, "%s", text);
    soap_closesock(soap);
    return CALL_UNREACHABLE;
}

/* The pool: contexts are made on first need, at most size of them. */
struct soap_pool {
    struct soap_client_config cfg; /* strings owned by the pool */
    pthread_mutex_t lock;
    pthread_cond_t freed;
    int size;
    int created;
    struct soap **idle; /* stack of created, unused contexts */
    int nidle;
};

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* Whether the connection of soap is to a server whose certificate crl
   revokes (crl NULL: the CRL in force). */
static bool peer_revoked(struct soap *soap, const X509_CRL *crl)
{
    if (!soap_valid_socket(soap->socket) || soap->ssl == NULL)
        return false;
    X509_CRL *current = crl == NULL ? crl_current() : NULL;
    bool revoked = crl_lists(crl != NULL ? crl : current, SSL_get0_peer_certificate(soap->ssl));
    X509_CRL_free(current);
    return revoked;
}

/* A reload's CRL closes the idle connections to a revoked server at once;
   a busy one is closed when it comes back (soap_pool_put). */
static void pool_on_crl(void *arg, const X509_CRL *crl)
{
    struct soap_pool *pool = arg;
    int closed = 0;
    pthread_mutex_lock(&pool->lock);
    for (int i = 0; i < pool->nidle; i++) {
        if (peer_revoked(pool->idle[i], crl)) {
            soap_closesock(pool->idle[i]);
            closed++;
        }
    }
    pthread_mutex_unlock(&pool->lock);
    if (closed > 0)
        log_warnx("CRL: the server at %s presents a revoked certificate: %d idle connection%s "
                  "closed",
                  pool->cfg.url, closed, closed == 1 ? "" : "s");
}

struct soap_pool *soap_pool_new(const struct soap_client_config *cfg, int size, char *err,
                                size_t errlen)
{
    if (size < 1)
        size = 1;
    struct soap_pool *pool = calloc(1, sizeof(*pool));
    if (pool == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pool->cfg = *cfg;
    pool->cfg.url = dup_or_null(cfg->url);
    pool->cfg.tls.ca = dup_or_null(cfg->tls.ca);
    pool->cfg.tls.certkey = dup_or_null(cfg->tls.certkey);
    pool->cfg.tls.crl = dup_or_null(cfg->tls.crl);
    pool->cfg.expect_cluster = dup_or_null(cfg->expect_cluster);
    pool->size = size;
    pool->idle = calloc((size_t)size, sizeof(*pool->idle));
    pthread_mutex_init(&pool->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&pool->freed, &attr);
    pthread_condattr_destroy(&attr);
    if (pool->idle == NULL || (cfg->url && !pool->cfg.url) || (cfg->tls.ca && !pool->cfg.tls.ca) ||
        (cfg->tls.certkey && !pool->cfg.tls.certkey) || (cfg->tls.crl && !pool->cfg.tls.crl) ||
        (cfg->expect_cluster && !pool->cfg.expect_cluster)) {
        snprintf(err, errlen, "out of memory");
        soap_pool_free(pool);
        return NULL;
    }
    /* The first context is made now so a bad URL or TLS file is a start-up
       error, and so soap_pool_get always has one to wait for. */
    struct soap *first = soap_client_new(&pool->cfg, err, errlen);
    if (first == NULL) {
        soap_pool_free(pool);
        return NULL;
    }
    pool->idle[pool->nidle++] = first;
    pool->created = 1;
    if (crl_watch(pool_on_crl, pool) < 0)
        log_warnx("too many CRL watchers: a reload will not close pooled connections to a "
                  "revoked %s",
                  pool->cfg.url);
    return pool;
}

struct soap *soap_pool_get(struct soap_pool *pool)
{
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        if (pool->nidle > 0) {
            struct soap *soap = pool->idle[--pool->nidle];
            pthread_mutex_unlock(&pool->lock);
            return soap;
        }
        if (pool->created < pool->size) {
            pool->created++;
            pthread_mutex_unlock(&pool->lock);
            char err[256];
            struct soap *soap = soap_client_new(&pool->cfg, err, sizeof(err));
            if (soap)
                return soap;
            log_warnx("new upstream context: %s", err);
            pthread_mutex_lock(&pool->lock);
            pool->created--;
            /* Fall through and wait for one of the existing contexts. */
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += 10;
        if (pthread_cond_timedwait(&pool->freed, &pool->lock, &ts) == ETIMEDOUT)
            log_warnx("all %d upstream contexts busy for 10 s; still waiting", pool->created);
    }
}

void soap_pool_put(struct soap_pool *pool, struct soap *soap, int broken)
{
    if (soap == NULL)
        return;
    soap_client_reset(soap);
    soap_client_set_wait(soap, 0);
    if (broken || peer_revoked(soap, NULL))
        soap_closesock(soap);
    pthread_mutex_lock(&pool->lock);
    if (pool->nidle < pool->size) {
        pool->idle[pool->nidle++] = soap;
        soap = NULL;
    }
    pthread_cond_signal(&pool->freed);
    pthread_mutex_unlock(&pool->lock);
    if (soap) { /* more puts than gets: a caller bug, but no reason to leak */
        log_warnx("context returned to a full pool: freed");
        soap_client_free(soap);
    }
}

void soap_pool_free(struct soap_pool *pool)
{
    if (pool == NULL)
        return;
    crl_unwatch(pool_on_crl, pool);
    for (int i = 0; i < pool->nidle; i++)
        soap_client_free(pool->idle[i]);
    pthread_cond_destroy(&pool->freed);
    pthread_mutex_destroy(&pool->lock);
    free(pool->idle);
    free((char *)pool->cfg.url);
    free((char *)pool->cfg.tls.ca);
    free((char *)pool->cfg.tls.certkey);
    free((char *)pool->cfg.tls.crl);
    free((char *)pool->cfg.expect_cluster);
    free(pool);
}

const char *soap_pool_url(const struct soap_pool *pool)
{
    return pool->cfg.url;
}
