/* Names of roles and cluster kinds, and the rules for names. */
#include "proto.h"

#include <string.h>

static const char *const role_names[] = {
    [QCG_ROLE_NONE] = "none",         [QCG_ROLE_BROKER] = "broker", [QCG_ROLE_PROXY] = "proxy",
    [QCG_ROLE_FRONTEND] = "frontend", [QCG_ROLE_HELPER] = "helper",
};

static const char *const kind_names[] = {
    [CLUSTER_OPEN] = "open",
    [CLUSTER_FIREWALLED] = "firewalled",
    [CLUSTER_NAT] = "nat",
    [CLUSTER_SYMNAT] = "symnat",
};

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Index of name in table[first..], -1 if absent. */
static int lookup(const char *const *table, int n, int first, const char *name)
{
    if (name == NULL)
        return -1;
    for (int i = first; i < n; i++)
        if (strcmp(table[i], name) == 0)
            return i;
    return -1;
}

const char *role_name(enum qcg_role role)
{
    if ((int)role < 0 || (int)role >= NELEM(role_names))
        return "unknown";
    return role_names[role];
}

enum qcg_role role_parse(const char *name)
{
    int i = lookup(role_names, NELEM(role_names), QCG_ROLE_NONE + 1, name);
    return i < 0 ? QCG_ROLE_NONE : (enum qcg_role)i;
}

const char *cluster_kind_name(enum cluster_kind kind)
{
    if ((int)kind < 0 || (int)kind >= NELEM(kind_names))
        return "unknown";
    return kind_names[kind];
}

int cluster_kind_parse(const char *name)
{
    return lookup(kind_names, NELEM(kind_names), 0, name);
}

bool observed_inbound_valid(const char *word)
{
    static const char *const words[] = {"open", "dropped", "reset", "icmp", "rejected", "unknown"};
    return word != NULL && lookup(words, NELEM(words), 0, word) >= 0;
}

static bool is_alnum(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* [A-Za-z0-9][A-Za-z0-9._-]* of 1..max_len characters. */
static bool token_valid(const char *s, size_t max_len)
{
    if (s == NULL || !is_alnum(s[0]))
        return false;
    size_t i;
    for (i = 0; s[i]; i++) {
        if (i >= max_len)
            return false;
        char c = s[i];
        if (!is_alnum(c) && c != '.' && c != '_' && c != '-')
            return false;
    }
    return true;
}

bool name_valid(const char *name)
{
    return token_valid(name, QCG_NAME_MAX - 1);
}

bool job_valid(const char *job)
{
    return token_valid(job, QCG_JOB_MAX - 1);
}

bool secret_valid(const char *secret)
{
    if (secret == NULL || secret[0] == '\0')
        return false;
    for (size_t i = 0; secret[i]; i++) {
        if (i >= QCG_SECRET_MAX - 1)
            return false;
        if (secret[i] < 0x20 || secret[i] > 0x7e)
            return false;
    }
    return true;
}
