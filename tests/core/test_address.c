/* core/address.c: IPv4 and IPv6 text within QCG_ADDR_MAX, nothing else. */
#include "address.h"
#include "check.h"
#include "proto.h"

int main(void)
{
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
