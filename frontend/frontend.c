#include "frontend.h"
#include "rates.h"

#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "frontend_config.h"
#include "report_batch.h"
#include "store.h"

/* Time plus randomness: a restarted frontend never reuses an epoch, so its
   helpers always notice the restart and re-register. */
static uint64_t new_epoch(void)
{
    uint32_t r = 0;
    if (RAND_bytes((unsigned char *)&r, sizeof(r)) != 1)
        r = (uint32_t)clock();
    uint64_t e = ((uint64_t)time(NULL) << 24) ^ (r & 0xffffffu);
    return e != 0 ? e : 1;
}

struct frontend *frontend_new(const struct frontend_config *cfg, char *err, size_t errlen)
{
    struct frontend *fe = calloc(1, sizeof(*fe));
    if (fe == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    fe->cfg = cfg;
    fe->cluster = cfg->cluster_name;
    fe->epoch = new_epoch();
    fe->store = store_new(FRONTEND_HELPER_QUEUE);
    fe->cache = cache_new((size_t)cfg->cache_size);
    const struct rate limits[RATE_KINDS] = {
        [RATE_LOOKUP] = {cfg->node_lookups, 10.0 * cfg->node_lookups},
        [RATE_REPORT] = {cfg->node_reports, 10.0 * cfg->node_reports},
        [RATE_PROBE] = {cfg->node_probes / 60.0, cfg->node_probes},
    };
    fe->rates = rates_new(limits);
    if (fe->store == NULL || fe->cache == NULL || fe->rates == NULL) {
        snprintf(err, errlen, "out of memory");
        frontend_free(fe);
        return NULL;
    }
    fe->upstream.url = cfg->broker;
    fe->upstream.tls.ca = cfg->ca;
    fe->upstream.tls.certkey = cfg->cert;
    fe->upstream.tls.crl = cfg->crl;
    /* Only the broker: a frontend's calls carry its helpers' contacts. */
    fe->upstream.expect_role = QCG_ROLE_BROKER;
    fe->upstream.connect_timeout = 5;
    fe->upstream.io_timeout = 10;
    fe->pool = soap_pool_new(&fe->upstream, FRONTEND_POOL_SIZE, err, errlen);
    if (fe->pool == NULL) {
        frontend_free(fe);
        return NULL;
    }
    return fe;
}

void frontend_free(struct frontend *fe)
{
    if (fe == NULL)
        return;
    reports_free(fe->reports);
    if (fe->pool != NULL)
        soap_pool_free(fe->pool);
    store_free(fe->store);
    rates_free(fe->rates);
    cache_free(fe->cache);
    free(fe);
}
