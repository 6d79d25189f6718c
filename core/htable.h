/*
 * A small open-addressing hash table of pointers (linear probing, backward-shift
 * deletion, so no tombstones).  The caller owns the entries and supplies each
 * entry's hash and an equality test against a key; the table stores the hash
 * beside the pointer so growing never calls back.  Not thread-safe: its
 * users hold their own locks.  The one hash table of the project: the
 * broker's registry, reflector and outcome memory, the frontend's maps (strmap.h), the
 * proxy's waiting sides (proxy/relay.c).
 */
#ifndef QCG_HTABLE_H
#define QCG_HTABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* true when `entry` has the key `key` (whatever struct the caller uses). */
typedef bool (*htable_eq_fn)(const void *entry, const void *key);

struct htable;

struct htable *htable_new(htable_eq_fn eq);
/* Frees the table only, not the entries. */
void htable_free(struct htable *t);

void *htable_find(const struct htable *t, uint64_t hash, const void *key);
/* Adds an entry whose key is not present yet; -1 when memory runs out. */
int htable_insert(struct htable *t, uint64_t hash, void *entry);
/* Removes and returns the entry with this key, or NULL. */
void *htable_remove(struct htable *t, uint64_t hash, const void *key);
size_t htable_count(const struct htable *t);
/* Forgets every entry (the caller frees them first, e.g. by iterating). */
void htable_clear(struct htable *t);
/* Iteration: `size_t i = 0; while ((e = htable_next(t, &i)))`; the table must
   not change meanwhile. */
void *htable_next(const struct htable *t, size_t *iter);

/* Seeded 64-bit hash of bytes; continue a hash by passing the previous one as seed. */
uint64_t htable_hash(const void *data, size_t len, uint64_t seed);

#endif
