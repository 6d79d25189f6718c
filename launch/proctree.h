/* The processes a launch started: the daemon runs as the leader of its own
   session (setsid), and everything it starts stays in that session even
   when it takes a process group of its own (Open MPI gives each rank one)
   or is orphaned.  Ending a launch signals the whole session. */
#ifndef QCG_LAUNCH_PROCTREE_H
#define QCG_LAUNCH_PROCTREE_H

#include <sys/types.h>

/* Sends sig to every process of session sid that we may signal; returns how
   many were signalled (0: none left). */
int session_signal(pid_t sid, int sig);

#endif
