/*
 * The proxies the broker may send a pair through (option `proxy`, the data
 * addresses of qcg-proxy daemons) and the key it shares with them to sign
 * tokens (option `proxy-key`, util/token.h).
 */
#ifndef BROKER_PROXIES_H
#define BROKER_PROXIES_H

#include <stddef.h>
#include <stdint.h>
#include "proto.h"
#include "token.h"

#define PROXIES_MAX 16
/* How long a proxy token is valid; the proxy adds its own clock-skew margin. */
#define PROXY_TOKEN_LIFETIME 60

struct proxy_addr {
    char name[QCG_NAME_MAX];
    char host[QCG_ADDR_MAX]; /* an IP address: processes connect to it as given */
    int port;
};

struct proxies {
    int count;
    struct proxy_addr list[PROXIES_MAX];
    struct proxy_key key;
};

/* Parses "NAME@HOST:PORT[,NAME@HOST:PORT...]" (NULL or "" = no proxy) and,
   when there is one, loads the key file (required then).  0, or -1 with a
   one-line reason in err. */
int proxies_parse(struct proxies *p, const char *spec, const char *key_file, char *err,
                  size_t errlen);

/* Wipes the key. */
void proxies_clear(struct proxies *p);

#endif
