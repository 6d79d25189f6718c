/* core-localproto: the header and payload checks every local message
   passes before use. */
#include <string.h>

/* The exit-at-the-first-failure checks these tests were written with. */
#include "check.h"
#include "localproto.h"
#include "qcgconn.h"

static struct local_header header(uint16_t type, uint32_t length)
{
    struct local_header h = {.magic = LOCAL_MAGIC, .type = type, .length = length};
    return h;
}

static void test_headers(void)
{
    struct local_header h;

    for (uint16_t t = 1; t < LOCAL_TYPE_COUNT; t++) {
        size_t size = local_payload_size[t];

        h = header(t, (uint32_t)size);
        REQUIRE_EQ(local_header_check(&h), 0);
        h = header(t, (uint32_t)size + 1);
        REQUIRE_EQ(local_header_check(&h), QCG_EPROTO);
        if (size > 0) {
            h = header(t, (uint32_t)size - 1);
            REQUIRE_EQ(local_header_check(&h), QCG_EPROTO);
        }
        h = header(t, 0xffffffffu);
        REQUIRE_EQ(local_header_check(&h), QCG_EPROTO);
        h = header(t, (uint32_t)size);
        h.magic = 0x31474351u; /* "QCG1" the other way round */
        REQUIRE_EQ(local_header_check(&h), QCG_EPROTO);
        h = header(t, (uint32_t)size);
        h.reserved = 1;
        REQUIRE_EQ(local_header_check(&h), QCG_EPROTO);
    }
    h = header(0, 0);
    REQUIRE_EQ(local_header_check(&h), QCG_EPROTO);
    h = header(LOCAL_TYPE_COUNT, 0);
    REQUIRE_EQ(local_header_check(&h), QCG_EPROTO);
    h = header(0xffff, 0);
    REQUIRE_EQ(local_header_check(&h), QCG_EPROTO);
    REQUIRE_EQ(local_header_check(NULL), QCG_EPROTO);

    /* The sizes the helper and the library agree on. */
    REQUIRE_EQ(local_payload_size[LOCAL_HELLO], sizeof(struct local_hello));
    REQUIRE_EQ(local_payload_size[LOCAL_HELLO_OK], sizeof(struct local_hello_ok));
    REQUIRE_EQ(local_payload_size[LOCAL_PUBLISH], sizeof(struct local_publish));
    REQUIRE_EQ(local_payload_size[LOCAL_WITHDRAW], 0);
    REQUIRE_EQ(local_payload_size[LOCAL_LOOKUP], sizeof(struct local_lookup));
    REQUIRE_EQ(local_payload_size[LOCAL_PLAN], sizeof(struct local_plan));
    REQUIRE_EQ(local_payload_size[LOCAL_OK], 0);
    REQUIRE_EQ(local_payload_size[LOCAL_ERROR], sizeof(struct local_error));
    REQUIRE_EQ(local_payload_size[LOCAL_INCOMING], sizeof(struct local_incoming));
    REQUIRE_EQ(local_payload_size[LOCAL_STATUS], 0);
    REQUIRE_EQ(local_payload_size[LOCAL_STATUS_OK], sizeof(struct local_status));
    REQUIRE_EQ(local_payload_size[LOCAL_REPORT], sizeof(struct local_report));
    REQUIRE_EQ(local_payload_size[LOCAL_SITE], 0);
    REQUIRE_EQ(local_payload_size[LOCAL_SITE_OK], sizeof(struct local_site));
    REQUIRE_EQ(local_payload_size[LOCAL_PROBE], sizeof(struct local_probe));
    REQUIRE_EQ(local_payload_size[LOCAL_PROBE_OK], sizeof(struct local_probe_ok));
    REQUIRE_EQ(local_payload_size[LOCAL_OBSERVED], sizeof(struct local_observed));
    REQUIRE_EQ(local_payload_size[LOCAL_PUNCHING], 0);
    REQUIRE_EQ(local_payload_size[LOCAL_PUNCHING_OK], sizeof(struct local_punching));
}

/* A payload passes, then fails once the string field at [off, off+len) has
   no NUL left in it. */
static void check_string_field(uint16_t type, void *payload, size_t off, size_t len)
{
    char *field = (char *)payload + off;
    char saved[256];

    REQUIRE(len <= sizeof(saved));
    memcpy(saved, field, len);
    REQUIRE_EQ(local_payload_check(type, payload), 0);
    memset(field, 'x', len);
    REQUIRE_EQ(local_payload_check(type, payload), QCG_EPROTO);
    /* A NUL in the last byte is enough. */
    field[len - 1] = '\0';
    REQUIRE_EQ(local_payload_check(type, payload), 0);
    memcpy(field, saved, len);
}

#define FIELD(type, p, f) check_string_field(type, &(p), offsetof(__typeof__(p), f), sizeof((p).f))

static void test_payloads(void)
{
    struct local_hello hello = {.version = LOCAL_VERSION, .rank = 3};
    struct local_hello_ok ok = {.version = LOCAL_VERSION, .port_low = 1, .port_high = 2};
    struct local_publish pub = {.port = 1};
    struct local_lookup lk = {.to_rank = 1, .timeout_ms = 5};
    struct local_plan plan = {.technique = QCG_TECH_DIRECT};
    struct local_error err = {.code = QCG_EDENIED};
    struct local_incoming in = {.peer_rank = 1};
    struct local_status st = {0};

    strcpy(hello.job, "job");
    strcpy(hello.secret, "s");
    FIELD(LOCAL_HELLO, hello, job);
    FIELD(LOCAL_HELLO, hello, secret);
    hello.version = LOCAL_VERSION + 1;
    REQUIRE_EQ(local_payload_check(LOCAL_HELLO, &hello), QCG_EPROTO);
    hello.version = 0;
    REQUIRE_EQ(local_payload_check(LOCAL_HELLO, &hello), QCG_EPROTO);
    /* A process older than the helper by the versions that only added
       requests is taken. */
    REQUIRE_EQ(LOCAL_VERSION_OLDEST, 8);
    hello.version = LOCAL_VERSION_OLDEST;
    REQUIRE_EQ(local_payload_check(LOCAL_HELLO, &hello), 0);
    hello.version = LOCAL_VERSION_OLDEST - 1;
    REQUIRE_EQ(local_payload_check(LOCAL_HELLO, &hello), QCG_EPROTO);
    hello.version = LOCAL_VERSION;

    FIELD(LOCAL_HELLO_OK, ok, cluster);
    FIELD(LOCAL_HELLO_OK, ok, node);
    FIELD(LOCAL_HELLO_OK, ok, address);

    FIELD(LOCAL_PLAN, plan, cluster);
    FIELD(LOCAL_PLAN, plan, node);
    FIELD(LOCAL_PLAN, plan, address);
    FIELD(LOCAL_PLAN, plan, token);

    FIELD(LOCAL_ERROR, err, message);
    FIELD(LOCAL_INCOMING, in, token);

    FIELD(LOCAL_STATUS_OK, st, cluster);
    FIELD(LOCAL_STATUS_OK, st, node);
    FIELD(LOCAL_STATUS_OK, st, frontend);

    /* Integer-only payloads and empty ones. */
    REQUIRE_EQ(local_payload_check(LOCAL_PUBLISH, &pub), 0);
    REQUIRE_EQ(local_payload_check(LOCAL_LOOKUP, &lk), 0);
    REQUIRE_EQ(local_payload_check(LOCAL_WITHDRAW, NULL), 0);
    REQUIRE_EQ(local_payload_check(LOCAL_OK, NULL), 0);
    REQUIRE_EQ(local_payload_check(LOCAL_STATUS, NULL), 0);
    /* Unknown types and a missing payload. */
    REQUIRE_EQ(local_payload_check(0, &pub), QCG_EPROTO);
    REQUIRE_EQ(local_payload_check(LOCAL_TYPE_COUNT, &pub), QCG_EPROTO);
    REQUIRE_EQ(local_payload_check(LOCAL_PLAN, NULL), QCG_EPROTO);
}

/* Version 4: LOOKUP's only, SITE_OK, PROBE, PROBE_OK, OBSERVED. */
static void test_probe_payloads(void)
{
    struct local_lookup lk = {.to_rank = 1, .timeout_ms = 5};
    static struct local_site site;
    struct local_probe pr = {.seconds = 30};
    struct local_probe_ok po = {.rank = 1, .seconds = 30};
    struct local_observed ob = {.port_preserving = 1};

    /* only: 0 (normal) or a technique, nothing beyond proxy. */
    for (uint32_t t = 0; t <= QCG_TECH_PROXY; t++) {
        lk.only = t;
        REQUIRE_EQ(local_payload_check(LOCAL_LOOKUP, &lk), 0);
    }
    lk.only = QCG_TECH_PROXY + 1;
    REQUIRE_EQ(local_payload_check(LOCAL_LOOKUP, &lk), QCG_EPROTO);
    lk.only = 0xffffffffu;
    REQUIRE_EQ(local_payload_check(LOCAL_LOOKUP, &lk), QCG_EPROTO);

    REQUIRE_EQ(local_payload_check(LOCAL_SITE, NULL), 0);
    memset(&site, 0, sizeof(site));
    strcpy(site.node, "n1");
    strcpy(site.cluster.name, "c1");
    strcpy(site.cluster.kind, "nat");
    site.clusters = 1;
    site.clusters_total = 1;
    FIELD(LOCAL_SITE_OK, site, node);
    FIELD(LOCAL_SITE_OK, site, address);
    FIELD(LOCAL_SITE_OK, site, cluster.name);
    FIELD(LOCAL_SITE_OK, site, cluster.kind);
    for (int i = 0; i < LOCAL_PUBLIC_MAX; i++) {
        FIELD(LOCAL_SITE_OK, site, cluster.public_address[i]);
    }
    FIELD(LOCAL_SITE_OK, site, frontend);
    FIELD(LOCAL_SITE_OK, site, broker);
    FIELD(LOCAL_SITE_OK, site, frontend_seen_from);
    FIELD(LOCAL_SITE_OK, site, reflector);
    FIELD(LOCAL_SITE_OK, site, intercept);
    for (int i = 0; i < LOCAL_PROXIES_MAX; i++) {
        FIELD(LOCAL_SITE_OK, site, proxy[i]);
    }
    for (int i = 0; i < LOCAL_CLUSTERS_MAX; i++) {
        FIELD(LOCAL_SITE_OK, site, peer[i].name);
        FIELD(LOCAL_SITE_OK, site, peer[i].kind);
        FIELD(LOCAL_SITE_OK, site, peer[i].public_address[LOCAL_PUBLIC_MAX - 1]);
    }
    /* Counts within their arrays. */
    site.proxies = LOCAL_PROXIES_MAX;
    REQUIRE_EQ(local_payload_check(LOCAL_SITE_OK, &site), 0);
    site.proxies = LOCAL_PROXIES_MAX + 1;
    REQUIRE_EQ(local_payload_check(LOCAL_SITE_OK, &site), QCG_EPROTO);
    site.proxies = 0;
    site.clusters = site.clusters_total = LOCAL_CLUSTERS_MAX + 1;
    REQUIRE_EQ(local_payload_check(LOCAL_SITE_OK, &site), QCG_EPROTO);
    site.clusters = LOCAL_CLUSTERS_MAX; /* more known than carried */
    REQUIRE_EQ(local_payload_check(LOCAL_SITE_OK, &site), 0);
    site.clusters_total = 3; /* more carried than known */
    REQUIRE_EQ(local_payload_check(LOCAL_SITE_OK, &site), QCG_EPROTO);
    site.clusters = site.clusters_total = 1;
    site.can_intercept = 2;
    REQUIRE_EQ(local_payload_check(LOCAL_SITE_OK, &site), QCG_EPROTO);
    site.can_intercept = 1;
    REQUIRE_EQ(local_payload_check(LOCAL_SITE_OK, &site), 0);

    /* PROBE: a cluster and 1..LOCAL_PROBE_SECONDS_MAX seconds. */
    strcpy(pr.cluster, "c2");
    FIELD(LOCAL_PROBE, pr, cluster);
    pr.cluster[0] = '\0';
    REQUIRE_EQ(local_payload_check(LOCAL_PROBE, &pr), QCG_EPROTO);
    strcpy(pr.cluster, "c2");
    pr.seconds = 0;
    REQUIRE_EQ(local_payload_check(LOCAL_PROBE, &pr), QCG_EPROTO);
    pr.seconds = LOCAL_PROBE_SECONDS_MAX;
    REQUIRE_EQ(local_payload_check(LOCAL_PROBE, &pr), 0);
    pr.seconds = LOCAL_PROBE_SECONDS_MAX + 1;
    REQUIRE_EQ(local_payload_check(LOCAL_PROBE, &pr), QCG_EPROTO);
    REQUIRE_EQ(LOCAL_PROBE_SECONDS_MAX, 120);

    strcpy(po.job, "probe-0123");
    strcpy(po.secret, "s");
    FIELD(LOCAL_PROBE_OK, po, job);
    FIELD(LOCAL_PROBE_OK, po, secret);
    FIELD(LOCAL_PROBE_OK, po, cluster);
    FIELD(LOCAL_PROBE_OK, po, node);
    FIELD(LOCAL_PROBE_OK, po, address);
    po.rank = -1;
    REQUIRE_EQ(local_payload_check(LOCAL_PROBE_OK, &po), QCG_EPROTO);
    po.rank = 1;
    po.seconds = 0;
    REQUIRE_EQ(local_payload_check(LOCAL_PROBE_OK, &po), QCG_EPROTO);
    po.seconds = 30;

    /* OBSERVED: its words exactly, nothing longer, shorter or of another case. */
    {
        static const char *const kinds[] = {"open", "firewalled", "nat", "symnat"};
        static const char *const maps[] = {"none", "endpoint-independent", "endpoint-dependent",
                                           "unknown"};
        static const char *const ins[] = {"open", "dropped",  "reset",
                                          "icmp", "rejected", "unknown"};
        static const char *const bad[] = {"",         "NAT",     "nat ",  "na", "symnatx",
                                          "endpoint", "refused", "RESET", "x"};

        strcpy(ob.public_address, "192.0.2.1");
        for (int k = 0; k < 4; k++) {
            for (int m = 0; m < 4; m++) {
                strcpy(ob.kind, kinds[k]);
                strcpy(ob.mapping, maps[m]);
                strcpy(ob.inbound, ins[(k + m) % 6]);
                REQUIRE_EQ(local_payload_check(LOCAL_OBSERVED, &ob), 0);
            }
        }
        FIELD(LOCAL_OBSERVED, ob, public_address);
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            struct local_observed o = ob;

            strcpy(o.kind, bad[i]);
            REQUIRE_EQ(local_payload_check(LOCAL_OBSERVED, &o), QCG_EPROTO);
            o = ob;
            strcpy(o.mapping, bad[i]);
            REQUIRE_EQ(local_payload_check(LOCAL_OBSERVED, &o), QCG_EPROTO);
            o = ob;
            strcpy(o.inbound, bad[i]);
            REQUIRE_EQ(local_payload_check(LOCAL_OBSERVED, &o), QCG_EPROTO);
        }
        /* A valid word followed by garbage after its NUL is still the word. */
        memset(ob.kind, 'z', sizeof(ob.kind));
        strcpy(ob.kind, "nat");
        REQUIRE_EQ(local_payload_check(LOCAL_OBSERVED, &ob), 0);
        memset(ob.kind, 'z', sizeof(ob.kind));
        REQUIRE_EQ(local_payload_check(LOCAL_OBSERVED, &ob), QCG_EPROTO);
        strcpy(ob.kind, "nat");
        for (int32_t pp = -1; pp <= 1; pp++) {
            ob.port_preserving = pp;
            REQUIRE_EQ(local_payload_check(LOCAL_OBSERVED, &ob), 0);
        }
        ob.port_preserving = 2;
        REQUIRE_EQ(local_payload_check(LOCAL_OBSERVED, &ob), QCG_EPROTO);
        ob.port_preserving = -2;
        REQUIRE_EQ(local_payload_check(LOCAL_OBSERVED, &ob), QCG_EPROTO);
    }
}

/* PUNCHING_OK: each family's strings terminated, its numbers in range. */
static void test_punching(void)
{
    struct local_punching pu;

    memset(&pu, 0, sizeof(pu));
    for (int f = 0; f < 2; f++) {
        pu.family[f].hops = -1;
        FIELD(LOCAL_PUNCHING_OK, pu, family[f].reflector);
        FIELD(LOCAL_PUNCHING_OK, pu, family[f].address);
        FIELD(LOCAL_PUNCHING_OK, pu, family[f].why);
        pu.family[f].hops = -2;
        REQUIRE_EQ(local_payload_check(LOCAL_PUNCHING_OK, &pu), QCG_EPROTO);
        pu.family[f].hops = 255;
        pu.family[f].first_ttl = 255;
        REQUIRE_EQ(local_payload_check(LOCAL_PUNCHING_OK, &pu), 0);
        pu.family[f].first_ttl = 256;
        REQUIRE_EQ(local_payload_check(LOCAL_PUNCHING_OK, &pu), QCG_EPROTO);
        pu.family[f].first_ttl = 0;
        pu.family[f].measured = 2;
        REQUIRE_EQ(local_payload_check(LOCAL_PUNCHING_OK, &pu), QCG_EPROTO);
        pu.family[f].measured = 1;
    }
    pu.punch_ttl = -2;
    REQUIRE_EQ(local_payload_check(LOCAL_PUNCHING_OK, &pu), QCG_EPROTO);
    pu.punch_ttl = 64;
    REQUIRE_EQ(local_payload_check(LOCAL_PUNCHING_OK, &pu), 0);
    pu.reserved = 1;
    REQUIRE_EQ(local_payload_check(LOCAL_PUNCHING_OK, &pu), QCG_EPROTO);
}

int main(void)
{
    test_headers();
    test_payloads();
    test_probe_payloads();
    test_punching();
    return check_result("core-localproto");
}
