/*
 * broker-reflector-process: the reflector in its own process, as qcg-broker
 * runs it (ports 18415-18417).
 *
 *   checks       every malformed message of reflector_msg.h refused (privsep/proc.h's
 *                imsg_check with its table), the good ones taken
 *   child side   this binary executed again as the child (reflector_process_main):
 *                a bad first message ends it (status 1, no crash); after INIT, a
 *                stream of malformed packets is refused and the EXPECT after them
 *                still pairs two PUNCHes; closing the channel ends it (status 0)
 *   broker side  reflector_client_start: a rogue child (this binary with
 *                QCG_TEST_ROGUE set) sends malformed OBSERVEDs: only the good ones
 *                reach the callback; the real child: capabilities gone, an
 *                EXPECT and a PUNCH pair through it, SIGKILL noticed (not up) and
 *                a new child serving the same port, stop leaves no process
 *
 *   test --(channel: socketpair)--> qcg-reflector child --(TCP 127.0.0.1:1841x)--> test clients
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker_config.h"
#include "check.h"
#include "fdpass.h"
#include "line_answer.h"
#include "log.h"
#include "monotonic.h"
#include "reflector.h"
#include "reflector_msg.h"

#define CHILD_PORT 18415
#define CLIENT_PORT 18416
#define ROGUE_PORT 18417
#define WAIT_MS 5000

extern char **environ;

static struct proxy_key key;

/* ---- helpers ---- */

static struct rmsg_expect good_expect(const unsigned char pair[TOKEN_PAIR_LEN])
{
    struct rmsg_expect m;
    memset(&m, 0, sizeof(m));
    m.h = (struct imsg_hdr){.type = RMSG_EXPECT, .len = sizeof(m)};
    m.expiry = (uint64_t)time(NULL) + 60;
    memcpy(m.pair, pair, TOKEN_PAIR_LEN);
    snprintf(m.sides[0].cluster, sizeof(m.sides[0].cluster), "nata");
    snprintf(m.sides[0].node, sizeof(m.sides[0].node), "nata1");
    m.sides[0].preserving = 1;
    snprintf(m.sides[1].cluster, sizeof(m.sides[1].cluster), "natb");
    snprintf(m.sides[1].node, sizeof(m.sides[1].node), "natb1");
    return m;
}

static struct rmsg_observed good_observed(void)
{
    struct rmsg_observed m;
    memset(&m, 0, sizeof(m));
    m.h = (struct imsg_hdr){.type = RMSG_OBSERVED, .len = sizeof(m)};
    m.punch = 1;
    snprintf(m.cluster, sizeof(m.cluster), "nata");
    snprintf(m.node, sizeof(m.node), "nata1");
    snprintf(m.local_addr, sizeof(m.local_addr), "10.0.0.1");
    snprintf(m.addr, sizeof(m.addr), "203.0.113.30");
    m.local_port = 5000;
    m.port = 5000;
    return m;
}

static struct rmsg_init good_init(void)
{
    struct rmsg_init m;
    memset(&m, 0, sizeof(m));
    m.h = (struct imsg_hdr){.type = RMSG_INIT, .len = sizeof(m)};
    m.version = RMSG_VERSION;
    m.key = key;
    m.log_level = getenv("VERBOSE") ? LOG_LEVEL_DEBUG : LOG_LEVEL_WARN;
    return m;
}

static int check(const void *m, size_t len, unsigned accept)
{
    char why[RMSG_WHY_LEN];
    union rmsg u;
    struct imsg_chan c;
    imsg_chan_init(&c, -1, rmsg_types, accept, NULL, "the test");
    memset(&u, 0, sizeof(u));
    memcpy(&u, m, len < sizeof(u) ? len : sizeof(u));
    int rc = imsg_check(&c, &u, len, false, why, sizeof(why));
    if (getenv("VERBOSE"))
        printf("  check: %d %s\n", rc, rc < 0 ? why : "");
    return rc;
}

static void map(int port, char *out, size_t outlen)
{
    int fd = line_client(port, NULL, NULL);
    out[0] = '\0';
    if (fd < 0)
        return;
    if (send(fd, "MAP\n", 4, MSG_NOSIGNAL) == 4)
        line_answer(fd, out, outlen);
    close(fd);
}

/* Both sides of pair punch at once; true when both hear PEER. */
static bool punch_pair(int port, const unsigned char pair[TOKEN_PAIR_LEN])
{
    int fd[2], local[2];
    char line[300], ans[2][300];
    bool ok = true;
    for (int side = 0; side < 2; side++) {
        char tok[TOKEN_TEXT_LEN + 1];
        fd[side] = line_client(port, NULL, &local[side]);
        if (fd[side] < 0)
            return false;
        token_issue(&key, pair, side, (uint64_t)time(NULL) + 60, tok, sizeof(tok));
        snprintf(line, sizeof(line), "PUNCH %s 127.0.0.1 %d\n", tok, local[side]);
        if (send(fd[side], line, strlen(line), MSG_NOSIGNAL) < 0)
            ok = false;
    }
    for (int side = 0; side < 2; side++) {
        line_answer(fd[side], ans[side], sizeof(ans[side]));
        close(fd[side]);
        if (strncmp(ans[side], "PEER ", 5) != 0) {
            fprintf(stderr, "side %d heard '%s'\n", side, ans[side]);
            ok = false;
        }
    }
    return ok;
}

/* The child as reflector_client.c makes it, with the channel ours. */
static pid_t start_child(int listen_fd, int *chan)
{
    struct proc p;
    char err[200];
    const struct proc_spec spec = {.name = "qcg-reflector",
                                   .exec_arg = REFLECTOR_PROCESS_ARG,
                                   .give_fd = listen_fd,
                                   .deathsig = SIGKILL};
    if (proc_start(&p, &spec, err, sizeof(err)) < 0) {
        fprintf(stderr, "start_child: %s\n", err);
        return -1;
    }
    *chan = p.fd;
    return p.pid;
}

/* The child's exit status within WAIT_MS; -1 for a signal or no exit. */
static int wait_exit(pid_t pid)
{
    int status = 0;
    uint64_t end = monotonic_ms() + WAIT_MS;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (monotonic_ms() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        usleep(10 * 1000);
    }
    if (WIFSIGNALED(status))
        fprintf(stderr, "child killed by signal %d\n", WTERMSIG(status));
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Reads one message of any type within WAIT_MS: its type, or -1. */
static int read_msg(int fd, union rmsg *m, size_t *len)
{
    struct imsg_chan c;
    char why[300];
    int got;
    imsg_chan_init(&c, fd, rmsg_types, ~0u, NULL, "the test");
    int type = imsg_recv_wait(&c, m, sizeof(*m), &got, WAIT_MS, why, sizeof(why));
    *len = type > 0 ? m->h.len : 0;
    return type > 0 ? type : -1;
}

static void send_raw(int fd, const void *m, size_t len)
{
    if (send(fd, m, len, MSG_NOSIGNAL) != (ssize_t)len)
        fprintf(stderr, "send_raw: %s\n", strerror(errno));
}

/* ---- the checks alone ---- */

static void test_checks(void)
{
    const unsigned TO_CHILD = IMSG_BIT(RMSG_EXPECT), TO_BROKER = IMSG_BIT(RMSG_OBSERVED);
    unsigned char pair[TOKEN_PAIR_LEN] = {1, 2, 3};
    struct rmsg_expect e = good_expect(pair), bad_e;
    struct rmsg_observed o = good_observed(), bad_o;
    struct rmsg_init in = good_init(), bad_in;
    struct rmsg_ready r = {.h = {.type = RMSG_READY, .len = sizeof(r)}, .ok = 1}, bad_r;
    struct imsg_hdr t = {.len = sizeof(t)};

    CHECKF(check(&e, sizeof(e), TO_CHILD) == RMSG_EXPECT, "a good EXPECT");
    CHECKF(check(&o, sizeof(o), TO_BROKER) == RMSG_OBSERVED, "a good OBSERVED (PUNCH)");
    bad_o = o;
    bad_o.punch = 0;
    memset(bad_o.cluster, 0, sizeof(bad_o.cluster));
    memset(bad_o.node, 0, sizeof(bad_o.node));
    memset(bad_o.local_addr, 0, sizeof(bad_o.local_addr));
    bad_o.local_port = 0;
    CHECKF(check(&bad_o, sizeof(bad_o), TO_BROKER) == RMSG_OBSERVED, "a good OBSERVED (MAP)");
    CHECKF(check(&in, sizeof(in), IMSG_BIT(RMSG_INIT)) == RMSG_INIT, "a good INIT");
    CHECKF(check(&r, sizeof(r), IMSG_BIT(RMSG_READY)) == RMSG_READY, "a good READY");

    /* Sizes and types. */
    CHECKF(check(&e, 0, TO_CHILD) < 0, "empty");
    CHECKF(check(&e, 3, TO_CHILD) < 0, "shorter than a type");
    CHECKF(check(&e, sizeof(e) - 1, TO_CHILD) < 0, "EXPECT a byte short");
    CHECKF(check(&e, sizeof(e) + 1, TO_CHILD) < 0, "EXPECT a byte long");
    CHECKF(check(&e, sizeof(union rmsg) + 100, TO_CHILD) < 0, "longer than any message");
    CHECKF(check(&o, sizeof(o), TO_CHILD) < 0, "OBSERVED to the child");
    CHECKF(check(&e, sizeof(e), TO_BROKER) < 0, "EXPECT to the broker");
    CHECKF(check(&in, sizeof(in), TO_CHILD) < 0, "INIT after INIT");
    CHECKF(check(&r, sizeof(r), TO_BROKER) < 0, "READY after READY");
    t.type = 0;
    CHECKF(check(&t, sizeof(t), ~0u) < 0, "type 0");
    t.type = 99;
    CHECKF(check(&t, sizeof(t), ~0u) < 0, "type 99");
    t.type = 0xffffffffu;
    CHECKF(check(&t, sizeof(t), ~0u) < 0, "type 2^32-1");
    bad_e = e;
    bad_e.h.len = sizeof(e) + 8;
    CHECKF(check(&bad_e, sizeof(bad_e), TO_CHILD) < 0, "a length field that is not the size");

    /* EXPECT fields. */
    bad_e = e;
    memset(bad_e.sides[0].cluster, 'a', sizeof(bad_e.sides[0].cluster));
    CHECKF(check(&bad_e, sizeof(bad_e), TO_CHILD) < 0, "cluster without its NUL");
    bad_e = e;
    memset(bad_e.sides[1].node, 'a', sizeof(bad_e.sides[1].node));
    CHECKF(check(&bad_e, sizeof(bad_e), TO_CHILD) < 0, "node without its NUL");
    bad_e = e;
    bad_e.sides[1].cluster[0] = '\0';
    CHECKF(check(&bad_e, sizeof(bad_e), TO_CHILD) < 0, "empty cluster");
    bad_e = e;
    bad_e.sides[0].node[1] = '\n';
    CHECKF(check(&bad_e, sizeof(bad_e), TO_CHILD) < 0, "a newline in a node");
    bad_e = e;
    bad_e.sides[0].preserving = 2;
    CHECKF(check(&bad_e, sizeof(bad_e), TO_CHILD) < 0, "preserving 2");
    bad_e = e;
    bad_e.expiry = 0;
    CHECKF(check(&bad_e, sizeof(bad_e), TO_CHILD) < 0, "expiry 0");
    bad_e = e;
    bad_e.expiry = UINT64_MAX;
    CHECKF(check(&bad_e, sizeof(bad_e), TO_CHILD) < 0, "expiry 2^64-1");
    bad_e = e;
    bad_e.h.reserved = 1;
    CHECKF(check(&bad_e, sizeof(bad_e), TO_CHILD) < 0, "reserved 1");

    /* OBSERVED fields. */
    bad_o = o;
    bad_o.punch = 2;
    CHECKF(check(&bad_o, sizeof(bad_o), TO_BROKER) < 0, "punch 2");
    bad_o = o;
    bad_o.port = 0;
    CHECKF(check(&bad_o, sizeof(bad_o), TO_BROKER) < 0, "port 0");
    bad_o = o;
    bad_o.port = 65536;
    CHECKF(check(&bad_o, sizeof(bad_o), TO_BROKER) < 0, "port 65536");
    bad_o = o;
    bad_o.local_port = -1;
    CHECKF(check(&bad_o, sizeof(bad_o), TO_BROKER) < 0, "local port -1");
    bad_o = o;
    snprintf(bad_o.addr, sizeof(bad_o.addr), "203.0.113.300");
    CHECKF(check(&bad_o, sizeof(bad_o), TO_BROKER) < 0, "an address that is none");
    bad_o = o;
    memset(bad_o.addr, '1', sizeof(bad_o.addr));
    CHECKF(check(&bad_o, sizeof(bad_o), TO_BROKER) < 0, "address without its NUL");
    bad_o = o;
    snprintf(bad_o.local_addr, sizeof(bad_o.local_addr), "here");
    CHECKF(check(&bad_o, sizeof(bad_o), TO_BROKER) < 0, "a local address that is none");
    bad_o = o;
    bad_o.cluster[0] = '\0';
    CHECKF(check(&bad_o, sizeof(bad_o), TO_BROKER) < 0, "a PUNCH without its cluster");
    bad_o = o;
    bad_o.punch = 0;
    CHECKF(check(&bad_o, sizeof(bad_o), TO_BROKER) < 0, "names without a PUNCH");

    /* INIT and READY fields. */
    bad_in = in;
    bad_in.version = RMSG_VERSION + 1;
    CHECKF(check(&bad_in, sizeof(bad_in), IMSG_BIT(RMSG_INIT)) < 0, "another version");
    bad_in = in;
    bad_in.log_level = 4;
    CHECKF(check(&bad_in, sizeof(bad_in), IMSG_BIT(RMSG_INIT)) < 0, "log level 4");
    bad_in = in;
    bad_in.syslog = 7;
    CHECKF(check(&bad_in, sizeof(bad_in), IMSG_BIT(RMSG_INIT)) < 0, "syslog 7");
    bad_in = in;
    bad_in.setuser = 1;
    bad_in.uid = (uint32_t)-1;
    CHECKF(check(&bad_in, sizeof(bad_in), IMSG_BIT(RMSG_INIT)) < 0, "uid -1");
    bad_in = in;
    bad_in.listen6 = 2;
    CHECKF(check(&bad_in, sizeof(bad_in), IMSG_BIT(RMSG_INIT)) < 0, "listen6 2");
    /* LISTEN6 brings the IPv6 listener: never without it. */
    struct rmsg_listen6 l6 = {.h = {.type = RMSG_LISTEN6, .len = sizeof(l6)}};
    CHECKF(check(&l6, sizeof(l6), IMSG_BIT(RMSG_LISTEN6)) < 0, "LISTEN6 without a descriptor");
    bad_r = r;
    bad_r.ok = 0;
    CHECKF(check(&bad_r, sizeof(bad_r), IMSG_BIT(RMSG_READY)) < 0, "a failure without a reason");
    bad_r = r;
    snprintf(bad_r.why, sizeof(bad_r.why), "extra");
    CHECKF(check(&bad_r, sizeof(bad_r), IMSG_BIT(RMSG_READY)) < 0, "success with a reason");
    bad_r = r;
    bad_r.ok = 0;
    memset(bad_r.why, 'x', sizeof(bad_r.why));
    CHECKF(check(&bad_r, sizeof(bad_r), IMSG_BIT(RMSG_READY)) < 0, "reason without its NUL");
}

/* ---- the child, driven over its channel ---- */

static void test_child_bad_first(int listen_fd)
{
    int chan;
    pid_t pid = start_child(listen_fd, &chan);
    unsigned char pair[TOKEN_PAIR_LEN] = {9};
    struct rmsg_expect e = good_expect(pair);
    send_raw(chan, &e, sizeof(e));
    CHECKF(wait_exit(pid) == 1, "a child whose first message is no INIT exits with status 1");
    close(chan);
}

static void test_child(int listen_fd)
{
    int chan;
    union rmsg m;
    size_t len = 0;
    pid_t pid = start_child(listen_fd, &chan);
    struct rmsg_init in = good_init();
    unsigned char pair[TOKEN_PAIR_LEN] = {0x42, (unsigned char)(monotonic_ms() & 0xff)};
    struct rmsg_expect e = good_expect(pair), bad;
    char big[sizeof(union rmsg) + 100], ans[300];

    send_raw(chan, &in, sizeof(in));
    CHECKF(read_msg(chan, &m, &len) == RMSG_READY && m.ready.ok == 1, "READY from the child");

    /* Garbage of every kind, then the good EXPECT. */
    send_raw(chan, "", 0);
    send_raw(chan, "abc", 3);
    memset(big, 0x41, sizeof(big));
    send_raw(chan, big, sizeof(big));
    send_raw(chan, &in, sizeof(in));
    send_raw(chan, &e, sizeof(e) - 8);
    bad = e;
    memset(bad.sides[0].cluster, 'x', sizeof(bad.sides[0].cluster));
    send_raw(chan, &bad, sizeof(bad));
    bad = e;
    bad.sides[1].preserving = 7;
    send_raw(chan, &bad, sizeof(bad));
    bad = e;
    bad.expiry = 0;
    send_raw(chan, &bad, sizeof(bad));
    struct rmsg_observed o = good_observed();
    send_raw(chan, &o, sizeof(o));
    /* A descriptor attached to a message is not taken along. */
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fdpass_send(chan, &bad, sizeof(bad), devnull) < 0)
        fprintf(stderr, "fdpass_send: %s\n", strerror(errno));
    close(devnull);
    send_raw(chan, &e, sizeof(e));

    map(CHILD_PORT, ans, sizeof(ans));
    CHECKF(strncmp(ans, "MAPPED 127.0.0.1 ", 17) == 0, "MAP after the garbage: '%s'", ans);
    CHECKF(punch_pair(CHILD_PORT, pair), "the EXPECT after the garbage pairs two PUNCHes");
    int punches = 0, maps = 0;
    /* COUNTERS come between them whenever the child's counters changed. */
    for (int i = 0, type; i < 16 && maps + punches < 3; i++) {
        if ((type = read_msg(chan, &m, &len)) == RMSG_COUNTERS)
            continue;
        if (type != RMSG_OBSERVED)
            break;
        punches += m.observed.punch == 1 && (strcmp(m.observed.cluster, "nata") == 0 ||
                                             strcmp(m.observed.cluster, "natb") == 0);
        maps += m.observed.punch == 0;
    }
    CHECKF(maps == 1 && punches == 2, "OBSERVED: %d MAP, %d PUNCH", maps, punches);
    close(chan);
    CHECKF(wait_exit(pid) == 0, "the child exits with status 0 once its channel closes");
}

/* ---- the broker's side ---- */

struct seen {
    atomic_int n, punches;
    char cluster[64];
    int port;
};

static void on_observe(void *arg, const struct reflector_observation *o)
{
    struct seen *s = arg;
    if (o->cluster != NULL) {
        snprintf(s->cluster, sizeof(s->cluster), "%s", o->cluster);
        s->port = o->port;
        atomic_fetch_add(&s->punches, 1);
    }
    atomic_fetch_add(&s->n, 1);
}

/* The rogue child: READY, then OBSERVEDs of every wrong kind and two good. */
static int rogue_main(void)
{
    int fd = PROC_FD_CHAN;
    union rmsg m;
    size_t len = 0;
    if (read_msg(fd, &m, &len) != RMSG_INIT)
        return 1;
    struct rmsg_ready r = {.h = {.type = RMSG_READY, .len = sizeof(r)}, .ok = 1};
    send_raw(fd, &r, sizeof(r));
    struct rmsg_observed o = good_observed(), bad;
    char big[sizeof(union rmsg) + 1];
    memset(big, 0, sizeof(big));
    send_raw(fd, "", 0);
    send_raw(fd, "xy", 2);
    send_raw(fd, big, sizeof(big));
    send_raw(fd, &r, sizeof(r));
    send_raw(fd, &m.init, sizeof(m.init));
    send_raw(fd, &o, sizeof(o) - 1);
    bad = o;
    bad.port = 0;
    send_raw(fd, &bad, sizeof(bad));
    bad = o;
    bad.local_port = 70000;
    send_raw(fd, &bad, sizeof(bad));
    bad = o;
    memset(bad.cluster, 'c', sizeof(bad.cluster));
    send_raw(fd, &bad, sizeof(bad));
    bad = o;
    snprintf(bad.addr, sizeof(bad.addr), "nowhere");
    send_raw(fd, &bad, sizeof(bad));
    bad = o;
    bad.punch = 0;
    send_raw(fd, &bad, sizeof(bad));
    unsigned char pair[TOKEN_PAIR_LEN] = {7};
    struct rmsg_expect e = good_expect(pair);
    send_raw(fd, &e, sizeof(e));
    send_raw(fd, &o, sizeof(o));
    /* The last one, told apart by its port: once it is seen, everything
       before it on the channel has been read. */
    o.port = 5001;
    send_raw(fd, &o, sizeof(o));
    explicit_bzero(&m, sizeof(m));
    /* Until the broker closes the channel. */
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, WAIT_MS) > 0 && recv(fd, &m, sizeof(m), MSG_DONTWAIT) > 0)
        ;
    return 0;
}

static bool wait_until(const atomic_int *v, int want)
{
    uint64_t end = monotonic_ms() + WAIT_MS;
    while (atomic_load(v) < want && monotonic_ms() < end)
        usleep(10 * 1000);
    return atomic_load(v) >= want;
}

static void test_rogue(void)
{
    struct seen s = {0};
    char err[300];
    struct reflector_process_config cfg = {.listen = "127.0.0.1:18417", .same_user = true};

    setenv("QCG_TEST_ROGUE", "1", 1);
    struct reflector_client *c =
        reflector_client_start(&cfg, &key, on_observe, &s, err, sizeof(err));
    unsetenv("QCG_TEST_ROGUE");
    CHECKF(c != NULL, "rogue: start: %s", err);
    if (c == NULL)
        return;
    /* A wrong one let through would make the second callback come before
       the last message's (port 5001). */
    CHECKF(wait_until(&s.n, 2), "rogue: the good OBSERVEDs arrive");
    CHECKF(atomic_load(&s.n) == 2 && strcmp(s.cluster, "nata") == 0 && s.port == 5001,
           "rogue: only the good OBSERVEDs reached the callback (%d, last %s:%d)",
           atomic_load(&s.n), s.cluster, s.port);
    CHECKF(reflector_client_up(c), "rogue: the broker still counts on its reflector");
    reflector_client_stop(c);
}

static bool wait_up(struct reflector_client *c, bool want)
{
    uint64_t end = monotonic_ms() + WAIT_MS;
    while (reflector_client_up(c) != want && monotonic_ms() < end)
        usleep(5 * 1000);
    return reflector_client_up(c) == want;
}

/* /proc/PID/status's line for field, e.g. "CapEff". */
static void status_field(int pid, const char *field, char *out, size_t outlen)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, field, strlen(field)) == 0 && line[strlen(field)] == ':')
            snprintf(out, outlen, "%s", line + strlen(field) + 2);
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

static void test_client(void)
{
    struct seen s = {0};
    char err[300], ans[300], v[128];
    /* The default user when root (scripts/install-deps creates it), the
       test's own uid otherwise (it cannot become another). */
    bool root = geteuid() == 0;
    struct reflector_process_config cfg = {
        .listen = "127.0.0.1:18416", .user = REFLECTOR_USER_DEFAULT, .same_user = !root};
    struct reflector_side sides[2];
    unsigned char pair[TOKEN_PAIR_LEN] = {0x43, (unsigned char)(monotonic_ms() & 0xff)};

    CHECKF(reflector_client_start(
               &(struct reflector_process_config){.listen = "nonsense", .same_user = true}, &key,
               NULL, NULL, err, sizeof(err)) == NULL &&
               strstr(err, "not ADDR:PORT") != NULL,
           "a bad listen address: '%s'", err);
    struct reflector_client *c =
        reflector_client_start(&cfg, &key, on_observe, &s, err, sizeof(err));
    CHECKF(c != NULL, "start: %s", err);
    if (c == NULL)
        return;
    int pid = reflector_client_pid(c);
    CHECKF(pid > 0 && pid != getpid() && reflector_client_up(c), "a child serves");
    status_field(pid, "CapEff", v, sizeof(v));
    CHECKF(strcmp(v, "0000000000000000") == 0, "the child's CapEff: '%s'", v);
    status_field(pid, "CapBnd", v, sizeof(v));
    CHECKF(strcmp(v, "0000000000000000") == 0, "the child's CapBnd: '%s'", v);
    status_field(pid, "NoNewPrivs", v, sizeof(v));
    CHECKF(strcmp(v, "1") == 0, "the child's NoNewPrivs: '%s'", v);
    status_field(pid, "Name", v, sizeof(v));
    CHECKF(strcmp(v, "qcg-reflector") == 0, "the child's name: '%s'", v);
    struct passwd *pw = getpwnam(REFLECTOR_USER_DEFAULT);
    char want[64];
    snprintf(want, sizeof(want), "%u\t%u\t%u\t%u", root && pw ? (unsigned)pw->pw_uid : getuid(),
             root && pw ? (unsigned)pw->pw_uid : getuid(),
             root && pw ? (unsigned)pw->pw_uid : getuid(),
             root && pw ? (unsigned)pw->pw_uid : getuid());
    status_field(pid, "Uid", v, sizeof(v));
    CHECKF((!root || pw != NULL) && strcmp(v, want) == 0,
           "the child runs as %s: Uid '%s', want '%s'", root ? REFLECTOR_USER_DEFAULT : "us", v,
           want);
    /* Never the broker's own uid unless asked. */
    struct passwd *self = getpwuid(geteuid());
    uint32_t u, g;
    CHECKF(self != NULL &&
               reflector_user_resolve(&(struct reflector_process_config){.user = self->pw_name}, &u,
                                      &g, err, sizeof(err)) < 0 &&
               strstr(err, "the broker's own uid") != NULL,
           "reflector-user = the broker's own user is refused: '%s'", err);

    memset(sides, 0, sizeof(sides));
    snprintf(sides[0].cluster, sizeof(sides[0].cluster), "nata");
    snprintf(sides[0].node, sizeof(sides[0].node), "nata1");
    snprintf(sides[1].cluster, sizeof(sides[1].cluster), "natb");
    snprintf(sides[1].node, sizeof(sides[1].node), "natb1");
    CHECKF(reflector_client_expect(c, pair, sides, (uint64_t)time(NULL) + 60) == 0, "expect");
    /* The EXPECT crosses to the child's other thread, and a PUNCH sent at
       once may overtake it ("no punch expected", the pair not taken): in
       real use the helper's punch follows a round trip through its frontend.
       A few tries, 100 ms apart. */
    bool punched = false;
    for (int i = 0; i < 5 && !punched; i++) {
        if (i > 0)
            nanosleep(&(struct timespec){0, 100 * 1000000L}, NULL);
        punched = punch_pair(CLIENT_PORT, pair);
    }
    CHECKF(punched, "a PUNCH pair through the child");
    CHECKF(wait_until(&s.punches, 2) && s.port > 0, "both PUNCHes observed by the broker");
    /* The child's counters reach the broker (--stats), about once a second. */
    struct reflector_counters k;
    uint64_t until = monotonic_ms() + 3000;
    do {
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
        reflector_client_counters(c, &k);
    } while (k.paired < 1 && monotonic_ms() < until);
    CHECKF(k.paired == 1 && k.punches >= 2, "counters from the child: paired %llu, punches %llu",
           (unsigned long long)k.paired, (unsigned long long)k.punches);

    /* Killed: noticed at once, then a new child on the same port. */
    kill(pid, SIGKILL);
    CHECKF(wait_up(c, false), "the broker noticed the death");
    CHECKF(reflector_client_expect(c, pair, sides, (uint64_t)time(NULL) + 60) < 0,
           "no EXPECT while no child serves");
    CHECKF(wait_up(c, true), "a new child within %d ms", WAIT_MS);
    int pid2 = reflector_client_pid(c);
    CHECKF(pid2 > 0 && pid2 != pid, "a new child: %d after %d", pid2, pid);
    map(CLIENT_PORT, ans, sizeof(ans));
    CHECKF(strncmp(ans, "MAPPED 127.0.0.1 ", 17) == 0, "the new child serves MAP: '%s'", ans);
    /* The dead child's counts stay in the totals, the new one's add to them. */
    until = monotonic_ms() + 3000;
    do {
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
        reflector_client_counters(c, &k);
    } while (k.maps < 1 && monotonic_ms() < until);
    CHECKF(k.maps == 1 && k.paired == 1, "counters across children: maps %llu, paired %llu",
           (unsigned long long)k.maps, (unsigned long long)k.paired);
    reflector_client_stop(c);
    CHECKF(kill(pid2, 0) < 0 && errno == ESRCH, "no child left after the stop");
}

int main(int argc, char **argv)
{
    /* The child this binary becomes (the broker's main does the same). */
    if (argc == 2 && strcmp(argv[1], REFLECTOR_PROCESS_ARG) == 0)
        return getenv("QCG_TEST_ROGUE") ? rogue_main() : reflector_process_main();

    char err[200];
    log_init("test", getenv("VERBOSE") ? LOG_LEVEL_DEBUG : LOG_LEVEL_WARN, false);
    signal(SIGPIPE, SIG_IGN);
    for (size_t i = 0; i < sizeof(key.bytes); i++)
        key.bytes[i] = (unsigned char)(i * 5 + 3);
    test_checks();
    int listen_fd = reflector_listen("127.0.0.1:18415", 0, err, sizeof(err));
    CHECKF(listen_fd >= 0, "listen: %s", err);
    if (listen_fd >= 0) {
        test_child_bad_first(listen_fd);
        test_child(listen_fd);
        close(listen_fd);
    }
    test_rogue();
    test_client();
    if (check_failures)
        fprintf(stderr, "broker-reflector-process: %d check(s) failed\n", check_failures);
    else
        printf("broker-reflector-process: all checks passed\n");
    return check_failures != 0;
}
