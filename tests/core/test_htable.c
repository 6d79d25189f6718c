/* core/htable.c: entries found by hash and key through growth, removal
   (backward shift keeps every other entry findable, even where hashes
   collide), iteration and clearing. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "htable.h"

struct item {
    int key;
    uint64_t hash;
};

static bool item_has_key(const void *entry, const void *key)
{
    return ((const struct item *)entry)->key == *(const int *)key;
}

/* Few distinct hashes: long runs of colliding entries. */
static uint64_t weak_hash(int key)
{
    return (uint64_t)(key % 7);
}

static bool all_findable(struct htable *t, struct item *items, int n, const bool *present)
{
    for (int i = 0; i < n; i++) {
        struct item *e = htable_find(t, items[i].hash, &items[i].key);
        if (e != (present[i] ? &items[i] : NULL))
            return false;
    }
    return true;
}

static void test_table(uint64_t (*hash)(int), const char *what)
{
    enum { N = 1000 };
    static struct item items[N];
    static bool present[N];
    struct htable *t = htable_new(item_has_key);

    CHECK(t != NULL);
    for (int i = 0; i < N; i++) {
        items[i] = (struct item){.key = i, .hash = hash(i)};
        present[i] = true;
        CHECK(htable_insert(t, items[i].hash, &items[i]) == 0);
    }
    CHECK(htable_count(t) == N);
    if (!all_findable(t, items, N, present))
        fprintf(stderr, "%s: not all found after growing\n", what);
    CHECK(all_findable(t, items, N, present));
    int missing = N + 5;
    CHECK(htable_find(t, hash(missing), &missing) == NULL);
    CHECK(htable_remove(t, hash(missing), &missing) == NULL);

    /* Every third one removed: the others stay findable. */
    for (int i = 0; i < N; i += 3) {
        CHECK(htable_remove(t, items[i].hash, &items[i].key) == &items[i]);
        present[i] = false;
    }
    CHECK(htable_count(t) == N - (N + 2) / 3);
    CHECK(all_findable(t, items, N, present));

    /* Iteration sees each remaining entry once. */
    static int seen[N];
    struct item *e;
    size_t it = 0, count = 0;
    memset(seen, 0, sizeof(seen));
    while ((e = htable_next(t, &it)) != NULL) {
        seen[e->key]++;
        count++;
    }
    CHECK(count == htable_count(t));
    for (int i = 0; i < N; i++)
        CHECK(seen[i] == (present[i] ? 1 : 0));

    htable_clear(t);
    CHECK(htable_count(t) == 0);
    it = 0;
    CHECK(htable_next(t, &it) == NULL);
    memset(present, 0, sizeof(present));
    CHECK(all_findable(t, items, N, present));
    CHECK(htable_insert(t, items[1].hash, &items[1]) == 0);
    CHECK(htable_find(t, items[1].hash, &items[1].key) == &items[1]);
    htable_free(t);
}

static uint64_t good_hash(int key)
{
    return htable_hash(&key, sizeof(key), 42);
}

int main(void)
{
    test_table(good_hash, "seeded hash");
    test_table(weak_hash, "colliding hashes");
    /* The hash depends on the seed and on every byte. */
    CHECK(htable_hash("abc", 3, 1) != htable_hash("abc", 3, 2));
    CHECK(htable_hash("abc", 3, 1) != htable_hash("abd", 3, 1));
    CHECK(htable_hash("abc", 3, 1) == htable_hash("abc", 3, 1));
    htable_free(NULL);
    return check_result("test_htable");
}
