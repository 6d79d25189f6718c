/* core/address.c: IPv4 and IPv6 text within QCG_ADDR_MAX, nothing else;
   HOST:PORT and [IPv6]:PORT with every odd form; ranges per family. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "address.h"
#include "check.h"
#include "proto.h"

/* hostport_parse(text) succeeds with host and port. */
static void hostport_ok(const char *text, const char *host, int port)
{
    char h[QCG_ADDR_MAX], why[200] = "";
    int p = -1;
    int rc = hostport_parse(text, false, h, sizeof(h), &p, why, sizeof(why));
    CHECKF(rc == 0, "%s: %s", text, why);
    CHECK_STR(h, host);
    CHECK_EQ(p, port);
}

/* hostport_parse(text) fails with a reason holding what. */
static void hostport_bad(const char *text, const char *what)
{
    char h[QCG_ADDR_MAX] = "x", why[200] = "";
    int p = 7;
    CHECKF(hostport_parse(text, false, h, sizeof(h), &p, why, sizeof(why)) < 0, "%s taken",
           text ? text : "NULL");
    CHECK_HAS(why, what);
    CHECK_STR(h, "");
    CHECK_EQ(p, 0);
}

static void hostports(void)
{
    hostport_ok("203.0.113.5:7700", "203.0.113.5", 7700);
    hostport_ok("[2001:db8::1]:7700", "2001:db8::1", 7700);
    hostport_ok("[2001:DB8:0:0::1]:1", "2001:db8::1", 1);
    hostport_ok("[::1]:65535", "::1", 65535);
    hostport_ok("[::]:7704", "::", 7704);
    hostport_ok("0.0.0.0:7704", "0.0.0.0", 7704);
    /* A mapped address is the IPv4 host, shown so. */
    hostport_ok("[::ffff:203.0.113.7]:7703", "203.0.113.7", 7703);

    hostport_bad(NULL, "missing");
    hostport_bad("", "missing");
    hostport_bad("203.0.113.5", "no port");
    hostport_bad("203.0.113.5:", "port");
    hostport_bad("203.0.113.5:0", "the port is not 1-65535");
    hostport_bad("203.0.113.5:65536", "the port is not 1-65535");
    hostport_bad("203.0.113.5:-1", "the port");
    hostport_bad("203.0.113.5:+80", "the port");
    hostport_bad("203.0.113.5:80 ", "the port");
    hostport_bad("203.0.113.5:0x50", "the port");
    hostport_bad("203.0.113.5:000080", "the port");
    hostport_bad("2001:db8::1:7700", "in brackets");
    hostport_bad("2001:db8::1", "in brackets");
    hostport_bad("::1:7700", "in brackets");
    hostport_bad("[2001:db8::1]", "no :PORT");
    hostport_bad("[2001:db8::1]7700", "no :PORT");
    hostport_bad("[2001:db8::1:7700", "no ']'");
    hostport_bad("[203.0.113.5]:7700", "not an IPv6 address");
    hostport_bad("[fe80::1%eth0]:7700", "zone ids");
    hostport_bad("[fe80::1%25eth0]:7700", "zone ids");
    hostport_bad("localhost:7700", "not an IP address");
    hostport_bad("broker.example.org:7700", "not an IP address");
    hostport_bad(":7700", "not ADDR:PORT");
    hostport_bad("[]:7700", "not ADDR:PORT");
    hostport_bad("[[::1]]:7700", "no :PORT");

    char h[QCG_ADDR_MAX], why[200];
    int p = -1;
    CHECK(hostport_parse("[::1]:0", true, h, sizeof(h), &p, why, sizeof(why)) == 0 && p == 0);

    char out[HOSTPORT_MAX];
    hostport_format("2001:db8::1", 7700, out, sizeof(out));
    CHECK_STR(out, "[2001:db8::1]:7700");
    hostport_format("203.0.113.5", 7700, out, sizeof(out));
    CHECK_STR(out, "203.0.113.5:7700");
    hostport_format("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255", 65535, out, sizeof(out));
    CHECK_STR(out, "[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535");
    /* What it formats, hostport_parse reads back. */
    CHECK(hostport_parse(out, false, h, sizeof(h), &p, why, sizeof(why)) == 0 && p == 65535);
}

/* address_list_format: one address, several, IPv6 in brackets with a port
   only, and a short buffer cut but terminated, the whole length told. */
static void list_texts(void)
{
    const char others[3][QCG_ADDR_MAX] = {"2001:db8:1::5", "198.51.100.7", "2001:db8:2::5"};
    char out[ADDRESS_LIST_TEXT_MAX];
    CHECK_EQ(address_list_format("198.18.1.5", others, 0, 7700, out, sizeof(out)), 15);
    CHECK_STR(out, "198.18.1.5:7700");
    address_list_format("198.18.1.5", others, 2, 7700, out, sizeof(out));
    CHECK_STR(out, "198.18.1.5:7700 and [2001:db8:1::5]:7700 and 198.51.100.7:7700");
    address_list_format("198.18.1.5", others, 2, 0, out, sizeof(out));
    CHECK_STR(out, "198.18.1.5 and 2001:db8:1::5 and 198.51.100.7");

    /* The longest addresses, every one: the buffer the header names holds them. */
    const char *v6 = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255";
    char longest[QCG_NODE_ADDRS - 1][QCG_ADDR_MAX];
    for (int i = 0; i < QCG_NODE_ADDRS - 1; i++)
        snprintf(longest[i], sizeof(longest[i]), "%s", v6);
    int whole = address_list_format(v6, longest, QCG_NODE_ADDRS - 1, 65535, out, sizeof(out));
    CHECKF(whole > 0 && (size_t)whole < sizeof(out) && strlen(out) == (size_t)whole, "%d: %s",
           whole, out);

    /* Cut: the start of the text, terminated; the return says how much more. */
    char small[24];
    memset(small, 'x', sizeof(small));
    int n = address_list_format("198.18.1.5", others, 2, 7700, small, sizeof(small));
    CHECK_EQ(n, 62);
    CHECK_STR(small, "198.18.1.5:7700 and [20");
    char none[1] = {'x'};
    CHECK_EQ(address_list_format("198.18.1.5", others, 1, 0, none, sizeof(none)), 28);
    CHECK_EQ(none[0], '\0');
}

static void urls(void)
{
    char h[QCG_ADDR_MAX], why[200] = "";
    int p = 0;
    CHECK(url_hostport("https://[::1]:7700/", h, sizeof(h), &p, why, sizeof(why)) == 0);
    CHECK_STR(h, "::1");
    CHECK_EQ(p, 7700);
    CHECK(url_hostport("https://203.0.113.10:7701/", h, sizeof(h), &p, why, sizeof(why)) == 0);
    CHECK_STR(h, "203.0.113.10");
    CHECK_EQ(p, 7701);
    CHECK(url_hostport("https://[2001:db8::10]", h, sizeof(h), &p, why, sizeof(why)) == 0);
    CHECK_EQ(p, 443);
    CHECK(url_hostport("https://203.0.113.10/", h, sizeof(h), &p, why, sizeof(why)) == 0);
    CHECK_EQ(p, 443);
    CHECK(url_hostport("http://[::1]:7700/", h, sizeof(h), &p, why, sizeof(why)) < 0);
    CHECK_HAS(why, "is not https://HOST:PORT/");
    CHECK(url_hostport("https://2001:db8::10:7700/", h, sizeof(h), &p, why, sizeof(why)) < 0);
    CHECK_HAS(why, "in brackets");
    CHECK(url_hostport("https://broker.grid.example.org:7700/", h, sizeof(h), &p, why,
                       sizeof(why)) == 0);
    CHECK_STR(h, "broker.grid.example.org");
    CHECK_EQ(p, 7700);
    CHECK(url_hostport("https://broker.grid.example.org:0/", h, sizeof(h), &p, why, sizeof(why)) <
          0);
    CHECK(url_hostport("https://bro ker:7700/", h, sizeof(h), &p, why, sizeof(why)) < 0);
    CHECK(url_hostport("https://[::1]:7700/x", h, sizeof(h), &p, why, sizeof(why)) < 0);
    CHECK(url_hostport("https:///", h, sizeof(h), &p, why, sizeof(why)) < 0);
    CHECK(url_hostport(NULL, h, sizeof(h), &p, why, sizeof(why)) < 0);
}

static void families(void)
{
    char c[QCG_ADDR_MAX];
    CHECK_EQ(address_family("203.0.113.7"), AF_INET);
    CHECK_EQ(address_family("2001:db8::7"), AF_INET6);
    CHECK_EQ(address_family("::ffff:203.0.113.7"), AF_INET);
    CHECK_EQ(address_family("::203.0.113.7"), AF_INET6); /* compatible, not mapped */
    CHECK_EQ(address_family("[::1]"), 0);
    CHECK_EQ(address_family("fe80::1%lo"), 0);
    CHECK_EQ(address_family(NULL), 0);
    CHECK(address_canonical("2001:DB8:0000::0001", c, sizeof(c)) == 0);
    CHECK_STR(c, "2001:db8::1");
    CHECK(address_canonical("::ffff:203.0.113.7", c, sizeof(c)) == 0);
    CHECK_STR(c, "203.0.113.7");
    CHECK(address_canonical("nope", c, sizeof(c)) < 0);
    CHECK_STR(c, "");
    CHECK(address_equal("::ffff:1.2.3.4", "1.2.3.4"));
    CHECK(address_equal("2001:db8::1", "2001:DB8:0:0:0:0:0:1"));
    CHECK(!address_equal("2001:db8::1", "2001:db8::2"));
    CHECK(!address_equal("::1", "127.0.0.1"));
    CHECK(!address_equal("1.2.3.4", NULL));

    struct sockaddr_storage ss;
    CHECK(address_sockaddr("::ffff:203.0.113.7", 80, &ss) == sizeof(struct sockaddr_in));
    CHECK(ss.ss_family == AF_INET &&
          ((struct sockaddr_in *)&ss)->sin_addr.s_addr == inet_addr("203.0.113.7") &&
          ((struct sockaddr_in *)&ss)->sin_port == htons(80));
    CHECK(address_sockaddr("2001:db8::1", 7700, &ss) == sizeof(struct sockaddr_in6));
    CHECK(ss.ss_family == AF_INET6 && ((struct sockaddr_in6 *)&ss)->sin6_port == htons(7700) &&
          ((struct sockaddr_in6 *)&ss)->sin6_scope_id == 0);
    CHECK(address_sockaddr("[::1]", 1, &ss) == 0);
    CHECK(address_sockaddr("fe80::1%lo", 1, &ss) == 0);
}

/* Ranges match per family; a mapped address or range is IPv4. */
static void ranges(void)
{
    struct addr_range r4, r6, m;
    char why[200], text[QCG_ADDR_MAX + 4];
    CHECK(addr_range_parse("198.51.100.0/24", &r4, why, sizeof(why)) == 0);
    CHECK(addr_range_parse("2001:db8::/48", &r6, why, sizeof(why)) == 0);
    CHECK(addr_range_contains(&r6, "2001:db8:0:ffff::1"));
    CHECK(!addr_range_contains(&r6, "2001:db8:1::1"));
    CHECK(addr_range_contains(&r4, "::ffff:198.51.100.9"));
    CHECK(!addr_range_contains(&r6, "198.51.100.9"));
    CHECK(!addr_range_contains(&r4, "2001:db8::1"));
    CHECK(!addr_range_contains(&r4, "fe80::1%lo"));
    CHECK(!addr_range_overlap(&r4, &r6));
    CHECK(addr_range_parse("::ffff:198.51.100.0/120", &m, why, sizeof(why)) == 0);
    addr_range_format(&m, text, sizeof(text));
    CHECK_STR(text, "198.51.100.0/24");
    CHECK(addr_range_overlap(&m, &r4));
    CHECK(addr_range_parse("::ffff:198.51.100.0/64", &m, why, sizeof(why)) < 0);
    CHECK_HAS(why, "not 96-128");
    CHECK(addr_range_parse("2001:db8::1/48", &m, why, sizeof(why)) < 0);
    CHECK_HAS(why, "host bits set (the range is 2001:db8::/48)");
    CHECK(addr_range_parse("2001:db8::/129", &m, why, sizeof(why)) < 0);
    CHECK(addr_range_parse("[2001:db8::]/48", &m, why, sizeof(why)) < 0);
    CHECK(addr_range_parse("fe80::%lo/64", &m, why, sizeof(why)) < 0);
    CHECK(addr_range_parse("2001:db8::/48", &m, why, sizeof(why)) == 0 &&
          addr_range_declarable(&m, why, sizeof(why)) == 0);
    CHECK(addr_range_parse("2000::/15", &m, why, sizeof(why)) == 0 &&
          addr_range_declarable(&m, why, sizeof(why)) < 0);
    CHECK(addr_range_parse("::1/128", &m, why, sizeof(why)) == 0 &&
          addr_range_declarable(&m, why, sizeof(why)) < 0);
}

/* A node's addresses: a list, canonical, IPv4 first, each once; a
   message's further ones; a range inside another. */
static void lists(void)
{
    char a[QCG_NODE_ADDRS][QCG_ADDR_MAX], why[160];
    CHECKF(address_list_parse("2001:DB8::5, 198.51.100.5", a, QCG_NODE_ADDRS, why, sizeof(why)) ==
                   2 &&
               strcmp(a[0], "198.51.100.5") == 0 && strcmp(a[1], "2001:db8::5") == 0,
           "IPv6 then IPv4: IPv4 first, canonical (%s)", why);
    CHECKF(address_list_parse("::1", a, QCG_NODE_ADDRS, why, sizeof(why)) == 1 &&
               strcmp(a[0], "::1") == 0,
           "one IPv6 address alone");
    CHECKF(address_list_parse("::1,2001:db8::1,127.0.0.1", a, QCG_NODE_ADDRS, why, sizeof(why)) ==
                   3 &&
               strcmp(a[0], "127.0.0.1") == 0 && strcmp(a[1], "::1") == 0 &&
               strcmp(a[2], "2001:db8::1") == 0,
           "the IPv4 one to the front, the others in their order");
    CHECKF(address_list_parse("::1, 0::1", a, QCG_NODE_ADDRS, why, sizeof(why)) == -1 &&
               strstr(why, "twice") != NULL,
           "the same host twice: %s", why);
    CHECKF(address_list_parse("::1, host", a, QCG_NODE_ADDRS, why, sizeof(why)) == -1 &&
               strstr(why, "'host' is not an IPv4 or IPv6 literal") != NULL,
           "a name: %s", why);
    CHECKF(address_list_parse(" , ", a, QCG_NODE_ADDRS, why, sizeof(why)) == -1, "none");
    CHECKF(address_list_parse("::1,::2,::3,::4,::5", a, QCG_NODE_ADDRS, why, sizeof(why)) == -1 &&
               strstr(why, "more than 4") != NULL,
           "five: %s", why);

    char *in[2] = {"2001:DB8::1", "::ffff:198.51.100.1"};
    CHECKF(address_others_take(1, in, "198.51.100.1", a, 3, why, sizeof(why)) == 1 &&
               strcmp(a[0], "2001:db8::1") == 0,
           "a further address, canonical");
    CHECKF(address_others_take(2, in, "198.51.100.1", a, 3, why, sizeof(why)) == -1,
           "a mapped copy of the first: twice");
    CHECKF(address_others_take(2, in, "198.51.100.1", a, 1, why, sizeof(why)) == -1,
           "more than allowed");
    CHECKF(address_among("2001:db8:0::1", (const char(*)[QCG_ADDR_MAX])a, 1) &&
               !address_among("2001:db8::2", (const char(*)[QCG_ADDR_MAX])a, 1),
           "among");

    struct addr_range outer, inner, v4;
    addr_range_parse("2001:db8:1::/48", &outer, why, sizeof(why));
    addr_range_parse("2001:db8:1:5::/64", &inner, why, sizeof(why));
    addr_range_parse("198.51.100.0/24", &v4, why, sizeof(why));
    CHECKF(addr_range_within_any(&inner, &outer, 1) && !addr_range_within_any(&outer, &inner, 1) &&
               !addr_range_within_any(&v4, &outer, 1) && addr_range_within_any(&outer, &outer, 1),
           "within");
}

int main(void)
{
    lists();
    hostports();
    list_texts();
    urls();
    families();
    ranges();
    CHECK(address_valid("127.0.0.1"));
    CHECK(address_valid("198.18.1.10"));
    CHECK(address_valid("::1"));
    CHECK(address_valid("2001:db8::5"));
    CHECK(address_valid("::ffff:203.0.113.7"));
    CHECK(!address_valid(NULL));
    CHECK(!address_valid(""));
    CHECK(!address_valid("localhost"));
    CHECK(!address_valid("1.2.3"));
    CHECK(!address_valid("1.2.3.256"));
    CHECK(!address_valid(" 1.2.3.4"));
    CHECK(!address_valid("1.2.3.4 "));
    CHECK(!address_valid("1.2.3.4:80"));
    CHECK(!address_valid("fe80::1%eth0"));
    /* Longer than QCG_ADDR_MAX - 1 even when inet_pton would take it. */
    char s[QCG_ADDR_MAX + 8];
    snprintf(s, sizeof(s), "0000:0000:0000:0000:0000:0000:0000:0001");
    CHECK(address_valid(s));
    snprintf(s, sizeof(s), "0000:0000:0000:0000:0000:ffff:255.255.255.255");
    CHECK(strlen(s) == QCG_ADDR_MAX - 3 && address_valid(s));
    return check_result("test_address");
}
