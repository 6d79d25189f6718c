/*
 * Privilege separation: a daemon's part that holds something (capabilities,
 * keys) talks to a part that holds less over a SOCK_SEQPACKET socketpair, in
 * the manner of OpenBSD relayd's proc.c and imsg.  One copy of the mechanism
 * for qcg-helper's privileged process (fork; helper/privsep.h) and
 * qcg-broker's reflector process (fork + execve; broker/reflector.h).
 *
 * Messages (imsg.c).  One message per datagram: a struct imsg_hdr, then the
 * body of its type, and at most one descriptor (SCM_RIGHTS) where its type
 * says so.  Each end has a table of the types (name, exact size, whether a
 * descriptor comes, a check of the fields) and the set it accepts now; a
 * received message passes the table before the caller sees it: a short or
 * long datagram, a length field that is not the datagram's, an unknown or
 * unaccepted type, a descriptor where none belongs (closed) or none where
 * one must be, fields out of range.  A refusal is logged, at most
 * IMSG_LOG_BURST lines a second, with the count left out.  Both ends are the
 * same build, so the layout is this compiler's: the checks are against a
 * peer that misbehaves, not another version.
 *
 * Processes (proc_start.c, proc_wait.c).  proc_start makes the socketpair
 * and the child: it dies with its parent (PR_SET_PDEATHSIG), holds only the
 * standard descriptors, the channel (PROC_FD_CHAN) and optionally one more
 * (PROC_FD_GIVEN), and is named; then either returns in the child (fork
 * only: the caller runs the child's code) or executes this program again
 * with one argument (a fresh image: none of the parent's memory).  The
 * parent stops a child by closing its end (the child's cue to clean up and
 * exit), waits, and kills it when it does not; proc_restart is the backoff
 * between the starts of a child that keeps dying.
 */
#ifndef QCG_PRIVSEP_PROC_H
#define QCG_PRIVSEP_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ratelimit.h"

/* ---- messages ---- */

struct imsg_hdr {
    uint32_t type;     /* 1..IMSG_TYPES-1 */
    uint32_t len;      /* the whole message, header included: the datagram's size */
    uint32_t id;       /* a request's, echoed in its answers; 0: none */
    uint32_t reserved; /* 0 */
};
_Static_assert(sizeof(struct imsg_hdr) == 16, "imsg_hdr layout");

#define IMSG_TYPES 32
#define IMSG_BIT(t) (1u << (t))
/* Refusal lines a second, at most. */
#define IMSG_LOG_BURST 10
/* The longest message any table may hold. */
#define IMSG_SIZE_MAX 4096

/* A type's flags. */
#define IMSG_WITH_FD 1u /* exactly one descriptor comes with it */

/* The fields of a message of the right type and size: 0, or -1 with a
   one-line reason.  ctx is the channel's. */
typedef int (*imsg_check_fn)(const void *msg, const void *ctx, char *why, size_t whylen);

struct imsg_type {
    const char *name; /* NULL: no such type */
    uint32_t size;    /* exact, header included */
    uint32_t flags;
    imsg_check_fn check; /* NULL: the size is all */
};

/* One end of a channel.  Sending is thread-safe; receiving is one thread's. */
struct imsg_chan {
    int fd;
    const struct imsg_type *types; /* [IMSG_TYPES], indexed by type */
    uint32_t accept;               /* the types taken now (IMSG_BIT) */
    const void *ctx;               /* for the checks */
    const char *peer;              /* in log lines: "the broker" */
    struct ratelimit refused;
};

void imsg_chan_init(struct imsg_chan *c, int fd, const struct imsg_type *types, uint32_t accept,
                    const void *ctx, const char *peer);
/* The type's name, or "unknown". */
const char *imsg_name(const struct imsg_type *types, uint32_t type);
/* A message as received: len bytes (more than were kept when it was cut),
   with a descriptor or not.  Its type, or -1 with a one-line reason. */
int imsg_check(const struct imsg_chan *c, const void *msg, size_t len, bool with_fd, char *why,
               size_t whylen);

/* Sends msg (len bytes, its header's type set; len and reserved are filled
   in) with fd (-1: none), waiting at most wait_ms for room.  0, or -1 with
   errno: EAGAIN still full, EINVAL a message its table does not allow (a
   bug), else the socket's. */
int imsg_send(const struct imsg_chan *c, void *msg, size_t len, int fd, unsigned wait_ms);

#define IMSG_NONE 0     /* nothing to read now */
#define IMSG_CLOSED -1  /* the peer closed the channel, or it failed (errno) */
#define IMSG_REFUSED -2 /* a message refused and logged; why says why */
/* One message, without waiting, into buf (bufsize at least the largest
   accepted type): its type (checked; *fd the descriptor when its type has
   one, else -1), or one of the above.  A refused message's header, when
   whole, is in buf (its id, for an answer). */
int imsg_recv(struct imsg_chan *c, void *buf, size_t bufsize, int *fd, char *why, size_t whylen);
/* The same, waiting at most wait_ms for a message: its type, or -1 with why
   (none in time, the peer closed, refused). */
int imsg_recv_wait(struct imsg_chan *c, void *buf, size_t bufsize, int *fd, unsigned wait_ms,
                   char *why, size_t whylen);
/* A warning line at most IMSG_LOG_BURST times a second, with the count of
   those not logged (for events a peer can repeat at will). */
void imsg_warn_limited(struct ratelimit *rl, const char *line);

/* ---- processes ---- */

#define PROC_FD_CHAN 3
#define PROC_FD_GIVEN 4

struct proc_spec {
    const char *name;     /* the child's argv[0], and comm (at most 15 characters) of a
                             fork-only child: execve names an executed one "exe", it
                             sets its own */
    const char *exec_arg; /* NULL: fork only; else execve("/proc/self/exe", name, exec_arg) */
    int give_fd;          /* -1, or a descriptor the child gets as PROC_FD_GIVEN */
    int deathsig;         /* the child's signal when its parent (thread) dies */
};

struct proc {
    pid_t pid; /* 0: none */
    int fd;    /* our end: close-on-exec, non-blocking; -1 once closed */
    bool reaped;
    int status; /* waitpid's, once reaped */
};

/* Starts a child.  In the parent 0 (p filled), or -1 with why.  In the
   child of a fork-only spec 1: its channel is PROC_FD_CHAN, every other
   descriptor but 0-2 (and PROC_FD_GIVEN) is closed, syslog closed too
   (log_init again).  Call it before threads exist, or know that a fork-only
   child inherits no lock in use (the exec child only runs async-signal-safe
   calls before execve). */
int proc_start(struct proc *p, const struct proc_spec *s, char *err, size_t errlen);
/* In an executed child: whether PROC_FD_CHAN is a channel. */
bool proc_child_has_chan(void);

/* Waits at most ms for the child to end: true once reaped. */
bool proc_wait(struct proc *p, unsigned ms);
/* "exited with status N", "was killed by signal 9 (Killed)". */
void proc_how(const struct proc *p, char *out, size_t outlen);
/* Closes our end (the child's cue to stop), waits ms, then SIGKILL (and at
   most a second more); how says how it ended. */
void proc_stop(struct proc *p, unsigned ms, char *how, size_t howlen);

/* A child that keeps dying is started again after a backoff, and not at all
   after max_deaths quick deaths in a row (each within stable_ms of its
   start). */
struct proc_restart {
    unsigned min_ms, max_ms, max_deaths, stable_ms;
    unsigned deaths;     /* quick ones in a row */
    uint64_t started_ms; /* of the current child */
};
void proc_restart_started(struct proc_restart *r, uint64_t now_ms);
/* After a death (ran: it had started) or a failed start: the delay before
   the next start, or -1: give up. */
long proc_restart_next(struct proc_restart *r, uint64_t now_ms, bool ran);

#endif
