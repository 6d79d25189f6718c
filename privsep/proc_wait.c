/* Waiting for a child, stopping it, and when to start the next; see proc.h. */
#include "proc.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backoff.h"
#include "monotonic.h"

#define POLL_MS 1
#define KILLED_WAIT_MS 1000

bool proc_wait(struct proc *p, unsigned ms)
{
    uint64_t end = monotonic_ms() + ms;

    while (!p->reaped && p->pid > 0) {
        pid_t r = waitpid(p->pid, &p->status, WNOHANG);
        if (r == p->pid || (r < 0 && errno == ECHILD)) {
            if (r < 0)
                p->status = -1;
            p->reaped = true;
            break;
        }
        if (monotonic_ms() >= end)
            return false;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    return true;
}

void proc_how(const struct proc *p, char *out, size_t outlen)
{
    if (!p->reaped)
        snprintf(out, outlen, "has not ended");
    else if (p->status == -1)
        snprintf(out, outlen, "could not be waited for");
    else if (WIFSIGNALED(p->status))
        snprintf(out, outlen, "was killed by signal %d (%s)", WTERMSIG(p->status),
                 strsignal(WTERMSIG(p->status)));
    else
        snprintf(out, outlen, "exited with status %d", WEXITSTATUS(p->status));
}

void proc_stop(struct proc *p, unsigned ms, char *how, size_t howlen)
{
    bool killed = false;

    if (p->fd >= 0) {
        close(p->fd);
        p->fd = -1;
    }
    if (!proc_wait(p, ms)) {
        kill(p->pid, SIGKILL);
        killed = true;
        proc_wait(p, KILLED_WAIT_MS);
    }
    if (how == NULL)
        return;
    if (!p->reaped)
        snprintf(how, howlen, "did not end even after SIGKILL");
    else if (killed)
        snprintf(how, howlen, "did not exit within %u ms and was killed", ms);
    else
        proc_how(p, how, howlen);
}

void proc_restart_started(struct proc_restart *r, uint64_t now_ms)
{
    r->started_ms = now_ms;
}

long proc_restart_next(struct proc_restart *r, uint64_t now_ms, bool ran)
{
    if (ran && now_ms - r->started_ms >= r->stable_ms)
        r->deaths = 0;
    r->deaths++;
    if (r->deaths > r->max_deaths)
        return -1;
    return (long)backoff_ms(r->deaths - 1, r->min_ms, r->max_ms);
}
