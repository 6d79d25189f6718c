#include "number.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

int number_parse(const char *s, long min, long max, long *out)
{
    /* strtol skips leading blanks and takes a sign: only "-" is ours. */
    if (s == NULL || *s == '\0' || isspace((unsigned char)*s) || *s == '+')
        return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}
