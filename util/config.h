/*
 * One table per daemon describes every setting once: its name, type, default and
 * help.  The same table reads the config file (`name = value` lines; `#` at the start of a line or
 * after a blank, outside double quotes, begins a comment) and the command line (`--name value` or
 * `--name=value`; flags win over the file), and prints --help.  Settings are stored into a
 * caller-owned struct through offsets, so a test can build a config without touching globals.
 */
#ifndef QCG_CONFIG_H
#define QCG_CONFIG_H

#include <stddef.h>

enum config_type {
    CONFIG_STRING, /* char * (malloc'd; free with config_free) */
    CONFIG_INT,    /* int, range-checked against min..max */
    CONFIG_BOOL,   /* int 0/1; accepts yes/no/true/false/1/0; a flag alone means 1 */
    CONFIG_PORTS,  /* int[2] "LOW-HIGH", 1..65535, LOW <= HIGH */
};

struct config_option {
    const char *name;
    enum config_type type;
    size_t offset;   /* offsetof(the daemon's struct, field) */
    long min, max;   /* CONFIG_INT: the range; other types: min = CONFIG_ACTION */
    const char *def; /* default as text, NULL = unset / required check by caller */
    const char *help;
};

/*
 * In min of an option that is not CONFIG_INT: a one-off action of the command
 * line (--stats, --json), not a setting: a config file naming it is refused,
 * and the config file's man page and --man=keys leave it out.
 */
#define CONFIG_ACTION 1

enum config_result {
    CONFIG_OK = 0,
    CONFIG_EXIT_OK = 1, /* --help, --version or --man was printed: exit 0 */
    CONFIG_ERROR = -1,  /* err holds a one-line reason: exit non-zero */
};

/*
 * Applies defaults, then `--config FILE` (if given), then the other flags.
 * `--check-config` reads them the same way, then prints one line and returns
 * CONFIG_EXIT_OK: every name known and every value well-formed.
 * Arguments that are not options (and everything after `--`) are left in
 * argv[*first_arg..argc-1] for the caller.  `usage` is the synopsis line printed
 * by --help before the option list.
 */
enum config_result config_load(const struct config_option *options, void *cfg, int argc,
                               char **argv, const char *usage, int *first_arg, char *err,
                               size_t errlen);
/* Parses one file into cfg; used by config_load and by tests. */
int config_read_file(const struct config_option *options, void *cfg, const char *path, char *err,
                     size_t errlen);
/* Sets one option from text; -1 with err on unknown name or bad value. */
int config_set(const struct config_option *options, void *cfg, const char *name, const char *value,
               char *err, size_t errlen);
void config_free(const struct config_option *options, void *cfg);
/* An option of the command line only (CONFIG_ACTION). */
int config_is_action(const struct config_option *o);
/*
 * The table as roff for man/ (config_man.c): what "" gives SYNOPSIS (the
 * usage lines) and OPTIONS of the program's page, what "conf" the SETTINGS of
 * its config file's page, what "keys" the settings one a line, `NAME DEFAULT`
 * (NAME alone without one; for tests/docs).  config_load calls it for the
 * hidden --man[=conf|keys].
 */
void config_print_man(const struct config_option *options, const char *usage, const char *what);

#endif
