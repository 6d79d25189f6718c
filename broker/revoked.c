/*
 * A frontend whose certificate a reload's CRL revokes (soap_server_on_revoked):
 * its cluster goes as if each of its contacts were withdrawn, and `--grid`
 * and `--stats` no longer count it.  A frontend re-issued a certificate
 * registers the cluster anew.
 */
#include "revoked.h"

#include "broker.h"
#include "log.h"
#include "registry.h"

void broker_revoked(void *user, const struct identity *id)
{
    struct broker *b = user;
    if (id->role != QCG_ROLE_FRONTEND)
        return;
    size_t nodes;
    size_t n = registry_drop_cluster(b->reg, id->cluster, &nodes);
    log_warnx("cluster %s dropped: its frontend's certificate is revoked; %zu node%s, %zu "
              "contact%s withdrawn",
              id->cluster, nodes, nodes == 1 ? "" : "s", n, n == 1 ? "" : "s");
}
