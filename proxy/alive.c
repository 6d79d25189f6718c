/* The proxy's beats to the broker; see alive.h. */
#include "alive.h"

#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "proto.h"
#include "relay.h"
#include "soapH.h"
#include "soap_client.h"
#include "ticker.h"

/* A beat must not outlast the interval by much: a stuck broker is retried. */
#define ALIVE_CONNECT_TIMEOUT 5
#define ALIVE_IO_TIMEOUT 10

enum beat_outcome { BEAT_NONE_YET, BEAT_OK, BEAT_FAILED };

struct alive {
    struct soap *soap;
    const char *url; /* owned by soap */
    int interval;
    struct relay *relay;
    enum beat_outcome last;
    struct ticker *ticker;
};

/* One beat.  Logs the first outcome and each change. */
static void beat(void *arg)
{
    struct alive *a = arg;
    struct relay_counters k;
    struct qcg__ackResponse res;
    char sub[64], msg[256];
    relay_counters(a->relay, &k);
    int rc = soap_call_qcg__proxyAlive(a->soap, a->url, NULL, QCG_PROTOCOL_VERSION,
                                       (int)k.pairs_active, k.bytes_relayed, &res);
    enum call_status st = soap_call_status(a->soap, rc, sub, sizeof(sub), msg, sizeof(msg));
    soap_client_reset(a->soap);
    enum beat_outcome now = st == CALL_OK ? BEAT_OK : BEAT_FAILED;
    if (now == a->last)
        return;
    a->last = now;
    if (st == CALL_OK)
        log_info("the broker at %s hears our beats (every %d s)", a->url, a->interval);
    else if (st == CALL_FAULT)
        log_warnx("the broker at %s refused our beat (qcg:%s): %s; retrying every %d s", a->url,
                  sub, msg, a->interval);
    else
        log_warnx("the broker at %s is unreachable: %s; retrying every %d s", a->url, msg,
                  a->interval);
}

struct alive *alive_start(const struct alive_config *cfg, char *err, size_t errlen)
{
    struct alive *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    /* The beats go to the broker only: not to another service of the CA. */
    struct soap_client_config cc = {.url = cfg->url,
                                    .tls = cfg->tls,
                                    .connect_timeout = ALIVE_CONNECT_TIMEOUT,
                                    .io_timeout = ALIVE_IO_TIMEOUT,
                                    .expect_role = QCG_ROLE_BROKER};
    a->soap = soap_client_new(&cc, err, errlen);
    if (a->soap == NULL) {
        free(a);
        return NULL;
    }
    a->url = soap_client_url(a->soap);
    a->interval = cfg->interval;
    a->relay = cfg->relay;
    a->ticker = ticker_start((unsigned)cfg->interval, true, beat, a, err, errlen);
    if (a->ticker == NULL) {
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
    ticker_stop(a->ticker);
    soap_client_free(a->soap);
    free(a);
}
