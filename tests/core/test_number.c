/* core/number.c: whole decimal numbers in a range; what atoi and %d take
   silently (blanks, units, a plus, overflow) is refused. */
#include "check.h"
#include "number.h"

#include <limits.h>

int main(void)
{
    long v = 7;

    CHECK(number_parse("0", 0, 10, &v) == 0 && v == 0);
    CHECK(number_parse("10", 0, 10, &v) == 0 && v == 10);
    CHECK(number_parse("-3", -5, 5, &v) == 0 && v == -3);
    CHECK(number_parse("0010", 0, 100, &v) == 0 && v == 10);
    v = 7;
    /* Out of the range, and out of a long's: refused, *out untouched. */
    CHECK(number_parse("11", 0, 10, &v) == -1 && v == 7);
    CHECK(number_parse("-1", 0, 10, &v) == -1 && v == 7);
    CHECK(number_parse("99999999999999999999", LONG_MIN, LONG_MAX, &v) == -1 && v == 7);
    /* What is not a whole number. */
    const char *bad[] = {"", " 1", "1 ", "+1", "10s", "1e3", "0x10", "-", "1.5", "abc"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(number_parse(bad[i], LONG_MIN, LONG_MAX, &v) == -1 && v == 7);
    CHECK(number_parse(NULL, 0, 10, &v) == -1);
    return check_result("test_number");
}
