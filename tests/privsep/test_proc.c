/*
 * privsep-proc: privsep/proc.h itself, on a table of three types made for
 * the test, as the helper and the broker use it:
 *
 *   messages     over a socketpair: the good ones taken; refused with a
 *                reason and no descriptor kept: a short, long or empty
 *                datagram, a length field that lies, a reserved field, an
 *                unknown or unaccepted type, a field out of range, a
 *                descriptor where the type has none, none where it must
 *                have one, two; imsg_send refuses what its table does not
 *                allow; a flood of refusals logs at most IMSG_LOG_BURST
 *                lines, the next line counts those left out
 *   processes    a forked child holds fds 0-3 only and exits 0 when the
 *                channel closes; an executed child (this binary again) gets
 *                its channel and the given descriptor; a child killed (the
 *                peer's death) is seen as a closed channel and "killed by
 *                signal 9"; one that ignores the close is killed by
 *                proc_stop; the restart backoff gives up after max_deaths
 *                quick deaths and forgets a stable child's
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "fdpass.h"
#include "log.h"
#include "proc.h"

#define WAIT_MS 5000
#define CHILD_ARG "--test-child"

enum { PING = 1, PASS = 2, ANSWER = 3 };

struct ping {
    struct imsg_hdr h;
    uint32_t value; /* < 100 */
};

struct pass {
    struct imsg_hdr h;
};

static int ping_ok(const void *msg, const void *ctx, char *why, size_t whylen)
{
    const struct ping *p = msg;

    (void)ctx;
    if (p->value >= 100) {
        snprintf(why, whylen, "value %u, not below 100", p->value);
        return -1;
    }
    return 0;
}

static const struct imsg_type types[IMSG_TYPES] = {
    [PING] = {"PING", sizeof(struct ping), 0, ping_ok},
    [PASS] = {"PASS", sizeof(struct pass), IMSG_WITH_FD, NULL},
    [ANSWER] = {"ANSWER", sizeof(struct ping), 0, NULL},
};
#define ACCEPT (IMSG_BIT(PING) | IMSG_BIT(PASS))

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* opendir's own */
}

static struct ping ping(uint32_t value)
{
    struct ping p = {.h = {.type = PING, .len = sizeof(p)}, .value = value};
    return p;
}

/* What the receiving end makes of len raw bytes of msg (fd -1: none). */
static int take(struct imsg_chan *rx, int tx, const void *msg, size_t len, int fd, char *why,
                size_t whylen, int *got)
{
    union {
        struct ping p;
        char bytes[IMSG_SIZE_MAX];
    } buf;
    ssize_t n = fd >= 0 ? fdpass_send(tx, msg, len, fd) : send(tx, msg, len, MSG_NOSIGNAL);

    if (n != (ssize_t)len)
        return -100;
    why[0] = '\0';
    int rc = imsg_recv(rx, &buf, sizeof(buf), got, why, whylen);
    if (getenv("VERBOSE"))
        printf("  %d %s\n", rc, why);
    return rc;
}

static void expect_refused(struct imsg_chan *rx, int tx, const void *msg, size_t len, int fd,
                           const char *want)
{
    char why[300];
    int got = -1, before = open_fds();
    int rc = take(rx, tx, msg, len, fd, why, sizeof(why), &got);

    CHECKF(rc == IMSG_REFUSED && strstr(why, want) != NULL && got == -1,
           "refused (%s): rc %d, '%s'", want, rc, why);
    CHECKF(open_fds() == before, "no descriptor kept (%s): %d open, %d before", want, open_fds(),
           before);
}

static int count_in(const char *path, const char *needle)
{
    char line[1024];
    int n = 0;
    FILE *f = fopen(path, "r");

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

static void test_messages(void)
{
    int sv[2];
    struct imsg_chan rx, tx;
    char why[300], big[IMSG_SIZE_MAX + 10];
    int got = -1;

    REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
    imsg_chan_init(&rx, sv[0], types, ACCEPT, NULL, "the test's peer");
    imsg_chan_init(&tx, sv[1], types, IMSG_BIT(ANSWER), NULL, "the test");
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    REQUIRE(devnull >= 0);

    /* The good ones. */
    struct ping p = ping(7);
    CHECK(take(&rx, sv[1], &p, sizeof(p), -1, why, sizeof(why), &got) == PING && got == -1);
    CHECK(imsg_recv(&rx, big, sizeof(big), &got, why, sizeof(why)) == IMSG_NONE);
    struct pass pa = {.h = {.type = PASS}};
    CHECK(imsg_send(&tx, &pa, sizeof(pa), devnull, 0) == 0 && pa.h.len == sizeof(pa));
    CHECK(imsg_recv(&rx, big, sizeof(big), &got, why, sizeof(why)) == PASS && got >= 0);
    struct stat a, b;
    CHECK(got >= 0 && fstat(got, &a) == 0 && fstat(devnull, &b) == 0 && a.st_ino == b.st_ino &&
          (fcntl(got, F_GETFD) & FD_CLOEXEC));
    if (got >= 0)
        close(got);

    /* Sizes. */
    expect_refused(&rx, sv[1], &p, sizeof(p) - 1, -1, "PING of 19 bytes (saying 20), not 20");
    memset(big, 0, sizeof(big));
    memcpy(big, &p, sizeof(p));
    expect_refused(&rx, sv[1], big, sizeof(p) + 1, -1, "PING of 21 bytes");
    expect_refused(&rx, sv[1], big, sizeof(big), -1, "PING of 4106 bytes");
    expect_refused(&rx, sv[1], "ab", 2, -1, "2 bytes, shorter than a header");
    expect_refused(&rx, sv[1], "", 0, -1, "0 bytes, shorter than a header");
    struct ping liar = ping(7);
    liar.h.len = 4096;
    expect_refused(&rx, sv[1], &liar, sizeof(liar), -1, "PING of 20 bytes (saying 4096)");
    liar = ping(7);
    liar.h.reserved = 1;
    expect_refused(&rx, sv[1], &liar, sizeof(liar), -1, "PING with reserved 1");

    /* Types and fields. */
    struct ping t = ping(7);
    t.h.type = 0;
    expect_refused(&rx, sv[1], &t, sizeof(t), -1, "unknown type 0");
    t.h.type = 9;
    expect_refused(&rx, sv[1], &t, sizeof(t), -1, "unknown type 9");
    t.h.type = 0xffffffffu;
    expect_refused(&rx, sv[1], &t, sizeof(t), -1, "unknown type 4294967295");
    t.h.type = ANSWER;
    expect_refused(&rx, sv[1], &t, sizeof(t), -1, "ANSWER not expected here now");
    t = ping(100);
    expect_refused(&rx, sv[1], &t, sizeof(t), -1, "PING: value 100, not below 100");

    /* Descriptors. */
    p = ping(7);
    expect_refused(&rx, sv[1], &p, sizeof(p), devnull, "PING with a descriptor");
    pa.h.len = sizeof(pa);
    expect_refused(&rx, sv[1], &pa, sizeof(pa), -1, "PASS without a descriptor");
    {
        /* Two at once: neither is kept. */
        int fds[2] = {devnull, devnull};
        char cbuf[CMSG_SPACE(sizeof(fds))];
        struct iovec iov = {.iov_base = &pa, .iov_len = sizeof(pa)};
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
        memset(cbuf, 0, sizeof(cbuf));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(fds));
        memcpy(CMSG_DATA(cm), fds, sizeof(fds));
        int before = open_fds();
        CHECK(sendmsg(sv[1], &mh, MSG_NOSIGNAL) == (ssize_t)sizeof(pa));
        int rc = imsg_recv(&rx, big, sizeof(big), &got, why, sizeof(why));
        CHECKF(rc == IMSG_REFUSED && strstr(why, "more than one descriptor") && got == -1 &&
                   open_fds() == before,
               "two descriptors: %d '%s', %d open, %d before", rc, why, open_fds(), before);
    }

    /* imsg_send sends only what the table allows. */
    t = ping(7);
    CHECK(imsg_send(&tx, &t, sizeof(t) - 1, -1, 0) < 0 && errno == EINVAL);
    CHECK(imsg_send(&tx, &t, sizeof(t), devnull, 0) < 0 && errno == EINVAL);
    CHECK(imsg_send(&tx, &pa, sizeof(pa), -1, 0) < 0 && errno == EINVAL);
    t.h.type = 9;
    CHECK(imsg_send(&tx, &t, sizeof(t), -1, 0) < 0 && errno == EINVAL);

    /* A flood of refusals: IMSG_LOG_BURST lines at most in a second, then
       one that counts the others. */
    char logpath[] = "/tmp/privsep-proc-XXXXXX";
    int logfd = mkstemp(logpath), saved = dup(2);
    REQUIRE(logfd >= 0 && saved >= 0);
    /* The refusals above took this second's lines: a fresh window. */
    struct timespec pause = {.tv_sec = 1, .tv_nsec = 100 * 1000000L};
    nanosleep(&pause, NULL);
    dup2(logfd, 2);
    for (int i = 0; i < 5 * IMSG_LOG_BURST; i++)
        take(&rx, sv[1], "xy", 2, -1, why, sizeof(why), &got);
    int lines = count_in(logpath, "refused a message of 2 bytes from the test's peer");
    nanosleep(&pause, NULL);
    take(&rx, sv[1], "xy", 2, -1, why, sizeof(why), &got);
    dup2(saved, 2);
    close(saved);
    close(logfd);
    int after = count_in(logpath, "refused a message of 2 bytes from the test's peer");
    int counted = count_in(logpath, "more since the last such line)");
    CHECKF(lines >= IMSG_LOG_BURST && lines <= 2 * IMSG_LOG_BURST && after == lines + 1 &&
               counted >= 1,
           "a flood of %d refusals: %d lines, then %d, %d counting the rest", 5 * IMSG_LOG_BURST,
           lines, after, counted);
    unlink(logpath);

    /* The peer's end closes: the end, not a refusal. */
    close(sv[1]);
    CHECK(imsg_recv(&rx, big, sizeof(big), &got, why, sizeof(why)) == IMSG_CLOSED);
    close(sv[0]);
    close(devnull);
}

/* The children: each says how many descriptors it holds, then waits for
   the channel's end (exit 0) or dies as told by the value it gets. */
static _Noreturn void child_main(void)
{
    struct imsg_chan c;
    struct ping p, in;
    char why[300];
    int fd;

    log_init("child", LOG_LEVEL_WARN, false);
    imsg_chan_init(&c, PROC_FD_CHAN, types, IMSG_BIT(PING), NULL, "the parent");
    p = ping((uint32_t)open_fds());
    if (fcntl(PROC_FD_GIVEN, F_GETFD) >= 0)
        p.value += 50; /* the given descriptor came */
    if (!proc_child_has_chan() || imsg_send(&c, &p, sizeof(p), -1, WAIT_MS) < 0)
        _exit(3);
    for (;;) {
        int rc = imsg_recv_wait(&c, &in, sizeof(in), &fd, 60000, why, sizeof(why));
        if (rc < 0)
            _exit(0); /* the channel closed */
        if (in.value == 1)
            raise(SIGKILL);
        if (in.value == 2) {
            signal(SIGTERM, SIG_IGN);
            pause(); /* ignores the close */
        }
    }
}

/* Starts a child and reads its first PING: the value, or -1. */
static int start(struct proc *p, const struct proc_spec *s, struct imsg_chan *c)
{
    char err[200];
    struct ping in;
    int fd;

    int rc = proc_start(p, s, err, sizeof(err));
    if (rc == 1)
        child_main();
    CHECKF(rc == 0, "proc_start: %s", err);
    if (rc != 0)
        return -1;
    imsg_chan_init(c, p->fd, types, IMSG_BIT(PING), NULL, "the child");
    if (imsg_recv_wait(c, &in, sizeof(in), &fd, WAIT_MS, err, sizeof(err)) != PING) {
        fprintf(stderr, "first message: %s\n", err);
        return -1;
    }
    return (int)in.value;
}

static void tell(struct imsg_chan *c, uint32_t value)
{
    struct ping p = ping(value);
    CHECK(imsg_send(c, &p, sizeof(p), -1, WAIT_MS) == 0);
}

static void test_processes(void)
{
    struct proc p;
    struct imsg_chan c;
    char how[200], why[200];
    struct ping in;
    int fd;
    /* A descriptor of ours that no child may keep. */
    int spare = open("/dev/null", O_RDONLY);
    const struct proc_spec forked = {.name = "test-child", .give_fd = -1, .deathsig = SIGKILL};

    /* Forked: 0-3 only; the close ends it with status 0. */
    int n = start(&p, &forked, &c);
    CHECKF(n == 4, "a forked child holds %d descriptors, not 4 (0-2 and its channel)", n);
    proc_stop(&p, WAIT_MS, how, sizeof(how));
    CHECKF(strcmp(how, "exited with status 0") == 0, "closed: it %s", how);

    /* Executed, with a descriptor given: 0-4. */
    const struct proc_spec executed = {
        .name = "test-child", .exec_arg = CHILD_ARG, .give_fd = spare, .deathsig = SIGKILL};
    n = start(&p, &executed, &c);
    CHECKF(n == 55, "an executed child holds %d descriptors and the given one, not 5 and 50",
           n - 50);
    /* execve names it after the file (exe); its argv[0] is the name. */
    char cmdline[64] = "", path[64];
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)p.pid);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        size_t got = fread(cmdline, 1, sizeof(cmdline) - 1, f);
        cmdline[got] = '\0';
        fclose(f);
    }
    CHECKF(strcmp(cmdline, "test-child") == 0, "its argv[0]: '%s'", cmdline);

    /* The peer's death: a closed channel, and how. */
    tell(&c, 1);
    CHECK(imsg_recv_wait(&c, &in, sizeof(in), &fd, WAIT_MS, why, sizeof(why)) < 0);
    CHECKF(strstr(why, "the child closed the channel") != NULL, "after its death: '%s'", why);
    CHECK(proc_wait(&p, WAIT_MS));
    proc_how(&p, how, sizeof(how));
    CHECKF(strcmp(how, "was killed by signal 9 (Killed)") == 0, "killed: it %s", how);
    proc_stop(&p, 0, NULL, 0);

    /* One that ignores the close is killed. */
    start(&p, &forked, &c);
    tell(&c, 2);
    proc_stop(&p, 200, how, sizeof(how));
    CHECKF(strcmp(how, "did not exit within 200 ms and was killed") == 0, "stubborn: it %s", how);
    CHECK(p.reaped && kill(p.pid, 0) < 0);
    close(spare);
}

static void test_restart(void)
{
    struct proc_restart r = {.min_ms = 1000, .max_ms = 30000, .max_deaths = 3, .stable_ms = 60000};
    long d1, d2, d3;

    proc_restart_started(&r, 1000);
    d1 = proc_restart_next(&r, 1500, true);
    d2 = proc_restart_next(&r, 3000, false); /* the next start failed */
    d3 = proc_restart_next(&r, 9000, false);
    CHECKF(d1 >= 500 && d1 <= 1000 && d2 >= 1000 && d2 <= 2000 && d3 >= 2000 && d3 <= 4000,
           "backoff: %ld, %ld, %ld ms", d1, d2, d3);
    CHECK(proc_restart_next(&r, 20000, false) == -1); /* a fourth quick one: give up */
    r.deaths = 2;
    proc_restart_started(&r, 100000);
    d1 = proc_restart_next(&r, 100000 + 60000, true); /* it lived a minute */
    CHECKF(r.deaths == 1 && d1 >= 500 && d1 <= 1000, "a stable child's death: %u, %ld ms", r.deaths,
           d1);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], CHILD_ARG) == 0)
        child_main();
    log_init("test", LOG_LEVEL_WARN, false);
    signal(SIGPIPE, SIG_IGN);
    test_messages();
    test_processes();
    test_restart();
    return check_result("privsep-proc");
}
