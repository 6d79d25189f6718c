/* common_tally: counts per holder up to a share, forgotten at zero; the
   source key of an address (IPv4, an IPv6 /64, v4-mapped as IPv4). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "check.h"
#include "tally.h"

static void key_of(int family, const char *text, char out[TALLY_KEY_MAX])
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t len;
    if (family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        inet_pton(AF_INET, text, &s4->sin_addr);
        len = sizeof(*s4);
    } else {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        inet_pton(AF_INET6, text, &s6->sin6_addr);
        len = sizeof(*s6);
    }
    tally_source_key(&ss, len, out);
}

int main(void)
{
    struct tally *t = tally_new();
    char k[TALLY_KEY_MAX];

    REQUIRE(t != NULL);
    for (int i = 0; i < 3; i++)
        CHECK(tally_take(t, "203.0.113.1", 3));
    CHECK(!tally_take(t, "203.0.113.1", 3));
    CHECK(tally_take(t, "198.51.100.1", 3));
    CHECK_EQ(tally_count(t, "203.0.113.1"), 3);
    CHECK_EQ(tally_holders(t), 2);
    tally_give(t, "203.0.113.1");
    CHECK(tally_take(t, "203.0.113.1", 3));
    tally_give(t, "198.51.100.1");
    CHECK_EQ(tally_holders(t), 1);
    CHECK_EQ(tally_count(t, "198.51.100.1"), 0);
    /* A share of 0 takes nothing. */
    CHECK(!tally_take(t, "198.18.0.1", 0));
    /* A batch given back at once (entries expiring together). */
    for (int i = 0; i < 5; i++)
        CHECK(tally_take(t, "198.18.0.2", 10));
    tally_give_n(t, "198.18.0.2", 3);
    CHECK_EQ(tally_count(t, "198.18.0.2"), 2);
    tally_give_n(t, "198.18.0.2", 2);
    CHECK_EQ(tally_count(t, "198.18.0.2"), 0);
    CHECK_EQ(tally_holders(t), 1);
    tally_free(t);

    key_of(AF_INET, "203.0.113.7", k);
    CHECK(strcmp(k, "203.0.113.7") == 0);
    key_of(AF_INET6, "2001:db8:1:2:aaaa:bbbb:cccc:dddd", k);
    CHECK(strcmp(k, "2001:db8:1:2::/64") == 0);
    char k2[TALLY_KEY_MAX];
    key_of(AF_INET6, "2001:db8:1:2::1", k2);
    CHECKF(strcmp(k, k2) == 0, "one /64, one key: %s and %s", k, k2);
    key_of(AF_INET6, "::ffff:198.51.100.4", k);
    CHECK(strcmp(k, "198.51.100.4") == 0);
    /* A configured prefix: a /56 holds both /64s, a /128 is the address. */
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6}, b6 = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, "2001:db8:0:1ff::1", &a6.sin6_addr);
    inet_pton(AF_INET6, "2001:db8:0:100::2", &b6.sin6_addr);
    tally_source_key_prefix((struct sockaddr_storage *)&a6, sizeof(a6), 56, k);
    tally_source_key_prefix((struct sockaddr_storage *)&b6, sizeof(b6), 56, k2);
    CHECKF(strcmp(k, "2001:db8:0:100::/56") == 0 && strcmp(k, k2) == 0, "/56: %s and %s", k, k2);
    tally_source_key_prefix((struct sockaddr_storage *)&a6, sizeof(a6), 128, k);
    CHECK_STR(k, "2001:db8:0:1ff::1");
    return check_result("common_tally");
}
