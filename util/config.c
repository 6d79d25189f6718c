/*
 * Settings from one option table: defaults, then the config file, then the
 * command line.  Every error is one line naming where it came from (file and
 * line, or the flag) and what was wrong.
 */
#include "config.h"
#include "number.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto.h"

#ifndef QCG_VERSION
#define QCG_VERSION "unknown"
#endif

#define CONFIG_LINE_MAX 4096
/* A config file is a few dozen lines; anything this big is a mistake. */
#define CONFIG_FILE_MAX (1024 * 1024)

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Prefixes err with "what: " in place. */
static void prefix_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void prefix_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    char prefix[512], rest[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    snprintf(rest, sizeof(rest), "%s", err);
    snprintf(err, errlen, "%s: %s", prefix, rest);
}

int config_is_action(const struct config_option *o)
{
    return o->type != CONFIG_INT && o->min == CONFIG_ACTION;
}

static const struct config_option *find_option(const struct config_option *options,
                                               const char *name, size_t len)
{
    for (const struct config_option *o = options; o->name; o++)
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
            return o;
    return NULL;
}

/* Quotes a value for an error message, shortened so the message stays one
   readable line. */
static const char *shown(const char *value, char *buf, size_t len)
{
    size_t n = strlen(value);
    if (n + 1 <= len) {
        memcpy(buf, value, n + 1);
    } else {
        memcpy(buf, value, len - 4);
        memcpy(buf + len - 4, "...", 4);
    }
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return buf;
}

static int parse_long(const char *s, long *out)
{
    return number_parse(s, LONG_MIN, LONG_MAX, out);
}

static int parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"yes", "true", "1", "on"};
    static const char *const no[] = {"no", "false", "0", "off"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

/* "LOW-HIGH" with 1 <= LOW <= HIGH <= 65535; "none" or "0-0" mean no range
   (stored as 0-0, the schema's "no open range"). */
static int parse_ports(const char *s, int out[2])
{
    if (strcasecmp(s, "none") == 0 || strcmp(s, "0-0") == 0) {
        out[0] = out[1] = 0;
        return 0;
    }
    const char *dash = strchr(s, '-');
    if (dash == NULL || dash == s || dash[1] == '\0')
        return -1;
    char low[16];
    size_t n = (size_t)(dash - s);
    if (n >= sizeof(low))
        return -1;
    memcpy(low, s, n);
    low[n] = '\0';
    long lo, hi;
    if (low[0] == '+' || dash[1] == '+' || dash[1] == '-')
        return -1;
    if (parse_long(low, &lo) < 0 || parse_long(dash + 1, &hi) < 0)
        return -1;
    if (lo < 1 || hi > 65535 || lo > hi)
        return -1;
    out[0] = (int)lo;
    out[1] = (int)hi;
    return 0;
}

static int set_value(const struct config_option *o, void *cfg, const char *value, char *err,
                     size_t errlen)
{
    char *field = (char *)cfg + o->offset;
    char buf[64];
    switch (o->type) {
    case CONFIG_STRING: {
        char *copy = strdup(value);
        if (copy == NULL) {
            set_err(err, errlen, "out of memory");
            return -1;
        }
        char **p = (char **)(void *)field;
        free(*p);
        *p = copy;
        return 0;
    }
    case CONFIG_INT: {
        long v;
        if (parse_long(value, &v) < 0 || v < o->min || v > o->max) {
            set_err(err, errlen, "\"%s\" is not a number in %ld..%ld",
                    shown(value, buf, sizeof(buf)), o->min, o->max);
            return -1;
        }
        *(int *)(void *)field = (int)v;
        return 0;
    }
    case CONFIG_BOOL: {
        int v;
        if (parse_bool(value, &v) < 0) {
            set_err(err, errlen, "\"%s\" is not a boolean (yes/no, true/false, on/off, 1/0)",
                    shown(value, buf, sizeof(buf)));
            return -1;
        }
        *(int *)(void *)field = v;
        return 0;
    }
    case CONFIG_PORTS: {
        int v[2];
        if (parse_ports(value, v) < 0) {
            set_err(
                err, errlen,
                "\"%s\" is not a port range LOW-HIGH with 1 <= LOW <= HIGH <= 65535 (or \"none\")",
                shown(value, buf, sizeof(buf)));
            return -1;
        }
        memcpy(field, v, sizeof(v));
        return 0;
    }
    }
    set_err(err, errlen, "option %s has an unknown type", o->name);
    return -1;
}

int config_set(const struct config_option *options, void *cfg, const char *name, const char *value,
               char *err, size_t errlen)
{
    char buf[64];
    const struct config_option *o = name ? find_option(options, name, strlen(name)) : NULL;
    if (o == NULL) {
        set_err(err, errlen, "unknown option \"%s\"", shown(name ? name : "", buf, sizeof(buf)));
        return -1;
    }
    if (value == NULL) {
        set_err(err, errlen, "missing value");
        return -1;
    }
    return set_value(o, cfg, value, err, errlen);
}

void config_free(const struct config_option *options, void *cfg)
{
    for (const struct config_option *o = options; o->name; o++) {
        if (o->type == CONFIG_STRING) {
            char **p = (char **)(void *)((char *)cfg + o->offset);
            free(*p);
            *p = NULL;
        }
    }
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* A '#' that begins the line or follows a blank, outside double quotes,
   starts a comment to the end of the line ("port = 7700   # the default"), as
   in most name = value formats; a '#' inside a word stays ("a#b", a URL's
   fragment). */
static void cut_comment(char *s)
{
    bool quoted = false;
    for (char *p = s; *p != '\0'; p++) {
        if (*p == '"')
            quoted = !quoted;
        else if (*p == '#' && !quoted && (p == s || p[-1] == ' ' || p[-1] == '\t')) {
            *p = '\0';
            return;
        }
    }
}

/* One "name = value" line (already without its newline). */
static int parse_line(const struct config_option *options, void *cfg, char *line, char *err,
                      size_t errlen)
{
    char buf[64];
    cut_comment(line);
    char *s = trim(line);
    if (*s == '\0')
        return 0;
    char *eq = strchr(s, '=');
    char *name = s, *value = NULL;
    if (eq != NULL) {
        *eq = '\0';
        name = trim(s);
        value = trim(eq + 1);
        /* Quotes keep leading or trailing blanks; they are not part of the value. */
        size_t n = strlen(value);
        if (n >= 2 && value[0] == '"' && value[n - 1] == '"') {
            value[n - 1] = '\0';
            value++;
        }
    }
    if (*name == '\0') {
        set_err(err, errlen, "expected \"name = value\"");
        return -1;
    }
    const struct config_option *o = find_option(options, name, strlen(name));
    if (o == NULL) {
        set_err(err, errlen, "unknown option \"%s\"", shown(name, buf, sizeof(buf)));
        return -1;
    }
    if (config_is_action(o)) {
        set_err(err, errlen,
                "%s is an option of the command line (--%s), not a setting of the file", o->name,
                o->name);
        return -1;
    }
    if (value == NULL) {
        if (o->type != CONFIG_BOOL) {
            set_err(err, errlen, "%s: missing value (expected \"%s = value\")", o->name, o->name);
            return -1;
        }
        value = "yes";
    }
    if (set_value(o, cfg, value, err, errlen) < 0) {
        prefix_err(err, errlen, "%s", o->name);
        return -1;
    }
    return 0;
}

int config_read_file(const struct config_option *options, void *cfg, const char *path, char *err,
                     size_t errlen)
{
    /* O_NONBLOCK: a FIFO given by mistake must not hang the daemon in open(). */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        set_err(err, errlen, "config file %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        set_err(err, errlen, "config file %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, "config file %s: not a regular file", path);
        close(fd);
        return -1;
    }
    if (st.st_size > CONFIG_FILE_MAX) {
        set_err(err, errlen, "config file %s: larger than %d bytes", path, CONFIG_FILE_MAX);
        close(fd);
        return -1;
    }

    char *data = malloc((size_t)st.st_size + 1);
    if (data == NULL) {
        set_err(err, errlen, "config file %s: out of memory", path);
        close(fd);
        return -1;
    }
    size_t len = 0;
    for (;;) {
        if (len == (size_t)st.st_size) {
            break; /* the file may have grown since fstat: ignore the rest */
        }
        ssize_t r = read(fd, data + len, (size_t)st.st_size - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            set_err(err, errlen, "config file %s: %s", path, strerror(errno));
            free(data);
            close(fd);
            return -1;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    data[len] = '\0';

    int rc = 0;
    int lineno = 0;
    char *p = data, *end = data + len;
    while (p < end) {
        lineno++;
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *line_end = nl ? nl : end;
        size_t n = (size_t)(line_end - p);
        if (n > CONFIG_LINE_MAX) {
            set_err(err, errlen, "config file %s line %d: longer than %d characters", path, lineno,
                    CONFIG_LINE_MAX);
            rc = -1;
            break;
        }
        if (memchr(p, '\0', n) != NULL) {
            set_err(err, errlen, "config file %s line %d: contains a NUL byte", path, lineno);
            rc = -1;
            break;
        }
        *line_end = '\0';
        if (parse_line(options, cfg, p, err, errlen) < 0) {
            prefix_err(err, errlen, "config file %s line %d", path, lineno);
            rc = -1;
            break;
        }
        p = line_end + 1;
    }
    free(data);
    return rc;
}

static const char *type_text(const struct config_option *o, char *buf, size_t len)
{
    switch (o->type) {
    case CONFIG_STRING:
        return "TEXT";
    case CONFIG_INT:
        snprintf(buf, len, "N (%ld..%ld)", o->min, o->max);
        return buf;
    case CONFIG_BOOL:
        return "[yes|no]";
    case CONFIG_PORTS:
        return "LOW-HIGH";
    }
    return "?";
}

static void print_help(const struct config_option *options, const char *prog, const char *usage)
{
    printf("Usage: %s\n\nOptions (--name value, --name=value, or \"name = value\" in the config "
           "file; flags win over the file):\n",
           usage ? usage : prog);
    printf("  --config FILE\n      read settings from FILE first\n");
    printf("  --help\n      print this text and exit\n");
    printf("  --version\n      print the version and the protocol version and exit\n");
    printf("  --check-config\n      read the config file and the flags, say whether every name "
           "is known and\n      every value well-formed, and exit (files named and required "
           "settings are\n      checked at start)\n");
    for (const struct config_option *o = options; o->name; o++) {
        char buf[64];
        printf("  --%s %s\n      %s", o->name, type_text(o, buf, sizeof(buf)),
               o->help ? o->help : "");
        if (o->def)
            printf(" (default: %s)", o->def[0] ? o->def : "\"\"");
        printf("\n");
    }
}

static const char *prog_name(int argc, char **argv)
{
    if (argc < 1 || argv[0] == NULL)
        return "qcg";
    const char *slash = strrchr(argv[0], '/');
    return slash ? slash + 1 : argv[0];
}

static bool is_flag(const char *arg)
{
    return arg[0] == '-' && arg[1] != '\0';
}

/* "--name[=value]" -> option name span; returns the value after '=' or NULL. */
static const char *split_flag(const char *arg, size_t *name_len)
{
    const char *name = arg + 2;
    const char *eq = strchr(name, '=');
    *name_len = eq ? (size_t)(eq - name) : strlen(name);
    return eq ? eq + 1 : NULL;
}

/* Moves the non-option arguments to the end of argv, keeping their order. */
static int permute(int argc, char **argv, int nonopt_count, const bool *is_nonopt)
{
    char **tmp = malloc((size_t)argc * sizeof(*tmp));
    if (tmp == NULL)
        return -1;
    int a = 1, b = argc - nonopt_count;
    for (int i = 1; i < argc; i++) {
        if (is_nonopt[i])
            tmp[b++] = argv[i];
        else
            tmp[a++] = argv[i];
    }
    memcpy(argv + 1, tmp + 1, (size_t)(argc - 1) * sizeof(*tmp));
    free(tmp);
    return argc - nonopt_count;
}

enum config_result config_load(const struct config_option *options, void *cfg, int argc,
                               char **argv, const char *usage, int *first_arg, char *err,
                               size_t errlen)
{
    const char *prog = prog_name(argc, argv);
    char buf[64];

    /* The caller's struct may hold garbage: every setting starts from zero
       (NULL string, 0, 0-0), which is also how "no default" reads. */
    for (const struct config_option *o = options; o->name; o++) {
        char *field = (char *)cfg + o->offset;
        switch (o->type) {
        case CONFIG_STRING:
            *(char **)(void *)field = NULL;
            break;
        case CONFIG_INT:
        case CONFIG_BOOL:
            *(int *)(void *)field = 0;
            break;
        case CONFIG_PORTS:
            memset(field, 0, 2 * sizeof(int));
            break;
        }
    }
    for (const struct config_option *o = options; o->name; o++) {
        if (o->def == NULL)
            continue;
        if (set_value(o, cfg, o->def, err, errlen) < 0) {
            prefix_err(err, errlen, "%s: default of --%s", prog, o->name);
            config_free(options, cfg);
            return CONFIG_ERROR;
        }
    }

    bool *is_nonopt = calloc((size_t)(argc > 0 ? argc : 1), sizeof(bool));
    if (is_nonopt == NULL) {
        set_err(err, errlen, "%s: out of memory", prog);
        config_free(options, cfg);
        return CONFIG_ERROR;
    }
    enum config_result result = CONFIG_ERROR;
    int nonopt = 0;
    const char *config_path = NULL;

    /* Pass 1: classify the arguments, find --config, --help and --version, and
       reject unknown flags and missing values before anything is applied. */
    bool help = false, version = false, check = false, after_dashes = false;
    const char *man = NULL;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (after_dashes || !is_flag(arg)) {
            is_nonopt[i] = true;
            nonopt++;
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            after_dashes = true;
            continue;
        }
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            help = true;
            continue;
        }
        if (strcmp(arg, "--version") == 0) {
            version = true;
            continue;
        }
        if (strcmp(arg, "--check-config") == 0) {
            check = true;
            continue;
        }
        if (strcmp(arg, "--man") == 0 || strncmp(arg, "--man=", 6) == 0) {
            man = arg[5] == '=' ? arg + 6 : "";
            continue;
        }
        if (arg[1] != '-') {
            set_err(err, errlen, "%s: unknown option \"%s\" (see --help)", prog,
                    shown(arg, buf, sizeof(buf)));
            goto out;
        }
        size_t nlen;
        const char *value = split_flag(arg, &nlen);
        const char *name = arg + 2;
        if (nlen == 6 && strncmp(name, "config", 6) == 0) {
            if (value == NULL) {
                if (i + 1 >= argc) {
                    set_err(err, errlen, "%s: --config: missing value", prog);
                    goto out;
                }
                value = argv[++i];
            }
            config_path = value;
            continue;
        }
        const struct config_option *o = find_option(options, name, nlen);
        bool negated = false;
        if (o == NULL && nlen > 3 && strncmp(name, "no-", 3) == 0) {
            o = find_option(options, name + 3, nlen - 3);
            negated = o != NULL && o->type == CONFIG_BOOL && value == NULL;
            if (!negated)
                o = NULL;
        }
        if (o == NULL) {
            set_err(err, errlen, "%s: unknown option \"%s\" (see --help)", prog,
                    shown(arg, buf, sizeof(buf)));
            goto out;
        }
        /* A bool flag alone means yes; it never takes the next argument, so
           "--foreground file" keeps "file" as an argument. */
        if (value == NULL && o->type != CONFIG_BOOL && !negated) {
            if (i + 1 >= argc) {
                set_err(err, errlen, "%s: --%s: missing value", prog, o->name);
                goto out;
            }
            i++;
        }
    }

    if (help) {
        print_help(options, prog, usage);
        result = CONFIG_EXIT_OK;
        goto out;
    }
    if (man != NULL) {
        config_print_man(options, usage ? usage : prog, man);
        result = CONFIG_EXIT_OK;
        goto out;
    }
    if (version) {
        printf("%s %s (protocol version %d)\n", prog, QCG_VERSION, QCG_PROTOCOL_VERSION);
        result = CONFIG_EXIT_OK;
        goto out;
    }
    if (nonopt > 0 && first_arg == NULL) {
        for (int i = 1; i < argc; i++) {
            if (is_nonopt[i]) {
                set_err(err, errlen, "%s: unexpected argument \"%s\"", prog,
                        shown(argv[i], buf, sizeof(buf)));
                goto out;
            }
        }
    }

    if (config_path != NULL) {
        if (config_read_file(options, cfg, config_path, err, errlen) < 0) {
            prefix_err(err, errlen, "%s", prog);
            goto out;
        }
    }

    /* Pass 2: apply the flags in order; later ones win. */
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (is_nonopt[i])
            continue;
        if (strcmp(arg, "--") == 0 || strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0 ||
            strcmp(arg, "--version") == 0 || strcmp(arg, "--check-config") == 0)
            continue;
        size_t nlen;
        const char *value = split_flag(arg, &nlen);
        const char *name = arg + 2;
        if (nlen == 6 && strncmp(name, "config", 6) == 0) {
            if (value == NULL)
                i++;
            continue;
        }
        const struct config_option *o = find_option(options, name, nlen);
        if (o == NULL) { /* checked in pass 1: a negated bool */
            o = find_option(options, name + 3, nlen - 3);
            value = "no";
        } else if (value == NULL) {
            value = o->type == CONFIG_BOOL ? "yes" : argv[++i];
        }
        if (set_value(o, cfg, value, err, errlen) < 0) {
            prefix_err(err, errlen, "%s: --%s", prog, o->name);
            goto out;
        }
    }

    if (first_arg != NULL && argc < 1) {
        *first_arg = argc;
    } else if (first_arg != NULL) {
        int first = permute(argc, argv, nonopt, is_nonopt);
        if (first < 0) {
            set_err(err, errlen, "%s: out of memory", prog);
            goto out;
        }
        *first_arg = first;
    }
    if (check) {
        printf("%s: %s: every setting known and well-formed\n", prog,
               config_path ? config_path : "(no --config)");
        result = CONFIG_EXIT_OK;
        goto out;
    }
    result = CONFIG_OK;
out:
    free(is_nonopt);
    /* Nothing is half-loaded: on error (or --help) the strings are released,
       and config_free stays safe to call. */
    if (result != CONFIG_OK)
        config_free(options, cfg);
    return result;
}
