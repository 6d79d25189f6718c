/*
 * The long-poll client (common/longpoll.h) against a real SOAP server over
 * loopback mutual TLS (test_soap_ops.c: poll long-polls a cmdqueue, stats
 * answers; a throw-away CA from certs/qcg-certs).  Checks what the frontend
 * and the helper rely on: every command is handed on once and in order, also
 * when polls repeat what was acknowledged; a new epoch means registering
 * again and counting from 1 again; a lost server means backing off and
 * coming back; a stop is prompt during a pending poll.
 *
 * usage: test_longpoll QCG_CERTS     (exit 77: skipped)
 * Ports: 17680-17689.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "cmdqueue.h"
#include "log.h"
#include "longpoll.h"
#include "soapH.h"
#include "soap_client.h"
#include "soap_server.h"
#include "test_soap_ops.h"

#define PORT_FIRST 17680
#define PORT_LAST 17689
#define SEEN_MAX 64

static char dir[] = "/tmp/qcg-test-longpoll-XXXXXX";
static char ca[300], server_pem[300], client_pem[300];

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* What the callbacks saw, read by the test while the thread runs. */
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t seen[SEEN_MAX];
static int nseen, registrations, downs;

static int count(const int *what)
{
    pthread_mutex_lock(&seen_lock);
    int n = *what;
    pthread_mutex_unlock(&seen_lock);
    return n;
}

/* Waits up to ms for *what to reach n (the thread works on its own time). */
static int wait_count(const int *what, int n, int ms)
{
    long end = now_ms() + ms;
    while (count(what) < n && now_ms() < end) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return count(what) >= n;
}

/* Registering asks the server for stats on the thread's own context: the
   registration is a real call, failing while the server is down. */
static int on_register(void *arg, struct soap *soap, uint64_t *epoch, char *why, size_t whylen)
{
    struct test_state *st = arg;
    struct qcg__statsResponse r;
    char sub[32], msg[200];

    memset(&r, 0, sizeof(r));
    int rc = soap_call_qcg__stats(soap, soap_client_url(soap), NULL, QCG_PROTOCOL_VERSION, &r);
    if (soap_call_status(soap, rc, sub, sizeof(sub), msg, sizeof(msg)) != CALL_OK) {
        snprintf(why, whylen, "stats: %s", msg);
        return -1;
    }
    *epoch = st->epoch;
    pthread_mutex_lock(&seen_lock);
    registrations++;
    pthread_mutex_unlock(&seen_lock);
    return 0;
}

static void on_command(void *arg, const struct command *c)
{
    (void)arg;
    pthread_mutex_lock(&seen_lock);
    if (nseen < SEEN_MAX)
        seen[nseen] = c->seq;
    nseen++;
    pthread_mutex_unlock(&seen_lock);
}

static void on_down(void *arg, const char *why)
{
    (void)arg;
    (void)why;
    pthread_mutex_lock(&seen_lock);
    downs++;
    pthread_mutex_unlock(&seen_lock);
}

static const struct longpoll_ops ops = {
    .registered = on_register,
    .command = on_command,
    .down = on_down,
};

struct server {
    struct soap_server *srv;
    pthread_t thread;
};

static void *server_main(void *arg)
{
    soap_server_run(arg);
    return NULL;
}

static int server_start(struct server *s, int port, struct test_state *st)
{
    char err[512];
    struct soap_server_config cfg = {
        .listen_addr = "127.0.0.1",
        .port = port,
        .tls = {.ca = ca, .certkey = server_pem},
        .max_connections = 8,
        .user = st,
    };
    s->srv = soap_server_new(&cfg, err, sizeof(err));
    if (s->srv == NULL) {
        fprintf(stderr, "no server on port %d: %s\n", port, err);
        return -1;
    }
    pthread_create(&s->thread, NULL, server_main, s->srv);
    return 0;
}

/* Stops the server; a poll waiting in the queue is woken by closing it. */
static void server_stop(struct server *s, struct test_state *st)
{
    soap_server_stop(s->srv);
    cmdqueue_close(st->queue);
    pthread_join(s->thread, NULL);
    soap_server_free(s->srv);
}

static uint64_t push(struct test_state *st, const char *kind)
{
    struct command c;
    memset(&c, 0, sizeof(c));
    snprintf(c.kind, sizeof(c.kind), "%s", kind);
    snprintf(c.job, sizeof(c.job), "job1");
    c.rank = 1;
    return cmdqueue_push(st->queue, &c);
}

static void run(int port)
{
    struct test_state st = {.queue = cmdqueue_new(64), .epoch = 7};
    struct server s;
    char url[64], err[512];
    if (server_start(&s, port, &st) < 0) {
        CHECK(!"server start");
        return;
    }
    snprintf(url, sizeof(url), "https://127.0.0.1:%d/", port);
    struct soap_client_config client = {.url = url,
                                        .tls = {.ca = ca, .certkey = client_pem},
                                        .connect_timeout = 5,
                                        .io_timeout = 5};
    struct longpoll_config cfg = {
        .client = &client, .service = "test server", .wait = 20, .ops = &ops, .arg = &st};
    struct longpoll *lp = longpoll_new(&cfg, err, sizeof(err));
    CHECK(lp != NULL);
    if (lp == NULL)
        return;
    CHECK(longpoll_start(lp, err, sizeof(err)) == 0);
    CHECK(wait_count(&registrations, 1, 5000));
    int connected;
    uint64_t epoch;
    longpoll_state(lp, &connected, &epoch);
    CHECK(connected == 1 && epoch == 7);

    /* Three commands, handed on in order; then three polls that act as if
       their ack had been lost get all three again: none is handed on twice. */
    WAIT_UNTIL(atomic_load(&st.polls) >= 1, 5000, "the first poll at the server");
    st.forget_acks = 3;
    for (int i = 0; i < 3; i++)
        push(&st, "invalidate");
    CHECK(wait_count(&nseen, 3, 5000));
    WAIT_UNTIL(st.forget_acks == 0, 5000, "three polls without their ack");
    uint64_t s4 = push(&st, "flush");
    CHECK(wait_count(&nseen, 4, 5000));
    /* All four acknowledged: the client has polled again after handing on
       what it got, so a command handed on twice would show by now. */
    WAIT_UNTIL(cmdqueue_pending(st.queue) == 0, 5000, "the ack of the four commands");
    CHECK(count(&nseen) == 4);
    CHECK(seen[0] == 1 && seen[1] == 2 && seen[2] == 3 && seen[3] == s4);
    CHECK(count(&registrations) == 1);

    /* The server "restarts": a new epoch and a new queue numbering from 1.
       The client registers again and takes seq 1 and 2 of the new queue. */
    int polls = atomic_load(&st.polls);
    struct cmdqueue *old = st.queue;
    st.queue = cmdqueue_new(64);
    st.epoch = 8;
    cmdqueue_close(old);
    CHECK(wait_count(&registrations, 2, 5000));
    CHECK(wait_count(&downs, 1, 1000));
    WAIT_UNTIL(atomic_load(&st.polls) > polls, 5000, "a poll of the new epoch");
    push(&st, "invalidate");
    push(&st, "invalidate");
    CHECK(wait_count(&nseen, 6, 5000));
    CHECK(seen[4] == 1 && seen[5] == 2);
    longpoll_state(lp, &connected, &epoch);
    CHECK(connected == 1 && epoch == 8);

    /* The server goes away: the client says so and backs off (a few
       attempts in 2 s, not a storm); it registers again once a server is
       back (here a restarted one: epoch 9) and takes its commands. */
    server_stop(&s, &st);
    cmdqueue_free(old);
    int before = count(&downs);
    CHECK(wait_count(&downs, before + 1, 5000));
    longpoll_state(lp, &connected, &epoch);
    CHECK(connected == 0 && epoch == 0);
    sleep(2);
    int attempts = count(&downs) - before;
    CHECK(attempts >= 2 && attempts <= 6);
    old = st.queue;
    st.queue = cmdqueue_new(64);
    st.epoch = 9;
    cmdqueue_free(old);
    polls = atomic_load(&st.polls);
    CHECK(server_start(&s, port, &st) == 0);
    CHECK(wait_count(&registrations, 3, 15000));
    WAIT_UNTIL(atomic_load(&st.polls) > polls, 5000, "a poll of the restarted server");
    push(&st, "flush");
    CHECK(wait_count(&nseen, 7, 5000));
    CHECK(seen[6] == 1);

    /* Asked to register again (what it declares has changed): once the
       pending poll ends (here woken by a command), with the same epoch and
       so the same ack: the command is handed on once. */
    WAIT_UNTIL(cmdqueue_pending(st.queue) == 0, 5000, "the ack of the flush");
    longpoll_register_again(lp);
    push(&st, "invalidate");
    CHECK(wait_count(&registrations, 4, 5000));
    CHECK(wait_count(&nseen, 8, 5000));
    WAIT_UNTIL(cmdqueue_pending(st.queue) == 0, 5000, "the ack of the last command");
    CHECK(count(&nseen) == 8 && seen[7] == 2);

    /* A stop while a poll waits at the server (the one that brought the
       last ack) is prompt. */
    long t0 = now_ms();
    longpoll_free(lp);
    CHECK(now_ms() - t0 < 2000);
    server_stop(&s, &st);
    cmdqueue_free(st.queue);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s QCG_CERTS\n", argv[0]);
        return 2;
    }
    if (access(argv[1], X_OK) < 0) {
        fprintf(stderr, "%s: not available: skipped\n", argv[1]);
        return 77;
    }
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "%s --dir %s init >/dev/null && %s --dir %s issue broker --san 127.0.0.1 >/dev/null "
             "&& %s --dir %s issue frontend nata >/dev/null 2>&1",
             argv[1], dir, argv[1], dir, argv[1], dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not make the test certificates\n");
        return 1;
    }
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    snprintf(server_pem, sizeof(server_pem), "%s/broker-broker.pem", dir);
    snprintf(client_pem, sizeof(client_pem), "%s/frontend-nata.pem", dir);
    log_init("test", LOG_LEVEL_DEBUG, false);
    signal(SIGPIPE, SIG_IGN);

    run(PORT_FIRST);

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_result("longpoll");
}
