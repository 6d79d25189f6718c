/* See hex.h. */
#include "hex.h"

#include <string.h>

static int hex_value(int c, bool allow_upper)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (allow_upper && c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

void hex_encode(const void *data, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = data;

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

int hex_decode(const char *text, size_t n, void *out, bool allow_upper)
{
    unsigned char *o = out;

    for (size_t i = 0; i < n; i++) {
        int hi = hex_value((unsigned char)text[2 * i], allow_upper);
        int lo = hi < 0 ? -1 : hex_value((unsigned char)text[2 * i + 1], allow_upper);

        if (hi < 0 || lo < 0)
            return -1;
        o[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

bool hex_lower_valid(const char *text, size_t max_len)
{
    size_t n = text != NULL ? strnlen(text, max_len + 1) : 0;

    if (n == 0 || n > max_len)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (hex_value((unsigned char)text[i], false) < 0)
            return false;
    }
    return true;
}
