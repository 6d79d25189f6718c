/* String keys over the one hash table (htable.h): a slot holds the key's
   copy and the value. */
#include "strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "htable.h"

struct slot {
    void *value;
    char key[];
};

struct strmap {
    struct htable *table; /* of struct slot */
};

static bool slot_has_key(const void *entry, const void *key)
{
    return strcmp(((const struct slot *)entry)->key, key) == 0;
}

/* Unseeded: keys are short ids chosen by our own peers, not by an attacker
   who could aim at one slot more than at any other. */
static uint64_t hash_key(const char *key)
{
    return htable_hash(key, strlen(key), 0);
}

struct strmap *strmap_new(void)
{
    struct strmap *map = calloc(1, sizeof(*map));
    if (map == NULL)
        return NULL;
    map->table = htable_new(slot_has_key);
    if (map->table == NULL) {
        free(map);
        return NULL;
    }
    return map;
}

void strmap_clear(struct strmap *map, void (*free_value)(void *))
{
    struct slot *s;
    size_t i = 0;

    while ((s = htable_next(map->table, &i)) != NULL) {
        if (free_value != NULL)
            free_value(s->value);
        free(s);
    }
    htable_clear(map->table);
}

void strmap_free(struct strmap *map, void (*free_value)(void *))
{
    if (map == NULL)
        return;
    strmap_clear(map, free_value);
    htable_free(map->table);
    free(map);
}

void *strmap_get(const struct strmap *map, const char *key)
{
    struct slot *s = htable_find(map->table, hash_key(key), key);
    return s != NULL ? s->value : NULL;
}

int strmap_put(struct strmap *map, const char *key, void *value, void **old)
{
    uint64_t hash = hash_key(key);
    struct slot *s = htable_find(map->table, hash, key);
    if (s != NULL) {
        if (old != NULL)
            *old = s->value;
        s->value = value;
        return 0;
    }
    size_t len = strlen(key) + 1;
    s = malloc(sizeof(*s) + len);
    if (s == NULL)
        return -1;
    memcpy(s->key, key, len);
    s->value = value;
    if (htable_insert(map->table, hash, s) < 0) {
        free(s);
        return -1;
    }
    if (old != NULL)
        *old = NULL;
    return 0;
}

void *strmap_remove(struct strmap *map, const char *key)
{
    struct slot *s = htable_remove(map->table, hash_key(key), key);
    if (s == NULL)
        return NULL;
    void *value = s->value;
    free(s);
    return value;
}

size_t strmap_count(const struct strmap *map)
{
    return htable_count(map->table);
}

void strmap_foreach(const struct strmap *map, void (*fn)(const char *key, void *value, void *arg),
                    void *arg)
{
    struct slot *s;
    size_t i = 0;

    while ((s = htable_next(map->table, &i)) != NULL)
        fn(s->key, s->value, arg);
}
