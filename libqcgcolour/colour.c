/* The colours of a rank, read from the environment the launch gives it
   (qcgcolour.h).  No state: every call parses the variables again, which
   costs microseconds and keeps the library safe to call from any thread,
   before MPI_Init and after. */
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "qcgcolour.h"

#define QCG_EXPORT __attribute__((visibility("default")))
#define NAME_LEN 64 /* core's name rule: 1..63 characters */

struct level {
    const char *name, *own, *all;
};

static const struct level levels[] = {
    {"site", "QCG_COLOUR_SITE", "QCG_COLOURS_SITE"},
    {"node", "QCG_COLOUR_NODE", "QCG_COLOURS_NODE"},
};
#define LEVELS ((int)(sizeof(levels) / sizeof(levels[0])))

QCG_EXPORT int qcg_colour_depth(void)
{
    return LEVELS;
}

QCG_EXPORT const char *qcg_colour_level_name(int level)
{
    return level >= 0 && level < LEVELS ? levels[level].name : NULL;
}

QCG_EXPORT int qcg_colour_string(int level, char *buf, size_t len)
{
    const char *v;

    if (level < 0 || level >= LEVELS)
        return QCG_COLOUR_ELEVEL;
    v = getenv(levels[level].own);
    if (v == NULL || v[0] == '\0')
        return QCG_COLOUR_EUNSET;
    if (!name_valid(v))
        return QCG_COLOUR_EINVAL;
    if (buf == NULL || strlen(v) >= len)
        return QCG_COLOUR_ERANGE;
    memcpy(buf, v, strlen(v) + 1);
    return 0;
}

/* Walks the job's list at level: its length, and in *place the number of
   entries before colour (when colour is given and found, else -1).  The
   list must be sorted and without repeats, so that this place is the same
   integer on every rank; anything else is refused rather than guessed. */
static int scan(int level, const char *colour, int *place)
{
    char prev[NAME_LEN] = "", cur[NAME_LEN];
    const char *p, *comma;
    int n = 0;

    if (level < 0 || level >= LEVELS)
        return QCG_COLOUR_ELEVEL;
    p = getenv(levels[level].all);
    if (p == NULL || p[0] == '\0')
        return QCG_COLOUR_EUNSET;
    *place = -1;
    for (;;) {
        size_t l;

        comma = strchr(p, ',');
        l = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (l == 0 || l >= sizeof(cur))
            return QCG_COLOUR_EINVAL;
        memcpy(cur, p, l);
        cur[l] = '\0';
        if (!name_valid(cur) || (n > 0 && strcmp(prev, cur) >= 0))
            return QCG_COLOUR_EINVAL;
        if (colour != NULL && strcmp(cur, colour) == 0)
            *place = n;
        if (n == 0x7fffffff)
            return QCG_COLOUR_EINVAL;
        n++;
        memcpy(prev, cur, l + 1);
        if (comma == NULL)
            return n;
        p = comma + 1;
    }
}

QCG_EXPORT int qcg_colour_count(int level)
{
    int place;

    return scan(level, NULL, &place);
}

QCG_EXPORT int qcg_colour_to_int(int level, const char *colour)
{
    int place, rc;

    if (colour == NULL)
        return QCG_COLOUR_ENOTFOUND;
    rc = scan(level, colour, &place);
    if (rc < 0)
        return rc;
    return place >= 0 ? place : QCG_COLOUR_ENOTFOUND;
}

QCG_EXPORT int qcg_colour_int(int level)
{
    char own[NAME_LEN];
    int rc = qcg_colour_string(level, own, sizeof(own));

    return rc < 0 ? rc : qcg_colour_to_int(level, own);
}

QCG_EXPORT const char *qcg_colour_strerror(int err)
{
    switch (err) {
    case 0:
        return "no error";
    case QCG_COLOUR_ELEVEL:
        return "no such level (0 site, 1 node)";
    case QCG_COLOUR_EUNSET:
        return "QCG_COLOUR_SITE, QCG_COLOUR_NODE, QCG_COLOURS_SITE or QCG_COLOURS_NODE is not "
               "set: start the job with qcg-mpirun (the job's sites need site=NAME in its host "
               "list)";
    case QCG_COLOUR_EINVAL:
        return "a QCG_COLOUR* variable is malformed: names of 1..63 of A-Z a-z 0-9 . _ -, "
               "lists comma-separated, sorted, each name once";
    case QCG_COLOUR_ENOTFOUND:
        return "the colour is not among the job's (QCG_COLOURS_SITE, QCG_COLOURS_NODE): does the "
               "host list give this node's site as the grid declares it?";
    case QCG_COLOUR_ERANGE:
        return "the buffer is too short for the colour (64 bytes always suffice)";
    default:
        return "unknown error";
    }
}
