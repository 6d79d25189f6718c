/* Per-uid counts of connections and requests; see shares.h.  A node has a
   handful of users at once, so a list searched linearly will do. */
#include <stdlib.h>

#include "monotonic.h"
#include "shares.h"

struct shares {
    struct dlist list;
};

struct shares *shares_new(void)
{
    return calloc(1, sizeof(struct shares));
}

void shares_free(struct shares *ss)
{
    if (ss == NULL)
        return;
    while (ss->list.head != NULL) {
        struct share *s = dlist_entry(ss->list.head, struct share, link);
        dlist_remove(&ss->list, &s->link);
        free(s);
    }
    free(ss);
}

struct share *share_join(struct shares *ss, uid_t uid)
{
    struct share *s;

    for (struct dlink *l = ss->list.head; l != NULL; l = l->next) {
        s = dlist_entry(l, struct share, link);
        if (s->uid == uid) {
            s->conns++;
            return s;
        }
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->uid = uid;
    s->conns = 1;
    dlist_append(&ss->list, &s->link);
    return s;
}

static void release(struct shares *ss, struct share *s)
{
    if (s->conns > 0 || s->requests > 0 || monotonic_ms() < s->keep_until_ms)
        return;
    dlist_remove(&ss->list, &s->link);
    free(s);
}

void share_leave(struct shares *ss, struct share *s)
{
    s->conns--;
    release(ss, s);
}

void share_request_begin(struct share *s)
{
    s->requests++;
}

void share_request_end(struct shares *ss, struct share *s)
{
    s->requests--;
    release(ss, s);
}

/* Whether a share other than s used one of its buckets within within_ms:
   lookup_rate only, or with any_request its publishes too. */
static bool others_since(const struct shares *ss, const struct share *s, uint64_t within_ms,
                         bool any_request)
{
    uint64_t now = monotonic_ms();

    for (const struct dlink *l = ss->list.head; l != NULL; l = l->next) {
        const struct share *o = dlist_entry(l, struct share, link);
        uint64_t last = o->lookup_rate.last_ms;

        if (any_request && o->publishes.last_ms > last)
            last = o->publishes.last_ms;
        if (o != s && last != 0 && last + within_ms >= now)
            return true;
    }
    return false;
}

bool share_others_looking_up(const struct shares *ss, const struct share *s, uint64_t within_ms)
{
    return others_since(ss, s, within_ms, false);
}

bool share_others_active(const struct shares *ss, const struct share *s, uint64_t within_ms)
{
    return others_since(ss, s, within_ms, true);
}

bool share_others_connected(const struct shares *ss, const struct share *s)
{
    for (const struct dlink *l = ss->list.head; l != NULL; l = l->next) {
        const struct share *o = dlist_entry(l, struct share, link);
        if (o != s && o->conns > 0)
            return true;
    }
    return false;
}

bool share_take(struct share *s, struct tokenbucket *b, double rate, double burst)
{
    uint64_t now = monotonic_ms();
    bool ok = tokenbucket_take(b, now, rate, burst);
    uint64_t full = now + (uint64_t)((burst - b->tokens) * 1000.0 / rate) + 1;

    if (full > s->keep_until_ms)
        s->keep_until_ms = full;
    return ok;
}
