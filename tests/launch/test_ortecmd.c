/* What qcg-launch and qcg-agent make of mpirun's daemon command line
   (shell words, -mca values, orted, the runtime URIs) and the grid job ids
   of a user's job: known answers, then random mutations of real command
   lines and URIs that must neither crash, overrun nor leak (ASan in CI). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "jobid.h"
#include "ortecmd.h"

#define WORDS_MAX 64

static char *words[WORDS_MAX + 1];
static char why[160];

/* shell_words of in[0..n-1] into words, at most max (<= WORDS_MAX). */
static int split_max(int n, const char *const *in, int max)
{
    memset(why, 'Z', sizeof(why));
    words[0] = (char *)"not set";
    return shell_words(n, in, words, max, why, sizeof(why));
}

static int split(int n, const char *const *in)
{
    return split_max(n, in, WORDS_MAX);
}

static int split1(const char *s)
{
    return split(1, &s);
}

/* The words are exactly want[0..nwant-1] (and NULL after them); says how
   they differ if not. */
static int words_are(int got, const char *const *want, int nwant)
{
    int same = got == nwant && words[got] == NULL;
    for (int i = 0; same && i < nwant; i++)
        same = words[i] != NULL && strcmp(words[i], want[i]) == 0;
    if (!same) {
        fprintf(stderr, "  got %d word(s):", got);
        for (int i = 0; i < got && i <= WORDS_MAX; i++)
            fprintf(stderr, " [%s]", words[i] ? words[i] : "(null)");
        fprintf(stderr, "\n  expected %d:", nwant);
        for (int i = 0; i < nwant; i++)
            fprintf(stderr, " [%s]", want[i]);
        fprintf(stderr, "\n");
    }
    return same;
}

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))
/* split1(s) gives the words w... */
#define CHECK_WORDS(s, ...)                                                                        \
    do {                                                                                           \
        static const char *const want_[] = {__VA_ARGS__};                                          \
        int got_ = split1(s);                                                                      \
        CHECK(words_are(got_, want_, NELEM(want_)));                                               \
        words_free(words);                                                                         \
    } while (0)
/* ... or is refused, why saying want. */
#define CHECK_REFUSED(s, want)                                                                     \
    do {                                                                                           \
        CHECK(split1(s) == -1);                                                                    \
        CHECK(words[0] == NULL);                                                                   \
        CHECK(memchr(why, '\0', sizeof(why)) != NULL);                                             \
        if (memchr(why, '\0', sizeof(why)) != NULL)                                                \
            CHECK_HAS(why, want);                                                                  \
    } while (0)

static void test_words(void)
{
    CHECK_WORDS("orted", "orted");
    CHECK_WORDS("a b\tc", "a", "b", "c");
    CHECK_WORDS("  lead   trail\t ", "lead", "trail");
    CHECK_WORDS("\"1146028032.0;tcp://198.18.1.11:43981\"", "1146028032.0;tcp://198.18.1.11:43981");
    CHECK_WORDS("\"^s1,s2,cray,isolated\"", "^s1,s2,cray,isolated");
    CHECK_WORDS("--prefix=/opt/ompi-4.1_x+y%z@h:1,2^3!", "--prefix=/opt/ompi-4.1_x+y%z@h:1,2^3!");

    /* Single quotes: everything literal, the backslash too. */
    CHECK_WORDS("'a b $c;d\\e\"f'", "a b $c;d\\e\"f");
    /* Double quotes: shell syntax is literal but for \ before " \ $ ` (and $ ` themselves). */
    CHECK_WORDS("\"a\\\"b\\\\c\\$d\\`e\\xf\"", "a\"b\\c$d`e\\xf");
    CHECK_WORDS("\"a;b|c&d<e>f(g)h*i?j[k]l{m}n~o#p'q\"", "a;b|c&d<e>f(g)h*i?j[k]l{m}n~o#p'q");
    CHECK_WORDS("\"a\nb\"", "a\nb");
    CHECK_WORDS("\"a\\\\\"", "a\\");
    CHECK_REFUSED("\"a\\\"", "unclosed \""); /* the backslash took the quote */
    /* Quotes join what touches them; empty quotes are an empty word. */
    CHECK_WORDS("a\"b c\"'d e'f", "ab cd ef");
    CHECK_WORDS("\"\" ''", "", "");
    CHECK_WORDS("x \"\"", "x", "");
    /* Unquoted backslash: the next character, whatever it is. */
    CHECK_WORDS("a\\ b \\;\\$x\\\\", "a b", ";$x\\");
    CHECK_WORDS("\\'quoted\\'", "'quoted'");

    /* No words at all. */
    CHECK(split1("") == 0 && words[0] == NULL);
    CHECK(split1(" \t ") == 0 && words[0] == NULL);
    CHECK(split(0, NULL) == 0 && words[0] == NULL);

    /* Shell syntax outside quotes: the agent runs no shell. */
    static const char meta[] = ";&|<>()$`*?[]{}~#";
    for (const char *m = meta; *m; m++) {
        char alone[2] = {*m, '\0'}, inside[6] = {'a', *m, 'b', '\0'};
        char expected[48];
        snprintf(expected, sizeof(expected), "argument 1: '%c' would need a shell", *m);
        CHECK_REFUSED(alone, expected);
        CHECK_REFUSED(inside, expected);
    }
    /* $ and ` expand in double quotes too. */
    CHECK_REFUSED("\"$HOME\"", "'$' would need a shell");
    CHECK_REFUSED("\"a`id`\"", "'`' would need a shell");
    CHECK_WORDS("'$HOME'", "$HOME");
    CHECK_WORDS("\"\\$HOME\"", "$HOME");
    /* A backslash with nothing after it would join the next argument. */
    CHECK_REFUSED("a\\", "'\\' would need a shell");
    /* An unquoted newline ends a command, as ; does. */
    CHECK_REFUSED("a\nb", "argument 1: a newline would need a shell");
    /* Quotes close within the argument they opened in. */
    CHECK_REFUSED("\"abc", "argument 1: unclosed \"");
    CHECK_REFUSED("'abc", "argument 1: unclosed '");
    CHECK_REFUSED("a\"b'", "unclosed \"");
    const char *const across[] = {"\"a", "b\""};
    CHECK(split(2, across) == -1 && words[0] == NULL);
    CHECK_HAS(why, "argument 1: unclosed \"");
    /* why names the argument at fault. */
    const char *const third[] = {"ok", "fine", "x|y"};
    CHECK(split(3, third) == -1 && words[0] == NULL);
    CHECK_STR(why, "argument 3: '|' would need a shell (this agent runs none)");

    /* At most max words, counted across arguments; the words made before
       the refusal are freed (ASan's leak check). */
    const char *const three[] = {"a b", "c"};
    CHECK(split_max(2, three, 3) == 3);
    words_free(words);
    CHECK(split_max(2, three, 2) == -1 && words[0] == NULL);
    CHECK_STR(why, "more than 2 words");
    CHECK(split_max(1, three, 1) == -1 && words[0] == NULL);
    CHECK_STR(why, "more than 1 words");
    const char *const four[] = {"a b", "c d"};
    CHECK(split_max(2, four, 3) == -1 && words[0] == NULL);
    CHECK(split_max(1, three, 0) == -1 && words[0] == NULL);
    const char *const blank[] = {"", "  "};
    CHECK(split_max(2, blank, 0) == 0 && words[0] == NULL);
    /* a refusal after words were made frees them too */
    const char *const late[] = {"a b c", "d;"};
    CHECK(split(2, late) == -1 && words[0] == NULL);
}

/* Open MPI 4.1's rsh launcher: `qcg-launch HOST orted ARGS`, the values
   quoted for the remote shell; the same words when the arguments come
   joined in one. */
static void test_orted_line(void)
{
    static const char *const in[] = {
        "orted",
        "-mca",
        "ess",
        "\"env\"",
        "-mca",
        "ess_base_jobid",
        "\"1146028032\"",
        "-mca",
        "ess_base_vpid",
        "1",
        "-mca",
        "ess_base_num_procs",
        "\"2\"",
        "-mca",
        "orte_node_regex",
        "\"nata[1:1],open[1:1]@0(2)\"",
        "-mca",
        "orte_hnp_uri",
        "\"1146028032.0;tcp://127.0.0.1:43981\"",
        "--mca",
        "plm_rsh_agent",
        "\"/x/qcg-launch --timeout 30\"",
        "-mca",
        "plm",
        "\"rsh\"",
        "-mca",
        "pmix",
        "\"^s1,s2,cray,isolated\"",
    };
    static const char *const want[] = {
        "orted",
        "-mca",
        "ess",
        "env",
        "-mca",
        "ess_base_jobid",
        "1146028032",
        "-mca",
        "ess_base_vpid",
        "1",
        "-mca",
        "ess_base_num_procs",
        "2",
        "-mca",
        "orte_node_regex",
        "nata[1:1],open[1:1]@0(2)",
        "-mca",
        "orte_hnp_uri",
        "1146028032.0;tcp://127.0.0.1:43981",
        "--mca",
        "plm_rsh_agent",
        "/x/qcg-launch --timeout 30",
        "-mca",
        "plm",
        "rsh",
        "-mca",
        "pmix",
        "^s1,s2,cray,isolated",
    };
    int n = split(NELEM(in), in);
    CHECK(words_are(n, want, NELEM(want)));
    if (n == NELEM(want)) {
        CHECK(runtime_of(words[0]) == &ompi_orte);
        CHECK(mca_value_index(&ompi_orte, n, words, "orte_hnp_uri") == 18);
        CHECK(mca_value_index(&ompi_orte, n, words, "plm_rsh_agent") == 21);
        CHECK(mca_value_index(&ompi_orte, n, words, "pmix") == 27);
        CHECK(mca_value_index(&ompi_orte, n, words, "orte_parent_uri") == -1);
        char addrs[64];
        uint16_t port = 0;
        CHECK(uri_tcp_endpoint(&ompi_orte, words[18], addrs, sizeof(addrs), &port) == 0);
        CHECK_STR(addrs, "127.0.0.1");
        CHECK(port == 43981);
    }
    words_free(words);

    char joined[1024] = "";
    for (int i = 0; i < NELEM(in); i++) {
        strcat(joined, in[i]);
        strcat(joined, i + 1 < NELEM(in) ? " " : "");
    }
    CHECK(words_are(split1(joined), want, NELEM(want)));
    words_free(words);
}

static void test_mca(void)
{
    char *argv[] = {(char *)"orted",
                    (char *)"-mca",
                    (char *)"ess",
                    (char *)"env",
                    (char *)"--mca",
                    (char *)"orte_hnp_uri",
                    (char *)"U",
                    (char *)"-mca",
                    (char *)"ess",
                    (char *)"again",
                    (char *)"-mca",
                    (char *)"last",
                    NULL};
    int argc = NELEM(argv) - 1;

    CHECK(mca_value_index(&ompi_orte, argc, argv, "ess") == 3); /* the first */
    CHECK(mca_value_index(&ompi_orte, argc, argv, "orte_hnp_uri") == 6);
    /* a name with no value after it, at the last position */
    CHECK(mca_value_index(&ompi_orte, argc, argv, "last") == -1);
    /* a value is not a name; names need -mca or --mca before them */
    CHECK(mca_value_index(&ompi_orte, argc, argv, "env") == -1);
    CHECK(mca_value_index(&ompi_orte, argc, argv, "-mca") == -1);
    CHECK(mca_value_index(&ompi_orte, argc, argv, "orted") == -1);
    CHECK(mca_value_index(&ompi_orte, argc, argv, "") == -1);
    /* only the first argc count */
    CHECK(mca_value_index(&ompi_orte, 6, argv, "orte_hnp_uri") == -1);
    CHECK(mca_value_index(&ompi_orte, 7, argv, "orte_hnp_uri") == 6);
    CHECK(mca_value_index(&ompi_orte, 0, argv, "ess") == -1);

    char *other[] = {(char *)"orted", (char *)"-gmca", (char *)"a",    (char *)"1", (char *)"-MCA",
                     (char *)"b",     (char *)"2",     (char *)"mca",  (char *)"c", (char *)"3",
                     (char *)"-mca",  (char *)"-mca",  (char *)"-mca", NULL};
    CHECK(mca_value_index(&ompi_orte, NELEM(other) - 1, other, "a") == -1);
    CHECK(mca_value_index(&ompi_orte, NELEM(other) - 1, other, "b") == -1);
    CHECK(mca_value_index(&ompi_orte, NELEM(other) - 1, other, "c") == -1);
    CHECK(mca_value_index(&ompi_orte, NELEM(other) - 1, other, "-mca") == 12);
}

static void test_runtime_of(void)
{
    CHECK(runtime_of("orted") == &ompi_orte);
    CHECK(runtime_of("/usr/bin/orted") == &ompi_orte);
    CHECK(runtime_of("./orted") == &ompi_orte);
    CHECK(runtime_of("/opt/openmpi-4.1.5/bin//orted") == &ompi_orte);
    CHECK(runtime_of("orted2") == NULL);
    CHECK(runtime_of("xorted") == NULL);
    CHECK(runtime_of("/usr/bin/xorted") == NULL);
    CHECK(runtime_of("/bin/sh") == NULL);
    CHECK(runtime_of("orted/") == NULL);
    CHECK(runtime_of("/orted/sh") == NULL);
    CHECK(runtime_of("/") == NULL);
    CHECK(runtime_of("") == NULL);
    CHECK(runtime_of("ORTED") == NULL);
    CHECK(runtime_of("prted") == &ompi_prrte);
    CHECK(runtime_of("/usr/bin/prted") == &ompi_prrte);
    CHECK(runtime_of("prterun") == NULL);
    CHECK(runtime_of("/usr/bin/prte") == NULL);
    CHECK(runtime_of("xprted") == NULL);
}

static void test_uri(void)
{
    char addrs[64], out[128];
    uint16_t port;

#define ENDPOINT(uri)                                                                              \
    (port = 0, memset(addrs, 'Z', sizeof(addrs)),                                                  \
     uri_tcp_endpoint(&ompi_orte, uri, addrs, sizeof(addrs), &port))
    CHECK(ENDPOINT("1146028032.0;tcp://198.18.1.11:43981") == 0);
    CHECK_STR(addrs, "198.18.1.11");
    CHECK(port == 43981);
    CHECK(ENDPOINT("1146028032.0;tcp://198.18.1.11,10.1.2.3:43981;tcp6://[::1]:43982") == 0);
    CHECK_STR(addrs, "198.18.1.11,10.1.2.3");
    CHECK(port == 43981);
    /* the tcp endpoint wherever it is among the others */
    CHECK(ENDPOINT("1146028032.0;tcp6://[::1]:43982;tcp://10.0.0.1:1") == 0);
    CHECK_STR(addrs, "10.0.0.1");
    CHECK(port == 1);
    CHECK(ENDPOINT("1.0;tcp://h:65535") == 0);
    CHECK(port == 65535);
    /* IPv6 only, no port, port 0 or over 65535, no address, not a URI */
    CHECK(ENDPOINT("1146028032.0;tcp6://[::1]:43982") == -1);
    CHECK(ENDPOINT("1146028032.0;tcp://198.18.1.11") == -1);
    CHECK(ENDPOINT("1146028032.0;tcp://198.18.1.11:") == -1);
    CHECK(ENDPOINT("1146028032.0;tcp://198.18.1.11:;tcp6://[::1]:2") == -1);
    CHECK(ENDPOINT("1146028032.0;tcp://198.18.1.11:0") == -1);
    CHECK(ENDPOINT("1146028032.0;tcp://198.18.1.11:65536") == -1);
    CHECK(ENDPOINT("1146028032.0;tcp://198.18.1.11:99999999999999999999999") == -1);
    CHECK(ENDPOINT("1146028032.0;tcp://:43981") == -1);
    CHECK(ENDPOINT("1146028032.0;tcp://198.18.1.11:43981x") == -1);
    CHECK(ENDPOINT("1146028032.0;tcp://198.18.1.11:0x10") == -1);
    CHECK(ENDPOINT("tcp://198.18.1.11:43981") == -1);
    CHECK(ENDPOINT("1146028032.0") == -1);
    CHECK(ENDPOINT("") == -1);
    CHECK(ENDPOINT(";;;;") == -1);
    CHECK(ENDPOINT("garbage;tcp://::::") == -1);
    /* the port is digits only: no sign, no space (strtoul's leniency) */
    CHECK(ENDPOINT("1.0;tcp://10.0.0.1:+43981") == -1);
    CHECK(ENDPOINT("1.0;tcp://10.0.0.1: 43981") == -1);
    CHECK(ENDPOINT("1.0;tcp://10.0.0.1:-1") == -1);
    CHECK(ENDPOINT("1.0;tcp://10.0.0.1:-18446744073709551615") == -1);
    /* the address list must fit with its NUL */
    CHECK(uri_tcp_endpoint(&ompi_orte, "1.0;tcp://10.0.0.1:5", addrs, 8, &port) == -1);
    CHECK(uri_tcp_endpoint(&ompi_orte, "1.0;tcp://10.0.0.1:5", addrs, 9, &port) == 0);
    CHECK_STR(addrs, "10.0.0.1");
#undef ENDPOINT

    static const char uri[] = "1146028032.0;tcp://198.18.1.11,10.1.2.3:43981;tcp6://[::1]:43982";
    CHECK(uri_point_to_loopback(&ompi_orte, uri, 5000, out, sizeof(out)) == 0);
    CHECK_STR(out, "1146028032.0;tcp://127.0.0.1:5000");
    CHECK(uri_point_to_loopback(&ompi_orte, "7.1;tcp6://[::1]:1;tcp://h:2", 65535, out,
                                sizeof(out)) == 0);
    CHECK_STR(out, "7.1;tcp://127.0.0.1:65535");
    /* not runtime URIs: no process name, no tcp endpoint, not a URI at all */
    CHECK(uri_point_to_loopback(&ompi_orte, ";tcp://10.0.0.1:5", 5000, out, sizeof(out)) == -1);
    CHECK(uri_point_to_loopback(&ompi_orte, "1.0;tcp6://[::1]:5", 5000, out, sizeof(out)) == -1);
    CHECK(uri_point_to_loopback(&ompi_orte, "1.0;tcp://10.0.0.1", 5000, out, sizeof(out)) == -1);
    CHECK(uri_point_to_loopback(&ompi_orte, "tcp://10.0.0.1:5", 5000, out, sizeof(out)) == -1);
    CHECK(uri_point_to_loopback(&ompi_orte, "hello", 5000, out, sizeof(out)) == -1);
    CHECK(uri_point_to_loopback(&ompi_orte, "", 5000, out, sizeof(out)) == -1);
    /* room for exactly the result with its NUL, and one byte less */
    size_t need = strlen("1146028032.0;tcp://127.0.0.1:5000") + 1;
    char *exact = malloc(need);
    CHECK(uri_point_to_loopback(&ompi_orte, uri, 5000, exact, need) == 0);
    CHECK_STR(exact, "1146028032.0;tcp://127.0.0.1:5000");
    CHECK(uri_point_to_loopback(&ompi_orte, uri, 5000, exact, need - 1) == -1);
    CHECK(strnlen(exact, need - 1) < need - 1); /* cut, terminated */
    CHECK(uri_point_to_loopback(&ompi_orte, uri, 5000, exact, 1) == -1);
    CHECK_STR(exact, "");
    free(exact);
}

/* What Open MPI 5.0.7's mpirun (PRRTE 3.0.8, Debian 13) gives its ssh
   launch agent for a node, as captured there: for a user whose login shell
   is bash, and for one whose shell is sh (".profile" read in a subshell). */
static const char *const prrte_tail[] = {
    "--leave-session-attached",
    "--prtemca",
    "ess",
    "\"env\"",
    "--prtemca",
    "ess_base_nspace",
    "\"prterun-vm-25@0\"",
    "--prtemca",
    "ess_base_vpid",
    "1",
    "--prtemca",
    "ess_base_num_procs",
    "\"3\"",
    "--prtemca",
    "prte_hnp_uri",
    "\"prterun-vm-25@0.0;tcp://198.51.100.7,203.0.113.9:51947:24,24\"",
    "--prtemca",
    "plm_ssh_agent",
    "\"/usr/bin/qcg-launch\"",
    "--prtemca",
    "plm_ssh_no_tree_spawn",
    "\"1\"",
    "--prtemca",
    "rml_base_radix",
    "\"1000\"",
    "--prtemca",
    "plm",
    "\"ssh\"",
};
#define PRRTE_ENV                                                                                  \
    "PRTE_PREFIX=/usr;export PRTE_PREFIX;LD_LIBRARY_PATH=/usr/lib:/usr/lib/x86_64-linux-gnu/"      \
    "pmix2/lib:$LD_LIBRARY_PATH;export LD_LIBRARY_PATH;DYLD_LIBRARY_PATH=/usr/lib:/usr/lib/"       \
    "x86_64-linux-gnu/pmix2/lib:$DYLD_LIBRARY_PATH;export DYLD_LIBRARY_PATH;/usr/bin/prted"

/* The launch agent's arguments joined (as qcg-launch joins them), with
   before/after around the tail. */
static void prrte_line(char *out, size_t len, const char *before, const char *after)
{
    snprintf(out, len, "%s", before);
    for (int i = 0; i < NELEM(prrte_tail); i++) {
        strncat(out, " ", len - strlen(out) - 1);
        strncat(out, prrte_tail[i], len - strlen(out) - 1);
    }
    strncat(out, after, len - strlen(out) - 1);
}

static void check_prrte_words(const char *bare)
{
    int n = split1(bare);
    CHECK(n == NELEM(prrte_tail) + 1);
    if (n != NELEM(prrte_tail) + 1) {
        words_free(words);
        return;
    }
    CHECK_STR(words[0], "/usr/bin/prted");
    CHECK(runtime_of(words[0]) == &ompi_prrte);
    CHECK(runtime_of_line(n, words) == &ompi_prrte);
    int u = mca_value_index(&ompi_prrte, n, words, "prte_hnp_uri");
    CHECK(u == 16);
    CHECK(mca_value_index(&ompi_orte, n, words, "prte_hnp_uri") == -1);
    CHECK(mca_value_index(&ompi_prrte, n, words, "prte_parent_uri") == -1);
    CHECK(mca_value_index(&ompi_prrte, n, words, "rml_base_radix") == 25);
    if (u > 0) {
        char addrs[64], out[128];
        uint16_t port = 0;
        CHECK_STR(words[u], "prterun-vm-25@0.0;tcp://198.51.100.7,203.0.113.9:51947:24,24");
        CHECK(uri_tcp_endpoint(&ompi_prrte, words[u], addrs, sizeof(addrs), &port) == 0);
        CHECK_STR(addrs, "198.51.100.7,203.0.113.9");
        CHECK(port == 51947);
        CHECK(uri_point_to_loopback(&ompi_prrte, words[u], 40001, out, sizeof(out)) == 0);
        CHECK_STR(out, "prterun-vm-25@0.0;tcp://127.0.0.1:40001:8");
    }
    words_free(words);
}

static void test_prrte_line(void)
{
    char line[2048], bare[2048], want[2048], w[160];

    /* bash: the settings, then the daemon's own words */
    prrte_line(line, sizeof(line), PRRTE_ENV, "");
    prrte_line(want, sizeof(want), "/usr/bin/prted", "");
    CHECK(prrte_strip_preamble(line, bare, sizeof(bare), w, sizeof(w)) == 1);
    CHECK_STR(bare, want);
    check_prrte_words(bare);
    /* sh: the same in ( test ! -r ./.profile || . ./.profile; ... ) */
    prrte_line(line, sizeof(line), "( test ! -r ./.profile || . ./.profile; " PRRTE_ENV, " )");
    CHECK(prrte_strip_preamble(line, bare, sizeof(bare), w, sizeof(w)) == 1);
    CHECK_STR(bare, want);
    /* without a shell, these would not be words at all */
    CHECK(split1(line) == -1);
    /* ORTE's line and a bare one have no preamble */
    CHECK(prrte_strip_preamble(want, bare, sizeof(bare), w, sizeof(w)) == 0);
    CHECK(prrte_strip_preamble("orted -mca ess env", bare, sizeof(bare), w, sizeof(w)) == 0);
    CHECK(prrte_strip_preamble("", bare, sizeof(bare), w, sizeof(w)) == 0);

    /* Anything else around the daemon is refused, not run: another
       variable, a command substitution, another variable's value, a missing
       export, an unclosed subshell, more commands after it. */
    static const char *const bad[] = {
        "PATH=/tmp;export PATH;/usr/bin/prted",
        "LD_PRELOAD=/tmp/x.so;export LD_PRELOAD;/usr/bin/prted",
        "PRTE_PREFIX=$(id);export PRTE_PREFIX;/usr/bin/prted",
        "PRTE_PREFIX=`id`;export PRTE_PREFIX;/usr/bin/prted",
        "PRTE_PREFIX=/usr $HOME;export PRTE_PREFIX;/usr/bin/prted",
        "LD_LIBRARY_PATH=$HOME;export LD_LIBRARY_PATH;/usr/bin/prted",
        "PRTE_PREFIX=/usr;export PMIX_PREFIX;/usr/bin/prted",
        "PRTE_PREFIX=/usr;/usr/bin/prted",
        "PRTE_PREFIX=/usr",
        "PRTE_PREFIX=/usr;export PRTE_PREFIX",
        "( test ! -r ./.profile || . ./.profile; PRTE_PREFIX=/usr;export "
        "PRTE_PREFIX;/usr/bin/prted",
        "( test ! -r ./.profile || . ./.profile; /usr/bin/prted )x",
    };
    for (int i = 0; i < NELEM(bad); i++) {
        int rc = prrte_strip_preamble(bad[i], bare, sizeof(bare), w, sizeof(w));
        if (rc == 1) /* stripped: then what is left must still be refused */
            rc = split1(bare) < 0 || runtime_of(bare) == NULL ? -1 : 1;
        if (rc != -1 && rc != 0)
            fprintf(stderr, "  accepted: %s\n", bad[i]);
        CHECK(rc == -1 || (rc == 0 && split1(bad[i]) == -1));
    }
    /* The command with its NUL must fit */
    prrte_line(line, sizeof(line), PRRTE_ENV, "");
    size_t need = strlen(want) + 1;
    CHECK(prrte_strip_preamble(line, bare, need, w, sizeof(w)) == 1);
    CHECK(prrte_strip_preamble(line, bare, need - 1, w, sizeof(w)) == -1);
}

static void test_prrte_uri(void)
{
    char addrs[64], out[128];
    uint16_t port;

#define ENDPOINT5(uri)                                                                             \
    (port = 0, memset(addrs, 'Z', sizeof(addrs)),                                                  \
     uri_tcp_endpoint(&ompi_prrte, uri, addrs, sizeof(addrs), &port))
    CHECK(ENDPOINT5("prterun-n-1@0.0;tcp://198.18.1.11:43981:24") == 0);
    CHECK_STR(addrs, "198.18.1.11");
    CHECK(port == 43981);
    /* ports and masks as lists: the first port */
    CHECK(ENDPOINT5("p@0.0;tcp://198.18.1.11,198.51.100.2:43981,43982:24,16") == 0);
    CHECK_STR(addrs, "198.18.1.11,198.51.100.2");
    CHECK(port == 43981);
    CHECK(ENDPOINT5("p@0.0;tcp6://[::1]:5:128;tcp://10.0.0.1:7:8") == 0);
    CHECK(port == 7);
    /* ORTE's form has no masks; bad ports and masks */
    CHECK(ENDPOINT5("p@0.0;tcp://198.18.1.11:43981") == -1);
    CHECK(ENDPOINT5("p@0.0;tcp://198.18.1.11:0:24") == -1);
    CHECK(ENDPOINT5("p@0.0;tcp://198.18.1.11:65536:24") == -1);
    CHECK(ENDPOINT5("p@0.0;tcp://198.18.1.11::24") == -1);
    CHECK(ENDPOINT5("p@0.0;tcp://198.18.1.11:5:") == -1);
    CHECK(ENDPOINT5("p@0.0;tcp://198.18.1.11:5:24,") == -1);
    CHECK(ENDPOINT5("p@0.0;tcp://198.18.1.11:5,:24") == -1);
    CHECK(ENDPOINT5("p@0.0;tcp://198.18.1.11:5:129") == -1);
    CHECK(ENDPOINT5("p@0.0;tcp://198.18.1.11:5:x") == -1);
    CHECK(ENDPOINT5("p@0.0;tcp://198.18.1.11:+5:24") == -1);
    CHECK(ENDPOINT5("p@0.0;tcp://:5:24") == -1);
    CHECK(ENDPOINT5("p@0.0;tcp://5:24") == -1);
    CHECK(ENDPOINT5("tcp://198.18.1.11:5:24") == -1);
#undef ENDPOINT5
    /* ORTE reads a PRRTE contact's port as the mask: the runtime matters */
    CHECK(uri_tcp_endpoint(&ompi_orte, "p@0.0;tcp://10.0.0.1:5:24", addrs, sizeof(addrs), &port) ==
              0 &&
          port == 24);

    CHECK(uri_point_to_loopback(&ompi_prrte,
                                "prterun-n-1@0.0;tcp://198.18.1.11,10.1.2.3:43981:24,8", 5000, out,
                                sizeof(out)) == 0);
    CHECK_STR(out, "prterun-n-1@0.0;tcp://127.0.0.1:5000:8");
    CHECK(uri_point_to_loopback(&ompi_prrte, "p@0.0;tcp://10.0.0.1:5", 5000, out, sizeof(out)) ==
          -1);
    size_t need = strlen("p@0.0;tcp://127.0.0.1:5000:8") + 1;
    CHECK(uri_point_to_loopback(&ompi_prrte, "p@0.0;tcp://10.0.0.1:5:8", 5000, out, need) == 0);
    CHECK(uri_point_to_loopback(&ompi_prrte, "p@0.0;tcp://10.0.0.1:5:8", 5000, out, need - 1) ==
          -1);
}

static void test_jobid(void)
{
    char id[GRID_JOB_MAX], gen[USER_JOB_MAX + 1], gen2[USER_JOB_MAX + 1];
    char job40[USER_JOB_MAX + 2];

    memset(job40, 'j', USER_JOB_MAX + 1);
    job40[USER_JOB_MAX + 1] = '\0';
    CHECK(!user_job_valid(job40)); /* 41 characters */
    job40[USER_JOB_MAX] = '\0';
    CHECK(user_job_valid(job40)); /* 40 */
    CHECK(user_job_valid("a"));
    CHECK(user_job_valid("9"));
    CHECK(user_job_valid("Job-1.2_x"));
    CHECK(user_job_valid("a--"));
    CHECK(!user_job_valid(""));
    CHECK(!user_job_valid(NULL));
    CHECK(!user_job_valid("-a"));
    CHECK(!user_job_valid(".a"));
    CHECK(!user_job_valid("_a"));
    CHECK(!user_job_valid("a b"));
    CHECK(!user_job_valid("a/b"));
    CHECK(!user_job_valid("a;b"));
    CHECK(!user_job_valid("a\nb"));
    CHECK(!user_job_valid("j\xc3\xa9"));

    CHECK(agent_job_id(id, "j1", "nata1") == 0);
    CHECK_STR(id, "j1.a.nata1");
    CHECK(agent_job_id(id, "j1", "bad node") == -1);
    CHECK(agent_job_id(id, "j1", "") == -1);
    CHECK(agent_job_id(id, "j1", "-n") == -1);
    CHECK(agent_job_id(id, "", "n") == -1);
    CHECK(agent_job_id(id, "j/1", "n") == -1);
    CHECK(agent_job_id(id, job40, "n") == 0);

    /* The longest id that fits (63 characters) keeps the node's name; one
       more and the node is hashed (FNV-1a 64: "a" -> af63dc4c8601ec8c). */
    char node[80];
    memset(node, 'n', sizeof(node));
    node[59] = '\0';
    CHECK(agent_job_id(id, "j", node) == 0);
    CHECK(strlen(id) == 63 && strncmp(id, "j.a.nnn", 7) == 0);
    node[59] = 'n';
    node[60] = '\0';
    CHECK(agent_job_id(id, "j", node) == 0);
    CHECK(strlen(id) == strlen("j.h.") + 16 && strncmp(id, "j.h.", 4) == 0);
    static const char longnode[] =
        "compute-node-0042.a-rather-long-cluster-domain.example-univ.edu";
    CHECK(agent_job_id(id, "j1", longnode) == 0);
    CHECK_STR(id, "j1.h.297f208493f56232");
    CHECK(agent_job_id(id, job40, longnode) == 0);
    CHECK(strlen(id) == USER_JOB_MAX + 3 + 16 && strlen(id) <= GRID_JOB_MAX - 1);
    CHECK(strcmp(id + USER_JOB_MAX, ".h.297f208493f56232") == 0);
    char again[GRID_JOB_MAX], other[GRID_JOB_MAX];
    CHECK(agent_job_id(again, job40, longnode) == 0);
    CHECK_STR(again, id);
    char longnode2[sizeof(longnode)];
    memcpy(longnode2, longnode, sizeof(longnode));
    longnode2[16] = '3'; /* compute-node-0043... */
    CHECK(agent_job_id(other, job40, longnode2) == 0);
    CHECK(strcmp(other, id) != 0);
    /* A node name too long to be a name is no node. */
    memset(node, 'n', sizeof(node));
    node[63] = '\0';
    CHECK(agent_job_id(id, "j", node) == 0);
    node[63] = 'n';
    node[64] = '\0';
    CHECK(agent_job_id(id, "j", node) == -1);

    CHECK(mpi_job_id(id, "j1", 1146028032u) == 0);
    CHECK_STR(id, "j1.m.1146028032");
    CHECK(mpi_job_id(id, "j1", 0) == 0);
    CHECK_STR(id, "j1.m.0");
    CHECK(mpi_job_id(id, job40, UINT32_MAX) == 0);
    CHECK(strlen(id) == USER_JOB_MAX + strlen(".m.4294967295"));
    CHECK(strcmp(id + USER_JOB_MAX, ".m.4294967295") == 0);
    CHECK(mpi_job_id(id, "", 1) == -1);
    CHECK(mpi_job_id(id, "a b", 1) == -1);

    CHECK(user_job_generate(gen) == 0);
    CHECK(user_job_generate(gen2) == 0);
    CHECK(strlen(gen) == 33 && gen[0] == 'j');
    CHECK(strspn(gen + 1, "0123456789abcdef") == 32);
    CHECK(strlen(gen2) == 33 && strspn(gen2 + 1, "0123456789abcdef") == 32);
    CHECK(user_job_valid(gen));
    CHECK(strcmp(gen, gen2) != 0);
}

/* xorshift: the same mutations every run. */
static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_random(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A byte a mutation puts in: mostly the ones the parsers look at. */
static char interesting(void)
{
    static const char alphabet[] = "\"'\\ \t\n;&|<>()$`*?[]{}~#:,./-09az";
    uint64_t r = next_random();
    if (r % 4 == 0)
        return (char)(1 + (r >> 8) % 255);
    return alphabet[(r >> 8) % (sizeof(alphabet) - 1)];
}

/* s, changed at a few places, cut or grown, in a buffer of exactly its size. */
static char *mutated(const char *s)
{
    size_t n = strlen(s), len = n;
    if (next_random() % 4 == 0)
        len = next_random() % (n + 1);
    else if (next_random() % 3 == 0)
        len = n + next_random() % 8;
    char *m = malloc(len + 1);
    for (size_t i = 0; i < len; i++)
        m[i] = i < n ? s[i] : interesting();
    for (int k = (int)(next_random() % 4); k > 0 && len > 0; k--)
        m[next_random() % len] = interesting();
    m[len] = '\0';
    return m;
}

/* The word quoted for shell_words: in single quotes, a ' as '\''. */
static char *quoted(const char *w)
{
    char *q = malloc(4 * strlen(w) + 3), *o = q;
    *o++ = '\'';
    for (; *w; w++) {
        if (*w == '\'') {
            memcpy(o, "'\\''", 4);
            o += 4;
        } else {
            *o++ = *w;
        }
    }
    *o++ = '\'';
    *o = '\0';
    return q;
}

/* Mutated daemon command lines through shell_words: a count within max and
   terminated words, or a refusal with a reason; the words quoted again give
   the same words; nothing leaks. */
static int mutate_words(const char *const *sample, int nsample, int *verdicts)
{
    const char *in[WORDS_MAX];
    char *mine[WORDS_MAX];
    char *again[WORDS_MAX + 1];
    int n = 1 + (int)(next_random() % (nsample < WORDS_MAX ? nsample : WORDS_MAX));
    int first = (int)(next_random() % (size_t)(nsample - n + 1));
    int max = next_random() % 2 ? WORDS_MAX : (int)(next_random() % (WORDS_MAX + 1));
    int bad = 0;

    for (int i = 0; i < n; i++)
        in[i] = mine[i] =
            next_random() % 3 == 0 ? mutated(sample[first + i]) : strdup(sample[first + i]);
    int got = split_max(n, in, max);
    if (got == -1) {
        size_t len = strnlen(why, sizeof(why));
        if (words[0] != NULL || len == 0 || len == sizeof(why))
            bad++;
        verdicts[1]++;
    } else if (got < 0 || got > max || words[got] != NULL) {
        bad++;
    } else {
        verdicts[0]++;
        for (int i = 0; i < got; i++)
            if (words[i] == NULL)
                bad++;
        /* Quoted one by one, the words come back as they are. */
        const char *q[WORDS_MAX];
        for (int i = 0; !bad && i < got; i++)
            q[i] = quoted(words[i]);
        if (!bad) {
            memset(why, 'Z', sizeof(why));
            int back = shell_words(got, q, again, WORDS_MAX, why, sizeof(why));
            if (back != got)
                bad++;
            for (int i = 0; !bad && i < got; i++)
                if (strcmp(again[i], words[i]) != 0)
                    bad++;
            if (back > 0)
                words_free(again);
            for (int i = 0; i < got; i++)
                free((char *)q[i]);
        }
        words_free(words);
    }
    if (bad) {
        fprintf(stderr, "shell_words of %d argument(s), max %d: %d, why \"%.*s\"\n", n, max, got,
                (int)sizeof(why), why);
        for (int i = 0; i < n; i++)
            fprintf(stderr, "  [%s]\n", in[i]);
    }
    for (int i = 0; i < n; i++)
        free(mine[i]);
    return bad;
}

/* A mutated URI through both URI functions, with output buffers of random
   sizes: terminated output, and a loopback URI that keeps the process name
   whenever one is produced. */
static int mutate_uri(const char *sample, int *verdicts)
{
    char *uri = mutated(sample);
    size_t addrlen = 1 + next_random() % 48, outlen = 1 + next_random() % 64;
    char *addrs = malloc(addrlen), *out = malloc(outlen), big[256], want[320];
    uint16_t port = 0, lport = (uint16_t)next_random();
    int bad = 0;

    memset(addrs, 'Z', addrlen);
    int rc = uri_tcp_endpoint(&ompi_orte, uri, addrs, addrlen, &port);
    if (rc == 0) {
        verdicts[0]++;
        char ep[80];
        snprintf(ep, sizeof(ep), "tcp://%s:", addrs);
        if (strnlen(addrs, addrlen) == addrlen || port == 0 || strstr(uri, ep) == NULL)
            bad++;
    } else if (rc != -1) {
        bad++;
    }

    memset(out, 'Z', outlen);
    rc = uri_point_to_loopback(&ompi_orte, uri, lport, out, outlen);
    const char *semi = strchr(uri, ';');
    if (rc == 0) {
        verdicts[1]++;
        snprintf(want, sizeof(want), "%.*s;tcp://127.0.0.1:%u", semi ? (int)(semi - uri) : 0, uri,
                 lport);
        if (strnlen(out, outlen) == outlen || semi == NULL || semi == uri ||
            strcmp(out, want) != 0 ||
            uri_tcp_endpoint(&ompi_orte, uri, big, sizeof(big), &port) != 0)
            bad++;
    } else if (rc == -1) {
        /* untouched, or written and cut: terminated either way */
        int untouched = 1;
        for (size_t i = 0; i < outlen; i++)
            untouched &= out[i] == 'Z';
        if (!untouched && strnlen(out, outlen) == outlen)
            bad++;
    } else {
        bad++;
    }
    if (bad)
        fprintf(stderr, "URI [%s]: endpoint [%.*s]:%u, loopback %d [%.*s]\n", uri, (int)addrlen,
                addrs, port, rc, (int)outlen, out);
    free(uri);
    free(addrs);
    free(out);
    return bad;
}

static void test_mutations(void)
{
    static const char *const sample[] = {
        "orted",
        "-mca",
        "ess",
        "\"env\"",
        "-mca",
        "ess_base_jobid",
        "\"1146028032\"",
        "-mca",
        "ess_base_vpid",
        "1",
        "-mca",
        "orte_node_regex",
        "\"nata[1:1],open[1:1]@0(2)\"",
        "-mca",
        "orte_hnp_uri",
        "\"1146028032.0;tcp://198.18.1.11,10.1.2.3:43981;tcp6://[::1]:43982\"",
        "--mca",
        "plm_rsh_agent",
        "\"/x/qcg-launch --timeout 30\"",
        "-mca",
        "pmix",
        "\"^s1,s2,cray,isolated\"",
        "'it'\\''s' a\\ b \"c\\\"d\"",
    };
    static const char *const uris[] = {
        "1146028032.0;tcp://198.18.1.11:43981",
        "1146028032.0;tcp://198.18.1.11,10.1.2.3:43981;tcp6://[::1]:43982",
        "1146028032.1;tcp6://[fe80::1]:1024;tcp://10.0.0.1:65535",
        "4.0;tcp://a:1",
    };
    int bad = 0, wv[2] = {0}, uv[2] = {0};
    const int rounds = 200000;

    for (int round = 0; round < rounds && bad == 0; round++) {
        bad += mutate_words(sample, NELEM(sample), wv);
        bad += mutate_uri(uris[next_random() % NELEM(uris)], uv);
    }
    CHECK(bad == 0);
    CHECK(wv[0] > 0 && wv[1] > 0);
    CHECK(uv[0] > 0 && uv[1] > 0 && uv[0] < rounds && uv[1] < rounds);
    printf("%d mutated command lines: %d split, %d refused; %d mutated URIs: %d with a tcp "
           "endpoint, %d pointed at the loopback\n",
           rounds, wv[0], wv[1], rounds, uv[0], uv[1]);
}

int main(void)
{
    test_words();
    test_orted_line();
    test_mca();
    test_runtime_of();
    test_uri();
    test_prrte_line();
    test_prrte_uri();
    test_jobid();
    test_mutations();
    return check_result("launch-ortecmd");
}
