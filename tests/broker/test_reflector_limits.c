/*
 * broker-reflector-limits: what one address or one cluster's flood cannot
 * take from the others (reflector on 127.0.0.1:18418).
 *
 *   idle       40 connections from 127.0.0.1 that send nothing, against 16
 *              slots: a punch from 127.0.0.2 still pairs (oldest idle cut)
 *   address    130 idle connections from 127.0.0.1: those beyond 128 are
 *              closed at once, a MAP from 127.0.0.2 is answered
 *   cluster    one cluster's 64 plans against a table of 64: another
 *              cluster's plan is still taken and its punch pairs
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "line_answer.h"
#include "log.h"
#include "monotonic.h"
#include "reflector.h"

#define PORT 18418
#define SLOTS 16
#define PER_ADDRESS 128 /* REFLECTOR_CONNS_PER_ADDRESS */

static struct proxy_key key;

/* Sends line and reads the answer line. */
static void exchange(int fd, const char *line, char *out, size_t outlen)
{
    if (send(fd, line, strlen(line), MSG_NOSIGNAL) < 0)
        fprintf(stderr, "send: %s\n", strerror(errno));
    line_answer(fd, out, outlen);
}

/* The connection was closed (EOF or reset) within ms, without a byte. */
static bool closed_within(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char b;
    return poll(&p, 1, ms) == 1 && recv(fd, &b, 1, MSG_DONTWAIT) <= 0;
}

/* A pair id numbered n, of its own job (token.h: the last bytes are the
   job's tag), or of job `job` when not 0. */
static void make_job_pair(unsigned char pair[TOKEN_PAIR_LEN], unsigned n, unsigned job)
{
    memset(pair, 0, TOKEN_PAIR_LEN);
    memcpy(pair, &n, sizeof(n));
    pair[4] = (unsigned char)(monotonic_ms() & 0xff);
    job = job != 0 ? job : 0x80000000u | n;
    memcpy(pair + TOKEN_PAIR_LEN - TOKEN_JOB_TAG_LEN, &job, TOKEN_JOB_TAG_LEN);
}

static void make_pair(unsigned char pair[TOKEN_PAIR_LEN], unsigned n)
{
    make_job_pair(pair, n, 0);
}

static int expect_for(struct reflector *r, const unsigned char pair[TOKEN_PAIR_LEN],
                      const char *cluster)
{
    struct reflector_side sides[2];
    memset(sides, 0, sizeof(sides));
    snprintf(sides[0].cluster, sizeof(sides[0].cluster), "%s", cluster);
    snprintf(sides[0].node, sizeof(sides[0].node), "%s1", cluster);
    snprintf(sides[1].cluster, sizeof(sides[1].cluster), "%s", cluster);
    snprintf(sides[1].node, sizeof(sides[1].node), "%s2", cluster);
    return reflector_expect(r, pair, sides, (uint64_t)time(NULL) + 60);
}

/* Both sides of pair PUNCH from `from`: true when both get their PEER. */
static bool punch_pairs(const unsigned char pair[TOKEN_PAIR_LEN], const char *from, char *why,
                        size_t whylen)
{
    char tok[2][TOKEN_TEXT_LEN + 1], line[2][300], ans[2][400];
    int fd[2], local[2] = {0, 0};
    uint64_t exp = (uint64_t)time(NULL) + 60;

    for (int i = 0; i < 2; i++) {
        token_issue(&key, pair, i, exp, tok[i], sizeof(tok[i]));
        fd[i] = line_client(PORT, from, &local[i]);
        if (fd[i] < 0) {
            snprintf(why, whylen, "connect: %s", strerror(errno));
            if (i == 1)
                close(fd[0]);
            return false;
        }
        snprintf(line[i], sizeof(line[i]), "PUNCH %s %s %d\n", tok[i], from, local[i]);
    }
    /* The initiator's answer waits for the target's line: send both first. */
    if (send(fd[0], line[0], strlen(line[0]), MSG_NOSIGNAL) < 0)
        ans[0][0] = '\0';
    exchange(fd[1], line[1], ans[1], sizeof(ans[1]));
    exchange(fd[0], "", ans[0], sizeof(ans[0]));
    close(fd[0]);
    close(fd[1]);
    snprintf(why, whylen, "initiator '%.200s', target '%.200s'", ans[0], ans[1]);
    return strncmp(ans[0], "PEER ", 5) == 0 && strncmp(ans[1], "PEER ", 5) == 0;
}

static struct reflector *start(const struct reflector_tuning *t)
{
    char err[200], listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", PORT);
    struct reflector *r = reflector_start_tuned(listen, &key, NULL, NULL, t, err, sizeof(err));
    if (r == NULL) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    return r;
}

static void test_idle_flood(void)
{
    enum { IDLE = 40 };
    struct reflector_tuning t = {.conns_max = SLOTS};
    struct reflector *r = start(&t);
    int idle[IDLE];
    unsigned char pair[TOKEN_PAIR_LEN];
    char why[600];

    for (int i = 0; i < IDLE; i++)
        idle[i] = line_client(PORT, "127.0.0.1", NULL);
    make_pair(pair, 1);
    CHECKF(expect_for(r, pair, "natb") == 0, "expect");
    CHECKF(punch_pairs(pair, "127.0.0.2", why, sizeof(why)),
           "a punch from 127.0.0.2 beside %d idle connections from 127.0.0.1 (%d slots): %.400s",
           IDLE, SLOTS, why);
    for (int i = 0; i < IDLE; i++)
        if (idle[i] >= 0)
            close(idle[i]);
    reflector_stop(r);
}

static void test_address(void)
{
    enum { IDLE = PER_ADDRESS + 2 };
    struct reflector *r = start(NULL);
    int idle[IDLE];
    char ans[400];

    for (int i = 0; i < IDLE; i++)
        idle[i] = line_client(PORT, "127.0.0.1", NULL);
    CHECKF(closed_within(idle[IDLE - 1], 1000) && closed_within(idle[IDLE - 2], 1000),
           "the connections from 127.0.0.1 beyond %d without a request closed at once",
           PER_ADDRESS);
    CHECKF(!closed_within(idle[0], 0), "the first ones still open (within the read timeout)");
    int m = line_client(PORT, "127.0.0.2", NULL);
    exchange(m, "MAP\n", ans, sizeof(ans));
    close(m);
    CHECKF(strncmp(ans, "MAPPED 127.0.0.2 ", 17) == 0, "MAP from 127.0.0.2: '%s'", ans);
    for (int i = 0; i < IDLE; i++)
        if (idle[i] >= 0)
            close(idle[i]);
    reflector_stop(r);
}

/* A flood of 64 plans from cluster nata against a table of 64: `share` of
   them are taken (job 0: each plan its own job, so the cluster's share
   binds; else all of one job, whose share binds); then a plan of another
   job from `other_cluster` is taken and its punch pairs. */
static void share_case(const char *what, unsigned job, int share, const char *other_cluster)
{
    enum { MAX = 64 };
    struct reflector_tuning t = {.expected_max = MAX};
    struct reflector *r = start(&t);
    unsigned char pair[TOKEN_PAIR_LEN];
    char why[600];
    int taken = 0;

    for (unsigned i = 0; i < MAX; i++) {
        make_job_pair(pair, 100 + i, job);
        taken += expect_for(r, pair, "nata") == 0;
    }
    CHECKF(taken == share, "%s: plans taken: %d of %d (its share: %d)", what, taken, MAX, share);
    make_job_pair(pair, 2, 9);
    CHECKF(expect_for(r, pair, other_cluster) == 0, "%s: another job's plan from %s taken", what,
           other_cluster);
    CHECKF(punch_pairs(pair, "127.0.0.2", why, sizeof(why)), "%s: its punch: %.400s", what, why);
    reflector_stop(r);
}

int main(void)
{
    log_init("broker", getenv("VERBOSE") ? LOG_LEVEL_DEBUG : LOG_LEVEL_ERROR, false);
    for (size_t i = 0; i < sizeof(key.bytes); i++)
        key.bytes[i] = (unsigned char)(i * 5 + 3);
    test_idle_flood();
    test_address();
    share_case("one cluster's flood", 0, 64 / 8, "natb");
    /* Half of a cluster's share: another job of the same cluster keeps room. */
    share_case("one job's flood", 7, 64 / 16, "nata");
    return check_result("broker-reflector-limits");
}
