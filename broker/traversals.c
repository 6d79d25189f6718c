/* Pending traversals; see traversals.h. */
#include "traversals.h"

#include <openssl/crypto.h>
#include <string.h>

void traversals_init(struct traversals *t)
{
    memset(t, 0, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
}

void traversals_destroy(struct traversals *t)
{
    pthread_mutex_destroy(&t->lock);
    OPENSSL_cleanse(t->slot, sizeof(t->slot));
}

int traversals_add(struct traversals *t, const struct traversal *tr, uint64_t now)
{
    int rc = -1;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < TRAVERSALS_MAX; i++) {
        if (t->slot[i].expiry == 0 || t->slot[i].expiry < now) {
            t->slot[i] = *tr;
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}

int traversals_take(struct traversals *t, const unsigned char pair[TOKEN_PAIR_LEN], uint64_t now,
                    struct traversal *out)
{
    int rc = -1;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < TRAVERSALS_MAX; i++) {
        struct traversal *s = &t->slot[i];
        if (s->expiry != 0 && memcmp(s->pair, pair, TOKEN_PAIR_LEN) == 0) {
            if (s->expiry >= now) {
                *out = *s;
                rc = 0;
            }
            memset(s, 0, sizeof(*s));
            break;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}
