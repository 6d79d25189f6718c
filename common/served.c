#include "served.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B (1u << SERVED_BROKER)
#define F (1u << SERVED_FRONTEND)
#define P (1u << SERVED_PROXY)

static const struct {
    const char *op;
    unsigned roles;
} table[] = {
    {"registerCluster", B}, {"registerNode", B | F},
    {"publish", B | F},     {"withdraw", B | F},
    {"lookup", B | F},      {"lookups", B | F},
    {"poll", B | F},        {"traverse", B | F},
    {"report", B | F},      {"reports", B | F},
    {"siteInfo", B | F},    {"probe", B | F},
    {"observed", B | F},    {"grid", B},
    {"proxyAlive", B},      {"stats", B | F | P},
};
#define NOPS (sizeof(table) / sizeof(table[0]))

const char *served_role_name(enum served_role role)
{
    return role == SERVED_FRONTEND ? "frontend" : role == SERVED_PROXY ? "proxy" : "broker";
}

static unsigned roles_of(const char *op, size_t oplen)
{
    for (size_t i = 0; i < NOPS; i++)
        if (strlen(table[i].op) == oplen && strncmp(table[i].op, op, oplen) == 0)
            return table[i].roles;
    return 0;
}

bool served_by(enum served_role role, const char *op)
{
    return (roles_of(op, strlen(op)) & (1u << role)) != 0;
}

void served_refusal(enum served_role role, const char *op, char *buf, size_t len)
{
    unsigned r = roles_of(op, strlen(op));
    const char *whose = (r & F) != 0 ? "the broker's and the frontends'" : "the broker's";
    snprintf(buf, len, "%s is not served by a %s (it is %s)", op, served_role_name(role), whose);
}

/* The end of the element that starts at `at` (its closing tag included),
   or NULL. */
static const char *element_end(const char *at, const char *close)
{
    const char *e = strstr(at, close);
    return e != NULL ? e + strlen(close) : NULL;
}

/* Appends [from, to) to out (sized for the whole input). */
static void put(char *out, size_t *n, const char *from, const char *to)
{
    memcpy(out + *n, from, (size_t)(to - from));
    *n += (size_t)(to - from);
}

/* Copies text without the elements `open`NAME"...`close` whose NAME keep()
   refuses (and the blanks before each). */
static char *filter(const char *text, const char *open, const char *close,
                    bool (*keep)(const char *name, size_t len, const void *arg), const void *arg)
{
    char *out = malloc(strlen(text) + 1);
    if (out == NULL)
        return NULL;
    size_t n = 0;
    const char *p = text, *at;
    while ((at = strstr(p, open)) != NULL) {
        const char *name = at + strlen(open), *q = strchr(name, '"');
        const char *end = q != NULL ? element_end(q, close) : NULL;
        if (end == NULL)
            break;
        if (keep(name, (size_t)(q - name), arg)) {
            put(out, &n, p, end);
        } else {
            const char *line = at;
            while (line > p && (line[-1] == ' ' || line[-1] == '\t'))
                line--;
            put(out, &n, p, line);
            if (*end == '\n')
                end++;
        }
        p = end;
    }
    put(out, &n, p, p + strlen(p));
    out[n] = '\0';
    return out;
}

static bool keep_op(const char *name, size_t len, const void *arg)
{
    return (roles_of(name, len) & (1u << *(const enum served_role *)arg)) != 0;
}

/* A message stays while an operation still names it (message="tns:NAME"). */
static bool keep_message(const char *name, size_t len, const void *arg)
{
    char ref[128];
    if (len + 20 > sizeof(ref))
        return true;
    snprintf(ref, sizeof(ref), "message=\"tns:%.*s\"", (int)len, name);
    return strstr((const char *)arg, ref) != NULL;
}

char *served_wsdl(enum served_role role, const char *wsdl)
{
    char *ops = filter(wsdl, "<operation name=\"", "</operation>", keep_op, &role);
    if (ops == NULL)
        return NULL;
    char *out = filter(ops, "<message name=\"", "</message>", keep_message, ops);
    free(ops);
    return out;
}
