/*
 * The proxies the broker may send a pair through (option `proxy`, the data
 * addresses of qcg-proxy daemons) and the key it shares with them to sign
 * tokens (option `proxy-key`, util/token.h).
 */
#ifndef BROKER_PROXIES_H
#define BROKER_PROXIES_H

#include <stddef.h>
#include <stdint.h>
#include "plan.h"
#include "proto.h"
#include "token.h"

#define PROXIES_MAX 16
/* How long a proxy token is valid; the proxy adds its own clock-skew margin. */
#define PROXY_TOKEN_LIFETIME 60

/* A proxy's data address in each family it listens in: the first one
   configured, and one of the other family when the same name is given twice
   ("" when not). */
struct proxy_addr {
    char name[QCG_NAME_MAX];
    char host[QCG_ADDR_MAX]; /* an IP address: processes connect to it as given */
    int port;
    char host2[QCG_ADDR_MAX]; /* of the other family than host, or "" */
    int port2;
};

/* The families p has an address in. */
unsigned proxy_addr_families(const struct proxy_addr *p);

/* p's address for an end whose node has addresses in `families`: the first
   configured one of those families, its port in *port; NULL when none. */
const char *proxy_addr_for(const struct proxy_addr *p, unsigned families, int *port);

struct proxies {
    int count;
    struct proxy_addr list[PROXIES_MAX];
    struct proxy_key key;
};

/* Parses "NAME@HOST:PORT[,NAME@HOST:PORT...]" (NULL or "" = no proxy; a
   NAME given twice, once per family, is one proxy with two addresses) and,
   when there is one, loads the key file (required then).  0, or -1 with a
   one-line reason in err. */
int proxies_parse(struct proxies *p, const char *spec, const char *key_file, char *err,
                  size_t errlen);

/* The families any of p's proxies has an address in. */
unsigned proxies_families(const struct proxies *p);

/* Wipes the key. */
void proxies_clear(struct proxies *p);

#endif
