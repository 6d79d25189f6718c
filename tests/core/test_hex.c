/* core/hex.c: encoding round-trips; decoding takes lowercase only unless
   told; the shape check takes 1..max lowercase digits. */
#include "check.h"
#include "hex.h"

static void test_encode(void)
{
    unsigned char all[256], back[256];
    char text[2 * 256 + 1];

    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    hex_encode(all, sizeof(all), text);
    CHECK(strlen(text) == 512);
    CHECK(strncmp(text, "000102", 6) == 0 && strcmp(text + 506, "fdfeff") == 0);
    CHECK(strspn(text, "0123456789abcdef") == 512);
    CHECK(hex_decode(text, sizeof(back), back, false) == 0 && memcmp(all, back, 256) == 0);
    hex_encode(all, 0, text);
    CHECK_STR(text, "");
}

static void test_decode(void)
{
    unsigned char b[4] = {0};

    CHECK(hex_decode("deadBEEF", 4, b, false) == -1);
    CHECK(hex_decode("deadBEEF", 4, b, true) == 0 && b[0] == 0xde && b[3] == 0xef);
    CHECK(hex_decode("0g", 1, b, true) == -1);
    CHECK(hex_decode(" 1", 1, b, true) == -1);
    CHECK(hex_decode("0x", 1, b, true) == -1);
    CHECK(hex_decode("-1", 1, b, true) == -1);
    /* Stops at a NUL instead of reading past it. */
    CHECK(hex_decode("", 1, b, false) == -1);
    CHECK(hex_decode("a", 1, b, false) == -1);
    CHECK(hex_decode("zz", 0, b, false) == 0);
}

static void test_shape(void)
{
    CHECK(hex_lower_valid("0", 4));
    CHECK(hex_lower_valid("abc", 4));
    CHECK(hex_lower_valid("0123", 4));
    CHECK(!hex_lower_valid("01234", 4));
    CHECK(!hex_lower_valid("", 4));
    CHECK(!hex_lower_valid(NULL, 4));
    CHECK(!hex_lower_valid("AB", 4));
    CHECK(!hex_lower_valid("a b", 4));
    CHECK(!hex_lower_valid("g", 4));
}

int main(void)
{
    test_encode();
    test_decode();
    test_shape();
    return check_result("test_hex");
}
