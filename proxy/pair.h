/*
 * One relayed pair: two sockets, and per direction a kernel pipe that splice(2)
 * moves the bytes through (socket -> pipe -> socket), so no byte is copied to
 * user space.  A pipe is made on the direction's first data and dropped again
 * when it has been empty for a while, so an idle pair holds two descriptors.
 *
 * The sockets are watched edge-triggered (engine_edge, util/engine.h); the
 * relay turns events into the readable/writable flags and calls pair_run,
 * which moves what it can.
 */
#ifndef PROXY_PAIR_H
#define PROXY_PAIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlist.h"
#include "engine.h"
#include "token.h"

#define PAIR_ADDR_MAX 64

struct pair;
struct relay;

struct pair_end {
    struct engine_edge edge;
    struct pair *pair;
    int fd;
    bool readable, writable;  /* last known: cleared on EAGAIN, set by events */
    char addr[PAIR_ADDR_MAX]; /* "host:port" for the logs */
    uint64_t stall_since_us;  /* tcp_stall_check's memory of this side */
};

/* dir[d] carries end[d] -> end[1 - d]. */
struct pair_dir {
    int pipe[2];    /* -1 when none */
    size_t inpipe;  /* bytes in the pipe */
    size_t pipecap; /* its size: the kernel's default, grown to pipe_size when full */
    bool nogrow;    /* the kernel refused to grow it */
    uint64_t bytes; /* delivered to the far end */
    bool eof;       /* the source has sent FIN */
    bool done;      /* FIN passed on after the last byte */
};

struct pair {
    struct pair_end end[2]; /* [TOKEN_SIDE_INITIATOR], [TOKEN_SIDE_TARGET] */
    struct pair_dir dir[2];
    unsigned char id[TOKEN_PAIR_LEN];
    uint64_t started_ms, active_ms;
    /* The relay's lists: all pairs by last activity, and those with work left. */
    struct dlink link;
    struct pair *ready_next;
    bool ready;
    struct relay *relay; /* the relay's, for its watches' callbacks */
    bool closed;
    /* A pipe got less than pipe_size (the user's pipe allowance is spent):
       set by pair_run, for the relay to say so. */
    size_t short_pipe;
    struct pair *dead_next; /* closed, freed after the turn's events */
};

enum pair_result {
    PAIR_WAIT,   /* nothing more to do until the next event */
    PAIR_MORE,   /* stopped after its share of work: run it again soon */
    PAIR_DONE,   /* both directions finished: close it */
    PAIR_FAILED, /* an error on either side: abort it */
};

/* Takes ownership of both sockets (end 0 = initiator, end 1 = target). */
struct pair *pair_new(const unsigned char id[TOKEN_PAIR_LEN], int fd0, const char *addr0, int fd1,
                      const char *addr1, uint64_t now_ms);
/* Moves what can be moved now.  *moved gets the bytes delivered; err (when
   PAIR_FAILED) says what went wrong, for the log. */
enum pair_result pair_run(struct pair *p, size_t pipe_size, uint64_t *moved, char *err,
                          size_t errlen);
/* The end whose peer has acknowledged nothing of the data in flight, not
   even a window probe, for timeout_ms (counted from the first call that saw
   it overdue, or from its last ACK, the later): its connection goes
   through a NAT or firewall that forgot it.  -1 when neither. */
int pair_stalled(struct pair *p, uint64_t now_ms, uint64_t timeout_ms);
/* Drops the pipes that are empty (an idle pair keeps only its sockets). */
void pair_trim(struct pair *p);
/* Closes the sockets and pipes (which ends their watches) and marks the pair
   closed.  abort: reset both connections (SO_LINGER 0) so neither side
   mistakes a cut-off for a clean end of data.  The memory stays until
   free(p): events of the current turn may still point at it. */
void pair_close(struct pair *p, bool abort);
/* Hex of the first bytes of the pair id, for the logs. */
void pair_id_text(const unsigned char id[TOKEN_PAIR_LEN], char out[9]);

#endif
