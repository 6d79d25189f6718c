/* Open MPI's runtime daemon command line (ortecmd.h). */
#include "ortecmd.h"

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

int mca_value_index(int argc, char *const *argv, const char *name)
{
    for (int i = 0; i + 2 < argc; i++)
        if ((strcmp(argv[i], "-mca") == 0 || strcmp(argv[i], "--mca") == 0) &&
            strcmp(argv[i + 1], name) == 0)
            return i + 2;
    return -1;
}

int is_orted(const char *arg0)
{
    const char *base = strrchr(arg0, '/');

    return strcmp(base != NULL ? base + 1 : arg0, "orted") == 0;
}

int uri_tcp_endpoint(const char *uri, char *addrs, size_t addrlen, uint16_t *port)
{
    const char *p = strstr(uri, ";tcp://"), *end, *colon;
    char *stop;
    unsigned long v;

    if (p == NULL)
        return -1;
    p += strlen(";tcp://");
    end = strchr(p, ';');
    if (end == NULL)
        end = p + strlen(p);
    colon = NULL;
    for (const char *q = p; q < end; q++)
        if (*q == ':')
            colon = q;
    /* Digits only: strtoul would also take a space, a sign and wrap a
       negative number around. */
    if (colon == NULL || colon == p || (size_t)(colon - p) >= addrlen || colon[1] < '0' ||
        colon[1] > '9')
        return -1;
    v = strtoul(colon + 1, &stop, 10);
    if (stop != end || stop == colon + 1 || v == 0 || v > 65535)
        return -1;
    memcpy(addrs, p, (size_t)(colon - p));
    addrs[colon - p] = '\0';
    *port = (uint16_t)v;
    return 0;
}

int uri_point_to_loopback(const char *uri, uint16_t port, char *out, size_t outlen)
{
    const char *semi = strchr(uri, ';');
    char addrs[256];
    uint16_t old;
    int n;

    if (semi == NULL || semi == uri || uri_tcp_endpoint(uri, addrs, sizeof(addrs), &old) < 0)
        return -1;
    n = snprintf(out, outlen, "%.*s;tcp://127.0.0.1:%u", (int)(semi - uri), uri, port);
    return n > 0 && (size_t)n < outlen ? 0 : -1;
}
