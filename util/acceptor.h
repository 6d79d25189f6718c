/*
 * Accepting connections for the event engine (engine.h) of the proxy's
 * relay and the broker's reflector: non-blocking listeners, level-triggered,
 * one or more sharing the spare descriptor and the refusal lines.
 *
 * Out of descriptors (EMFILE, ENFILE), the backlog keeps such a listener
 * readable and the loop would spin on it: a spare descriptor is given up to
 * take the connection and close it at once (the client hears at once, the
 * backlog drains), then taken again.
 *
 * Refusals, ours or the caller's (a cap reached), are logged at most once a
 * second, with the number refused since the last line.
 */
#ifndef QCG_COMMON_ACCEPTOR_H
#define QCG_COMMON_ACCEPTOR_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct acceptor {
    int spare_fd;        /* /dev/null, held for EMFILE; -1 if it could not be opened */
    atomic_ullong *shed; /* the caller's counter of connections refused here */
    uint64_t logged_ms;
    unsigned long suppressed;
};

/* A connection taken: fd is non-blocking and close-on-exec, the callee's. */
typedef void (*accepted_fn)(void *arg, int fd, const struct sockaddr_storage *ss, socklen_t len);

/* shed (may be NULL) counts the connections refused for want of a
   descriptor, each as it is closed. */
void acceptor_init(struct acceptor *a, atomic_ullong *shed);
/* Closes the spare descriptor (not the listener). */
void acceptor_free(struct acceptor *a);

/* Takes up to max connections waiting on listen_fd (the caller's), each to fn. */
void acceptor_run(struct acceptor *a, int listen_fd, int max, uint64_t now_ms, accepted_fn fn,
                  void *arg);

/* "refused ADDR: WHY", at most once a second. */
void acceptor_refused(struct acceptor *a, uint64_t now_ms, const char *addr, const char *why);

#endif
