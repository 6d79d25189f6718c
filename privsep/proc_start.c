/* Starting a child with its channel and nothing else; see proc.h. */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <syslog.h>
#include <unistd.h>

extern char **environ;

/* The standard descriptors open, so that the socketpair never takes one of
   them (a log line would go into it). */
static void std_fds_open(void)
{
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0)
            return;
}

/* In the child: chan and give (-1: none) on their fixed numbers, every
   other descriptor but 0-2 closed.  Only async-signal-safe calls: another
   thread of the parent may have held any lock at the fork. */
static int arrange_fds(int chan, int give)
{
    /* Both above the fixed numbers first: one dup2 must not overwrite the other. */
    int a = fcntl(chan, F_DUPFD_CLOEXEC, PROC_FD_GIVEN + 1);
    int b = give >= 0 ? fcntl(give, F_DUPFD_CLOEXEC, PROC_FD_GIVEN + 1) : -1;

    if (a < 0 || (give >= 0 && b < 0) || dup3(a, PROC_FD_CHAN, O_CLOEXEC) < 0 ||
        (b >= 0 && dup3(b, PROC_FD_GIVEN, O_CLOEXEC) < 0))
        return -1;
    if (close_range(b >= 0 ? PROC_FD_GIVEN + 1 : PROC_FD_CHAN + 1, ~0u, 0) < 0)
        return -1;
    return 0;
}

/* The child, up to its own code or execve. */
static void child(const struct proc_spec *s, int chan, pid_t parent, const sigset_t *mask)
{
    char arg0[16], arg1[64];
    char *argv[] = {arg0, arg1, NULL};

    /* Dies with the forking thread's process; one already gone is seen after. */
    if (prctl(PR_SET_PDEATHSIG, s->deathsig, 0, 0, 0) < 0 || getppid() != parent)
        _exit(127);
    if (s->exec_arg == NULL)
        closelog(); /* its descriptor goes with the others; log_init opens it again */
    if (arrange_fds(chan, s->give_fd) < 0)
        _exit(127);
    prctl(PR_SET_NAME, s->name, 0, 0, 0);
    if (s->exec_arg == NULL) {
        /* Back to the caller's code, fd 3 kept across its own execs: none. */
        pthread_sigmask(SIG_SETMASK, mask, NULL);
        return;
    }
    /* Both in the child's own buffers: execve takes no const. */
    strncpy(arg0, s->name, sizeof(arg0) - 1);
    arg0[sizeof(arg0) - 1] = '\0';
    strncpy(arg1, s->exec_arg, sizeof(arg1) - 1);
    arg1[sizeof(arg1) - 1] = '\0';
    /* The executed image keeps the channel: not close-on-exec there. */
    if (fcntl(PROC_FD_CHAN, F_SETFD, 0) < 0 ||
        (s->give_fd >= 0 && fcntl(PROC_FD_GIVEN, F_SETFD, 0) < 0))
        _exit(127);
    pthread_sigmask(SIG_SETMASK, mask, NULL);
    /* A fresh image: none of the parent's memory (keys, registry) comes along. */
    execve("/proc/self/exe", argv, environ);
    _exit(127);
}

int proc_start(struct proc *p, const struct proc_spec *s, char *err, size_t errlen)
{
    int sv[2];
    sigset_t all, old;

    memset(p, 0, sizeof(*p));
    p->fd = -1;
    std_fds_open();
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        return -1;
    }
    fflush(NULL);
    /* No signal handler of the parent's may run in the child before it is
       set up. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        child(s, sv[1], parent, &old);
        return 1; /* fork only */
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(sv[1]);
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(sv[0]);
        return -1;
    }
    p->pid = pid;
    p->fd = sv[0];
    if (fcntl(p->fd, F_SETFL, O_NONBLOCK) < 0) {
        snprintf(err, errlen, "O_NONBLOCK: %s", strerror(errno));
        proc_stop(p, 0, NULL, 0);
        return -1;
    }
    return 0;
}

bool proc_child_has_chan(void)
{
    int type = 0;
    socklen_t len = sizeof(type);

    return getsockopt(PROC_FD_CHAN, SOL_SOCKET, SO_TYPE, &type, &len) == 0 &&
           type == SOCK_SEQPACKET;
}
