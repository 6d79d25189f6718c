/* The broker's proxies; see proxies.h. */
#include "proxies.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "address.h"
#include "validate.h"

/* One "NAME@HOST:PORT" or "NAME@[IPv6]:PORT"; -1 with err. */
static int parse_one(const char *text, struct proxy_addr *out, char *err, size_t errlen)
{
    const char *at = strchr(text, '@');
    char why[200];

    memset(out, 0, sizeof(*out));
    if (at == NULL) {
        snprintf(err, errlen, "proxy: '%.80s' is not NAME@HOST:PORT", text);
        return -1;
    }
    if ((size_t)(at - text) >= sizeof(out->name)) {
        snprintf(err, errlen, "proxy: '%.80s': name too long", text);
        return -1;
    }
    memcpy(out->name, text, (size_t)(at - text));
    if (!name_valid(out->name)) {
        snprintf(err, errlen, "proxy: '%.80s': '%s' is not a valid name", text, out->name);
        return -1;
    }
    if (hostport_parse(at + 1, false, out->host, sizeof(out->host), &out->port, why, sizeof(why)) <
        0) {
        snprintf(err, errlen, "proxy: %s", why);
        return -1;
    }
    return 0;
}

static unsigned family_bit(const char *host)
{
    return address_family(host) == AF_INET6 ? FAMILY_V6 : FAMILY_V4;
}

unsigned proxy_addr_families(const struct proxy_addr *p)
{
    return family_bit(p->host) | (p->host2[0] != '\0' ? family_bit(p->host2) : 0);
}

const char *proxy_addr_for(const struct proxy_addr *p, unsigned families, int *port)
{
    if (family_bit(p->host) & families) {
        *port = p->port;
        return p->host;
    }
    if (p->host2[0] != '\0' && (family_bit(p->host2) & families)) {
        *port = p->port2;
        return p->host2;
    }
    return NULL;
}

/* `one` names a proxy already in p: its address of the other family, or an
   error.  1 when taken that way, 0 when the name is new, -1 with err. */
static int second_address(struct proxies *p, const struct proxy_addr *one, char *err, size_t errlen)
{
    for (int i = 0; i < p->count; i++) {
        struct proxy_addr *known = &p->list[i];
        if (strcmp(known->name, one->name) != 0)
            continue;
        if (proxy_addr_families(known) & family_bit(one->host)) {
            snprintf(err, errlen,
                     "proxy: %s has two %s addresses (name a proxy twice only for an address "
                     "in each family)",
                     one->name, family_bit(one->host) == FAMILY_V6 ? "IPv6" : "IPv4");
            return -1;
        }
        snprintf(known->host2, sizeof(known->host2), "%s", one->host);
        known->port2 = one->port;
        return 1;
    }
    return 0;
}

int proxies_parse(struct proxies *p, const char *spec, const char *key_file, char *err,
                  size_t errlen)
{
    char *copy, *save = NULL;
    int rc = 0;

    memset(p, 0, sizeof(*p));
    if (spec == NULL || spec[0] == '\0')
        return 0;
    copy = strdup(spec);
    if (copy == NULL) {
        snprintf(err, errlen, "proxy: out of memory");
        return -1;
    }
    for (char *tok = strtok_r(copy, ", \t", &save); tok != NULL && rc == 0;
         tok = strtok_r(NULL, ", \t", &save)) {
        struct proxy_addr one;
        rc = parse_one(tok, &one, err, errlen);
        int known = rc == 0 ? second_address(p, &one, err, errlen) : 0;
        if (rc < 0 || known != 0) {
            rc = known < 0 ? -1 : rc;
            continue;
        }
        if (p->count == PROXIES_MAX) {
            snprintf(err, errlen, "proxy: at most %d proxies", PROXIES_MAX);
            rc = -1;
            break;
        }
        p->list[p->count++] = one;
    }
    free(copy);
    if (rc == 0 && p->count > 0) {
        if (key_file == NULL || key_file[0] == '\0') {
            snprintf(err, errlen,
                     "proxy-key is required with proxy (the key shared with the "
                     "proxies)");
            rc = -1;
        } else {
            char why[256] = "";
            if (proxy_key_load(key_file, &p->key, why, sizeof(why)) < 0) {
                snprintf(err, errlen, "proxy-key: %s", why);
                rc = -1;
            }
        }
    }
    if (rc < 0)
        proxies_clear(p);
    return rc;
}

unsigned proxies_families(const struct proxies *p)
{
    unsigned f = 0;
    for (int i = 0; i < p->count; i++)
        f |= proxy_addr_families(&p->list[i]);
    return f;
}

void proxies_clear(struct proxies *p)
{
    OPENSSL_cleanse(p, sizeof(*p));
}
