/* The launch connection's frames: headers and LAUNCH payloads as both ends
   write them, every header and payload the receiver must refuse, and that
   no payload, however malformed, makes the decoder read past it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "wire.h"

static char why[128];

/* A decoded LAUNCH lives in static storage: it holds WIRE_ARGS_MAX pointers. */
static struct wire_launch req;

static int decode(const void *p, size_t n)
{
    memset(why, 'Z', sizeof(why));
    return wire_launch_decode(p, n, &req, why, sizeof(why));
}

static void test_header(void)
{
    uint8_t b[WIRE_HEADER];
    struct wire_header h;

    /* The layout: type, 0, channel and length big-endian. */
    wire_header_put(b, WIRE_TDATA, 0x0102, 0x00010000);
    const uint8_t want[WIRE_HEADER] = {7, 0, 1, 2, 0, 1, 0, 0};
    CHECK(memcmp(b, want, sizeof(want)) == 0);

    const uint16_t chans[] = {0, 1, 0x1234, 0xffff};
    const uint32_t lens[] = {0, 1, 4, WIRE_DATA_MAX, WIRE_FRAME_MAX - 1, WIRE_FRAME_MAX};
    for (int t = WIRE_LAUNCH; t <= WIRE_TYPE_LAST; t++)
        for (size_t c = 0; c < sizeof(chans) / sizeof(chans[0]); c++)
            for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
                memset(&h, 0xaa, sizeof(h));
                wire_header_put(b, (enum wire_type)t, chans[c], lens[l]);
                CHECK(wire_header_get(b, &h) == 0);
                CHECK(h.type == t && h.chan == chans[c] && h.len == lens[l]);
            }

    /* Every type byte and reserved byte: only ours, with 0 reserved. */
    int accepted = 0;
    for (int t = 0; t < 256; t++)
        for (int r = 0; r < 256; r++) {
            const uint8_t in[WIRE_HEADER] = {(uint8_t)t, (uint8_t)r, 0, 9, 0, 0, 0, 42};
            int rc = wire_header_get(in, &h);
            int ours = t >= WIRE_LAUNCH && t <= WIRE_TYPE_LAST && r == 0;
            CHECK(rc == (ours ? 0 : -1));
            accepted += rc == 0;
        }
    CHECK(accepted == WIRE_TYPE_LAST);

    /* Unknown types, the reserved byte, lengths over the frame bound. */
    const uint8_t type0[WIRE_HEADER] = {0, 0, 0, 0, 0, 0, 0, 1};
    CHECK(wire_header_get(type0, &h) == -1);
    const uint8_t type10[WIRE_HEADER] = {WIRE_TYPE_LAST + 1, 0, 0, 0, 0, 0, 0, 1};
    CHECK(wire_header_get(type10, &h) == -1);
    const uint8_t type255[WIRE_HEADER] = {255, 0, 0, 0, 0, 0, 0, 1};
    CHECK(wire_header_get(type255, &h) == -1);
    const uint8_t reserved[WIRE_HEADER] = {WIRE_OUT, 0x80, 0, 0, 0, 0, 0, 1};
    CHECK(wire_header_get(reserved, &h) == -1);
    wire_header_put(b, WIRE_OUT, 0, WIRE_FRAME_MAX + 1);
    CHECK(wire_header_get(b, &h) == -1);
    wire_header_put(b, WIRE_TDATA, 3, 0xffffffffu);
    CHECK(wire_header_get(b, &h) == -1);
    wire_header_put(b, WIRE_TDATA, 3, 0x80000000u);
    CHECK(wire_header_get(b, &h) == -1);

    CHECK_STR(wire_type_name(WIRE_LAUNCH), "LAUNCH");
    CHECK_STR(wire_type_name(WIRE_EXIT), "EXIT");
    CHECK_STR(wire_type_name(WIRE_SIGNAL), "SIGNAL");
    CHECK_STR(wire_type_name(0), "unknown");
    CHECK_STR(wire_type_name(WIRE_TYPE_LAST + 1), "unknown");
    CHECK_STR(wire_type_name(1000000), "unknown");
}

static void test_u32(void)
{
    uint8_t b[4];

    wire_u32_put(b, 0xdeadbeefu);
    CHECK(b[0] == 0xde && b[1] == 0xad && b[2] == 0xbe && b[3] == 0xef);
    CHECK(wire_u32_get(b) == 0xdeadbeefu);
    const uint32_t values[] = {0, 1, 9, 255, 256, 0x7fffffffu, 0x80000000u, 0xffffffffu};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        wire_u32_put(b, values[i]);
        CHECK(wire_u32_get(b) == values[i]);
    }
}

static void test_launch(void)
{
    const char *const argv[] = {"orted", "-mca", "ess", "env", NULL};
    static const uint8_t want[] = "\002j1\0orted\0-mca\0ess\0env";
    uint8_t buf[256];

    long n = wire_launch_encode(buf, sizeof(buf), "j1", 4, argv);
    CHECK(n == (long)sizeof(want));
    CHECK(n == (long)sizeof(want) && memcmp(buf, want, sizeof(want)) == 0);
    CHECK(decode(buf, (size_t)n) == 0);
    CHECK_STR(req.job, "j1");
    CHECK(req.argc == 4);
    for (int i = 0; i < 4 && req.argc == 4; i++)
        CHECK_STR(req.argv[i], argv[i]);
    CHECK(req.argv[4] == NULL);

    /* Empty strings are arguments too (and an empty job is the agent's to refuse). */
    const char *const empty[] = {"orted", "", "x"};
    n = wire_launch_encode(buf, sizeof(buf), "", 3, empty);
    CHECK(n == 1 + 1 + 6 + 1 + 2);
    CHECK(decode(buf, (size_t)n) == 0);
    CHECK_STR(req.job, "");
    CHECK(req.argc == 3);
    CHECK_STR(req.argv[1], "");
    CHECK_STR(req.argv[2], "x");

    /* The exact capacity is enough; every smaller one is refused without
       writing past it (ASan: buffers of exactly cap bytes). */
    size_t need = sizeof(want);
    for (size_t cap = 0; cap <= need; cap++) {
        uint8_t *out = malloc(cap > 0 ? cap : 1);
        long got = wire_launch_encode(out, cap, "j1", 4, argv);
        CHECK(got == (cap == need ? (long)need : -1));
        free(out);
    }

    /* Argument counts: 1..WIRE_ARGS_MAX. */
    static const char *many[WIRE_ARGS_MAX + 2];
    for (int i = 0; i < WIRE_ARGS_MAX + 1; i++)
        many[i] = "a";
    static uint8_t big[WIRE_FRAME_MAX];
    CHECK(wire_launch_encode(big, sizeof(big), "j", 0, many) == -1);
    CHECK(wire_launch_encode(big, sizeof(big), "j", -1, many) == -1);
    CHECK(wire_launch_encode(big, sizeof(big), "j", WIRE_ARGS_MAX + 1, many) == -1);
    n = wire_launch_encode(big, sizeof(big), "j", WIRE_ARGS_MAX, many);
    CHECK(n == 1 + 2 + 2 * WIRE_ARGS_MAX);
    CHECK(decode(big, (size_t)n) == 0);
    CHECK(req.argc == WIRE_ARGS_MAX && req.argv[WIRE_ARGS_MAX] == NULL);

    /* A payload over the frame bound is refused even with room for it. */
    size_t longlen = WIRE_FRAME_MAX;
    char *longarg = malloc(longlen + 1);
    memset(longarg, 'x', longlen);
    longarg[longlen] = '\0';
    const char *const toolong[] = {"orted", longarg};
    uint8_t *huge = malloc(2 * WIRE_FRAME_MAX);
    CHECK(wire_launch_encode(huge, 2 * WIRE_FRAME_MAX, "j", 2, toolong) == -1);
    /* and just under it, accepted */
    longarg[WIRE_FRAME_MAX - 1 - 2 - 6 - 1] = '\0';
    n = wire_launch_encode(huge, 2 * WIRE_FRAME_MAX, "j", 2, toolong);
    CHECK(n == WIRE_FRAME_MAX);
    CHECK(decode(huge, (size_t)n) == 0 && req.argc == 2);
    huge[n] = '\0'; /* one byte more is over the bound, even as strings */
    CHECK(decode(huge, (size_t)n + 1) == -1);
    CHECK_STR(why, "launch request not made of strings");
    free(huge);
    free(longarg);
}

static void test_refusals(void)
{
    /* A sender of another version, or nothing at all. */
    static const uint8_t v3[] = "\003j\0orted";
    CHECK(decode(v3, sizeof(v3)) == -1);
    CHECK_STR(why, "launch version 3, this agent speaks 2");
    static const uint8_t v0[] = "\000j\0orted";
    CHECK(decode(v0, sizeof(v0)) == -1);
    CHECK_HAS(why, "launch version 0");
    CHECK(decode(v3, 0) == -1);
    CHECK_STR(why, "launch version -1, this agent speaks 2");

    /* Not strings: the last byte is not a NUL. */
    static const uint8_t ok[] = "\002j\0orted";
    CHECK(decode(ok, sizeof(ok)) == 0);
    CHECK(decode(ok, sizeof(ok) - 1) == -1);
    CHECK_STR(why, "launch request not made of strings");
    CHECK(decode(ok, 1) == -1); /* the version byte alone */
    CHECK_STR(why, "launch request not made of strings");
    uint8_t *over = calloc(WIRE_FRAME_MAX + 1, 1);
    over[0] = WIRE_VERSION;
    over[1] = 'j';
    over[3] = 'o';
    CHECK(decode(over, WIRE_FRAME_MAX + 1) == -1);
    CHECK_STR(why, "launch request not made of strings");
    /* the same bytes within the bound: many empty arguments, too many */
    CHECK(decode(over, WIRE_FRAME_MAX) == -1);
    CHECK_STR(why, "more than 512 arguments");
    free(over);

    /* A job and no command. */
    static const uint8_t nocmd[] = "\002j";
    CHECK(decode(nocmd, sizeof(nocmd)) == -1);
    CHECK_STR(why, "no command");
    static const uint8_t nothing[] = "\002";
    CHECK(decode(nothing, sizeof(nothing)) == -1);
    CHECK_STR(why, "no command");

    /* WIRE_ARGS_MAX arguments, then one more. */
    uint8_t args[1 + 2 + 2 * (WIRE_ARGS_MAX + 1)];
    args[0] = WIRE_VERSION;
    args[1] = 'j';
    args[2] = '\0';
    for (int i = 0; i < WIRE_ARGS_MAX + 1; i++) {
        args[3 + 2 * i] = 'a';
        args[4 + 2 * i] = '\0';
    }
    CHECK(decode(args, sizeof(args) - 2) == 0 && req.argc == WIRE_ARGS_MAX);
    CHECK(decode(args, sizeof(args)) == -1);
    CHECK_STR(why, "more than 512 arguments");

    /* A short reason buffer is filled and terminated, never overrun. */
    char small[8];
    memset(small, 'Z', sizeof(small));
    CHECK(wire_launch_decode(nocmd, sizeof(nocmd), &req, small, sizeof(small)) == -1);
    CHECK_STR(small, "no comm");
}

/* xorshift: the same mutations every run. */
static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_random(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* What the decoder must say of p[0..n-1], found another way: the argument
   count, or -1 when it must refuse. */
static int expected_argc(const uint8_t *p, size_t n)
{
    if (n < 1 || p[0] != WIRE_VERSION || n > WIRE_FRAME_MAX || p[n - 1] != '\0')
        return -1;
    int nuls = 0;
    for (size_t i = 1; i < n; i++)
        nuls += p[i] == '\0';
    /* the first string is the job */
    return nuls - 1 >= 1 && nuls - 1 <= WIRE_ARGS_MAX ? nuls - 1 : -1;
}

/* A decoded string lies in the payload and ends there. */
static int inside(const char *s, const uint8_t *p, size_t n)
{
    const uint8_t *u = (const uint8_t *)s;
    return u > p && u < p + n && memchr(u, '\0', (size_t)(p + n - u)) != NULL;
}

/* One mutated LAUNCH payload: returns the number of faults found. */
static int mutate_launch(const uint8_t *seed, size_t seedlen, int *verdicts)
{
    size_t n = seedlen + next_random() % 16;
    if (next_random() % 4 == 0)
        n = next_random() % (seedlen + 1);
    uint8_t *buf = malloc(n > 0 ? n : 1); /* exactly n: ASan sees overreads */
    for (size_t i = 0; i < n; i++)
        buf[i] = i < seedlen ? seed[i] : (uint8_t)next_random();
    for (int k = (int)(next_random() % 5); k > 0 && n > 0; k--) {
        uint64_t r = next_random();
        /* NULs and the version byte matter most: more of them */
        buf[r % n] = (r >> 32) & 1 ? (uint8_t)(r >> 40) : ((r >> 33) & 1 ? 0 : WIRE_VERSION);
    }
    if (n > 0 && next_random() % 3 == 0)
        buf[n - 1] = '\0';

    int rc = decode(buf, n), want = expected_argc(buf, n), bad = 0;
    if (rc == 0) {
        if (req.argc < 1 || req.argc > WIRE_ARGS_MAX || req.argc != want ||
            req.argv[req.argc] != NULL || !inside(req.job, buf, n))
            bad++;
        for (int i = 0; !bad && i < req.argc; i++)
            if (!inside(req.argv[i], buf, n))
                bad++;
        /* Encoding what was decoded gives the payload back, in exactly n bytes. */
        if (!bad) {
            uint8_t *again = malloc(n);
            long m = wire_launch_encode(again, n, req.job, req.argc, req.argv);
            if (m != (long)n || memcmp(again, buf, n) != 0)
                bad++;
            free(again);
        }
    } else {
        size_t len = strnlen(why, sizeof(why));
        if (rc != -1 || want != -1 || len == 0 || len == sizeof(why))
            bad++;
        else if (strstr(why, "version") != NULL)
            verdicts[1]++;
        else if (strstr(why, "strings") != NULL)
            verdicts[2]++;
        else if (strstr(why, "arguments") != NULL)
            verdicts[3]++;
        else if (strstr(why, "no command") != NULL)
            verdicts[4]++;
        else
            bad++;
    }
    if (rc == 0)
        verdicts[0]++;
    if (bad)
        fprintf(stderr, "LAUNCH of %zu bytes: decoded %d (expected %d), why \"%.*s\"\n", n, rc,
                want, (int)sizeof(why), why);
    free(buf);
    return bad;
}

/* One mutated header: returns the number of faults found. */
static int mutate_header(int *accepted)
{
    uint8_t in[WIRE_HEADER], out[WIRE_HEADER];
    struct wire_header h;

    wire_header_put(in, (enum wire_type)(1 + next_random() % WIRE_TYPE_LAST),
                    (uint16_t)next_random(), (uint32_t)(next_random() % (WIRE_FRAME_MAX + 1)));
    for (int k = (int)(next_random() % 3); k > 0; k--)
        in[next_random() % WIRE_HEADER] = (uint8_t)next_random();
    uint8_t *buf = malloc(WIRE_HEADER);
    memcpy(buf, in, WIRE_HEADER);
    int rc = wire_header_get(buf, &h);
    free(buf);
    uint32_t len = wire_u32_get(in + 4);
    int ours =
        in[0] >= WIRE_LAUNCH && in[0] <= WIRE_TYPE_LAST && in[1] == 0 && len <= WIRE_FRAME_MAX;
    if (rc != (ours ? 0 : -1))
        return 1;
    if (rc == 0) {
        (*accepted)++;
        wire_header_put(out, (enum wire_type)h.type, h.chan, h.len);
        if (memcmp(in, out, WIRE_HEADER) != 0)
            return 1;
    }
    return 0;
}

/* Random mutations of valid LAUNCH payloads (bytes changed, NULs added or
   removed, cut, grown with junk) and of valid headers: the decoder accepts
   exactly what is well formed, every string it returns lies in the payload,
   a refusal says why, and nothing is read past the buffer (ASan in CI). */
static void test_mutations(void)
{
    static uint8_t small[64], orted[1024], many[1 + 3 + 2 * WIRE_ARGS_MAX];
    const char *const oargv[] = {"orted",
                                 "-mca",
                                 "ess",
                                 "env",
                                 "-mca",
                                 "ess_base_jobid",
                                 "1146028032",
                                 "-mca",
                                 "ess_base_vpid",
                                 "1",
                                 "-mca",
                                 "orte_hnp_uri",
                                 "1146028032.0;tcp://198.18.1.11,10.1.2.3:43981",
                                 "-mca",
                                 "plm",
                                 "rsh"};
    const char *const sargv[] = {"orted"};
    static const char *margv[WIRE_ARGS_MAX];
    for (int i = 0; i < WIRE_ARGS_MAX; i++)
        margv[i] = "a";
    const struct {
        const uint8_t *b;
        long n;
    } seeds[] = {
        {small, wire_launch_encode(small, sizeof(small), "j1", 1, sargv)},
        {orted, wire_launch_encode(orted, sizeof(orted), "job-42", 16, oargv)},
        {many, wire_launch_encode(many, sizeof(many), "j", WIRE_ARGS_MAX, margv)},
    };
    int bad = 0, verdicts[5] = {0}, accepted = 0;
    const int rounds = 300000;

    for (int s = 0; s < 3; s++)
        CHECK(seeds[s].n > 0);
    for (int round = 0; round < rounds && bad == 0; round++) {
        int which = (int)(next_random() % 3);
        bad += mutate_launch(seeds[which].b, (size_t)seeds[which].n, verdicts);
        bad += mutate_header(&accepted);
        if (bad)
            fprintf(stderr, "round %d failed\n", round);
    }
    CHECK(bad == 0);
    /* The mutations reach every verdict. */
    for (int v = 0; v < 5; v++)
        CHECK(verdicts[v] > 0);
    CHECK(accepted > 0 && accepted < rounds);
    printf("%d mutated LAUNCH payloads: %d decoded, refused %d for the version, %d not strings, "
           "%d too many arguments, %d no command; %d mutated headers: %d accepted\n",
           rounds, verdicts[0], verdicts[1], verdicts[2], verdicts[3], verdicts[4], rounds,
           accepted);
}

int main(void)
{
    test_header();
    test_u32();
    test_launch();
    test_refusals();
    test_mutations();
    return check_result("launch-wire");
}
