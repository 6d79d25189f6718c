/* The iptables rules of traversing TCP; see traverse_rules.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "monotonic.h"
#include "traverse_rules.h"

extern char **environ;

#define IPT_TIMEOUT_MS 10000
#define IPT_WAIT "5" /* seconds iptables waits for the xtables lock */
#define CHAIN_MAX 32
#define ARGV_MAX 40
/* A leftover jump may have been added more than once (crashed runs). */
#define SWEEP_JUMPS_MAX 8

int tvrules_run(char *const argv[], const char *input, unsigned timeout_ms, char *err,
                size_t errlen)
{
    posix_spawn_file_actions_t fa;
    int pipefd[2], in[2] = {-1, -1}, rc, status = 0;
    size_t got = 0, inlen = input != NULL ? strlen(input) : 0;
    pid_t pid;
    uint64_t deadline = monotonic_ms() + timeout_ms;

    err[0] = '\0';
    /* The input is written whole before the command starts: it must fit the
       pipe (64 KiB), hence TVRULES_BATCH_MAX. */
    if (inlen >= 65536) {
        snprintf(err, errlen, "input of %zu bytes too large", inlen);
        return -1;
    }
    if (input != NULL && pipe2(in, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    if (input != NULL && write(in[1], input, inlen) != (ssize_t)inlen) {
        snprintf(err, errlen, "pipe write: %s", strerror(errno));
        close(in[0]);
        close(in[1]);
        return -1;
    }
    if (in[1] >= 0)
        close(in[1]);
    if (pipe2(pipefd, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        if (in[0] >= 0)
            close(in[0]);
        return -1;
    }
    posix_spawn_file_actions_init(&fa);
    if (in[0] >= 0)
        posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    else
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
    rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pipefd[1]);
    if (in[0] >= 0)
        close(in[0]);
    if (rc != 0) {
        close(pipefd[0]);
        snprintf(err, errlen, "cannot run %s: %s", argv[0], strerror(rc));
        return -1;
    }
    /* Its stderr, until it closes it (exits) or the time is up. */
    for (;;) {
        uint64_t now = monotonic_ms();
        struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};
        char buf[256];

        if (now >= deadline) {
            kill(pid, SIGKILL);
            snprintf(err, errlen, "%s did not finish within %u ms", argv[0], timeout_ms);
            break;
        }
        if (poll(&pfd, 1, (int)(deadline - now)) < 0 && errno != EINTR)
            break;
        if (!(pfd.revents & (POLLIN | POLLHUP)))
            continue;
        ssize_t n = read(pipefd[0], buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (got + 1 < errlen) {
            size_t take = (size_t)n < errlen - 1 - got ? (size_t)n : errlen - 1 - got;

            memcpy(err + got, buf, take);
            got += take;
            err[got] = '\0';
        }
    }
    close(pipefd[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    /* One line is enough for a log. */
    char *nl = strchr(err, '\n');
    if (nl != NULL)
        *nl = '\0';
    if (err[0] == '\0')
        snprintf(err, errlen, "%s failed (status 0x%x)", argv[0], (unsigned)status);
    return -1;
}

enum { CH_OUT, CH_IN, CH_GUARD, CH_COUNT };

static void chain_name(char *out, size_t n, uint16_t queue, int chain)
{
    static const char *const names[CH_COUNT] = {"OUT", "IN", "GUARD"};
    snprintf(out, n, "QCG-TRAVERSE-%s-%u", names[chain], queue);
}

static int rule_chain(const struct tvrule *r)
{
    return r->kind != TVR_QUEUE ? CH_GUARD : r->inbound ? CH_IN : CH_OUT;
}

/* The tool of a family: iptables, or ip6tables for AF_INET6. */
static const char *tool(int family, int restore)
{
    if (family == AF_INET6)
        return restore ? "ip6tables-restore" : "ip6tables";
    return restore ? "iptables-restore" : "iptables";
}

/* iptables -w 5 -t raw <args...> (ip6tables for AF_INET6), with a log line
   on failure unless quiet. */
static int ipt(int family, int quiet, char *err, size_t errlen, const char *const *args)
{
    char *argv[ARGV_MAX];
    char buf[256];
    int n = 0;

    argv[n++] = (char *)tool(family, 0);
    argv[n++] = "-w";
    argv[n++] = IPT_WAIT;
    argv[n++] = "-t";
    argv[n++] = "raw";
    for (; *args != NULL && n < ARGV_MAX - 1; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    if (err == NULL) {
        err = buf;
        errlen = sizeof(buf);
    }
    uint64_t t0 = monotonic_ms();
    int rc = tvrules_run(argv, NULL, IPT_TIMEOUT_MS, err, errlen);
    if (rc < 0 && !quiet)
        log_warnx("%s -t raw %s %s: %s", argv[0], argv[5], argv[6] ? argv[6] : "", err);
    log_debug("%s -t raw %s %s: %s in %llu ms", argv[0], argv[5], argv[6] ? argv[6] : "",
              rc == 0 ? "done" : "failed", (unsigned long long)(monotonic_ms() - t0));
    return rc;
}

/* The jumps from the built-in chains: only the packets a chain's rules may
   take (SYN-carrying TCP; resets and destination-unreachable errors), each
   for one family (0: both). */
#define JUMP_MATCH_MAX 5
static const struct {
    int chain, family;
    const char *builtin;
    const char *match[JUMP_MATCH_MAX];
} jumps[] = {
    {CH_OUT, 0, "OUTPUT", {"-p", "tcp", "--tcp-flags", "SYN", "SYN"}},
    {CH_IN, 0, "PREROUTING", {"-p", "tcp", "--tcp-flags", "SYN", "SYN"}},
    {CH_GUARD, 0, "PREROUTING", {"-p", "tcp", "--tcp-flags", "RST", "RST"}},
    {CH_GUARD, AF_INET, "PREROUTING", {"-p", "icmp", "--icmp-type", "destination-unreachable"}},
    {CH_GUARD,
     AF_INET6,
     "PREROUTING",
     {"-p", "icmpv6", "--icmpv6-type", "destination-unreachable"}},
};
#define NJUMPS (sizeof(jumps) / sizeof(jumps[0]))

static int jump_of(size_t j, int family)
{
    return jumps[j].family == 0 || jumps[j].family == family;
}

/* iptables OP BUILTIN MATCH... -m comment --comment COMMENT -j CHAIN */
static int jump(int family, const char *op, size_t j, uint16_t queue, int quiet, char *err,
                size_t errlen)
{
    char chain[CHAIN_MAX], comment[64];
    const char *args[ARGV_MAX];
    int n = 0;

    chain_name(chain, sizeof(chain), queue, jumps[j].chain);
    snprintf(comment, sizeof(comment), "qcg-helper traverse q%u", queue);
    args[n++] = op;
    args[n++] = jumps[j].builtin;
    for (int i = 0; i < JUMP_MATCH_MAX && jumps[j].match[i] != NULL; i++)
        args[n++] = jumps[j].match[i];
    const char *tail[] = {"-m", "comment", "--comment", comment, "-j", chain, NULL};
    for (size_t i = 0; i < sizeof(tail) / sizeof(tail[0]); i++)
        args[n++] = tail[i];
    return ipt(family, quiet, err, errlen, args);
}

/* One family's jumps and chains, whatever they hold. */
static int sweep_family(int family, uint16_t queue)
{
    char chain[CHAIN_MAX];
    int failed = 0;

    /* Deleting each jump until there is none: bounded. */
    for (size_t j = 0; j < NJUMPS; j++)
        for (int i = 0; jump_of(j, family) && i < SWEEP_JUMPS_MAX; i++)
            if (jump(family, "-D", j, queue, 1, NULL, 0) < 0)
                break;
    for (int c = 0; c < CH_COUNT; c++) {
        chain_name(chain, sizeof(chain), queue, c);
        if (ipt(family, 1, NULL, 0, (const char *[]){"-F", chain, NULL}) < 0)
            continue; /* no such chain (or no ip6tables) */
        if (ipt(family, 0, NULL, 0, (const char *[]){"-X", chain, NULL}) < 0)
            failed++;
    }
    return failed;
}

int tvrules_sweep(uint16_t queue)
{
    return sweep_family(AF_INET, queue) + sweep_family(AF_INET6, queue);
}

/* Whether the kernel takes a rule with the u32 match (a Debian kernel has
   it; a custom one may not): one is added to the guard chain and removed. */
static int u32_works(int family, uint16_t queue)
{
    char chain[CHAIN_MAX];
    chain_name(chain, sizeof(chain), queue, CH_GUARD);
    const char *probe[] = {"-p",    family == AF_INET6 ? "icmpv6" : "icmp",          "-m", "u32",
                           "--u32", family == AF_INET6 ? "72=0" : "0>>22&0x3C@24=0", "-j", "DROP"};
    const char *args[2 + sizeof(probe) / sizeof(probe[0]) + 1];
    args[1] = chain;
    memcpy(args + 2, probe, sizeof(probe));
    args[2 + sizeof(probe) / sizeof(probe[0])] = NULL;
    args[0] = "-A";
    if (ipt(family, 1, NULL, 0, args) < 0)
        return 0;
    args[0] = "-D";
    (void)ipt(family, 1, NULL, 0, args);
    return 1;
}

/* One family's chains and jumps. */
static int setup_family(int family, uint16_t queue, int *icmp_guard, char *err, size_t errlen)
{
    char chain[CHAIN_MAX];

    for (int c = 0; c < CH_COUNT; c++) {
        chain_name(chain, sizeof(chain), queue, c);
        if (ipt(family, 0, err, errlen, (const char *[]){"-N", chain, NULL}) < 0)
            return -1;
    }
    for (size_t j = 0; j < NJUMPS; j++)
        if (jump_of(j, family) && jump(family, "-I", j, queue, 0, err, errlen) < 0)
            return -1;
    *icmp_guard = u32_works(family, queue);
    return 0;
}

int tvrules_setup(uint16_t queue, int v6, int icmp_guard[2], char *err, size_t errlen)
{
    char why[200];

    if (tvrules_sweep(queue) > 0)
        log_warnx("leftover chains of queue %u not fully removed", queue);
    icmp_guard[0] = icmp_guard[1] = 0;
    if (setup_family(AF_INET, queue, &icmp_guard[0], err, errlen) < 0)
        goto fail;
    if (v6 && setup_family(AF_INET6, queue, &icmp_guard[1], why, sizeof(why)) < 0) {
        snprintf(err, errlen, "ip6tables: %s", why);
        goto fail;
    }
    return 0;
fail:
    tvrules_sweep(queue);
    return -1;
}

/* One rule as an iptables-restore line: "-A|-D CHAIN matches... -j NFQUEUE|DROP ...". */
/* The u32 match of an ICMP(v6) destination-unreachable error quoting a
   packet to dst:dport.  IPv4: the destination address at ICMP header 8 +
   16, the TCP destination port behind the quoted IP header.  IPv6 (no
   extension header, as rawpkt.h): 40 + 8 + 24 and 40 + 8 + 40 + 2. */
static void icmp_u32(const struct tvrule *r, char *out, size_t n)
{
    if (r->dst.family == AF_INET6) {
        uint32_t w[4];
        memcpy(w, &r->dst.u.v6, sizeof(w));
        snprintf(out, n, "72=0x%08x&&76=0x%08x&&80=0x%08x&&84=0x%08x&&88&0xFFFF=%u",
                 (unsigned)ntohl(w[0]), (unsigned)ntohl(w[1]), (unsigned)ntohl(w[2]),
                 (unsigned)ntohl(w[3]), r->dport);
        return;
    }
    snprintf(out, n, "0>>22&0x3C@24=0x%08x&&0>>22&0x3C@8>>22&0x3C@8&0xFFFF=%u",
             (unsigned)ntohl(r->dst.u.v4.s_addr), r->dport);
}

static int rule_line(char *out, size_t n, uint16_t queue, const struct tvrule *r, int add)
{
    char chain[CHAIN_MAX], src[RAWPKT_ADDR_TEXT] = "", dst[RAWPKT_ADDR_TEXT] = "";
    char sport[16] = "", dport[16] = "", u32[128];
    int len;

    chain_name(chain, sizeof(chain), queue, rule_chain(r));
    if (r->src.family != 0)
        rawpkt_addr_text(&r->src, src);
    if (r->dst.family != 0)
        rawpkt_addr_text(&r->dst, dst);
    if (r->sport != 0)
        snprintf(sport, sizeof(sport), " --sport %u", r->sport);
    if (r->dport != 0)
        snprintf(dport, sizeof(dport), " --dport %u", r->dport);
    switch (r->kind) {
    case TVR_GUARD_RST:
        /* The reset comes from the remote end: its address and port. */
        len = snprintf(out, n,
                       "%s %s -p tcp -s %s --sport %u --tcp-flags RST RST -m comment --comment "
                       "\"qcg-helper traverse q%u id%u\" -j DROP\n",
                       add ? "-A" : "-D", chain, dst, r->dport, queue, r->id);
        break;
    case TVR_GUARD_ICMP:
        /* The error quotes our packet: its destination address and port. */
        icmp_u32(r, u32, sizeof(u32));
        len = snprintf(out, n,
                       "%s %s -p %s destination-unreachable -m u32 --u32 \"%s\" -m comment "
                       "--comment \"qcg-helper traverse q%u id%u\" -j DROP\n",
                       add ? "-A" : "-D", chain,
                       r->dst.family == AF_INET6 ? "icmpv6 --icmpv6-type" : "icmp --icmp-type", u32,
                       queue, r->id);
        break;
    default:
        /* --queue-bypass: a helper that is gone must not black-hole anything. */
        len = snprintf(out, n,
                       "%s %s -p tcp%s%s%s%s%s%s %s -m comment --comment "
                       "\"qcg-helper traverse q%u id%u\" -j NFQUEUE --queue-num %u "
                       "--queue-bypass\n",
                       add ? "-A" : "-D", chain, src[0] ? " -s " : "", src, sport,
                       dst[0] ? " -d " : "", dst, dport,
                       r->synack ? "--tcp-flags SYN,ACK SYN,ACK" : "--syn", queue, r->id, queue);
    }
    return len > 0 && (size_t)len < n ? len : -1;
}

/* One family's rules of r[0..n) in one iptables-restore transaction. */
static int apply_family(int family, uint16_t queue, const struct tvrule *r, size_t n, int add,
                        char *err, size_t errlen)
{
    char input[TVRULES_BATCH_MAX * 256 + 32];
    char *argv[] = {(char *)tool(family, 1), "-w", IPT_WAIT, "--noflush", NULL};
    size_t used, taken = 0;
    unsigned first = 0;

    used = (size_t)snprintf(input, sizeof(input), "*raw\n");
    for (size_t i = 0; i < n; i++) {
        if (r[i].dst.family != family)
            continue;
        int len = rule_line(input + used, sizeof(input) - used, queue, &r[i], add);

        if (len < 0) {
            snprintf(err, errlen, "rule id %u does not fit", r[i].id);
            return -1;
        }
        if (taken++ == 0)
            first = r[i].id;
        used += (size_t)len;
    }
    if (taken == 0)
        return 0;
    snprintf(input + used, sizeof(input) - used, "COMMIT\n");
    uint64_t t0 = monotonic_ms();
    int rc = tvrules_run(argv, input, IPT_TIMEOUT_MS, err, errlen);
    log_debug("%s: %s %zu rule(s) of queue %u (first id %u): %s in %llu ms", argv[0],
              add ? "add" : "delete", taken, queue, first, rc == 0 ? "done" : err,
              (unsigned long long)(monotonic_ms() - t0));
    return rc;
}

int tvrules_apply(uint16_t queue, const struct tvrule *r, size_t n, int add, char *err,
                  size_t errlen)
{
    if (n == 0 || n > TVRULES_BATCH_MAX) {
        snprintf(err, errlen, "%zu rules in one change (1 to %d)", n, TVRULES_BATCH_MAX);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (r[i].dst.family != AF_INET && r[i].dst.family != AF_INET6) {
            snprintf(err, errlen, "rule id %u has no destination address", r[i].id);
            return -1;
        }
    }
    int rc4 = apply_family(AF_INET, queue, r, n, add, err, errlen);
    int rc6 = rc4 < 0 ? 0 : apply_family(AF_INET6, queue, r, n, add, err, errlen);
    return rc4 < 0 || rc6 < 0 ? -1 : 0;
}
