/*
 * The option table as roff, for the man pages (man/CMakeLists.txt): the same
 * table that reads the file and the flags and prints --help, so the pages
 * cannot list an option the program does not take, or miss one.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

/* Text as roff: a backslash is \e, and no line may start a request. */
static void put_text(const char *s)
{
    fputs("\\&", stdout);
    for (; *s; s++) {
        if (*s == '\\')
            fputs("\\e", stdout);
        else if (*s == '\n')
            fputs("\n\\&", stdout);
        else
            putchar(*s);
    }
}

/* A name in bold, its dashes as minus signs (what a user types). */
static void put_name(const char *dashes, const char *name)
{
    fputs("\\fB", stdout);
    for (const char *s = dashes; *s; s++)
        fputs("\\-", stdout);
    for (; *name; name++) {
        if (*name == '-')
            fputs("\\-", stdout);
        else
            putchar(*name);
    }
    fputs("\\fR", stdout);
}

static void put_value(const struct config_option *o)
{
    switch (o->type) {
    case CONFIG_STRING:
        fputs("\\fITEXT\\fR", stdout);
        break;
    case CONFIG_INT:
        fputs("\\fIN\\fR", stdout);
        break;
    case CONFIG_BOOL:
        fputs("\\fByes\\fR|\\fBno\\fR", stdout);
        break;
    case CONFIG_PORTS:
        fputs("\\fILOW\\fR\\-\\fIHIGH\\fR", stdout);
        break;
    }
}

static void put_help(const struct config_option *o)
{
    put_text(o->help ? o->help : "");
    if (o->type == CONFIG_INT)
        printf(" (%ld to %ld)", o->min, o->max);
    if (o->def != NULL) {
        fputs("; default: ", stdout);
        put_text(o->def[0] ? o->def : "\"\"");
    }
    fputs(".\n", stdout);
}

static void print_options(const struct config_option *options, const char *usage)
{
    /* The usage lines as --help aligns them, but flush left. */
    fputs(".SH SYNOPSIS\n.nf\n", stdout);
    for (const char *line = usage; *line;) {
        line += strspn(line, " ");
        size_t len = strcspn(line, "\n");
        char buf[512];
        snprintf(buf, sizeof(buf), "%.*s", (int)len, line);
        put_text(buf);
        putchar('\n');
        line += len;
        if (*line == '\n')
            line++;
    }
    fputs(".fi\n.SH OPTIONS\n"
          "Every option is also a setting of the configuration file: \\fB\\-\\-\\fIname value\\fR "
          "or \\fB\\-\\-\\fIname\\fB=\\fIvalue\\fR on the command line, "
          "\\fIname\\fB = \\fIvalue\\fR in the file; the command line wins.  "
          "A yes/no option alone means yes, \\fB\\-\\-no\\-\\fIname\\fR means no.\n",
          stdout);
    fputs(".TP\n\\fB\\-\\-config\\fR \\fIFILE\\fR\nread settings from \\fIFILE\\fR first.\n"
          ".TP\n\\fB\\-\\-help\\fR\nprint the options and exit.\n"
          ".TP\n\\fB\\-\\-version\\fR\nprint the version and the protocol version and exit.\n"
          ".TP\n\\fB\\-\\-check\\-config\\fR\nread the config file and the other options, say "
          "whether every name is known and every value well-formed, and exit; the files they "
          "name and the settings required are checked at start.\n",
          stdout);
    for (const struct config_option *o = options; o->name; o++) {
        fputs(".TP\n", stdout);
        if (o->type == CONFIG_BOOL) {
            put_name("--", "[no-]");
            put_name("", o->name);
        } else {
            put_name("--", o->name);
            putchar(' ');
            put_value(o);
        }
        putchar('\n');
        put_help(o);
    }
}

static void print_settings(const struct config_option *options)
{
    fputs(".SH SETTINGS\n", stdout);
    for (const struct config_option *o = options; o->name; o++) {
        if (config_is_action(o))
            continue;
        fputs(".TP\n", stdout);
        put_name("", o->name);
        fputs(" = ", stdout);
        put_value(o);
        putchar('\n');
        put_help(o);
    }
}

/* The settings for tests/docs, which hold a shipped file against them. */
static void print_keys(const struct config_option *options)
{
    for (const struct config_option *o = options; o->name; o++) {
        if (config_is_action(o))
            continue;
        if (o->def != NULL)
            printf("%s %s\n", o->name, o->def[0] ? o->def : "\"\"");
        else
            printf("%s\n", o->name);
    }
}

void config_print_man(const struct config_option *options, const char *usage, const char *what)
{
    if (what != NULL && strcmp(what, "keys") == 0)
        print_keys(options);
    else if (what != NULL && strcmp(what, "conf") == 0)
        print_settings(options);
    else
        print_options(options, usage);
}
