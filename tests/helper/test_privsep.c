/*
 * helper-privsep: qcg-helper's privileged process (helper/privsep*.c) as the
 * helper runs it, real packet engine included, in a network namespace of its
 * own (its iptables chains and NFQUEUE stay there; root only, else 77 =
 * skipped):
 *
 *   this test --channel--> privileged process (proc_start; privsep_child_main)
 *     1. raw messages: every malformed or out-of-range one is refused with
 *        its reason and a rate-limited log line, and the process serves on
 *        (a descriptor sent along is refused and not kept); IPv6 addresses
 *        as strictly as IPv4 ones (only unicast, never the node's own, the
 *        SYN of its source's family and to the node's own address); an IPv6
 *        watch's rules go to ip6tables;
 *        it holds CAP_NET_ADMIN and CAP_NET_RAW only, no descriptor of ours;
 *        closing the socket removes its chains and it exits 0;
 *   this test (privsep.h) --> privileged process (privsep_fork)
 *     2. a watch times out with the engine's reason; the process is killed:
 *        the pending watch and every later one fail naming the signal, the
 *        lost callback comes once, this process goes on; a process that
 *        stops answering is killed after PRIVSEP_ACK_MS and lost the same way;
 *        two watches of one destination each get one of two connects' SYNs;
 *     3. this process drops every capability for good (privdrop, util/privdrop.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fdpass.h"
#include "helper.h"
#include "privdrop.h"
#include "log.h"
#include "monotonic.h"
#include "privsep.h"
#include "privsep_msg.h"
#include "proc.h"

#define QUEUE_RAW 7791
#define QUEUE_CLIENT 7792
#define ANSWER_MS 5000

static char logpath[] = "/tmp/helper-privsep-XXXXXX";

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The node: 198.51.100.7, and with v6 2001:db8:7::7 too. */
static void config(struct helper_config *cfg, int queue, int v6)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->intercept = 1;
    cfg->nfqueue = queue;
    cfg->address = "198.51.100.7";
    if (v6) {
        snprintf(cfg->addrs[0], sizeof(cfg->addrs[0]), "198.51.100.7");
        snprintf(cfg->addrs[1], sizeof(cfg->addrs[1]), "2001:db8:7::7");
        cfg->naddrs = 2;
    }
    cfg->ports[0] = 40000;
    cfg->ports[1] = 40099;
}

/* The first line of /proc/PID/status starting with key, value only. */
static void proc_status(pid_t pid, const char *key, char *out, size_t outlen)
{
    char path[64], line[256];
    FILE *f;

    snprintf(out, outlen, "?");
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, key, strlen(key)) == 0 && line[strlen(key)] == ':') {
            char *v = line + strlen(key) + 1;
            v += strspn(v, " \t");
            v[strcspn(v, "\n")] = '\0';
            snprintf(out, outlen, "%s", v);
            break;
        }
    }
    fclose(f);
}

static int count_in_log(const char *needle)
{
    char line[4096];
    int n = 0;
    FILE *f = fopen(logpath, "r");

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strstr(line, needle) != NULL)
            n++;
    fclose(f);
    return n;
}

/* Sends len bytes of msg, then reads one answer: its size, or -1. */
static ssize_t ask(int fd, const void *msg, size_t len, union privsep_msg *ans)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};

    if (send(fd, msg, len, MSG_NOSIGNAL) != (ssize_t)len)
        return -1;
    if (poll(&p, 1, ANSWER_MS) != 1)
        return -1;
    return recv(fd, ans, sizeof(*ans), 0);
}

/* ask, then: an ACK for id refusing with a reason containing want. */
static void expect_refused(int fd, const void *msg, size_t len, uint32_t id, const char *want)
{
    union privsep_msg ans;
    ssize_t n = ask(fd, msg, len, &ans);

    CHECK(n == (ssize_t)sizeof(struct privsep_status));
    CHECK(ans.h.type == PRIVSEP_ACK && ans.h.id == id && ans.status.status < 0);
    CHECK_HAS(ans.status.why, want);
    printf("refused (%s): %s\n", want, n > 0 ? ans.status.why : "(no answer)");
}

static struct privsep_watch_syn watch_msg(uint32_t id, const char *dst, uint16_t port,
                                          uint32_t timeout_ms)
{
    struct privsep_watch_syn w;

    memset(&w, 0, sizeof(w));
    w.h.type = PRIVSEP_WATCH_SYN;
    w.h.len = sizeof(w);
    w.h.id = id;
    struct rawpkt_addr a;
    CHECK(rawpkt_addr_parse(dst, &a) == 0);
    w.family = (uint8_t)a.family;
    memcpy(w.dst, &a.u, a.family == AF_INET6 ? 16 : 4);
    w.dport = port;
    w.timeout_ms = timeout_ms;
    return w;
}

static struct privsep_inject inject_msg(uint32_t id, uint16_t port, uint16_t len)
{
    struct privsep_inject in;

    memset(&in, 0, sizeof(in));
    in.h.type = PRIVSEP_INJECT;
    in.h.len = sizeof(in);
    in.h.id = id;
    inet_pton(AF_INET, "203.0.113.66", in.pub);
    in.family = AF_INET;
    in.pub_port = 31000;
    in.allowed_port = port;
    in.timeout_ms = 1000;
    in.len = len;
    return in;
}

static unsigned rules_now(int fd)
{
    struct privsep_bare r = {.h = {.type = PRIVSEP_RULES, .len = sizeof(r), .id = 900}};
    union privsep_msg ans;

    if (ask(fd, &r, sizeof(r), &ans) != (ssize_t)sizeof(struct privsep_rules_ok) ||
        ans.h.type != PRIVSEP_RULES_OK || ans.h.id != 900)
        return 9999;
    return ans.rules.rules;
}

static int chains_left(int queue)
{
    char cmd[160];

    snprintf(cmd, sizeof(cmd), "iptables -w 5 -t raw -S 2>/dev/null | grep -q 'QCG-TRAVERSE-.*-%d'",
             queue);
    int v4 = system(cmd) == 0;
    snprintf(cmd, sizeof(cmd),
             "ip6tables -w 5 -t raw -S 2>/dev/null | grep -q 'QCG-TRAVERSE-.*-%d'", queue);
    return v4 + 2 * (system(cmd) == 0);
}

/* An IPv6 SYN from 2001:db8:9::9 port 31000 to dst port 40000: headers
   only, as the engine parses it (it does not check checksums). */
static struct privsep_inject inject6_msg(uint32_t id, const char *pub, const char *dst)
{
    struct privsep_inject in = inject_msg(id, 40000, 60);

    memset(in.pub, 0, sizeof(in.pub));
    inet_pton(AF_INET6, pub, in.pub);
    in.family = AF_INET6;
    in.syn[0] = 0x60;
    in.syn[5] = 20;          /* payload length */
    in.syn[6] = IPPROTO_TCP; /* next header */
    in.syn[7] = 64;          /* hop limit */
    inet_pton(AF_INET6, "2001:db8:9::9", in.syn + 8);
    inet_pton(AF_INET6, dst, in.syn + 24);
    in.syn[40] = 31000 >> 8;
    in.syn[41] = 31000 & 0xff;
    in.syn[42] = 40000 >> 8;
    in.syn[43] = 40000 & 0xff;
    in.syn[52] = 5 << 4; /* data offset */
    in.syn[53] = 0x02;   /* SYN */
    return in;
}

/* 1: the privileged process on a socketpair of ours, spoken to raw. */
static void test_raw(void)
{
    struct helper_config cfg;
    union privsep_msg ans;
    uint8_t big[4096];
    int sv[2], logfd, spare, saved_err, status = 0;
    pid_t pid;
    char v[64], path[64], link[256], err[200];
    struct proc child;
    const struct proc_spec spec = {
        .name = "qcg-helper-priv", .exec_arg = NULL, .give_fd = -1, .deathsig = SIGTERM};

    config(&cfg, QUEUE_RAW, 1);
    logfd = mkstemp(logpath);
    /* A descriptor of ours without close-on-exec: the process must not keep it. */
    spare = open("/dev/null", O_RDONLY);
    CHECK(logfd >= 0 && spare >= 0);
    /* The child's stderr is the log file; ours comes back after the start. */
    saved_err = dup(2);
    dup2(logfd, 2);
    int started = proc_start(&child, &spec, err, sizeof(err));
    if (started == 1)
        privsep_child_main(&cfg);
    dup2(saved_err, 2);
    close(saved_err);
    close(logfd);
    CHECKF(started == 0, "proc_start: %s", err);
    pid = child.pid;
    sv[0] = child.fd;
    fcntl(sv[0], F_SETFL, 0); /* this test blocks on it */

    struct privsep_bare rules = {.h = {.type = PRIVSEP_RULES, .len = sizeof(rules), .id = 1}};
    expect_refused(sv[0], &rules, sizeof(rules), 1, "RULES before START");
    struct privsep_bare start = {.h = {.type = PRIVSEP_START, .len = sizeof(start)}};
    CHECK(ask(sv[0], &start, sizeof(start), &ans) == (ssize_t)sizeof(struct privsep_status));
    CHECK(ans.h.type == PRIVSEP_READY && ans.status.status == 0);
    printf("READY %d %s\n", ans.status.status, ans.status.why);
    CHECK(rules_now(sv[0]) == 0);

    proc_status(pid, "CapEff", v, sizeof(v));
    CHECK_STR(v, "0000000000003000"); /* CAP_NET_ADMIN (12) and CAP_NET_RAW (13) */
    proc_status(pid, "CapPrm", v, sizeof(v));
    CHECK_STR(v, "0000000000003000");
    proc_status(pid, "CapBnd", v, sizeof(v));
    CHECK_STR(v, "0000000000003000");
    proc_status(pid, "NoNewPrivs", v, sizeof(v));
    CHECK_STR(v, "1");
    proc_status(pid, "Name", v, sizeof(v));
    CHECK_STR(v, "qcg-helper-priv");
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, spare);
    ssize_t ln = readlink(path, link, sizeof(link) - 1);
    link[ln > 0 ? ln : 0] = '\0';
    CHECK(ln < 0 || strcmp(link, "/dev/null") != 0); /* closed, or reused by the engine */
    printf("privileged process %d: CapEff 3000, CapBnd 3000, no_new_privs, fd %d %s\n", (int)pid,
           spare, ln < 0 ? "closed" : link);

    /* Wrong sizes, types, directions. */
    struct privsep_watch_syn w = watch_msg(2, "198.51.100.1", 80, 1000);
    expect_refused(sv[0], &w, sizeof(w) - 1, 2, "WATCH_SYN of 39 bytes (saying 40), not 40");
    w.h.len = 20;
    expect_refused(sv[0], &w, sizeof(w), 2, "WATCH_SYN of 40 bytes (saying 20), not 40");
    w.h.len = sizeof(w);
    uint8_t tiny[3] = {1, 2, 3};
    expect_refused(sv[0], tiny, sizeof(tiny), 0, "shorter than a header");
    struct privsep_bare unknown = {.h = {.type = 77, .len = sizeof(unknown), .id = 3}};
    expect_refused(sv[0], &unknown, sizeof(unknown), 3, "unknown type 77");
    memset(big, 0, sizeof(big));
    memcpy(big, &w, sizeof(w));
    expect_refused(sv[0], big, sizeof(big), 2, "of 4096 bytes (saying 40), not 40");
    struct privsep_status ready = {.h = {.type = PRIVSEP_READY, .len = sizeof(ready), .id = 4}};
    expect_refused(sv[0], &ready, sizeof(ready), 4, "READY not expected here now");
    /* A descriptor where the list has none: refused, not kept. */
    w = watch_msg(12, "198.51.100.1", 80, 1000);
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(fdpass_send(sv[0], &w, sizeof(w), devnull) == (ssize_t)sizeof(w));
    close(devnull);
    struct pollfd pa = {.fd = sv[0], .events = POLLIN};
    CHECK(poll(&pa, 1, ANSWER_MS) == 1 && recv(sv[0], &ans, sizeof(ans), 0) > 0);
    CHECK(ans.h.type == PRIVSEP_ACK && ans.h.id == 12 && ans.status.status < 0);
    CHECK_HAS(ans.status.why, "WATCH_SYN with a descriptor");
    expect_refused(sv[0], &start, sizeof(start), 0, "START again");

    /* Fields out of range. */
    w = watch_msg(5, "127.0.0.1", 80, 1000);
    expect_refused(sv[0], &w, sizeof(w), 5, "127.0.0.1, not a unicast address");
    w = watch_msg(6, "198.51.100.1", 0, 1000);
    expect_refused(sv[0], &w, sizeof(w), 6, "WATCH_SYN with port 0");
    w = watch_msg(7, "198.51.100.1", 80, 0);
    expect_refused(sv[0], &w, sizeof(w), 7, "a timeout of 0 ms");
    w = watch_msg(8, "198.51.100.1", 80, 600000);
    expect_refused(sv[0], &w, sizeof(w), 8, "a timeout of 600000 ms");
    struct privsep_inject in = inject_msg(9, 40000, TRAVERSE_PACKET_MAX + 1);
    expect_refused(sv[0], &in, sizeof(in), 9, "INJECT of a 121-byte packet");
    in = inject_msg(10, 22, 40);
    expect_refused(sv[0], &in, sizeof(in), 10, "port 22, outside this node's range 40000-40099");
    /* Well-formed as a message, not as a SYN: the engine's own checks. */
    in = inject_msg(11, 40000, 40);
    expect_refused(sv[0], &in, sizeof(in), 11, "");
    CHECK(rules_now(sv[0]) == 0);

    /* IPv6: only unicast addresses, never the node's own, the SYN of its
       source's family, towards the node's own address. */
    static const char *const not_unicast[] = {"::1", "::", "ff02::1", "fe80::1",
                                              "::ffff:198.51.100.1"};
    for (size_t i = 0; i < sizeof(not_unicast) / sizeof(not_unicast[0]); i++) {
        char want[80];
        w = watch_msg(30, not_unicast[i], 80, 1000);
        snprintf(want, sizeof(want), "towards %s, not a unicast address", not_unicast[i]);
        expect_refused(sv[0], &w, sizeof(w), 30, want);
    }
    w = watch_msg(31, "2001:db8:7::7", 80, 1000);
    expect_refused(sv[0], &w, sizeof(w), 31, "2001:db8:7::7, this node's own address");
    w = watch_msg(32, "198.51.100.1", 80, 1000);
    w.family = 7;
    expect_refused(sv[0], &w, sizeof(w), 32, "WATCH_SYN towards of address family 7");
    w = watch_msg(33, "198.51.100.1", 80, 1000);
    w.dst[15] = 1;
    expect_refused(sv[0], &w, sizeof(w), 33, "an IPv4 address with bytes after it");
    in = inject6_msg(34, "::1", "2001:db8:7::7");
    expect_refused(sv[0], &in, sizeof(in), 34, "INJECT from ::1, not a unicast address");
    in = inject6_msg(35, "2001:db8:7::7", "2001:db8:7::7");
    expect_refused(sv[0], &in, sizeof(in), 35,
                   "INJECT from 2001:db8:7::7, this node's own address");
    in = inject_msg(36, 40000, 40);
    memset(in.pub, 0, sizeof(in.pub));
    inet_pton(AF_INET6, "2001:db8:9::9", in.pub);
    in.family = AF_INET6;
    in.syn[0] = 0x45;
    expect_refused(sv[0], &in, sizeof(in), 36, "INJECT of an IPv4 packet from an IPv6 address");
    /* Well-formed, but towards another node: the engine's check. */
    in = inject6_msg(37, "2001:db8:9::9", "2001:db8:7::8");
    expect_refused(sv[0], &in, sizeof(in), 37,
                   "destination 2001:db8:7::8 is not this node (2001:db8:7::7)");
    CHECK(rules_now(sv[0]) == 0);
    CHECK(kill(pid, 0) == 0);

    /* Rate-limited: at most IMSG_LOG_BURST lines a second for a flood, the
       next line counts those left out. */
    for (int i = 0; i < 3 * IMSG_LOG_BURST; i++)
        expect_refused(sv[0], tiny, sizeof(tiny), 0, "shorter than a header");
    int lines = count_in_log("refused a ");
    CHECK(lines >= IMSG_LOG_BURST && lines < 2 * IMSG_LOG_BURST + 4);
    sleep_ms(1100);
    expect_refused(sv[0], tiny, sizeof(tiny), 0, "shorter than a header");
    CHECK(count_in_log("refused a ") == lines + 1);
    CHECK(count_in_log("more since the last such line)") >= 1);

    /* A real watch: its rule, then the engine's timeout. */
    w = watch_msg(20, "198.51.100.1", 80, 300);
    CHECK(ask(sv[0], &w, sizeof(w), &ans) > 0 && ans.h.type == PRIVSEP_ACK && ans.h.id == 20 &&
          ans.status.status == 0);
    /* Its SYN rule and its guard: resets, and ICMP errors where the kernel
       has the u32 match (traverse.h). */
    unsigned watch_rules = rules_now(sv[0]);
    CHECK(watch_rules == 2 || watch_rules == 3);
    struct pollfd p = {.fd = sv[0], .events = POLLIN};
    CHECK(poll(&p, 1, ANSWER_MS) == 1 &&
          recv(sv[0], &ans, sizeof(ans), 0) == (ssize_t)sizeof(struct privsep_syn));
    CHECK(ans.h.type == PRIVSEP_SYN && ans.h.id == 20 && ans.syn.status == -ETIMEDOUT);
    CHECK_HAS(ans.syn.why, "no SYN towards 198.51.100.1 port 80 within");
    unsigned left = 1;
    for (int i = 0; i < 60 && left != 0; i++) {
        sleep_ms(50);
        left = rules_now(sv[0]);
    }
    CHECK(left == 0);
    CHECK(chains_left(QUEUE_RAW) == 3); /* iptables' and ip6tables' */

    /* An IPv6 watch: its rules in ip6tables, then the engine's timeout. */
    w = watch_msg(21, "2001:db8:1::1", 80, 300);
    CHECK(ask(sv[0], &w, sizeof(w), &ans) > 0 && ans.h.type == PRIVSEP_ACK && ans.h.id == 21 &&
          ans.status.status == 0);
    CHECK(rules_now(sv[0]) == watch_rules);
    CHECK(system("ip6tables -w 5 -t raw -S | grep -q -- '-s 2001:db8:1::1/128 -p tcp -m tcp "
                 "--sport 80 --tcp-flags RST RST'") == 0);
    CHECK(poll(&p, 1, ANSWER_MS) == 1 &&
          recv(sv[0], &ans, sizeof(ans), 0) == (ssize_t)sizeof(struct privsep_syn));
    CHECK(ans.h.type == PRIVSEP_SYN && ans.h.id == 21 && ans.syn.status == -ETIMEDOUT);
    CHECK_HAS(ans.syn.why, "no SYN towards 2001:db8:1::1 port 80 within");

    /* The end of the socket: chains removed, exit 0. */
    close(sv[0]);
    pid_t r = 0;
    for (int i = 0; i < 100 && r == 0; i++) {
        r = waitpid(pid, &status, WNOHANG);
        if (r == 0)
            sleep_ms(50);
    }
    CHECK(r == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(!chains_left(QUEUE_RAW));
    CHECK(count_in_log("stopping (the main process closed its socket)") == 1);
    CHECK(count_in_log("traversing TCP on queue 7791 closed") == 1);
    close(spare);
}

struct outcome {
    int done, status, acked;
    char why[PRIVSEP_WHY_MAX];
};

static void on_syn(void *arg, int status, const uint8_t *pkt, size_t len, const char *why)
{
    struct outcome *o = arg;

    (void)pkt;
    (void)len;
    o->done++;
    o->status = status;
    snprintf(o->why, sizeof(o->why), "%s", why);
}

static void on_done(void *arg, int status, const char *why)
{
    on_syn(arg, status, NULL, 0, why);
}

/* The watch's rule in place (counted), or the request failed before it:
   then the end of it, as an outcome. */
static void on_acked(void *arg, int status, const char *why)
{
    struct outcome *o = arg;

    if (status == 0) {
        o->acked++;
        return;
    }
    on_syn(arg, status, NULL, 0, why);
}

static void on_lost(void *arg, const char *why)
{
    on_syn(arg, -EPIPE, NULL, 0, why);
}

/* Runs the loop until *done or ms. */
static void run_until(uv_loop_t *loop, const int *done, unsigned ms)
{
    uint64_t end = monotonic_ms() + ms;

    while (!*done && monotonic_ms() < end)
        uv_run(loop, UV_RUN_NOWAIT), sleep_ms(5);
}

/* A started privileged process for queue, its loss reported to *lost; NULL
   after a failed check.  Before the loop, as in the helper. */
static struct privsep *client_start(int queue, uv_loop_t *loop, struct outcome *lost)
{
    struct helper_config cfg;
    char why[PRIVSEP_WHY_MAX];
    struct privsep *ps;

    config(&cfg, queue, 0);
    ps = privsep_fork(&cfg, why, sizeof(why));
    CHECK(ps != NULL);
    uv_loop_init(loop);
    if (ps == NULL)
        return NULL;
    CHECK(privsep_start(ps, loop, why, sizeof(why)) == 0);
    privsep_on_lost(ps, on_lost, lost);
    return ps;
}

/* 2: through privsep.h, as the helper's main process. */
static void test_client(void)
{
    struct outcome o1 = {0}, o2 = {0}, lost = {0};
    struct rawpkt_addr dst, dst6;
    char why[PRIVSEP_WHY_MAX];
    unsigned rules = 99;
    uint8_t junk[40] = {0};
    uv_loop_t loop;
    struct privsep *ps = client_start(QUEUE_CLIENT, &loop, &lost);

    if (ps == NULL)
        return;
    rawpkt_addr_parse("198.51.100.1", &dst);
    rawpkt_addr_parse("2001:db8:1::1", &dst6);
    CHECK(helper_can_intercept(privsep_pid(ps)));
    CHECK(privsep_rules(ps, &rules, why, sizeof(why)) == 0 && rules == 0);

    CHECK(privsep_watch_syn(ps, dst, 81, 200, on_acked, on_syn, &o1, why, sizeof(why)) == 0);
    CHECK(privsep_rules(ps, &rules, why, sizeof(why)) == 0 && (rules == 2 || rules == 3));
    CHECK(o1.done == 0 && o1.acked == 0); /* never from inside a call */
    run_until(&loop, &o1.done, 3000);
    CHECK(o1.acked == 1 && o1.done == 1 && o1.status == -ETIMEDOUT);
    CHECK_HAS(o1.why, "no SYN towards 198.51.100.1 port 81 within");
    CHECK(privsep_inject(ps, junk, 10, dst, 31000, 40000, 1000, NULL, NULL, why, sizeof(why)) < 0);
    CHECK_HAS(why, "a SYN of 10 bytes");
    /* A zero SYN goes to the privileged process, which refuses it: the
       refusal comes as the inject's outcome. */
    struct outcome oz = {0};
    CHECK(privsep_inject(ps, junk, sizeof(junk), dst, 31000, 40000, 1000, on_done, &oz, why,
                         sizeof(why)) == 0);
    CHECK(oz.done == 0);
    run_until(&loop, &oz.done, 3000);
    CHECK(oz.done == 1 && oz.status < 0 && oz.why[0] != '\0');
    printf("a zero SYN: %s\n", oz.why);
    /* This node has no IPv6 address: no IPv6 watch. */
    struct outcome o6 = {0};
    CHECK(privsep_watch_syn(ps, dst6, 81, 200, on_acked, on_syn, &o6, why, sizeof(why)) == 0);
    run_until(&loop, &o6.done, 3000);
    CHECK(o6.done == 1 && o6.acked == 0 && o6.status < 0);
    CHECK_HAS(o6.why, "WATCH_SYN towards 2001:db8:1::1: this node has no IPv6 address");

    /* Killed with a watch pending. */
    CHECK(privsep_watch_syn(ps, dst, 82, 5000, on_acked, on_syn, &o2, why, sizeof(why)) == 0);
    kill(privsep_pid(ps), SIGKILL);
    run_until(&loop, &lost.done, 3000);
    CHECK(o2.done == 1 && o2.status < 0);
    CHECK_HAS(o2.why, "killed by signal 9");
    CHECK(lost.done == 1);
    CHECK_HAS(lost.why, "the privileged process (pid");
    CHECK_HAS(lost.why, "killed by signal 9");
    CHECK(privsep_watch_syn(ps, dst, 83, 1000, on_acked, on_syn, &o1, why, sizeof(why)) < 0);
    CHECK_HAS(why, "traversing is no longer available: the privileged process");
    CHECK_HAS(why, "killed by signal 9");
    printf("after the kill: %s\n", why);
    run_until(&loop, &o1.done, 300); /* nothing more comes */
    CHECK(o1.done == 1 && o2.done == 1 && lost.done == 1);
    privsep_close(ps);
    privsep_free(ps);
    uv_run(&loop, UV_RUN_NOWAIT);
    CHECK(uv_loop_close(&loop) == 0);
}

/* 2a: two ranks of a node connect to one peer at once: both watches of
   its address and port stand, and each gets one of the two SYNs (the
   helper refused the second watch, and its connect fell back). */
static void test_two_watches(void)
{
    struct outcome o[2] = {{0}};
    struct rawpkt_addr dst;
    char why[PRIVSEP_WHY_MAX];
    int fd[2];
    uv_loop_t loop;
    struct outcome lost = {0};
    struct privsep *ps = client_start(QUEUE_CLIENT, &loop, &lost);

    if (ps == NULL)
        return;
    /* A route for the SYNs: a veth pair, in this test's own namespace. */
    CHECK(system("ip link add qcgtest0 type veth peer name qcgtest1 && "
                 "ip link set qcgtest0 up && ip link set qcgtest1 up && "
                 "ip addr add 198.18.250.1/24 dev qcgtest0 && "
                 "ip route add 198.51.100.0/24 dev qcgtest0") == 0);
    rawpkt_addr_parse("198.51.100.1", &dst);
    for (int i = 0; i < 2; i++)
        CHECK(privsep_watch_syn(ps, dst, 86, 5000, on_acked, on_syn, &o[i], why, sizeof(why)) == 0);
    /* The SYNs go once both rules are in place, as the processes' do. */
    run_until(&loop, &o[1].acked, 3000);
    CHECK(o[0].acked == 1 && o[1].acked == 1);
    for (int i = 0; i < 2; i++) {
        struct sockaddr_in sin = {
            .sin_family = AF_INET, .sin_port = htons(86), .sin_addr = dst.u.v4};
        fd[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        CHECK(fd[i] >= 0 && connect(fd[i], (struct sockaddr *)&sin, sizeof(sin)) < 0 &&
              errno == EINPROGRESS);
    }
    run_until(&loop, &o[1].done, 5000);
    CHECK(o[0].done == 1 && o[0].status == 0);
    CHECK(o[1].done == 1 && o[1].status == 0);
    if (o[1].status != 0)
        printf("second watch: %s\n", o[1].why);
    for (int i = 0; i < 2; i++)
        close(fd[i]);
    privsep_close(ps);
    privsep_free(ps);
    uv_run(&loop, UV_RUN_NOWAIT);
    CHECK(uv_loop_close(&loop) == 0);
    (void)system("ip link del qcgtest0 2>/dev/null");
}

/* A timer's ticks, and the longest time between two of them: a loop that
   blocks in a call shows it as a gap that long. */
struct ticks {
    int n;
    uint64_t last_ms, longest_ms;
};

static void on_tick(uv_timer_t *t)
{
    struct ticks *k = t->data;
    uint64_t now = monotonic_ms();

    if (k->n++ > 0 && now - k->last_ms > k->longest_ms)
        k->longest_ms = now - k->last_ms;
    k->last_ms = now;
}

/* 2b: a privileged process that stops answering is killed once a request
   has waited PRIVSEP_ACK_MS for its acknowledgement, and lost like a dead
   one; meanwhile the loop runs on (a request never blocks it). */
static void test_client_hung(void)
{
    struct outcome o = {0}, o2 = {0}, lost = {0};
    struct rawpkt_addr dst;
    char why[PRIVSEP_WHY_MAX];
    uv_loop_t loop;
    uv_timer_t tick;
    struct ticks ticks = {0};
    struct privsep *ps = client_start(QUEUE_CLIENT + 1, &loop, &lost);

    if (ps == NULL)
        return;
    rawpkt_addr_parse("198.51.100.1", &dst);
    CHECK(privsep_watch_syn(ps, dst, 84, 30000, on_acked, on_syn, &o, why, sizeof(why)) == 0);
    run_until(&loop, &o.acked, 3000);
    CHECK(o.acked == 1);
    kill(privsep_pid(ps), SIGSTOP);
    uint64_t t0 = monotonic_ms();
    CHECK(privsep_watch_syn(ps, dst, 85, 1000, on_acked, on_syn, &o2, why, sizeof(why)) == 0);
    CHECK(monotonic_ms() - t0 < 1000);
    uv_timer_init(&loop, &tick);
    tick.data = &ticks;
    uv_timer_start(&tick, on_tick, 100, 100);
    run_until(&loop, &lost.done, PRIVSEP_ACK_MS + 3000);
    uint64_t waited = monotonic_ms() - t0;
    CHECK(waited >= PRIVSEP_ACK_MS && waited < PRIVSEP_ACK_MS + 2000);
    CHECK(ticks.n >= 2 && ticks.longest_ms < PRIVSEP_ACK_MS / 2);
    printf("a stopped privileged process, lost after %llu ms (%d ticks of the loop meanwhile, "
           "at most %llu ms apart): %s\n",
           (unsigned long long)waited, ticks.n, (unsigned long long)ticks.longest_ms, o2.why);
    CHECK(o2.done == 1 && o2.status < 0 && o2.acked == 0 && lost.done == 1);
    CHECK_HAS(o2.why, "did not answer WATCH_SYN within 12000 ms: killed");
    CHECK(o.done == 1 && o.status < 0);
    CHECK_HAS(o.why, "did not answer WATCH_SYN within 12000 ms: killed");
    uv_close((uv_handle_t *)&tick, NULL);
    privsep_free(ps);
    uv_run(&loop, UV_RUN_NOWAIT);
    CHECK(uv_loop_close(&loop) == 0);
}

/* Runs fn in a process of its own, as libuv's tests do: privsep_fork must
   come before this process has a loop (the privileged process closes what
   libuv opened), and each of these tests has one. */
static void in_own_process(void (*fn)(void), const char *name)
{
    int status = 0;
    pid_t pid;

    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        fn();
        fflush(NULL);
        _exit(check_failures > 0);
    }
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "FAIL %s (status 0x%x)\n", name, (unsigned)status);
        check_failures++;
    }
}

/* 3: this process gives up everything. */
static void test_drop(void)
{
    char v[64], err[256];

    CHECK(privdrop(0, NULL, err, sizeof(err)) == 0);
    proc_status(getpid(), "CapEff", v, sizeof(v));
    CHECK_STR(v, "0000000000000000");
    proc_status(getpid(), "CapPrm", v, sizeof(v));
    CHECK_STR(v, "0000000000000000");
    proc_status(getpid(), "CapBnd", v, sizeof(v));
    CHECK_STR(v, "0000000000000000");
    proc_status(getpid(), "CapAmb", v, sizeof(v));
    CHECK_STR(v, "0000000000000000");
    proc_status(getpid(), "NoNewPrivs", v, sizeof(v));
    CHECK_STR(v, "1");
    CHECK(!helper_can_intercept(0));
}

int main(void)
{
    if (geteuid() != 0) {
        printf("SKIPPED: needs root (capabilities, iptables, NFQUEUE)\n");
        return 77;
    }
    if (unshare(CLONE_NEWNET) < 0) {
        printf("SKIPPED: no network namespace: %s\n", strerror(errno));
        return 77;
    }
    if (system("iptables -w 5 -t raw -S >/dev/null 2>&1") != 0) {
        printf("SKIPPED: iptables does not work here\n");
        return 77;
    }
    log_init("privsep-test", LOG_LEVEL_INFO, false);
    test_raw();
    in_own_process(test_client, "test_client");
    in_own_process(test_two_watches, "test_two_watches");
    in_own_process(test_client_hung, "test_client_hung");
    test_drop();
    if (check_failures > 0) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "cat %s", logpath);
        printf("--- the privileged process's log\n");
        fflush(stdout);
        if (system(cmd) != 0)
            printf("(none)\n");
    }
    unlink(logpath);
    return check_result("helper-privsep");
}
