/* proxy_live.c: the broker plans pairs only through proxies heard from
   lately, the least loaded first, and falls back to proxies never heard
   from only while no proxy beats (a restarted broker, an old proxy). */
#include <string.h>

#include "check.h"
#include "log.h"
#include "proxy_live.h"

#define ANY (FAMILY_V4 | FAMILY_V6)

static int picks_of(struct proxy_live *l, uint64_t now_ms, int n, const char *name)
{
    int hits = 0;
    for (int i = 0; i < n; i++) {
        unsigned char pair[16] = {(unsigned char)(i * 37), (unsigned char)(i * 11)};
        struct proxy_addr a;
        if (proxy_live_pick(l, pair, now_ms, ANY, ANY, &a) == 0 && strcmp(a.name, name) == 0)
            hits++;
    }
    return hits;
}

int main(void)
{
    log_init("test", LOG_LEVEL_ERROR, false);
    struct proxies p;
    memset(&p, 0, sizeof(p));
    p.count = 2;
    snprintf(p.list[0].name, sizeof(p.list[0].name), "one");
    snprintf(p.list[0].host, sizeof(p.list[0].host), "203.0.113.20");
    p.list[0].port = 7703;
    snprintf(p.list[1].name, sizeof(p.list[1].name), "two");
    snprintf(p.list[1].host, sizeof(p.list[1].host), "203.0.113.21");
    p.list[1].port = 7713;
    uint64_t t = 1000000;
    struct proxy_live *l = proxy_live_new(&p, 15, t);
    REQUIRE(l != NULL);

    /* Nobody has beaten yet: both are used, as before proxies beat. */
    CHECK(proxy_live_usable(l, t));
    int one = picks_of(l, t, 100, "one");
    CHECKF(one > 20 && one < 80, "unknown proxies share the pairs: one got %d of 100", one);

    /* A beat from a name the broker does not know is refused. */
    CHECK(proxy_live_beat(l, "three", 0, 0, t) < 0);

    /* Only "two" beats: "one" gets nothing while "two" lives. */
    CHECK_EQ(proxy_live_beat(l, "two", 0, 0, t), PROXY_UNKNOWN);
    CHECK_EQ(picks_of(l, t + 1000, 50, "one"), 0);

    /* Both alive: the less loaded one gets the new pairs until the loads meet. */
    CHECK_EQ(proxy_live_beat(l, "one", 40, 0, t), PROXY_UNKNOWN);
    CHECK_EQ(proxy_live_beat(l, "two", 10, 0, t), PROXY_ALIVE);
    CHECKF(picks_of(l, t, 30, "two") == 30, "30 pairs go to two (10 pairs) before one (40)");
    int two = picks_of(l, t, 20, "two");
    CHECKF(two >= 9 && two <= 11, "then they alternate: two got %d of 20", two);

    /* "one" stops beating: dead after 15 s, never planned, shown so. */
    CHECK_EQ(proxy_live_beat(l, "two", 5, 123, t + 14000), PROXY_ALIVE);
    CHECK_EQ(picks_of(l, t + 16000, 50, "one"), 0);
    struct proxy_view v[PROXIES_MAX];
    REQUIRE_EQ(proxy_live_snapshot(l, t + 16000, v, PROXIES_MAX), 2);
    CHECK_EQ(v[0].state, PROXY_DEAD);
    CHECK_EQ(v[0].last_seen_s, 16);
    CHECK_EQ(v[1].state, PROXY_ALIVE);
    CHECK_EQ(v[1].bytes, 123);
    CHECK(v[1].planned > 0);

    /* Both dead: no pair gets a dead proxy. */
    CHECK(!proxy_live_usable(l, t + 40000));
    struct proxy_addr a;
    unsigned char pair[16] = {0};
    CHECK(proxy_live_pick(l, pair, t + 40000, ANY, ANY, &a) < 0);
    /* ... but the one heard last is late, not gone, for 4 x 15 s after its
       beat (a lookup is told to ask again); not while one lives, nor after. */
    char late[QCG_NAME_MAX] = "";
    uint64_t silent = 0;
    CHECK(!proxy_live_late(l, t + 16000, late, sizeof(late), &silent));
    CHECK(proxy_live_late(l, t + 40000, late, sizeof(late), &silent));
    CHECKF(strcmp(late, "two") == 0 && silent == 26000, "late: %s, silent %llu ms", late,
           (unsigned long long)silent);
    CHECK(proxy_live_late(l, t + 14000 + 60000, late, sizeof(late), &silent));
    CHECK(!proxy_live_late(l, t + 14000 + 60001, late, sizeof(late), &silent));
    /* A dead proxy that beats again is alive again. */
    CHECK_EQ(proxy_live_beat(l, "one", 0, 0, t + 41000), PROXY_DEAD);
    CHECK(proxy_live_pick(l, pair, t + 41000, ANY, ANY, &a) == 0 && strcmp(a.name, "one") == 0);

    proxy_live_free(l);

    /* Once a proxy has beaten, one never heard from is not planned either:
       "one" dies, "two" never beat. */
    l = proxy_live_new(&p, 15, t);
    REQUIRE(l != NULL);
    CHECK_EQ(proxy_live_beat(l, "one", 0, 0, t), PROXY_UNKNOWN);
    CHECK_EQ(picks_of(l, t + 1000, 20, "one"), 20);
    CHECK(!proxy_live_usable(l, t + 16000));
    CHECK(proxy_live_pick(l, pair, t + 16000, ANY, ANY, &a) < 0);
    /* The one never heard from is shown unknown while beats may still come,
       then dead (it died across the broker's restart), not unknown forever. */
    REQUIRE_EQ(proxy_live_snapshot(l, t + 14000, v, PROXIES_MAX), 2);
    CHECK_EQ(v[1].state, PROXY_UNKNOWN);
    REQUIRE_EQ(proxy_live_snapshot(l, t + 16000, v, PROXIES_MAX), 2);
    CHECK_EQ(v[0].state, PROXY_DEAD);
    CHECK_EQ(v[1].state, PROXY_DEAD);
    /* Late is the one heard from, never the one that never beat. */
    CHECK(proxy_live_late(l, t + 16000, late, sizeof(late), &silent));
    CHECKF(strcmp(late, "one") == 0, "late: %s", late);
    proxy_live_free(l);

    /* Proxies that never beat (no broker URL): unknown and used for ever. */
    l = proxy_live_new(&p, 15, t);
    REQUIRE(l != NULL);
    REQUIRE_EQ(proxy_live_snapshot(l, t + 3600000, v, PROXIES_MAX), 2);
    CHECK_EQ(v[0].state, PROXY_UNKNOWN);
    CHECK_EQ(v[1].state, PROXY_UNKNOWN);
    CHECK(proxy_live_usable(l, t + 3600000));
    proxy_live_free(l);

    /* Only "two" has an IPv6 address as well: an IPv6-only end's pairs go
       there, whatever the load; pairs of IPv4 ends to both. */
    snprintf(p.list[1].host2, sizeof(p.list[1].host2), "2001:db8::21");
    p.list[1].port2 = 7713;
    l = proxy_live_new(&p, 15, t);
    REQUIRE(l != NULL);
    int to_two = 0, v4_two = 0;
    for (int i = 0; i < 50; i++) {
        unsigned char pr[16] = {(unsigned char)(i * 37), (unsigned char)(i * 11)};
        struct proxy_addr got;
        if (proxy_live_pick(l, pr, t, FAMILY_V6, FAMILY_V4, &got) == 0 &&
            strcmp(got.name, "two") == 0)
            to_two++;
        if (proxy_live_pick(l, pr, t, FAMILY_V4, FAMILY_V4, &got) == 0 &&
            strcmp(got.name, "two") == 0)
            v4_two++;
    }
    CHECK_EQ(to_two, 50);
    CHECK(v4_two > 0 && v4_two < 50);
    /* A pair of IPv6-only ends with "two" dead: no proxy for it. */
    CHECK(proxy_live_beat(l, "one", 0, 0, t + 20000) >= 0);
    unsigned char pair6[16] = {1};
    struct proxy_addr a6;
    CHECK(proxy_live_pick(l, pair6, t + 40000, FAMILY_V6, FAMILY_V6, &a6) < 0);
    proxy_live_free(l);
    return check_result("test_proxy_live");
}
