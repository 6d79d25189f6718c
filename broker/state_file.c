/* The broker's state file; see state_file.h. */
#include "state_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "address.h"
#include "log.h"
#include "outcomes.h"
#include "proto.h"
#include "registry.h"
#include "soapH.h"
#include "technique.h"
#include "ticker.h"
#include "validate.h"

#define MAGIC "qcg-broker-state 1"

struct writer {
    FILE *f;
};

static void write_entry(void *arg, const struct outcome_entry *e)
{
    FILE *f = ((struct writer *)arg)->f;
    for (int t = TECH_DIRECT; t < OUTCOMES_TECHNIQUES; t++) {
        const struct outcome_tally *k = &e->pair.tech[t];
        if (k->last == 0)
            continue;
        fprintf(f, "pair %s %s %s %llu %llu %d %llu %u\n", e->pair.from, e->pair.to,
                attempt_name(t), (unsigned long long)k->ok, (unsigned long long)k->failed,
                k->last_ok ? 1 : 0, (unsigned long long)k->last, k->last_setup_ms);
        for (int i = 0; i < OUTCOMES_WITNESSES; i++) {
            const struct outcome_witness *w = &e->seen[t][i];
            if (w->at != 0)
                fprintf(f, "witness %s %s %s %s %s %llu\n", e->pair.from, e->pair.to,
                        attempt_name(t), w->job, w->node, (unsigned long long)w->at);
        }
    }
}

static void write_observed(void *arg, const char *cluster, const struct reg_observation *o)
{
    FILE *f = ((struct writer *)arg)->f;
    fprintf(f, "observed %s %llu %s %s %s %d %s %s\n", cluster, (unsigned long long)o->when,
            o->node, cluster_kind_name(o->kind), o->public_addr[0] != '\0' ? o->public_addr : "-",
            o->port_preserving, o->mapping, o->inbound);
}

static void write_frontend(void *arg, const char *cluster, const char (*addrs)[QCG_ADDR_MAX], int n)
{
    FILE *f = ((struct writer *)arg)->f;
    fprintf(f, "frontend %s", cluster);
    for (int i = 0; i < n; i++)
        fprintf(f, " %s", addrs[i]);
    fputc('\n', f);
}

/* The directory's entry made durable too: the rename is what commits. */
static void sync_dir(const char *path)
{
    char copy[4096];
    snprintf(copy, sizeof(copy), "%s", path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

int state_dir_ready(const char *path, char *err, size_t errlen)
{
    char copy[4096];
    struct stat st;
    snprintf(copy, sizeof(copy), "%s", path);
    const char *dir = dirname(copy);
    if (stat(dir, &st) == 0 || errno != ENOENT)
        return 0; /* what else is wrong, the first write says */
    if (mkdir(dir, 0700) == 0) {
        log_info("state file %s: made its directory %s (mode 0700)", path, dir);
        return 0;
    }
    snprintf(err, errlen,
             "state file %s: cannot create its directory %s: %s (the broker runs as uid %u); "
             "make it, owned by the broker's user: install -d -o qcg -g qcg -m 0700 %s",
             path, dir, strerror(errno), (unsigned)geteuid(), dir);
    return -1;
}

int state_save(struct outcomes *o, struct registry *reg, const char *path, char *err, size_t errlen)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= (int)sizeof(tmp)) {
        snprintf(err, errlen, "state file %s: path too long", path);
        return -1;
    }
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "state file %s: cannot create %s: %s", path, tmp, strerror(errno));
        return -1;
    }
    FILE *f = fdopen(fd, "w");
    if (f == NULL) {
        snprintf(err, errlen, "state file %s: %s", path, strerror(errno));
        close(fd);
        unlink(tmp);
        return -1;
    }
    struct writer w = {f};
    fprintf(f, "# what qcg-broker learned (docs/admin.md); rewritten while it runs\n%s\n", MAGIC);
    outcomes_each(o, write_entry, &w);
    if (reg != NULL) {
        registry_observations_each(reg, write_observed, &w);
        registry_frontends_each(reg, write_frontend, &w);
    }
    bool ok = fflush(f) == 0 && !ferror(f) && fsync(fd) == 0;
    int saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (!ok || rename(tmp, path) != 0) {
        if (ok)
            saved = errno;
        snprintf(err, errlen, "state file %s: cannot write: %s", path, strerror(saved));
        unlink(tmp);
        return -1;
    }
    sync_dir(path);
    return 0;
}

/* ---- reading ---- */

static bool parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

/* Splits line into at most max blank-separated words; how many, or -1 when
   there are more. */
static int split(char *line, char **word, int max)
{
    int n = 0;
    for (char *save = NULL, *w = strtok_r(line, " \t", &save); w != NULL;
         w = strtok_r(NULL, " \t", &save)) {
        if (n == max)
            return -1;
        word[n++] = w;
    }
    return n;
}

struct reader {
    struct outcomes *o;
    struct registry *reg;
    struct outcome_entry cur; /* the pair being read; from[0] == 0: none */
    int witnesses[OUTCOMES_TECHNIQUES];
    struct state_loaded *out;
};

static void flush_pair(struct reader *r)
{
    if (r->cur.pair.from[0] == '\0')
        return;
    if (outcomes_restore(r->o, &r->cur) == 0)
        r->out->pairs++;
    memset(&r->cur, 0, sizeof(r->cur));
    memset(r->witnesses, 0, sizeof(r->witnesses));
}

static bool same_pair(const struct reader *r, const char *from, const char *to)
{
    return strcmp(r->cur.pair.from, from) == 0 && strcmp(r->cur.pair.to, to) == 0;
}

/* observed CLUSTER WHEN NODE KIND PUBLIC PRESERVING MAPPING INBOUND: held by
   the same checks as a probe's report (validate_observation). */
static bool read_observed(struct reader *r, char **w, int n)
{
    uint64_t when;
    char *end;
    if (n != 9 || !name_valid(w[1]) || !parse_u64(w[2], &when) || when == 0)
        return false;
    long preserving = strtol(w[6], &end, 10);
    if (*end != '\0' || end == w[6] || preserving < -1 || preserving > 1)
        return false;
    struct qcg__observation in = {.cluster = w[1],
                                  .node = w[3],
                                  .kind = w[4],
                                  .publicAddress = strcmp(w[5], "-") == 0 ? w[5] + 1 : w[5],
                                  .portPreserving = (int)preserving,
                                  .mapping = w[7],
                                  .inbound = w[8]};
    struct reg_observation o;
    char why[256];
    if (validate_observation(&in, &o, why, sizeof(why)) != 0)
        return false;
    o.when = when;
    if (r->reg == NULL)
        return true;
    if (registry_observation_restore(r->reg, w[1], &o) < 0)
        return false;
    r->out->observations++;
    return true;
}

/* frontend CLUSTER ADDRESS...: the addresses its frontend connects from. */
static bool read_frontend(struct reader *r, char **w, int n)
{
    char addrs[REG_FRONTEND_ADDRS][QCG_ADDR_MAX];
    if (n < 3 || n - 2 > REG_FRONTEND_ADDRS || !name_valid(w[1]))
        return false;
    for (int i = 2; i < n; i++) {
        if (!address_valid(w[i]))
            return false;
        snprintf(addrs[i - 2], sizeof(addrs[0]), "%s", w[i]);
    }
    if (r->reg == NULL)
        return true;
    int rc = registry_frontend_restore(r->reg, w[1], (const char(*)[QCG_ADDR_MAX])addrs, n - 2);
    if (rc < 0)
        return false;
    r->out->frontends += rc == 0;
    return true;
}

/* One line; false when it is not understood. */
static bool read_line(struct reader *r, char *line)
{
    char *w[REG_FRONTEND_ADDRS + 2];
    int n = split(line, w, REG_FRONTEND_ADDRS + 2);
    if (n <= 0)
        return n == 0;
    if (strcmp(w[0], "observed") == 0)
        return read_observed(r, w, n);
    if (strcmp(w[0], "frontend") == 0)
        return read_frontend(r, w, n);
    int t = n >= 4 ? attempt_parse(w[3]) : -1;
    if (t <= TECH_NONE || t >= OUTCOMES_TECHNIQUES || !name_valid(w[1]) || !name_valid(w[2]))
        return false;
    if (strcmp(w[0], "pair") == 0 && n == 9) {
        uint64_t ok, failed, last_ok, last, setup;
        if (!parse_u64(w[4], &ok) || !parse_u64(w[5], &failed) || !parse_u64(w[6], &last_ok) ||
            last_ok > 1 || !parse_u64(w[7], &last) || last == 0 || !parse_u64(w[8], &setup) ||
            setup > 3600000)
            return false;
        if (!same_pair(r, w[1], w[2])) {
            flush_pair(r);
            memcpy(r->cur.pair.from, w[1], strlen(w[1]) + 1);
            memcpy(r->cur.pair.to, w[2], strlen(w[2]) + 1);
        }
        struct outcome_tally *k = &r->cur.pair.tech[t];
        *k = (struct outcome_tally){.ok = ok,
                                    .failed = failed,
                                    .last_ok = last_ok == 1,
                                    .last = last,
                                    .last_setup_ms = (unsigned)setup};
        return true;
    }
    if (strcmp(w[0], "witness") == 0 && n == 7) {
        uint64_t at;
        /* A witness follows its pair's line. */
        if (!same_pair(r, w[1], w[2]) || r->cur.pair.tech[t].last == 0 ||
            r->witnesses[t] >= OUTCOMES_WITNESSES || !job_valid(w[4]) || !name_valid(w[5]) ||
            !parse_u64(w[6], &at) || at == 0)
            return false;
        struct outcome_witness *x = &r->cur.seen[t][r->witnesses[t]++];
        memcpy(x->job, w[4], strlen(w[4]) + 1);
        memcpy(x->node, w[5], strlen(w[5]) + 1);
        x->at = at;
        return true;
    }
    return false;
}

int state_load(struct outcomes *o, struct registry *reg, const char *path, struct state_loaded *out,
               char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        out->missing = 1;
        return 0;
    }
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        snprintf(err, errlen, "state file %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > STATE_FILE_MAX) {
        snprintf(err, errlen, "state file %s: %s", path,
                 S_ISREG(st.st_mode) ? "larger than 16 MiB" : "not a regular file");
        close(fd);
        return -1;
    }
    FILE *f = fdopen(fd, "r");
    if (f == NULL) {
        snprintf(err, errlen, "state file %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    struct reader r = {.o = o, .reg = reg, .out = out};
    char line[1024];
    int lineno = 0;
    bool magic = false;
    while (fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        size_t len = strlen(line);
        bool whole = len > 0 && line[len - 1] == '\n';
        bool too_long = !whole && !feof(f);
        if (whole)
            line[--len] = '\0';
        if (too_long) {
            /* A line longer than any we write: skip the rest of it. */
            int c;
            while ((c = fgetc(f)) != EOF && c != '\n')
                ;
        }
        if (line[0] == '#' || (len == 0 && whole))
            continue;
        if (!magic) {
            if (strcmp(line, MAGIC) != 0) {
                snprintf(err, errlen, "state file %s: line %d is not \"%s\"", path, lineno, MAGIC);
                fclose(f);
                return -1;
            }
            magic = true;
            continue;
        }
        if (too_long || !read_line(&r, line)) {
            out->skipped++;
            if (out->first_bad == 0)
                out->first_bad = lineno;
        }
    }
    flush_pair(&r);
    fclose(f);
    if (!magic && lineno > 0) {
        snprintf(err, errlen, "state file %s: no \"%s\" line", path, MAGIC);
        return -1;
    }
    return 0;
}

/* ---- the saver thread ---- */

struct state_saver {
    struct outcomes *o;
    struct registry *reg;
    char *path;
    struct ticker *ticker;
    uint64_t saved_generation, saved_observed;
    unsigned failures; /* in a row: logged once */
};

static void save_if_changed(struct state_saver *s)
{
    char err[512];
    uint64_t g = outcomes_generation(s->o);
    uint64_t obs = s->reg != NULL ? registry_observed_generation(s->reg) : 0;
    if (g == s->saved_generation && obs == s->saved_observed)
        return;
    if (state_save(s->o, s->reg, s->path, err, sizeof(err)) == 0) {
        if (s->failures > 0)
            log_info("state file %s written again", s->path);
        s->failures = 0;
        s->saved_generation = g;
        s->saved_observed = obs;
    } else if (s->failures++ == 0) {
        log_warnx("%s (what the broker learned will not survive a restart until this is fixed)",
                  err);
    }
}

static void save_tick(void *arg)
{
    save_if_changed(arg);
}

struct state_saver *state_saver_start(struct outcomes *o, struct registry *reg, const char *path,
                                      char *err, size_t errlen)
{
    struct state_saver *s = calloc(1, sizeof(*s));
    char why[128];
    if (s == NULL || (s->path = strdup(path)) == NULL) {
        free(s);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->o = o;
    s->reg = reg;
    s->saved_generation = outcomes_generation(o);
    s->saved_observed = reg != NULL ? registry_observed_generation(reg) : 0;
    s->ticker = ticker_start(STATE_SAVE_INTERVAL_S, false, save_tick, s, why, sizeof(why));
    if (s->ticker == NULL) {
        snprintf(err, errlen, "state file: %s", why);
        free(s->path);
        free(s);
        return NULL;
    }
    return s;
}

void state_saver_stop(struct state_saver *s)
{
    if (s == NULL)
        return;
    ticker_stop(s->ticker);
    /* The saver wrote what changed when it woke: nothing is left but what
       came since, which this last pass takes. */
    save_if_changed(s);
    free(s->path);
    free(s);
}
