#include "strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct slot {
    struct slot *next;
    void *value;
    char key[];
};

struct strmap {
    struct slot **buckets;
    size_t nbuckets;   /* a power of two */
    size_t count;
};

#define STRMAP_MIN_BUCKETS 16

/* FNV-1a: keys are short ids chosen by our own peers, not by an attacker who
   could aim at one bucket more than at any other. */
static uint64_t hash_key(const char *key)
{
    uint64_t h = 1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    return h;
}

struct strmap *strmap_new(void)
{
    struct strmap *map = calloc(1, sizeof(*map));
    if (map == NULL)
        return NULL;
    map->buckets = calloc(STRMAP_MIN_BUCKETS, sizeof(*map->buckets));
    if (map->buckets == NULL) {
        free(map);
        return NULL;
    }
    map->nbuckets = STRMAP_MIN_BUCKETS;
    return map;
}

void strmap_clear(struct strmap *map, void (*free_value)(void *))
{
    for (size_t i = 0; i < map->nbuckets; i++) {
        struct slot *s = map->buckets[i];
        while (s != NULL) {
            struct slot *next = s->next;
            if (free_value != NULL)
                free_value(s->value);
            free(s);
            s = next;
        }
        map->buckets[i] = NULL;
    }
    map->count = 0;
}

void strmap_free(struct strmap *map, void (*free_value)(void *))
{
    if (map == NULL)
        return;
    strmap_clear(map, free_value);
    free(map->buckets);
    free(map);
}

static struct slot **find(const struct strmap *map, const char *key)
{
    struct slot **sp = &map->buckets[hash_key(key) & (map->nbuckets - 1)];
    while (*sp != NULL && strcmp((*sp)->key, key) != 0)
        sp = &(*sp)->next;
    return sp;
}

void *strmap_get(const struct strmap *map, const char *key)
{
    struct slot *s = *find(map, key);
    return s != NULL ? s->value : NULL;
}

/* Doubles the bucket array; a failed allocation only leaves chains longer. */
static void grow(struct strmap *map)
{
    size_t n = map->nbuckets * 2;
    struct slot **b = calloc(n, sizeof(*b));
    if (b == NULL)
        return;
    for (size_t i = 0; i < map->nbuckets; i++) {
        struct slot *s = map->buckets[i];
        while (s != NULL) {
            struct slot *next = s->next;
            size_t j = hash_key(s->key) & (n - 1);
            s->next = b[j];
            b[j] = s;
            s = next;
        }
    }
    free(map->buckets);
    map->buckets = b;
    map->nbuckets = n;
}

int strmap_put(struct strmap *map, const char *key, void *value, void **old)
{
    struct slot **sp = find(map, key);
    if (*sp != NULL) {
        if (old != NULL)
            *old = (*sp)->value;
        (*sp)->value = value;
        return 0;
    }
    size_t len = strlen(key) + 1;
    struct slot *s = malloc(sizeof(*s) + len);
    if (s == NULL)
        return -1;
    memcpy(s->key, key, len);
    s->value = value;
    s->next = NULL;
    *sp = s;
    map->count++;
    if (old != NULL)
        *old = NULL;
    if (map->count > map->nbuckets)
        grow(map);
    return 0;
}

void *strmap_remove(struct strmap *map, const char *key)
{
    struct slot **sp = find(map, key);
    struct slot *s = *sp;
    if (s == NULL)
        return NULL;
    void *value = s->value;
    *sp = s->next;
    free(s);
    map->count--;
    return value;
}

size_t strmap_count(const struct strmap *map)
{
    return map->count;
}

void strmap_foreach(const struct strmap *map, void (*fn)(const char *key, void *value, void *arg),
                    void *arg)
{
    for (size_t i = 0; i < map->nbuckets; i++)
        for (struct slot *s = map->buckets[i]; s != NULL; s = s->next)
            fn(s->key, s->value, arg);
}
