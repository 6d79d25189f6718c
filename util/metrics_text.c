/* The exposition format; see metrics_text.h. */
#include "metrics_text.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double metrics_setup_buckets[METRICS_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                       0.1,   0.25,   0.5,   1,    5,     30};

void metrics_buf_free(struct metrics_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

static void put(struct metrics_buf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void puts_(struct metrics_buf *b, const char *s)
{
    put(b, s, strlen(s));
}

/* HELP text escapes \ and newline; label values also ". */
static void escaped(struct metrics_buf *b, const char *s, bool quote)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\')
            puts_(b, "\\\\");
        else if (*s == '\n')
            puts_(b, "\\n");
        else if (quote && *s == '"')
            puts_(b, "\\\"");
        else
            put(b, s, 1);
    }
}

void metrics_family(struct metrics_buf *b, const char *name, const char *type, const char *help)
{
    puts_(b, "# HELP ");
    puts_(b, name);
    puts_(b, " ");
    escaped(b, help, false);
    puts_(b, "\n# TYPE ");
    puts_(b, name);
    puts_(b, " ");
    puts_(b, type);
    puts_(b, "\n");
}

static void value_text(struct metrics_buf *b, double v)
{
    char num[40];
    if (isnan(v))
        snprintf(num, sizeof(num), "NaN");
    else if (isinf(v))
        snprintf(num, sizeof(num), v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 1e15)
        snprintf(num, sizeof(num), "%.0f", v);
    else
        snprintf(num, sizeof(num), "%.9g", v);
    puts_(b, num);
}

void metrics_sample_v(struct metrics_buf *b, const char *name, double value,
                      const char *const *labels, int nlabels)
{
    puts_(b, name);
    for (int i = 0; i < nlabels; i++) {
        puts_(b, i == 0 ? "{" : ",");
        puts_(b, labels[2 * i]);
        puts_(b, "=\"");
        escaped(b, labels[2 * i + 1] != NULL ? labels[2 * i + 1] : "", true);
        puts_(b, "\"");
    }
    puts_(b, nlabels > 0 ? "} " : " ");
    value_text(b, value);
    puts_(b, "\n");
}

void metrics_sample(struct metrics_buf *b, const char *name, double value, ...)
{
    const char *labels[16];
    int n = 0;
    va_list ap;
    va_start(ap, value);
    const char *s;
    while (n < 16 && (s = va_arg(ap, const char *)) != NULL)
        labels[n++] = s;
    va_end(ap);
    metrics_sample_v(b, name, value, labels, n / 2);
}

void metrics_observe(struct metrics_histogram *h, double value)
{
    for (int i = 0; i < METRICS_BUCKETS; i++) {
        if (value <= metrics_setup_buckets[i]) {
            h->bucket[i]++;
            break;
        }
    }
    h->count++;
    h->sum += value;
}

void metrics_histogram_add(struct metrics_histogram *into, const struct metrics_histogram *h)
{
    for (int i = 0; i < METRICS_BUCKETS; i++)
        into->bucket[i] += h->bucket[i];
    into->count += h->count;
    into->sum += h->sum;
}

void metrics_histogram_write(struct metrics_buf *b, const char *name,
                             const struct metrics_histogram *h, const char *const *labels,
                             int nlabels)
{
    char full[128], le[32];
    const char *l[2 * 8 + 2];
    int n = nlabels < 8 ? nlabels : 8;
    memcpy(l, labels, sizeof(*l) * 2 * (size_t)n);
    l[2 * n] = "le";
    l[2 * n + 1] = le;
    uint64_t cumulative = 0;
    snprintf(full, sizeof(full), "%s_bucket", name);
    for (int i = 0; i < METRICS_BUCKETS; i++) {
        cumulative += h->bucket[i];
        snprintf(le, sizeof(le), "%g", metrics_setup_buckets[i]);
        metrics_sample_v(b, full, (double)cumulative, l, n + 1);
    }
    snprintf(le, sizeof(le), "+Inf");
    metrics_sample_v(b, full, (double)h->count, l, n + 1);
    snprintf(full, sizeof(full), "%s_sum", name);
    metrics_sample_v(b, full, h->sum, l, n);
    snprintf(full, sizeof(full), "%s_count", name);
    metrics_sample_v(b, full, (double)h->count, l, n);
}

void metrics_write_mapped(struct metrics_buf *b, const struct metrics_map *map, size_t nmap,
                          const struct metrics_counter *c, size_t n)
{
    for (size_t i = 0; i < nmap; i++) {
        const struct metrics_map *m = &map[i];
        if (i == 0 || strcmp(map[i - 1].metric, m->metric) != 0)
            metrics_family(b, m->metric, m->type, m->help);
        for (size_t j = 0; j < n; j++) {
            if (strcmp(c[j].name, m->counter) != 0)
                continue;
            const char *l[2] = {m->label, m->value};
            metrics_sample_v(b, m->metric, (double)c[j].value, l, m->label != NULL ? 1 : 0);
            break;
        }
    }
}
