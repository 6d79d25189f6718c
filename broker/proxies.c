/* The broker's proxies; see proxies.h. */
#include "proxies.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        if (p->count == PROXIES_MAX) {
            snprintf(err, errlen, "proxy: at most %d proxies", PROXIES_MAX);
            rc = -1;
            break;
        }
        rc = parse_one(tok, &p->list[p->count], err, errlen);
        if (rc == 0)
            p->count++;
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

void proxies_clear(struct proxies *p)
{
    OPENSSL_cleanse(p, sizeof(*p));
}
