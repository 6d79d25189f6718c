/*
 * A helper whose certificate a reload's CRL revokes (soap_server_on_revoked):
 * its node is dropped as if its lease had run out, and its contacts are
 * withdrawn upstream at once, so that the broker invalidates them in every
 * cluster within the reload (kept for the next registration when the broker
 * cannot be reached).
 */
#include "revoked.h"

#include <stdio.h>
#include <string.h>

#include "frontend.h"
#include "log.h"
#include "relay.h"
#include "soap_client.h"
#include "store.h"

void frontend_revoked(void *user, const struct identity *id)
{
    struct frontend *fe = user;
    if (id->role != QCG_ROLE_HELPER || strcmp(id->cluster, fe->cluster) != 0)
        return;
    struct withdrawal *ws;
    size_t n = store_node_drop(fe->store, id->node, &ws);
    log_warnx("node %s dropped: its helper's certificate is revoked; %zu contact%s withdrawn",
              id->node, n, n == 1 ? "" : "s");
    const char *url = soap_pool_url(fe->pool);
    for (size_t i = 0; i < n; i++) {
        struct relay_error err;
        struct soap *up = soap_pool_get(fe->pool);
        int rc = relay_withdraw(up, url, ws[i].job, ws[i].verifier, ws[i].rank, ws[i].node, &err);
        int broken = rc < 0 && err.status == CALL_UNREACHABLE;
        soap_client_reset(up);
        soap_pool_put(fe->pool, up, broken);
        if (broken)
            store_withdrawal_add(fe->store, &ws[i]);
    }
    atomic_fetch_add(&fe->counters.contacts_expired, n);
    store_secrets_free(ws, sizeof(*ws), n);
}
