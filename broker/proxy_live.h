/*
 * Which of the broker's proxies are alive and how loaded they are, from the
 * beats they send (qcg__proxyAlive), and the choice of a proxy for a new pair.
 *
 * A proxy is alive while its last beat is at most dead_after seconds old,
 * dead once it is older, unknown before its first beat since the broker
 * started, and dead if it has not beaten dead_after seconds after the broker
 * started while another one has (it died across the broker's restart).  A pair goes to the alive
 * proxy with the fewest pairs (those it reported plus those planned through it since).  Only while
 * no proxy has beaten since the broker started, to an unknown one, as before proxies beat (proxies
 * without a broker URL never beat; a restarted broker has heard from no one for up to a beat's
 * interval).  Never to a dead one.  Thread-safe.
 */
#ifndef BROKER_PROXY_LIVE_H
#define BROKER_PROXY_LIVE_H

#include <stddef.h>
#include <stdint.h>

#include "proxies.h"

/* Three missed beats of qcg-proxy's default alive-interval (5 s). */
#define PROXY_LIVE_DEFAULT_DEAD_AFTER 15

enum proxy_state { PROXY_UNKNOWN, PROXY_ALIVE, PROXY_DEAD };

struct proxy_view {
    struct proxy_addr addr;
    enum proxy_state state;
    uint64_t last_seen_s; /* seconds since the last beat; 0 when unknown */
    unsigned pairs;       /* as last reported */
    uint64_t bytes;       /* as last reported */
    uint64_t planned;     /* pairs planned through it since the broker started */
};

struct proxy_live;

/* Copies the proxies' addresses (not the key).  NULL on ENOMEM. */
struct proxy_live *proxy_live_new(const struct proxies *p, unsigned dead_after_s, uint64_t now_ms);
void proxy_live_free(struct proxy_live *l);

/* A beat of proxy `name` at now_ms (monotonic): the state it was in before
   (a change is worth a log line), or -1 when no proxy of that name is
   configured. */
int proxy_live_beat(struct proxy_live *l, const char *name, unsigned pairs, uint64_t bytes,
                    uint64_t now_ms);

/* Whether a pair could get a proxy now (one alive or unknown). */
int proxy_live_usable(struct proxy_live *l, uint64_t now_ms);

/* The same for a pair whose ends have addresses in from_fam and to_fam
   (FAMILY_* sets): one proxy with an address in a family of each. */
int proxy_live_usable_for(struct proxy_live *l, uint64_t now_ms, unsigned from_fam,
                          unsigned to_fam);

/* The proxy for a new pair (counted as planned through it), copied to out:
   one with an address in a family of each end (from_fam, to_fam: FAMILY_*
   sets of proxies.h).  0, or -1 when none such is alive or unknown. */
int proxy_live_pick(struct proxy_live *l, const unsigned char pair[16], uint64_t now_ms,
                    unsigned from_fam, unsigned to_fam, struct proxy_addr *out);

/* A dead proxy may only be late: its beats, or the broker's own calls, held
   up by a stall of either host (seen in the lab's storms: no beat heard for
   20 s, then one).  For PROXY_LIVE_GRACE times dead_after after its last
   beat, a pair that needs a proxy is told to ask again rather than that
   none is left. */
#define PROXY_LIVE_GRACE 4

/* Whether no proxy is usable but one was heard within PROXY_LIVE_GRACE
   times dead_after: 1 with its name (a proxy_addr's) and how long it has
   been silent, in ms; else 0. */
int proxy_live_late(struct proxy_live *l, uint64_t now_ms, char *name, size_t len,
                    uint64_t *silent_ms);

/* Every configured proxy, in configuration order; returns how many (at most
   max). */
size_t proxy_live_snapshot(struct proxy_live *l, uint64_t now_ms, struct proxy_view *out,
                           size_t max);

const char *proxy_state_name(enum proxy_state s);

#endif
