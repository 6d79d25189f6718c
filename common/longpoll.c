/*
 * The long-poll client's thread (longpoll.h): register, poll, hand on what is
 * new, back off when the service cannot be reached.
 */
#include "longpoll.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cmdqueue.h"
#include "crl.h"
#include "backoff.h"
#include "daemon.h"
#include "log.h"
#include "monotonic.h"
#include "ratelimit.h"
#include "longpoll_internal.h"
#include "proto.h"
#include "soapH.h"
#include "soap_client.h"

#define BACKOFF_BASE_MS 200
#define BACKOFF_MAX_MS 10000
/* Our certificate refused: from 6.4 s (200 ms doubled 5 times) to a minute. */
#define BACKOFF_REFUSED_SKIP 5
#define BACKOFF_REFUSED_MAX_MS 60000
#define REFUSED_REMINDER_MS (10 * 60 * 1000)
#define WHY_MAX 300

struct longpoll {
    struct longpoll_config cfg;
    struct soap *soap; /* the thread's */
    pthread_t thread;
    int started;
    atomic_int stop;
    atomic_int again; /* longpoll_register_again */

    pthread_mutex_t lock; /* guards the fields below */
    SOAP_SOCKET fd;       /* the thread's connection, for longpoll_stop */
    X509 *peer;           /* the certificate the service showed on it */
    int connected;
    uint64_t epoch;
    struct ratelimit refused_log; /* the thread's: our certificate refused */
};

/*
 * A poll blocks in recv for up to the wait, so the thread's socket is tracked
 * through gSOAP's open and close hooks and shut down from longpoll_stop; the
 * lock makes sure the descriptor is never one gSOAP already closed (and the
 * kernel may have reused).  The hooks find the client through a plugin:
 * soap->user is soap_client's.
 */
static const char plugin_id[] = "qcg-longpoll";

struct hooks {
    struct longpoll *lp;
    SOAP_SOCKET (*next_open)(struct soap *, const char *, const char *, int);
    int (*next_closesocket)(struct soap *, SOAP_SOCKET);
};

static SOAP_SOCKET hook_open(struct soap *soap, const char *endpoint, const char *host, int port)
{
    struct hooks *h = soap_lookup_plugin(soap, plugin_id);
    struct longpoll *lp = h->lp;
    SOAP_SOCKET fd = h->next_open(soap, endpoint, host, port);
    X509 *cert = soap_valid_socket(fd) && soap->ssl ? SSL_get1_peer_certificate(soap->ssl) : NULL;

    pthread_mutex_lock(&lp->lock);
    lp->fd = fd;
    X509_free(lp->peer);
    lp->peer = cert;
    if (lp->stop && soap_valid_socket(fd))
        shutdown(fd, SHUT_RDWR);
    pthread_mutex_unlock(&lp->lock);
    return fd;
}

/* A reload's CRL that revokes the service we poll ends our connection to
   it: the next one is refused by our own check of its certificate. */
static void on_crl(void *arg, const X509_CRL *crl)
{
    struct longpoll *lp = arg;
    pthread_mutex_lock(&lp->lock);
    if (soap_valid_socket(lp->fd) && crl_lists(crl, lp->peer)) {
        shutdown(lp->fd, SHUT_RDWR);
        log_warnx("CRL: the %s %s presents a revoked certificate: connection closed",
                  lp->cfg.service, lp->cfg.client->url);
    }
    pthread_mutex_unlock(&lp->lock);
}

static int hook_closesocket(struct soap *soap, SOAP_SOCKET fd)
{
    struct hooks *h = soap_lookup_plugin(soap, plugin_id);
    struct longpoll *lp = h->lp;

    pthread_mutex_lock(&lp->lock);
    if (lp->fd == fd)
        lp->fd = SOAP_INVALID_SOCKET;
    pthread_mutex_unlock(&lp->lock);
    return h->next_closesocket(soap, fd);
}

static void plugin_delete(struct soap *soap, struct soap_plugin *p)
{
    (void)soap;
    free(p->data);
}

/* The context is never copied (no fcopy). */
static int plugin_init(struct soap *soap, struct soap_plugin *p, void *arg)
{
    struct hooks *h = malloc(sizeof(*h));

    if (h == NULL)
        return SOAP_EOM;
    h->lp = arg;
    h->next_open = soap->fopen;
    h->next_closesocket = soap->fclosesocket;
    soap->fopen = hook_open;
    soap->fclosesocket = hook_closesocket;
    p->id = plugin_id;
    p->data = h;
    p->fdelete = plugin_delete;
    return SOAP_OK;
}

struct longpoll *longpoll_new(const struct longpoll_config *cfg, char *err, size_t errlen)
{
    struct longpoll *lp = calloc(1, sizeof(*lp));

    if (lp == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    lp->cfg = *cfg;
    lp->fd = SOAP_INVALID_SOCKET;
    pthread_mutex_init(&lp->lock, NULL);
    lp->soap = soap_client_new(cfg->client, err, errlen);
    if (lp->soap == NULL)
        goto fail;
    if (soap_register_plugin_arg(lp->soap, plugin_init, lp) != SOAP_OK) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    return lp;
fail:
    longpoll_free(lp);
    return NULL;
}

struct soap *longpoll_soap(struct longpoll *lp)
{
    return lp->soap;
}

void longpoll_state(struct longpoll *lp, int *connected, uint64_t *epoch)
{
    pthread_mutex_lock(&lp->lock);
    *connected = lp->connected;
    *epoch = lp->epoch;
    pthread_mutex_unlock(&lp->lock);
}

static void set_state(struct longpoll *lp, int connected, uint64_t epoch)
{
    pthread_mutex_lock(&lp->lock);
    lp->connected = connected;
    lp->epoch = connected ? epoch : 0;
    pthread_mutex_unlock(&lp->lock);
}

/* An optional string of a command into its field; -1 when it does not fit. */
static int field(char *dst, size_t size, const char *src)
{
    size_t n = src != NULL ? strlen(src) : 0;

    if (n >= size)
        return -1;
    memcpy(dst, src != NULL ? src : "", n + 1);
    return 0;
}

static int command_from_soap(const struct qcg__command *in, struct command *out)
{
    memset(out, 0, sizeof(*out));
    out->seq = in->seq;
    out->rank = in->rank;
    out->port = in->port;
    out->peer_rank = in->peerRank;
    out->seconds = in->seconds;
    if (in->kind == NULL || field(out->kind, sizeof(out->kind), in->kind) < 0 ||
        field(out->job, sizeof(out->job), in->job) < 0 ||
        field(out->node, sizeof(out->node), in->node) < 0 ||
        field(out->address, sizeof(out->address), in->address) < 0 ||
        field(out->token, sizeof(out->token), in->token) < 0 ||
        field(out->packet, sizeof(out->packet), in->packet) < 0)
        return -1;
    return 0;
}

/* The commands of an answer above *ack, handed on in order; *ack covers
   every one of them, malformed ones included (they would come again). */
static void take_commands(struct longpoll *lp, const struct qcg__pollResponse *resp, uint64_t *ack)
{
    struct command c;

    for (int i = 0; i < resp->__sizeCommand; i++) {
        const struct qcg__command *in = &resp->command[i];

        if (in->seq <= *ack) {
            log_debug("command %" PRIu64 " (%.16s) seen before; not repeated", (uint64_t)in->seq,
                      in->kind != NULL ? in->kind : "(none)");
            continue;
        }
        *ack = in->seq;
        if (command_from_soap(in, &c) < 0) {
            log_warnx("command %" PRIu64 " (%.16s) from the %s: a field does not fit; skipped",
                      (uint64_t)in->seq, in->kind != NULL ? in->kind : "(none)", lp->cfg.service);
            continue;
        }
        lp->cfg.ops->command(lp->cfg.arg, &c);
        explicit_bzero(&c, sizeof(c));
    }
}

/* One long-poll: 0 answered (*server_epoch: the service's), -1 failed (why). */
int longpoll_poll_once(struct longpoll *lp, uint64_t epoch, uint64_t *ack, uint64_t *server_epoch,
                       char *why, size_t whylen)
{
    struct qcg__pollResponse resp;
    char subcode[32], text[256];
    int rc = 0;

    memset(&resp, 0, sizeof(resp));
    soap_client_set_wait(lp->soap, lp->cfg.wait);
    int call = soap_call_qcg__poll(lp->soap, lp->cfg.client->url, NULL, QCG_PROTOCOL_VERSION, epoch,
                                   *ack, lp->cfg.wait, &resp);
    if (soap_call_status(lp->soap, call, subcode, sizeof(subcode), text, sizeof(text)) != CALL_OK) {
        snprintf(why, whylen, "%s%s%s", subcode, subcode[0] ? ": " : "", text);
        rc = -1;
    } else if (resp.__sizeCommand < 0 || (resp.__sizeCommand > 0 && resp.command == NULL)) {
        snprintf(why, whylen, "a malformed poll answer");
        rc = -1;
    } else {
        *server_epoch = resp.epoch;
        if (resp.epoch == epoch)
            take_commands(lp, &resp, ack);
    }
    soap_client_reset(lp->soap);
    soap_client_set_wait(lp->soap, 0);
    return rc;
}

/* The link is down (why).  A new reason is news; the same one again is not:
   the backoff spaces the attempts, the log need not repeat each. */
static void fail(struct longpoll *lp, const char *what, const char *why, unsigned *failures,
                 char *last, size_t lastlen)
{
    /* A certificate the service refuses (revoked) stays refused until an
       admin acts: retry slowly, and remind of it now and then. */
    bool refused = soap_call_cert_refused();
    unsigned ms = refused ? backoff_ms(*failures + BACKOFF_REFUSED_SKIP, BACKOFF_BASE_MS,
                                       BACKOFF_REFUSED_MAX_MS)
                          : backoff_ms(*failures, BACKOFF_BASE_MS, BACKOFF_MAX_MS);
    unsigned left_out;

    set_state(lp, 0, 0);
    if (lp->cfg.ops->down != NULL)
        lp->cfg.ops->down(lp->cfg.arg, why);
    if (*failures == 0 || strcmp(why, last) != 0) {
        log_warnx("%s the %s %s: %s; retrying%s", what, lp->cfg.service, lp->cfg.client->url, why,
                  refused ? " at most once a minute: this service needs a valid certificate" : "");
        if (refused)
            ratelimit_ok(&lp->refused_log, monotonic_ms(), REFUSED_REMINDER_MS, &left_out);
    } else if (refused &&
               ratelimit_ok(&lp->refused_log, monotonic_ms(), REFUSED_REMINDER_MS, &left_out)) {
        log_warnx("%s the %s %s: %s (still; %u attempts since the last such line)", what,
                  lp->cfg.service, lp->cfg.client->url, why, left_out + 1);
    } else
        log_debug("%s the %s %s: %s (attempt %u; next in %u ms)", what, lp->cfg.service,
                  lp->cfg.client->url, why, *failures + 1, ms);
    snprintf(last, lastlen, "%s", why);
    (*failures)++;
    sleep_unless_stopped(ms, &lp->stop);
}

static void *longpoll_main(void *arg)
{
    struct longpoll *lp = arg;
    const struct longpoll_ops *ops = lp->cfg.ops;
    char why[WHY_MAX], last[WHY_MAX] = "";
    unsigned failures = 0;
    uint64_t epoch = 0, ack = 0, ack_epoch = 0;
    int registered = 0, polled = 0;

    while (!lp->stop) {
        if (atomic_exchange(&lp->again, 0))
            registered = 0;
        if (!registered) {
            int rc = ops->registered(lp->cfg.arg, lp->soap, &epoch, why, sizeof(why));

            soap_client_reset(lp->soap);
            if (lp->stop)
                break;
            if (rc < 0) {
                fail(lp, "cannot register with", why, &failures, last, sizeof(last));
                continue;
            }
            registered = 1;
            polled = 0;
            /* The same service kept our queue and what we acknowledged: ack 0
               would have it send the last batch again.  A new one numbers
               from 1 again. */
            if (epoch != ack_epoch) {
                ack = 0;
                ack_epoch = epoch;
            }
            set_state(lp, 1, epoch);
        }
        if (ops->before_poll != NULL) {
            ops->before_poll(lp->cfg.arg, lp->soap);
            soap_client_reset(lp->soap);
        }
        uint64_t server_epoch = epoch;
        int rc = longpoll_poll_once(lp, epoch, &ack, &server_epoch, why, sizeof(why));
        if (lp->stop)
            break;
        if (rc < 0) {
            registered = 0;
            fail(lp, "lost", why, &failures, last, sizeof(last));
            continue;
        }
        if (server_epoch != epoch) {
            registered = 0;
            /* Right after registering, a new epoch again is no restart but
               a service that cannot keep one: back off. */
            if (!polled) {
                snprintf(why, sizeof(why),
                         "its epoch changed right after registering (%" PRIu64 " -> %" PRIu64 ")",
                         epoch, server_epoch);
                fail(lp, "lost", why, &failures, last, sizeof(last));
                continue;
            }
            snprintf(why, sizeof(why), "the %s restarted: registering again", lp->cfg.service);
            log_warnx("the %s %s restarted (epoch %" PRIu64 " -> %" PRIu64 "): registering again",
                      lp->cfg.service, lp->cfg.client->url, epoch, server_epoch);
            set_state(lp, 0, 0);
            if (ops->down != NULL)
                ops->down(lp->cfg.arg, why);
            continue;
        }
        polled = 1;
        failures = 0;
    }
    set_state(lp, 0, 0);
    return NULL;
}

int longpoll_start(struct longpoll *lp, char *err, size_t errlen)
{
    int rc = pthread_create(&lp->thread, NULL, longpoll_main, lp);

    if (rc != 0) {
        snprintf(err, errlen, "cannot start the thread polling the %s: %s", lp->cfg.service,
                 strerror(rc));
        return -1;
    }
    lp->started = 1;
    if (crl_watch(on_crl, lp) < 0)
        log_warnx("too many CRL watchers: a reload will not close a revoked %s's connection",
                  lp->cfg.service);
    return 0;
}

void longpoll_stop(struct longpoll *lp)
{
    lp->stop = 1;
    pthread_mutex_lock(&lp->lock);
    if (soap_valid_socket(lp->fd))
        shutdown(lp->fd, SHUT_RDWR);
    pthread_mutex_unlock(&lp->lock);
}

void longpoll_register_again(struct longpoll *lp)
{
    atomic_store(&lp->again, 1);
}

int longpoll_stopping(const struct longpoll *lp)
{
    return lp->stop != 0;
}

void longpoll_free(struct longpoll *lp)
{
    if (lp == NULL)
        return;
    crl_unwatch(on_crl, lp);
    if (lp->started) {
        longpoll_stop(lp);
        pthread_join(lp->thread, NULL);
    }
    if (lp->soap != NULL)
        soap_client_free(lp->soap);
    X509_free(lp->peer);
    pthread_mutex_destroy(&lp->lock);
    free(lp);
}
