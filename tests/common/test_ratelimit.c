/* common_ratelimit: N lines per window (a burst in full, a flood cut, the
   count left out on the next line), and one line per interval as before. */
#include "check.h"
#include "ratelimit.h"

int main(void)
{
    struct ratelimit r = {0};
    unsigned left = 99, logged = 0;

    /* Ten at once are seen, the eleventh to the 25th are not. */
    for (int i = 0; i < 25; i++)
        logged += ratelimit_burst_ok(&r, 5000, 1000, 10, &left);
    CHECK_EQ(logged, 10);
    /* Still the same window. */
    CHECK(!ratelimit_burst_ok(&r, 5999, 1000, 10, &left));
    /* The next window: logged, with the 16 left out. */
    CHECK(ratelimit_burst_ok(&r, 6000, 1000, 10, &left));
    CHECK_EQ(left, 16);
    CHECK(ratelimit_burst_ok(&r, 6001, 1000, 10, &left));
    CHECK_EQ(left, 0);

    /* One per interval; a zero clock still counts as a first line. */
    struct ratelimit one = {0};
    CHECK(ratelimit_ok(&one, 0, 1000, &left) && left == 0);
    CHECK(!ratelimit_ok(&one, 999, 1000, &left));
    CHECK(!ratelimit_ok(&one, 500, 1000, &left));
    CHECK(ratelimit_ok(&one, 1001, 1000, &left));
    CHECK_EQ(left, 2);
    return check_result("common_ratelimit");
}
