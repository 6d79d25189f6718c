/* The technique names used in plans, logs and --json. */
#include "technique.h"

#include <string.h>

static const char *const technique_names[TECH_COUNT] = {
    [TECH_NONE] = "none",           [TECH_DIRECT] = "direct",
    [TECH_REVERSED] = "reversed",   [TECH_TRAVERSING] = "traversing",
    [TECH_HOLEPUNCH] = "holepunch", [TECH_PROXY] = "proxy",
};

const char *technique_name(enum technique t)
{
    if ((int)t < 0 || (int)t >= TECH_COUNT)
        return "unknown";
    return technique_names[t];
}

int technique_parse(const char *name)
{
    if (name == NULL)
        return -1;
    /* "none" is not a technique a plan may carry. */
    for (int i = TECH_NONE + 1; i < TECH_COUNT; i++)
        if (strcmp(technique_names[i], name) == 0)
            return i;
    return -1;
}

const char *attempt_name(int a)
{
    return a == TECH_PUNCH6 ? "holepunch6" : technique_name((enum technique)a);
}

int attempt_parse(const char *name)
{
    if (name != NULL && strcmp(name, "holepunch6") == 0)
        return TECH_PUNCH6;
    return technique_parse(name);
}
