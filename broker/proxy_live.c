/* The broker's view of its proxies' liveness and load; see proxy_live.h. */
#include "proxy_live.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct proxy_entry {
    struct proxy_addr addr;
    uint64_t heard_ms; /* monotonic ms of the last beat; 0 = never */
    unsigned pairs;
    uint64_t bytes;
    unsigned since_beat; /* pairs planned since the last beat, not in `pairs` yet */
    uint64_t planned;
};

struct proxy_live {
    pthread_mutex_t lock;
    uint64_t dead_after_ms;
    uint64_t started_ms; /* when the broker started listening for beats */
    bool heard_any;      /* some proxy has beaten since */
    int count;
    struct proxy_entry e[PROXIES_MAX];
};

struct proxy_live *proxy_live_new(const struct proxies *p, unsigned dead_after_s, uint64_t now_ms)
{
    struct proxy_live *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    pthread_mutex_init(&l->lock, NULL);
    l->dead_after_ms = (uint64_t)dead_after_s * 1000;
    l->started_ms = now_ms;
    l->count = p->count;
    for (int i = 0; i < p->count; i++)
        l->e[i].addr = p->list[i];
    return l;
}

void proxy_live_free(struct proxy_live *l)
{
    if (l == NULL)
        return;
    pthread_mutex_destroy(&l->lock);
    free(l);
}

static enum proxy_state state_of(const struct proxy_live *l, const struct proxy_entry *e,
                                 uint64_t now_ms)
{
    /* Silent for as long as a beating one may be, in a grid whose proxies
       beat: down (it died before its first beat to this broker). */
    if (e->heard_ms == 0)
        return l->heard_any && now_ms - l->started_ms > l->dead_after_ms ? PROXY_DEAD
                                                                         : PROXY_UNKNOWN;
    return now_ms - e->heard_ms <= l->dead_after_ms ? PROXY_ALIVE : PROXY_DEAD;
}

int proxy_live_beat(struct proxy_live *l, const char *name, unsigned pairs, uint64_t bytes,
                    uint64_t now_ms)
{
    int rc = -1;
    pthread_mutex_lock(&l->lock);
    for (int i = 0; i < l->count; i++) {
        struct proxy_entry *e = &l->e[i];
        if (strcmp(e->addr.name, name) != 0)
            continue;
        rc = (int)state_of(l, e, now_ms);
        /* Never 0: 0 means never heard from. */
        e->heard_ms = now_ms > 0 ? now_ms : 1;
        e->pairs = pairs;
        e->bytes = bytes;
        e->since_beat = 0;
        l->heard_any = true;
        break;
    }
    pthread_mutex_unlock(&l->lock);
    return rc;
}

/* Under the lock: the entry a pair goes to, or NULL; only one with an
   address in a family of each end (from_fam, to_fam: FAMILY_* sets). */
static struct proxy_entry *choose(struct proxy_live *l, const unsigned char pair[16],
                                  uint64_t now_ms, unsigned from_fam, unsigned to_fam)
{
    struct proxy_entry *best = NULL, *unknown = NULL;
    uint64_t best_load = 0;
    if (l->count == 0)
        return NULL;
    /* The pair id is random: where the scan starts breaks ties evenly. */
    unsigned start = (((unsigned)pair[0] << 8) | pair[1]) % (unsigned)l->count;
    for (int k = 0; k < l->count; k++) {
        struct proxy_entry *e = &l->e[(start + (unsigned)k) % (unsigned)l->count];
        unsigned fam = proxy_addr_families(&e->addr);
        if ((fam & from_fam) == 0 || (fam & to_fam) == 0)
            continue;
        switch (state_of(l, e, now_ms)) {
        case PROXY_ALIVE: {
            uint64_t load = (uint64_t)e->pairs + e->since_beat;
            if (best == NULL || load < best_load)
                best = e, best_load = load;
            break;
        }
        case PROXY_UNKNOWN:
            if (unknown == NULL)
                unknown = e;
            break;
        case PROXY_DEAD:
            break;
        }
    }
    /* Proxies that beat make the grid one of beating proxies: a silent one
       is down or misconfigured. */
    return best != NULL ? best : l->heard_any ? NULL : unknown;
}

int proxy_live_usable_for(struct proxy_live *l, uint64_t now_ms, unsigned from_fam, unsigned to_fam)
{
    static const unsigned char any[16];
    pthread_mutex_lock(&l->lock);
    int ok = choose(l, any, now_ms, from_fam, to_fam) != NULL;
    pthread_mutex_unlock(&l->lock);
    return ok;
}

int proxy_live_usable(struct proxy_live *l, uint64_t now_ms)
{
    return proxy_live_usable_for(l, now_ms, FAMILY_V4 | FAMILY_V6, FAMILY_V4 | FAMILY_V6);
}

int proxy_live_pick(struct proxy_live *l, const unsigned char pair[16], uint64_t now_ms,
                    unsigned from_fam, unsigned to_fam, struct proxy_addr *out)
{
    pthread_mutex_lock(&l->lock);
    struct proxy_entry *e = choose(l, pair, now_ms, from_fam, to_fam);
    if (e != NULL) {
        e->since_beat++;
        e->planned++;
        *out = e->addr;
    }
    pthread_mutex_unlock(&l->lock);
    return e != NULL ? 0 : -1;
}

int proxy_live_late(struct proxy_live *l, uint64_t now_ms, char *name, size_t len,
                    uint64_t *silent_ms)
{
    static const unsigned char any[16];
    const struct proxy_entry *late = NULL;
    pthread_mutex_lock(&l->lock);
    if (choose(l, any, now_ms, FAMILY_V4 | FAMILY_V6, FAMILY_V4 | FAMILY_V6) == NULL) {
        for (int i = 0; i < l->count; i++) {
            const struct proxy_entry *e = &l->e[i];
            if (e->heard_ms != 0 && now_ms - e->heard_ms <= PROXY_LIVE_GRACE * l->dead_after_ms &&
                (late == NULL || e->heard_ms > late->heard_ms))
                late = e;
        }
    }
    if (late != NULL) {
        snprintf(name, len, "%s", late->addr.name);
        *silent_ms = now_ms - late->heard_ms;
    }
    pthread_mutex_unlock(&l->lock);
    return late != NULL;
}

size_t proxy_live_snapshot(struct proxy_live *l, uint64_t now_ms, struct proxy_view *out,
                           size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&l->lock);
    for (int i = 0; i < l->count && n < max; i++, n++) {
        const struct proxy_entry *e = &l->e[i];
        out[n].addr = e->addr;
        out[n].state = state_of(l, e, now_ms);
        out[n].last_seen_s = e->heard_ms != 0 ? (now_ms - e->heard_ms) / 1000 : 0;
        out[n].pairs = e->pairs;
        out[n].bytes = e->bytes;
        out[n].planned = e->planned;
    }
    pthread_mutex_unlock(&l->lock);
    return n;
}

const char *proxy_state_name(enum proxy_state s)
{
    switch (s) {
    case PROXY_ALIVE:
        return "alive";
    case PROXY_DEAD:
        return "dead";
    default:
        return "unknown";
    }
}
