/*
 * The broker's decision of how process A reaches process B (docs/architecture.md,
 * "Plans"): a pure function of what the two frontends declared about their
 * clusters, of the two contacts, of the techniques the initiator already tried
 * for this pair, of what failed recently between the two clusters (the
 * broker's outcome memory) and of what the broker offers (a proxy, a
 * reflector).  No locks, no allocation, no logging.
 */
#ifndef BROKER_PLAN_H
#define BROKER_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include "proto.h"

/* A set of techniques: bit (1 << enum technique) for each. */
#define TECH_BIT(t) (1u << (unsigned)(t))

/* One end of a connection: its cluster as declared, and its contact. */
struct plan_end {
    const char *cluster;
    enum cluster_kind kind;
    int open_low, open_high; /* the cluster's open inbound port range, 0-0 = none */
    bool can_intercept;      /* the contact's node helper can intercept/inject */
    int port;                /* the contact's listening port */
    const char *node;        /* the contact's node, named in reasons; may be NULL */
};

/* What the broker has to offer, and what it remembers of the cluster pair. */
struct plan_offer {
    bool proxy;          /* a proxy is configured and alive (or not heard from yet) */
    bool proxies_dead;   /* !proxy because every configured proxy is dead */
    bool reflector;      /* hole punching has a reflector */
    bool reflector6;     /* ... and it takes IPv6 (hole punching over IPv6) */
    unsigned remembered; /* techniques whose last attempt between the two clusters failed,
                            within the memory's expiry: skipped like tried ones */
    /* Techniques the broker may not order for this pair, each with its reason
       (NULL: allowed): the address rules (registry.c) refuse a connect-back
       or an inject source outside what the initiator's site declared. */
    const char *refused[TECH_COUNT];
    /* The families (FAMILY_V4, FAMILY_V6, below) the broker's proxies
       have addresses in: what a proxy can bridge (plan_bridge.h). */
    unsigned proxy_families;
    /* ... and whether one usable proxy has both, as bridging an IPv6-only
       end and an IPv4-only one needs (proxy_live_usable_for). */
    bool proxy_bridge;
};

struct plan_decision {
    bool ok;                  /* false: status "unavailable" */
    enum technique technique; /* the technique used, or the one that would be needed */
    bool cacheable;
    unsigned refused; /* techniques skipped (or, alone, refused) for offer->refused */
    bool punch4;      /* hole punching over IPv4, the IPv6 punch tried or failed lately */
    char reason[400]; /* a sentence naming the clusters, their kinds, what was skipped */
};

/* Decides how `from` (the initiator) reaches `to`: the first technique of the
   preference order (docs/design.md) that applies to the pair, is neither in
   `tried` nor remembered as failing, and has what it needs (a proxy, a
   reflector).  Always fills *d. */
void plan_decide(const struct plan_end *from, const struct plan_end *to, unsigned tried,
                 const struct plan_offer *offer, struct plan_decision *d);

/* Plans exactly technique t for the pair (qcg-probe's lookup `only`), with
   no regard to the outcome memory (offer->remembered): ok when t can work
   for the pair and the broker has what it needs; else not ok, technique t,
   and a reason naming the clusters, their kinds, the cause and its
   consequence.  Inside one cluster only direct applies.  Never cacheable.
   Always fills *d. */
void plan_only(const struct plan_end *from, const struct plan_end *to, enum technique t,
               const struct plan_offer *offer, struct plan_decision *d);

/* What the pair has of IPv6 (docs/architecture.md, "Plans per family"). */
struct plan_v6 {
    bool from_has; /* the initiator's contact has an IPv6 address */
    bool to_has;   /* the target's has one */
    bool to_open;  /* the target's lies in one of its cluster's open ranges */
};

enum plan_family {
    PLAN_FAMILY_V4,      /* the decision stands, on the contacts' first addresses */
    PLAN_FAMILY_V6,      /* direct over IPv6, direct over IPv4 behind it */
    PLAN_FAMILY_V6_ONLY, /* direct over IPv6 instead of what IPv4 needed (a NAT's
                            reversed, traversing, punch or proxy) */
};

/* The family of the plan plan_decide (or plan_only for direct, `only`)
   made: direct goes over IPv6 when both ends have an IPv6 address and the
   target takes connections there (same cluster; an open range; an open
   or firewalled cluster's rule, whose firewall holds for both families),
   with IPv4 direct behind it when that applied; and IPv6 direct replaces
   a later technique when it avoids a NAT or firewall, unless direct was
   tried or failed recently between the clusters.  Adjusts *d's technique,
   ok, cacheable and reason. */
enum plan_family plan_prefer_v6(const struct plan_end *from, const struct plan_end *to,
                                const struct plan_v6 *v6, unsigned tried,
                                const struct plan_offer *offer, enum technique only,
                                struct plan_decision *d);

/* What the pair has of each family, for hole punching over IPv6. */
/* Families as sets: of an end's node's addresses, of a proxy's. */
#define FAMILY_V4 1u
#define FAMILY_V6 2u

/* The families each end's node has addresses in. */
struct plan_families {
    unsigned from, to;
};

/* Makes *d the plan of technique t over IPv6: ok, not cacheable, its reason
   the IPv4 one (shortened if need be), then "; both nodes have IPv6
   addresses (over IPv4: <the IPv4 plan's technique>): <what>". */
void plan_over_v6(struct plan_decision *d, enum technique t, const char *what);

/* Whether the plan plan_decide made (never a lookup's `only`) becomes hole
   punching over IPv6: both ends have IPv6 addresses, the reflector takes
   IPv6, and over IPv4 the pair needs hole punching or a relay, has nothing
   left, or needs traversing while an end has no IPv4 address; unless hole
   punching (either "holepunch6" or a plain "holepunch", TECH_PUNCH6) was
   tried or failed recently between the clusters.  After the IPv6 punch
   failed, plan_decide's own plan stands: the IPv4 punch where it applies,
   its reason naming both families.  IPv6 global
   addresses have no mapping to learn, but stateful firewalls still need the
   simultaneous open.  Adjusts *d (technique, ok, reason) when it does. */
bool plan_prefer_punch6(const struct plan_end *from, const struct plan_end *to,
                        const struct plan_families *fam, unsigned tried,
                        const struct plan_offer *offer, struct plan_decision *d);

/* Whether the plan plan_only made for hole punching goes over IPv6: both
   ends have IPv6 addresses and the reflector takes IPv6 (then also where
   IPv4 needs what hole punching cannot do, a symmetric NAT's mapping).
   Adjusts *d (ok, reason) when it does. */
bool plan_only_punch6(const struct plan_end *from, const struct plan_end *to,
                      const struct plan_families *fam, const struct plan_offer *offer,
                      struct plan_decision *d);

/* Parses a lookup's `tried` text (comma-separated technique names and
   "holepunch6"; NULL or "" = none) into a set: TECH_BIT of each, TECH_PUNCH6's
   for "holepunch6".  0, or -1 with the reason in why. */
int plan_tried_parse(const char *text, unsigned *tried, char *why, size_t whylen);

#endif
