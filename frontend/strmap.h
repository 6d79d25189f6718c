/* A string-keyed map (the keys copied) on core's hash table.  Not
   thread-safe: the modules that use it hold their own lock. */
#ifndef FRONTEND_STRMAP_H
#define FRONTEND_STRMAP_H

#include <stddef.h>

struct strmap;

struct strmap *strmap_new(void);
/* free_value (may be NULL) is called on every value still held. */
void strmap_free(struct strmap *map, void (*free_value)(void *));
void *strmap_get(const struct strmap *map, const char *key);
/* Inserts or replaces; the previous value (or NULL) goes to *old when old is
   not NULL.  The key is copied.  -1 when out of memory (map unchanged). */
int strmap_put(struct strmap *map, const char *key, void *value, void **old);
/* Removes the key and returns its value, NULL when absent. */
void *strmap_remove(struct strmap *map, const char *key);
size_t strmap_count(const struct strmap *map);
/* Calls fn on every entry; fn must not change the map. */
void strmap_foreach(const struct strmap *map, void (*fn)(const char *key, void *value, void *arg),
                    void *arg);
/* Removes everything, calling free_value (may be NULL) on each value. */
void strmap_clear(struct strmap *map, void (*free_value)(void *));

#endif
