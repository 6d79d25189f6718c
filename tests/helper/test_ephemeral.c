/* helper-ephemeral: a node's ports range against the kernel's ephemeral
   range and its reserved ports (what the helper warns about at start). */
#include "check.h"
#include "ephemeral.h"

int main(void)
{
    /* Debian's defaults: 32768-60999, nothing reserved. */
    CHECK_EQ(ephemeral_unreserved(41000, 41999, "32768\t60999\n", "\n"), 1000);
    CHECK_EQ(ephemeral_unreserved(61000, 61999, "32768\t60999\n", "\n"), 0);
    CHECK_EQ(ephemeral_unreserved(20000, 20999, "32768\t60999\n", ""), 0);
    CHECK_EQ(ephemeral_unreserved(60990, 61010, "32768\t60999\n", ""), 10);
    /* Reserved, whole or in part. */
    CHECK_EQ(ephemeral_unreserved(41000, 41999, "32768\t60999\n", "41000-41999\n"), 0);
    CHECK_EQ(ephemeral_unreserved(41000, 41999, "32768\t60999\n", "8080,41000-41499,41600\n"), 499);
    /* Not understood: no warning rather than a wrong one. */
    CHECK_EQ(ephemeral_unreserved(41000, 41999, "garbage", ""), -1);
    CHECK_EQ(ephemeral_unreserved(41000, 41999, "32768 60999", "41000-x"), -1);
    CHECK_EQ(ephemeral_unreserved(41000, 41999, "32768 60999", "41999-41000"), -1);
    return check_result("helper-ephemeral");
}
