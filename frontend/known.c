/* See known.h. */
#include "known.h"

#include <stdio.h>
#include <string.h>

#include "address.h"
#include "frontend_config.h"
#include "log.h"
#include "soap_server.h"

/* The host of "https://HOST:PORT/" or "https://[V6]:PORT/" when it is an
   address (a name is not resolved here: its address may change); else "". */
static void url_address(const char *url, char out[QCG_ADDR_MAX])
{
    out[0] = '\0';
    const char *p = strstr(url, "://");
    p = p != NULL ? p + 3 : url;
    size_t n;
    if (*p == '[') {
        p++;
        n = strcspn(p, "]");
    } else {
        n = strcspn(p, ":/");
    }
    if (n == 0 || n >= QCG_ADDR_MAX)
        return;
    char host[QCG_ADDR_MAX];
    memcpy(host, p, n);
    host[n] = '\0';
    if (address_valid(host))
        snprintf(out, QCG_ADDR_MAX, "%s", host);
}

void frontend_know(struct soap_server *srv, const struct frontend_config *cfg)
{
    char why[200], broker[QCG_ADDR_MAX];
    int named = 0;
    for (int i = 0; i < cfg->nranges; i++) {
        if (soap_server_know(srv, cfg->ranges[i], why, sizeof(why)) == 0)
            named++;
        else
            log_warnx("node range %s not known before its nodes log in: %s", cfg->ranges[i], why);
    }
    url_address(cfg->broker, broker);
    if (broker[0] != '\0' && soap_server_know(srv, broker, why, sizeof(why)) < 0)
        log_warnx("broker address %s not known before it logs in: %s", broker, why);
    log_debug("known before login: %d node range%s%s%s", named, named == 1 ? "" : "s",
              broker[0] != '\0' ? ", the broker at " : "", broker);
}
