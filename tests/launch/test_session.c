/* launch-session: qcg-agent's side of a launch (launch/session.c) driven by
   a launcher link over loopback TCP.  The daemon is a script standing in
   for orted: it prints its pid and exits, leaving a child (SIGTERM
   ignored) that holds its output open, so the session drains for a
   second after the exit.  Once the daemon is reaped (its /proc entry
   gone) the launcher sends SIGNAL: the agent must not pass it to the
   daemon's pid, which may be another process's by then (issue 32,
   finding 5).  The old agent sent it ("signal 15 from the launcher to
   orted pid N" in its log); this one says it was not sent. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "fixtures.h"
#include "link.h"
#include "log.h"
#include "session.h"
#include "wire.h"

static struct {
    pid_t daemon; /* from its first OUT frame */
    int exited, closed;
    int gone; /* the session ended and was handed back */
} L;

static void on_frame(struct link *l, const struct wire_header *h, const uint8_t *payload)
{
    (void)l;
    if (h->type == WIRE_OUT && L.daemon == 0)
        L.daemon = (pid_t)strtol((const char *)payload, NULL, 10);
    if (h->type == WIRE_EXIT)
        L.exited = 1;
}

static void on_closed(struct link *l, const char *why)
{
    (void)l;
    (void)why;
    L.closed = 1;
}

static const struct link_ops ops = {on_frame, on_closed, NULL, NULL, NULL};

/* The agent's part (launch/agent.c): the session is ours to free. */
static void session_gone(void *arg, struct session *s)
{
    free(s);
    *(int *)arg = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

/* Runs the loop until cond holds or secs pass. */
static void run_until(uv_loop_t *loop, int (*cond)(void), double secs)
{
    uv_timer_t t;
    double t0 = now_s();

    uv_timer_init(loop, &t);
    while (!cond() && now_s() - t0 < secs) {
        uv_timer_start(&t, on_tick, 20, 0);
        uv_run(loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
}

static int daemon_reaped(void)
{
    char path[64];
    struct stat st;
    if (L.daemon <= 0)
        return 0;
    snprintf(path, sizeof(path), "/proc/%d", (int)L.daemon);
    return stat(path, &st) != 0;
}

static int link_closed(void)
{
    return L.closed;
}

static int session_ended(void)
{
    return L.gone;
}

int main(void)
{
    char dir[] = "/tmp/qcg-launch-session.XXXXXX", script[128], logpath[160];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(script, sizeof(script), "%s/orted", dir);
    snprintf(logpath, sizeof(logpath), "%s/agent.log", dir);
    FILE *f = fopen(script, "w");
    REQUIRE(f != NULL);
    fputs("#!/bin/sh\n(trap '' TERM; sleep 3) &\necho $$\nexit 0\n", f);
    fclose(f);
    REQUIRE(chmod(script, 0700) == 0);
    /* The agent's log lines are what this test reads. */
    int saved = dup(2);
    REQUIRE(freopen(logpath, "w", stderr) != NULL);
    log_init("agent", LOG_LEVEL_INFO, false);

    uv_loop_t loop;
    uv_loop_init(&loop);
    int a, b;
    tcp_pair(&a, &b);
    extern char **environ;
    struct session_env env = {.loop = &loop,
                              .job = "j1",
                              .orted = script,
                              .prted = script,
                              .environ = environ,
                              .launch_ms = 5000,
                              .grace_ms = 1000,
                              .resume_ms = 1000,
                              .gone = session_gone,
                              .arg = &L.gone};
    struct link *l = link_new(&loop, a, NULL, &ops, NULL);
    struct session *s = session_new(&env, b, NULL, 0, 1);
    REQUIRE(l != NULL && s != NULL);
    const char *argv[] = {"orted", "-mca", "orte_hnp_uri", "1.0;tcp://127.0.0.1:1"};
    uint8_t launch[512];
    long n = wire_launch_encode(launch, sizeof(launch), "j1", 4, argv);
    REQUIRE(n > 0 && link_send(l, WIRE_LAUNCH, 0, launch, (size_t)n) == 0);

    run_until(&loop, daemon_reaped, 10);
    int reaped = daemon_reaped();
    uint8_t sig[4];
    wire_u32_put(sig, SIGTERM);
    REQUIRE(link_send(l, WIRE_SIGNAL, 0, sig, sizeof(sig)) == 0);
    run_until(&loop, link_closed, 10);
    if (!L.closed)
        link_close(l);
    run_until(&loop, link_closed, 2);
    /* Everything freed, for the sanitizers' leak check. */
    run_until(&loop, session_ended, 10);
    CHECKF(L.gone, "the session ended and was handed back");
    if (!L.gone)
        session_stop(s);
    run_until(&loop, session_ended, 5);
    uv_run(&loop, UV_RUN_NOWAIT);
    CHECKF(uv_loop_close(&loop) == 0, "every handle of the loop closed");

    fflush(stderr);
    dup2(saved, 2);
    char text[16384] = "";
    f = fopen(logpath, "r");
    size_t got = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f)
        fclose(f);
    text[got] = '\0';
    CHECKF(reaped, "the daemon (pid %d) ran and was reaped", (int)L.daemon);
    CHECKF(L.exited, "the launcher got its exit status");
    CHECKF(strstr(text, "to orted pid") == NULL,
           "a SIGNAL after the daemon was reaped is not sent to its pid");
    CHECKF(strstr(text, "already ended, not sent") != NULL, "... and the log says so");
    if (check_failures > 0)
        fprintf(stderr, "the agent's log:\n%s", text);
    unlink(logpath);
    unlink(script);
    rmdir(dir);
    return check_result("launch-session");
}
