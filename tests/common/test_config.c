/* config.c: defaults, file, flags, and a one-line error for every bad input. */
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "config.h"

struct tcfg {
    char *listen;
    int port;
    int foreground;
    int ports[2];
    char *url;
    int stats;
};

static const struct config_option options[] = {
    {"listen", CONFIG_STRING, offsetof(struct tcfg, listen), 0, 0, "127.0.0.1",
     "address to listen on"},
    {"port", CONFIG_INT, offsetof(struct tcfg, port), 1, 65535, "7700", "port to listen on"},
    {"foreground", CONFIG_BOOL, offsetof(struct tcfg, foreground), 0, 0, "no",
     "stay in the foreground"},
    {"node-ports", CONFIG_PORTS, offsetof(struct tcfg, ports), 0, 0, NULL, "the node's port range"},
    {"url", CONFIG_STRING, offsetof(struct tcfg, url), 0, 0, NULL, "upstream URL"},
    {"stats", CONFIG_BOOL, offsetof(struct tcfg, stats), CONFIG_ACTION, 0, "no",
     "print the counters and exit"},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};

static char tmpdir[] = "/tmp/qcg-test-config-XXXXXX";

/* Runs config_load on a NULL-terminated argument list. */
static enum config_result load(struct tcfg *cfg, int *first, char *err, size_t errlen, ...)
{
    char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, errlen);
    argv[argc++] = "/usr/sbin/qcg-broker";
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && argc < 31)
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    memset(cfg, 0xa5, sizeof(*cfg)); /* config_load must not trust garbage */
    err[0] = '\0';
    return config_load(options, cfg, argc, argv, "qcg-broker [options]", first, err, errlen);
}

static char *write_file(const char *name, const char *text, size_t len)
{
    static char path[256];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    fwrite(text, 1, len, f);
    fclose(f);
    return path;
}

/* Captures what fn prints on stdout. */
static enum config_result load_capturing(struct tcfg *cfg, const char *flag, char *out,
                                         size_t outlen)
{
    char path[256], err[256];
    snprintf(path, sizeof(path), "%s/stdout", tmpdir);
    fflush(stdout);
    int saved = dup(1);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    close(fd);
    enum config_result r = load(cfg, NULL, err, sizeof(err), flag, NULL);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, outlen - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
    return r;
}

static void test_defaults_and_flags(void)
{
    struct tcfg cfg;
    char err[256];
    int first = -1;
    CHECK(load(&cfg, &first, err, sizeof(err), NULL) == CONFIG_OK);
    CHECK_STR(cfg.listen, "127.0.0.1");
    CHECK(cfg.port == 7700);
    CHECK(cfg.foreground == 0);
    CHECK(cfg.ports[0] == 0 && cfg.ports[1] == 0); /* no default: zero, not garbage */
    CHECK(cfg.url == NULL);
    CHECK(first == 1);
    config_free(options, &cfg);
    CHECK(cfg.listen == NULL);
}

static void test_command_line(void)
{
    struct tcfg cfg;
    char err[256];
    int first = -1;
    char *argv[] = {"qcg-helper",
                    "pos1",
                    "--port",
                    "7800",
                    "--listen=0.0.0.0",
                    "--foreground",
                    "pos2",
                    "--node-ports=2000-2999",
                    "--",
                    "--port",
                    NULL};
    memset(&cfg, 0, sizeof(cfg));
    CHECK(config_load(options, &cfg, 10, argv, "u", &first, err, sizeof(err)) == CONFIG_OK);
    CHECK(cfg.port == 7800);
    CHECK_STR(cfg.listen, "0.0.0.0");
    CHECK(cfg.foreground == 1);
    CHECK(cfg.ports[0] == 2000 && cfg.ports[1] == 2999);
    CHECK(first == 7);
    if (first == 7) {
        CHECK_STR(argv[7], "pos1");
        CHECK_STR(argv[8], "pos2");
        CHECK_STR(argv[9], "--port");
    }
    config_free(options, &cfg);

    CHECK(load(&cfg, &first, err, sizeof(err), "--foreground=yes", "--no-foreground", NULL) ==
          CONFIG_OK);
    CHECK(cfg.foreground == 0);
    config_free(options, &cfg);
    CHECK(load(&cfg, &first, err, sizeof(err), "--foreground=TRUE", NULL) == CONFIG_OK);
    CHECK(cfg.foreground == 1);
    config_free(options, &cfg);
    CHECK(load(&cfg, &first, err, sizeof(err), "--node-ports", "none", NULL) == CONFIG_OK);
    CHECK(cfg.ports[0] == 0 && cfg.ports[1] == 0);
    config_free(options, &cfg);
    CHECK(load(&cfg, &first, err, sizeof(err), "--node-ports", "5-5", "--port=1", NULL) ==
          CONFIG_OK);
    CHECK(cfg.ports[0] == 5 && cfg.ports[1] == 5 && cfg.port == 1);
    config_free(options, &cfg);
}

/* Every bad flag: CONFIG_ERROR and exactly the expected one-line message. */
static void expect_error(const char *want, ...)
{
    char *argv[8];
    int argc = 0;
    va_list ap;
    va_start(ap, want);
    argv[argc++] = "qcg-broker";
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && argc < 7)
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    struct tcfg cfg;
    memset(&cfg, 0x5a, sizeof(cfg));
    char err[512] = "";
    int first;
    enum config_result r = config_load(options, &cfg, argc, argv, "u", &first, err, sizeof(err));
    CHECK(r == CONFIG_ERROR);
    CHECK_STR(err, want);
    CHECK(strchr(err, '\n') == NULL);
    /* Nothing left allocated after an error. */
    CHECK(cfg.listen == NULL && cfg.url == NULL);
}

static void test_bad_flags(void)
{
    expect_error("qcg-broker: --port: \"abc\" is not a number in 1..65535", "--port", "abc", NULL);
    expect_error("qcg-broker: --port: \"0\" is not a number in 1..65535", "--port=0", NULL);
    expect_error("qcg-broker: --port: \"65536\" is not a number in 1..65535", "--port", "65536",
                 NULL);
    expect_error("qcg-broker: --port: \"99999999999999999999\" is not a number in 1..65535",
                 "--port", "99999999999999999999", NULL);
    expect_error("qcg-broker: --port: \" 80\" is not a number in 1..65535", "--port", " 80", NULL);
    expect_error("qcg-broker: --port: \"\" is not a number in 1..65535", "--port=", NULL);
    expect_error("qcg-broker: unknown option \"--prot\" (see --help)", "--prot", "1", NULL);
    expect_error("qcg-broker: unknown option \"-p\" (see --help)", "-p", "1", NULL);
    expect_error("qcg-broker: unknown option \"--no-port\" (see --help)", "--no-port", NULL);
    expect_error("qcg-broker: --port: missing value", "--port", NULL);
    expect_error("qcg-broker: --config: missing value", "--config", NULL);
    expect_error(
        "qcg-broker: --foreground: \"maybe\" is not a boolean (yes/no, true/false, on/off, 1/0)",
        "--foreground=maybe", NULL);
    const char *bad_ranges[] = {"2000-1000", "0-5",    "1-65536", "abc",  "1000", "-5-10",
                                "1000-",     "10--20", "1 -2",    "+1-2", "1-+2", "0x10-0x20"};
    for (size_t i = 0; i < sizeof(bad_ranges) / sizeof(bad_ranges[0]); i++) {
        char want[256];
        snprintf(want, sizeof(want),
                 "qcg-broker: --node-ports: \"%s\" is not a port range LOW-HIGH with 1 <= LOW <= "
                 "HIGH <= 65535 (or \"none\")",
                 bad_ranges[i]);
        expect_error(want, "--node-ports", bad_ranges[i], NULL);
    }

    /* Without first_arg, a positional argument is an error. */
    struct tcfg cfg;
    char err[256];
    CHECK(load(&cfg, NULL, err, sizeof(err), "stray", NULL) == CONFIG_ERROR);
    CHECK_STR(err, "qcg-broker: unexpected argument \"stray\"");
}

static void test_file(void)
{
    struct tcfg cfg;
    char err[512];
    int first;
    const char good[] = "# broker settings\n\n  port = 8000  \r\nlisten=\"  ::1 \"\n"
                        "\tforeground\nnode-ports = 100-200\nurl = https://h:1/?a=b#c\n";
    char *path = write_file("good.conf", good, sizeof(good) - 1);
    char p[256];
    snprintf(p, sizeof(p), "%s", path);
    CHECK(load(&cfg, &first, err, sizeof(err), "--config", p, NULL) == CONFIG_OK);
    CHECK(cfg.port == 8000);
    CHECK_STR(cfg.listen, "  ::1 ");
    CHECK(cfg.foreground == 1);
    CHECK(cfg.ports[0] == 100 && cfg.ports[1] == 200);
    CHECK_STR(cfg.url, "https://h:1/?a=b#c");
    config_free(options, &cfg);

    /* Trailing comments, as the admin guide's blocks carry them; a '#' in a
       word or in quotes is part of the value. */
    const char commented[] = "port = 8001   # the default is 7700\nlisten = \"a # b\"  # quoted\n"
                             "foreground\t# a flag\nnode-ports = 300-400#not a comment\n"
                             "url = https://h:1/#frag # comment\n";
    path = write_file("commented.conf", commented, sizeof(commented) - 1);
    snprintf(p, sizeof(p), "%s", path);
    CHECK(load(&cfg, &first, err, sizeof(err), "--config", p, NULL) == CONFIG_ERROR);
    CHECK_HAS(err, "300-400#not a comment");
    const char commented_ok[] =
        "port = 8001   # the default is 7700\nlisten = \"a # b\"  # quoted\n"
        "foreground\t# a flag\nnode-ports = 300-400 # ports\n"
        "url = https://h:1/#frag # comment\n";
    path = write_file("commented.conf", commented_ok, sizeof(commented_ok) - 1);
    CHECK(load(&cfg, &first, err, sizeof(err), "--config", p, NULL) == CONFIG_OK);
    CHECK(cfg.port == 8001 && cfg.foreground == 1);
    CHECK_STR(cfg.listen, "a # b");
    CHECK(cfg.ports[0] == 300 && cfg.ports[1] == 400);
    CHECK_STR(cfg.url, "https://h:1/#frag");
    config_free(options, &cfg);
    path = write_file("good.conf", good, sizeof(good) - 1);
    snprintf(p, sizeof(p), "%s", path);

    /* Flags win over the file whatever their order. */
    CHECK(load(&cfg, &first, err, sizeof(err), "--port", "9000", "--config", p, NULL) == CONFIG_OK);
    CHECK(cfg.port == 9000);
    CHECK(cfg.foreground == 1);
    config_free(options, &cfg);
    char eq[300];
    snprintf(eq, sizeof(eq), "--config=%s", p);
    CHECK(load(&cfg, &first, err, sizeof(err), eq, "--no-foreground", NULL) == CONFIG_OK);
    CHECK(cfg.port == 8000 && cfg.foreground == 0);
    config_free(options, &cfg);

    /* config_read_file on its own, and its errors. */
    struct {
        const char *name, *text, *want;
    } bad[] = {
        {"unknown.conf", "port = 1\n# c\nprot = 2\n",
         "config file %s line 3: unknown option \"prot\""},
        {"novalue.conf", "port\n",
         "config file %s line 1: port: missing value (expected \"port = value\")"},
        {"badint.conf", "\n\nport = 12x\n",
         "config file %s line 3: port: \"12x\" is not a number in 1..65535"},
        {"inline.conf", "port = 80#http\n",
         "config file %s line 1: port: \"80#http\" is not a number in 1..65535"},
        {"badbool.conf", "foreground = 2\n",
         "config file %s line 1: foreground: \"2\" is not a boolean (yes/no, true/false, on/off, "
         "1/0)"},
        {"badports.conf", "node-ports = 9-8\n",
         "config file %s line 1: node-ports: \"9-8\" is not a port range LOW-HIGH with 1 <= LOW <= "
         "HIGH <= 65535 (or \"none\")"},
        {"noname.conf", " = 5\n", "config file %s line 1: expected \"name = value\""},
        {"nested.conf", "config = /etc/passwd\n",
         "config file %s line 1: unknown option \"config\""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *fp = write_file(bad[i].name, bad[i].text, strlen(bad[i].text));
        char want[512];
        snprintf(want, sizeof(want), bad[i].want, fp);
        memset(&cfg, 0, sizeof(cfg));
        CHECK(config_read_file(options, &cfg, fp, err, sizeof(err)) == -1);
        CHECK_STR(err, want);
        config_free(options, &cfg);
    }

    /* The same through config_load: prefixed with the program name. */
    char *fp = write_file("unknown.conf", "port = 1\n# c\nprot = 2\n", 22);
    char want[512];
    snprintf(want, sizeof(want), "qcg-broker: config file %s line 3: unknown option \"prot\"", fp);
    snprintf(p, sizeof(p), "%s", fp);
    CHECK(load(&cfg, &first, err, sizeof(err), "--config", p, NULL) == CONFIG_ERROR);
    CHECK_STR(err, want);

    /* A line over 4096 characters, a NUL byte. */
    size_t n = 5000;
    char *longline = malloc(n + 20);
    memcpy(longline, "port = 1\nurl = ", 15);
    memset(longline + 15, 'x', n);
    longline[15 + n] = '\n';
    fp = write_file("long.conf", longline, 16 + n);
    free(longline);
    memset(&cfg, 0, sizeof(cfg));
    CHECK(config_read_file(options, &cfg, fp, err, sizeof(err)) == -1);
    snprintf(want, sizeof(want), "config file %s line 2: longer than 4096 characters", fp);
    CHECK_STR(err, want);
    config_free(options, &cfg);
    fp = write_file("nul.conf", "port = 1\nurl = a\0b\n", 19);
    CHECK(config_read_file(options, &cfg, fp, err, sizeof(err)) == -1);
    snprintf(want, sizeof(want), "config file %s line 2: contains a NUL byte", fp);
    CHECK_STR(err, want);
    config_free(options, &cfg);

    /* Exactly 4096 characters is fine; no final newline is fine. */
    char *edge = malloc(4200);
    memcpy(edge, "url = ", 6);
    memset(edge + 6, 'y', 4090);
    fp = write_file("edge.conf", edge, 4096);
    free(edge);
    CHECK(config_read_file(options, &cfg, fp, err, sizeof(err)) == 0);
    CHECK(cfg.url && strlen(cfg.url) == 4090);
    config_free(options, &cfg);

    /* Not a regular file, missing file. */
    CHECK(config_read_file(options, &cfg, tmpdir, err, sizeof(err)) == -1);
    snprintf(want, sizeof(want), "config file %s: not a regular file", tmpdir);
    CHECK_STR(err, want);
    char fifo[300];
    snprintf(fifo, sizeof(fifo), "%s/fifo", tmpdir);
    mkfifo(fifo, 0600);
    CHECK(config_read_file(options, &cfg, fifo, err, sizeof(err)) == -1);
    CHECK_HAS(err, "not a regular file");
    unlink(fifo);
    CHECK(config_read_file(options, &cfg, "/nonexistent/qcg.conf", err, sizeof(err)) == -1);
    CHECK_STR(err, "config file /nonexistent/qcg.conf: No such file or directory");
}

static void test_help_version(void)
{
    struct tcfg cfg;
    char out[8192];
    CHECK(load_capturing(&cfg, "--help", out, sizeof(out)) == CONFIG_EXIT_OK);
    CHECK_HAS(out, "Usage: qcg-broker [options]");
    CHECK_HAS(out, "--config FILE");
    CHECK_HAS(out, "--port N (1..65535)\n      port to listen on (default: 7700)");
    CHECK_HAS(out, "--listen TEXT\n      address to listen on (default: 127.0.0.1)");
    CHECK_HAS(out, "--foreground [yes|no]");
    CHECK_HAS(out, "--node-ports LOW-HIGH\n      the node's port range\n");
    CHECK_HAS(out, "--url TEXT");
    CHECK(cfg.listen == NULL);
    CHECK(load_capturing(&cfg, "--version", out, sizeof(out)) == CONFIG_EXIT_OK);
    CHECK_HAS(out, "qcg-broker ");
    CHECK_HAS(out, "(protocol version 2)");
}

/* The man pages' option lists come from the same table (config_man.c). */
static void test_man(void)
{
    struct tcfg cfg;
    char out[8192];
    CHECK(load_capturing(&cfg, "--man", out, sizeof(out)) == CONFIG_EXIT_OK);
    CHECK_HAS(out, ".SH SYNOPSIS\n.nf\n\\&qcg-broker [options]\n.fi\n.SH OPTIONS\n");
    CHECK_HAS(out, ".TP\n\\fB\\-\\-port\\fR \\fIN\\fR\n\\&port to listen on (1 to 65535); "
                   "default: \\&7700.\n");
    CHECK_HAS(out, ".TP\n\\fB\\-\\-[no\\-]\\fR\\fBforeground\\fR\n");
    CHECK_HAS(out, "\\fB\\-\\-node\\-ports\\fR \\fILOW\\fR\\-\\fIHIGH\\fR\n");
    CHECK(strstr(out, "SETTINGS") == NULL);
    CHECK(load_capturing(&cfg, "--man=conf", out, sizeof(out)) == CONFIG_EXIT_OK);
    CHECK_HAS(out, ".SH SETTINGS\n.TP\n\\fBlisten\\fR = \\fITEXT\\fR\n");
    CHECK_HAS(out, "\\fBurl\\fR = \\fITEXT\\fR\n\\&upstream URL.\n");
    CHECK(strstr(out, "SYNOPSIS") == NULL);
    /* Hidden: --help does not offer it. */
    CHECK(load_capturing(&cfg, "--help", out, sizeof(out)) == CONFIG_EXIT_OK);
    CHECK(strstr(out, "--man") == NULL);
}

/* A command-line action (--stats) is a flag, never a setting of the file;
   --man=keys lists the settings for tests/docs; --check-config reads the file
   and the flags as a start would, and stops there. */
static void test_actions_and_check(void)
{
    struct tcfg cfg;
    char err[256], out[4096];
    CHECK(load(&cfg, NULL, err, sizeof(err), "--stats", NULL) == CONFIG_OK && cfg.stats == 1);
    config_free(options, &cfg);
    char *fp = write_file("action.conf", "port = 1\nstats = yes\n", 22);
    CHECK(load(&cfg, NULL, err, sizeof(err), "--config", fp, NULL) == CONFIG_ERROR);
    CHECK_HAS(err, "line 2: stats is an option of the command line (--stats), not a setting");
    CHECK(load_capturing(&cfg, "--man=keys", out, sizeof(out)) == CONFIG_EXIT_OK);
    CHECK_STR(out, "listen 127.0.0.1\nport 7700\nforeground no\nnode-ports\nurl\n");
    CHECK(load_capturing(&cfg, "--man=conf", out, sizeof(out)) == CONFIG_EXIT_OK);
    CHECK(strstr(out, "stats") == NULL);

    fp = write_file("check.conf", "port = 1\n", 9);
    char arg[300];
    snprintf(arg, sizeof(arg), "--config=%s", fp);
    CHECK(load_capturing(&cfg, "--check-config", out, sizeof(out)) == CONFIG_EXIT_OK);
    CHECK_HAS(out, "qcg-broker: (no --config): every setting known and well-formed\n");
    CHECK(load(&cfg, NULL, err, sizeof(err), arg, "--check-config", NULL) == CONFIG_EXIT_OK);
    fp = write_file("check.conf", "port = 0\n", 9);
    CHECK(load(&cfg, NULL, err, sizeof(err), arg, "--check-config", NULL) == CONFIG_ERROR);
    CHECK_HAS(err, "line 1: port: \"0\" is not a number in 1..65535");
    CHECK(load(&cfg, NULL, err, sizeof(err), "--check-config", "--port", "x", NULL) ==
          CONFIG_ERROR);
    CHECK(load_capturing(&cfg, "--help", out, sizeof(out)) == CONFIG_EXIT_OK);
    CHECK_HAS(out, "  --check-config\n");
}

static void test_config_set(void)
{
    struct tcfg cfg;
    char err[256];
    memset(&cfg, 0, sizeof(cfg));
    CHECK(config_set(options, &cfg, "port", "123", err, sizeof(err)) == 0 && cfg.port == 123);
    CHECK(config_set(options, &cfg, "url", "a", err, sizeof(err)) == 0);
    CHECK(config_set(options, &cfg, "url", "b", err, sizeof(err)) == 0); /* old one freed */
    CHECK_STR(cfg.url, "b");
    CHECK(config_set(options, &cfg, "nope", "1", err, sizeof(err)) == -1);
    CHECK_STR(err, "unknown option \"nope\"");
    CHECK(config_set(options, &cfg, "port", NULL, err, sizeof(err)) == -1);
    CHECK_STR(err, "missing value");
    CHECK(cfg.port == 123);
    config_free(options, &cfg);
    CHECK(cfg.url == NULL);
}

int main(void)
{
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_defaults_and_flags();
    test_command_line();
    test_bad_flags();
    test_file();
    test_help_version();
    test_man();
    test_actions_and_check();
    test_config_set();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_result("test_config");
}
