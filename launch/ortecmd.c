/* Open MPI's runtime daemon command line (ortecmd.h). */
#include "ortecmd.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void words_free(char **words)
{
    if (words == NULL)
        return;
    for (int i = 0; words[i] != NULL; i++)
        free(words[i]);
}

/* Appends c to the word being built (cur, *len of cap). */
static int put(char *cur, size_t *len, size_t cap, char c)
{
    if (*len + 1 >= cap)
        return -1;
    cur[(*len)++] = c;
    return 0;
}

/* Appends the word cur[0..len) to out: 0, or -1 with why. */
static int end_word(char **out, int *count, int max, char *cur, size_t len, char *why,
                    size_t whylen)
{
    if (*count >= max) {
        snprintf(why, whylen, "more than %d words", max);
        return -1;
    }
    cur[len] = '\0';
    if ((out[*count] = strdup(cur)) == NULL) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    out[++*count] = NULL;
    return 0;
}

int shell_words(int n, const char *const *in, char **out, int max, char *why, size_t whylen)
{
    int count = 0;
    size_t total = 0;

    out[0] = NULL;
    for (int i = 0; i < n; i++)
        total += strlen(in[i]) + 1;
    char *cur = malloc(total + 1);
    if (cur == NULL) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const char *s = in[i];
        size_t len = 0;
        int inword = 0, bad = 0;
        char quote = 0;

        for (; *s && !bad; s++) {
            char c = *s;
            if (quote == '\'') {
                if (c == '\'')
                    quote = 0;
                else
                    bad = put(cur, &len, total + 1, c);
            } else if (quote == '"') {
                if (c == '"') {
                    quote = 0;
                } else if (c == '\\' && s[1] != '\0' && strchr("\"\\$`", s[1]) != NULL) {
                    bad = put(cur, &len, total + 1, *++s);
                } else if (c == '$' || c == '`') {
                    snprintf(why, whylen, "argument %d: '%c' would need a shell", i + 1, c);
                    goto fail;
                } else {
                    bad = put(cur, &len, total + 1, c);
                }
            } else if (c == '\n') {
                /* It ends a command, as ';' does. */
                snprintf(why, whylen, "argument %d: a newline would need a shell", i + 1);
                goto fail;
            } else if (c == ' ' || c == '\t') {
                if (inword) {
                    if (end_word(out, &count, max, cur, len, why, whylen) < 0)
                        goto fail;
                    len = 0;
                    inword = 0;
                }
            } else if (c == '\'' || c == '"') {
                quote = c;
                inword = 1;
            } else if (c == '\\' && s[1] != '\0') {
                bad = put(cur, &len, total + 1, *++s);
                inword = 1;
            } else if (strchr(";&|<>()$`*?[]{}~#\\", c) != NULL) {
                snprintf(why, whylen, "argument %d: '%c' would need a shell (this agent runs none)",
                         i + 1, c);
                goto fail;
            } else {
                bad = put(cur, &len, total + 1, c);
                inword = 1;
            }
        }
        if (bad) {
            snprintf(why, whylen, "argument %d too long", i + 1);
            goto fail;
        }
        if (quote) {
            snprintf(why, whylen, "argument %d: unclosed %c", i + 1, quote);
            goto fail;
        }
        if (inword && end_word(out, &count, max, cur, len, why, whylen) < 0)
            goto fail;
    }
    free(cur);
    return count;
fail:
    free(cur);
    words_free(out);
    out[0] = NULL;
    return -1;
}

const struct ompi_runtime ompi_orte = {
    .name = "ORTE (Open MPI 4.1)",
    .daemon = "orted",
    .opt = {"-mca", "--mca"},
    .hnp_uri = "orte_hnp_uri",
    .parent_uri = "orte_parent_uri",
    .set_name = "oob_tcp_if_include",
    .set_value = "lo",
    .stay_attached = NULL,
    .masks = 0,
};

const struct ompi_runtime ompi_prrte = {
    .name = "PRRTE (Open MPI 5)",
    .daemon = "prted",
    .opt = {"--prtemca", NULL},
    .hnp_uri = "prte_hnp_uri",
    .parent_uri = "prte_parent_uri",
    .set_name = "prtereachable",
    .set_value = "weighted",
    .stay_attached = "--leave-session-attached",
    .masks = 1,
};

const struct ompi_runtime *runtime_of(const char *arg0)
{
    const char *base = strrchr(arg0, '/');

    base = base != NULL ? base + 1 : arg0;
    if (strcmp(base, ompi_orte.daemon) == 0)
        return &ompi_orte;
    if (strcmp(base, ompi_prrte.daemon) == 0)
        return &ompi_prrte;
    return NULL;
}

static int is_opt(const struct ompi_runtime *rt, const char *word)
{
    for (int k = 0; k < 2; k++)
        if (rt->opt[k] != NULL && strcmp(word, rt->opt[k]) == 0)
            return 1;
    return 0;
}

int mca_value_index(const struct ompi_runtime *rt, int argc, char *const *argv, const char *name)
{
    for (int i = 0; i + 2 < argc; i++)
        if (is_opt(rt, argv[i]) && strcmp(argv[i + 1], name) == 0)
            return i + 2;
    return -1;
}

const struct ompi_runtime *runtime_of_line(int argc, char *const *argv)
{
    const struct ompi_runtime *rt = argc > 0 ? runtime_of(argv[0]) : NULL;

    if (rt != NULL)
        return rt;
    if (mca_value_index(&ompi_orte, argc, argv, ompi_orte.hnp_uri) >= 0)
        return &ompi_orte;
    if (mca_value_index(&ompi_prrte, argc, argv, ompi_prrte.hnp_uri) >= 0)
        return &ompi_prrte;
    return NULL;
}

/* The number at p..end: digits only (strtoul would also take a space, a sign
   and wrap a negative number around), at most max.  -1 if not one. */
static long number(const char *p, const char *end, long max)
{
    long v = 0;

    if (p == end)
        return -1;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
        if (v > max)
            return -1;
    }
    return v;
}

/* A list of numbers 0..max at p..end, separated by commas: its first, or -1. */
static long number_list(const char *p, const char *end, long max)
{
    long first = -1;

    while (p <= end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma != NULL ? comma : end;
        long v = number(p, stop, max);
        if (v < 0)
            return -1;
        if (first < 0)
            first = v;
        p = stop + 1;
    }
    return first;
}

int uri_tcp_endpoint(const struct ompi_runtime *rt, const char *uri, char *addrs, size_t addrlen,
                     uint16_t *port)
{
    const char *p = strstr(uri, ";tcp://"), *end, *colon, *last;
    long v;

    if (p == NULL)
        return -1;
    p += strlen(";tcp://");
    end = strchr(p, ';');
    if (end == NULL)
        end = p + strlen(p);
    /* ADDRS:PORT, or ADDRS:PORTS:MASKS */
    last = NULL;
    for (const char *q = p; q < end; q++)
        if (*q == ':')
            last = q;
    if (last == NULL)
        return -1;
    colon = last;
    if (rt->masks) {
        colon = NULL;
        for (const char *q = p; q < last; q++)
            if (*q == ':')
                colon = q;
        if (colon == NULL || number_list(last + 1, end, 128) < 0)
            return -1;
    }
    if (colon == p || (size_t)(colon - p) >= addrlen)
        return -1;
    v = number_list(colon + 1, rt->masks ? last : end, 65535);
    if (v <= 0)
        return -1;
    memcpy(addrs, p, (size_t)(colon - p));
    addrs[colon - p] = '\0';
    *port = (uint16_t)v;
    return 0;
}

int uri_point_to_loopback(const struct ompi_runtime *rt, const char *uri, uint16_t port, char *out,
                          size_t outlen)
{
    const char *semi = strchr(uri, ';');
    char addrs[256];
    uint16_t old;
    int n;

    if (semi == NULL || semi == uri || uri_tcp_endpoint(rt, uri, addrs, sizeof(addrs), &old) < 0)
        return -1;
    n = snprintf(out, outlen, "%.*s;tcp://127.0.0.1:%u%s", (int)(semi - uri), uri, port,
                 rt->masks ? ":8" : "");
    return n > 0 && (size_t)n < outlen ? 0 : -1;
}

/* The variables PRRTE's preamble may set (values of path characters and
   $NAME of the same variable). */
static const char *const preamble_vars[] = {"PRTE_PREFIX", "PMIX_PREFIX", "LD_LIBRARY_PATH",
                                            "DYLD_LIBRARY_PATH"};

/* Skips "NAME=VALUE;export NAME;" at *p: 1, 0 if *p does not start so, -1 if
   it does with a value of another form. */
static int skip_assignment(const char **p)
{
    for (size_t k = 0; k < sizeof(preamble_vars) / sizeof(preamble_vars[0]); k++) {
        const char *name = preamble_vars[k], *s = *p;
        size_t len = strlen(name);
        if (strncmp(s, name, len) != 0 || s[len] != '=')
            continue;
        for (s += len + 1; *s != ';';) {
            if (*s == '$' && strncmp(s + 1, name, len) == 0)
                s += len + 1;
            else if (*s != '\0' && (isalnum((unsigned char)*s) || strchr("/.:_-+", *s) != NULL))
                s++;
            else
                return -1;
        }
        s++;
        if (strncmp(s, "export ", 7) != 0 || strncmp(s + 7, name, len) != 0 || s[7 + len] != ';')
            return -1;
        *p = s + 7 + len + 1;
        return 1;
    }
    return 0;
}

int prrte_strip_preamble(const char *cmd, char *out, size_t outlen, char *why, size_t whylen)
{
    static const char profile[] = "( test ! -r ./.profile || . ./.profile; ";
    const char *p = cmd, *end;
    int sub = 0, n = 0, rc;

    if (strncmp(p, profile, strlen(profile)) == 0) {
        p += strlen(profile);
        sub = 1;
    }
    while ((rc = skip_assignment(&p)) == 1)
        n++;
    if (rc < 0) {
        snprintf(why, whylen, "a daemon environment setting of an unknown form");
        return -1;
    }
    if (!sub && n == 0)
        return 0;
    end = p + strlen(p);
    if (sub) {
        if (end - p < 2 || strcmp(end - 2, " )") != 0) {
            snprintf(why, whylen, "an unclosed '(' around the daemon's command");
            return -1;
        }
        end -= 2;
    }
    if ((size_t)(end - p) >= outlen) {
        snprintf(why, whylen, "the daemon's command is too long");
        return -1;
    }
    memcpy(out, p, (size_t)(end - p));
    out[end - p] = '\0';
    return 1;
}
