/* The broker's state; see broker.h. */
#include "broker.h"

#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

uint64_t broker_make_epoch(uint64_t now)
{
    uint32_t rnd = 0;
    if (RAND_bytes((unsigned char *)&rnd, sizeof(rnd)) != 1)
        rnd = (uint32_t)clock();
    /* The time keeps epochs increasing across restarts; the random half keeps two
       brokers started in the same second apart. */
    return (now << 32) | rnd | 1;
}

struct broker *broker_new(size_t max_contacts, const char *name)
{
    struct broker *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return NULL;
    b->reg = registry_new(max_contacts, broker_make_epoch((uint64_t)time(NULL)));
    if (b->reg == NULL) {
        free(b);
        return NULL;
    }
    snprintf(b->name, sizeof(b->name), "%s", name != NULL ? name : "broker");
    return b;
}

void broker_free(struct broker *b)
{
    if (b == NULL)
        return;
    registry_free(b->reg);
    proxies_clear(&b->proxies);
    free(b);
}
