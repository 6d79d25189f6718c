/* The helper's identity is its certificate: refuse to start as a node the
   certificate does not name, rather than be refused by the frontend later. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"
#include "identity.h"

static int set_or_match(char **field, const char *option, const char *from_cert, const char *cn,
                        char *err, size_t errlen)
{
    if (*field == NULL) {
        *field = strdup(from_cert);
        if (*field == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        return 0;
    }
    if (strcmp(*field, from_cert) != 0) {
        snprintf(err, errlen, "%s '%s' does not match the certificate (CN=%s)", option, *field, cn);
        return -1;
    }
    return 0;
}

int helper_cert_check(struct helper_config *cfg, char *err, size_t errlen)
{
    struct identity id;
    if (identity_from_file(cfg->cert, QCG_ROLE_HELPER, &id, err, errlen) < 0)
        return -1;
    if (set_or_match(&cfg->cluster, "cluster", id.cluster, id.name, err, errlen) < 0 ||
        set_or_match(&cfg->node, "node", id.node, id.name, err, errlen) < 0)
        return -1;
    return 0;
}
