/* The proxy's beats to the broker; see alive.h. */
#include "alive.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "log.h"
#include "proto.h"
#include "relay.h"
#include "soapH.h"
#include "soap_client.h"

/* A beat must not outlast the interval by much: a stuck broker is retried. */
#define ALIVE_CONNECT_TIMEOUT 5
#define ALIVE_IO_TIMEOUT 10

struct alive {
    struct soap *soap;
    char *url;
    int interval;
    struct relay *relay;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
};

enum beat_outcome { BEAT_NONE_YET, BEAT_OK, BEAT_FAILED };

/* One beat.  Logs the first outcome and each change. */
static enum beat_outcome beat(struct alive *a, enum beat_outcome was)
{
    struct relay_counters k;
    struct qcg__ackResponse res;
    char sub[64], msg[256];
    relay_counters(a->relay, &k);
    int rc = soap_call_qcg__proxyAlive(a->soap, a->url, NULL, QCG_PROTOCOL_VERSION,
                                       (int)k.pairs_active, k.bytes_relayed, &res);
    enum call_status st = soap_call_status(a->soap, rc, sub, sizeof(sub), msg, sizeof(msg));
    soap_client_reset(a->soap);
    if (st == CALL_OK) {
        if (was != BEAT_OK)
            log_info("the broker at %s hears our beats (every %d s)", a->url, a->interval);
        return BEAT_OK;
    }
    if (was != BEAT_FAILED) {
        if (st == CALL_FAULT)
            log_warnx("the broker at %s refused our beat (qcg:%s): %s; retrying every %d s", a->url,
                      sub, msg, a->interval);
        else
            log_warnx("the broker at %s is unreachable: %s; retrying every %d s", a->url, msg,
                      a->interval);
    }
    return BEAT_FAILED;
}

static void *alive_thread(void *arg)
{
    struct alive *a = arg;
    enum beat_outcome last = BEAT_NONE_YET;
    pthread_mutex_lock(&a->lock);
    while (!a->stop) {
        pthread_mutex_unlock(&a->lock);
        last = beat(a, last);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += a->interval;
        pthread_mutex_lock(&a->lock);
        while (!a->stop && pthread_cond_timedwait(&a->wake, &a->lock, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

struct alive *alive_start(const struct alive_config *cfg, char *err, size_t errlen)
{
    struct alive *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    struct soap_client_config cc = {.url = cfg->url,
                                    .tls = cfg->tls,
                                    .connect_timeout = ALIVE_CONNECT_TIMEOUT,
                                    .io_timeout = ALIVE_IO_TIMEOUT};
    a->soap = soap_client_new(&cc, err, errlen);
    if (a->soap == NULL) {
        free(a);
        return NULL;
    }
    a->url = (char *)soap_client_url(a->soap);
    a->interval = cfg->interval;
    a->relay = cfg->relay;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&a->lock, NULL);
    if (pthread_create(&a->thread, NULL, alive_thread, a) != 0) {
        snprintf(err, errlen, "cannot start the beat thread");
        pthread_cond_destroy(&a->wake);
        pthread_mutex_destroy(&a->lock);
        soap_client_free(a->soap);
        free(a);
        return NULL;
    }
    return a;
}

void alive_stop(struct alive *a)
{
    if (a == NULL)
        return;
    pthread_mutex_lock(&a->lock);
    a->stop = true;
    pthread_cond_signal(&a->wake);
    pthread_mutex_unlock(&a->lock);
    pthread_join(a->thread, NULL);
    pthread_cond_destroy(&a->wake);
    pthread_mutex_destroy(&a->lock);
    soap_client_free(a->soap);
    free(a);
}
