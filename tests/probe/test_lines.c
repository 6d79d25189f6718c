/* The observers' one-line answers (tools/probe/lines.c): what qcg-probe
   takes from a reflector's or a proxy's MAPPED and DIALED lines, and what it
   refuses.  Whoever answers in the observer's place chooses these bytes, and
   the address goes into the report, the JSON and the observation the helper
   sends upstream: it must be an IP address, never text of their choosing. */
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "probe.h"

static char addr[LOCAL_ADDR_MAX], result[16];
static int port;

static int mapped(const char *line)
{
    memset(addr, 'Z', sizeof(addr));
    port = -1;
    return probe_mapped_parse(line, addr, sizeof(addr), &port);
}

static int dialed(const char *line)
{
    memset(addr, 'Z', sizeof(addr));
    port = -1;
    return probe_dialed_parse(line, addr, sizeof(addr), &port, result, sizeof(result));
}

static void test_mapped(void)
{
    CHECK(mapped("MAPPED 203.0.113.20 40001") == 0);
    CHECK_STR(addr, "203.0.113.20");
    CHECK_EQ(port, 40001);
    CHECK(mapped("MAPPED 2001:db8::20 1") == 0);
    CHECK_STR(addr, "2001:db8::20");

    CHECK(mapped("MAPPED 203.0.113.20 0") < 0);
    CHECK(mapped("MAPPED 203.0.113.20 65536") < 0);
    /* A number %d would overflow on, a sign, a unit. */
    CHECK(mapped("MAPPED 203.0.113.20 99999999999") < 0);
    CHECK(mapped("MAPPED 203.0.113.20 4294967297") < 0);
    CHECK(mapped("MAPPED 203.0.113.20 +40001") < 0);
    CHECK(mapped("MAPPED 203.0.113.20 40001s") < 0);
    CHECK(mapped("MAPPED 203.0.113.20 40001 more") < 0);
    CHECK(mapped("MAPPED 203.0.113.20") < 0);
    CHECK(mapped("DIALED 203.0.113.20 40001 open") < 0);
    /* Not addresses: a terminal escape, a name, a path, text. */
    CHECK(mapped("MAPPED \x1b[2J\x1b[31mpwned 40001") < 0);
    CHECK(mapped("MAPPED evil.example.org 40001") < 0);
    CHECK(mapped("MAPPED 203.0.113.20/../x 40001") < 0);
    CHECK(mapped("MAPPED \"},\"inject\":\"x 40001") < 0);
    CHECK(port == -1);
}

static void test_dialed(void)
{
    CHECK(dialed("DIALED 203.0.113.20 40002 open") == 0);
    CHECK_STR(addr, "203.0.113.20");
    CHECK_EQ(port, 40002);
    CHECK_STR(result, "open");
    CHECK(dialed("DIALED 203.0.113.20 40002 timeout") == 0);
    CHECK_STR(result, "timeout");

    CHECK(dialed("DIALED 203.0.113.20 40002") < 0);
    CHECK(dialed("DIALED 203.0.113.20 40002 open now") < 0);
    CHECK(dialed("DIALED 203.0.113.20 -1 open") < 0);
    CHECK(dialed("DIALED \x1b]0;title\x07 40002 open") < 0);
    CHECK(dialed("DIALED not-an-address 40002 open") < 0);
}

/* One line read off a socket: up to its '\n', or a reason. */
static void test_exchange(void)
{
    static const struct {
        const char *sent, *line; /* line NULL: refused */
    } cases[] = {
        {"MAPPED 203.0.113.20 40001\n", "MAPPED 203.0.113.20 40001"},
        {"MAPPED 203.0.113.20 40001\nmore\n", "MAPPED 203.0.113.20 40001"},
        {"MAPPED 203.0.113.20 40001", NULL}, /* closed before the '\n' */
        {"", NULL},
        {"MAPPED \0 203.0.113.20 40001\n", NULL}, /* too long once a NUL hides the '\n' */
    };
    char line[64], why[160];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int sv[2];
        REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
        size_t n = strlen(cases[i].sent);
        if (i == 4)
            n = sizeof("MAPPED \0 203.0.113.20 40001\n") - 1;
        REQUIRE(write(sv[0], cases[i].sent, n) == (ssize_t)n);
        shutdown(sv[0], SHUT_WR);
        why[0] = '\0';
        int rc = probe_exchange_line(sv[1], "MAP\n", 4, line, sizeof(line), 1000, why, sizeof(why));
        if (cases[i].line != NULL) {
            CHECK(rc == 0);
            CHECK_STR(line, cases[i].line);
        } else {
            CHECK(rc < 0);
            CHECK(why[0] != '\0');
        }
        close(sv[0]);
        close(sv[1]);
    }
}

int main(void)
{
    test_mapped();
    test_dialed();
    test_exchange();
    return check_result("probe-lines");
}
