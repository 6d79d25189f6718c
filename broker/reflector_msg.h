/*
 * The messages between qcg-broker and its reflector process, over a
 * SOCK_SEQPACKET socketpair: one message per packet, a fixed layout per type,
 * the size exact.  Both ends are the same executable (the child is qcg-broker
 * executed again), so the layout is this compiler's; the checks are against a
 * peer that misbehaves (a child taken over through its network input), not
 * against another build.
 *
 *   broker -> child   INIT      once, first: the punch key, how to log, whom to become
 *   child  -> broker  READY     once, the answer to INIT: serving, or why not
 *   broker -> child   EXPECT    reflector_expect: a planned pair
 *   child  -> broker  OBSERVED  the observe callback: what the reflector saw of a node
 *   child  -> broker  COUNTERS  its counters, about once a second while they change
 *
 * Each side takes only its own types, and INIT/READY only first; anything else,
 * a wrong size, a value out of range or a string without its NUL is refused
 * with a log line, at most ten a second (rmsg_refused).  Neither side ever
 * waits for the other: a message that does not fit is dropped and said so.
 */
#ifndef QCG_BROKER_REFLECTOR_MSG_H
#define QCG_BROKER_REFLECTOR_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ratelimit.h"
#include "reflector.h"
#include "token.h"

/* The child is `qcg-broker REFLECTOR_PROCESS_ARG` with these descriptors. */
#define REFLECTOR_PROCESS_ARG "--reflector-process"
#define REFLECTOR_FD_CHANNEL 3
#define REFLECTOR_FD_LISTEN 4

#define RMSG_VERSION 1
#define RMSG_NAME_LEN 64 /* cluster and node names, with the NUL */
#define RMSG_ADDR_LEN 64 /* addresses as text, with the NUL */
#define RMSG_WHY_LEN 256

enum rmsg_type { RMSG_INIT = 1, RMSG_READY, RMSG_EXPECT, RMSG_OBSERVED, RMSG_COUNTERS };
#define RMSG_BIT(t) (1u << (t))

struct rmsg_init {
    uint32_t type, version;
    struct proxy_key key; /* the punch key */
    uint32_t log_level;   /* enum log_level */
    uint32_t syslog;      /* 0 or 1 */
    uint32_t setuser;     /* 1: become uid/gid (the broker runs as root) */
    uint32_t uid, gid;
};

struct rmsg_ready {
    uint32_t type;
    uint32_t ok;            /* 1: serving; 0: why says what failed, and it exits */
    char why[RMSG_WHY_LEN]; /* "" when ok */
};

struct rmsg_side {
    char cluster[RMSG_NAME_LEN], node[RMSG_NAME_LEN]; /* non-empty */
    uint32_t preserving;                              /* 0 or 1 */
};
_Static_assert(sizeof(((struct rmsg_side *)0)->cluster) ==
                       sizeof(((struct reflector_side *)0)->cluster) &&
                   sizeof(((struct rmsg_side *)0)->node) ==
                       sizeof(((struct reflector_side *)0)->node),
               "EXPECT's names are copied whole to and from struct reflector_side");

struct rmsg_expect {
    uint32_t type, reserved; /* reserved: 0 */
    uint64_t expiry;         /* unix seconds, not 0 */
    unsigned char pair[TOKEN_PAIR_LEN];
    struct rmsg_side sides[2];
};

struct rmsg_observed {
    uint32_t type;
    uint32_t punch; /* 1: a PUNCH, cluster..local_port set; 0: MAP or DIAL, they are empty/0 */
    char cluster[RMSG_NAME_LEN], node[RMSG_NAME_LEN];
    char local_addr[RMSG_ADDR_LEN];
    char addr[RMSG_ADDR_LEN]; /* observed: an IP address */
    int32_t local_port, port; /* 1..65535 */
};

/* The child's counters so far (reflector_counters), about once a second
   while they change: for the broker's --stats. */
struct rmsg_counters {
    uint32_t type, reserved; /* reserved: 0 */
    struct reflector_counters counters;
};

union rmsg {
    uint32_t type;
    struct rmsg_init init;
    struct rmsg_ready ready;
    struct rmsg_expect expect;
    struct rmsg_observed observed;
    struct rmsg_counters counters;
};

/* Checks a received message of len bytes (len may exceed sizeof(*m): it was
   too long): its type is one of `accept` (RMSG_BIT()s), its size and every
   field are right.  The type, or -1 with a one-line reason. */
int rmsg_check(const union rmsg *m, size_t len, unsigned accept, char *why, size_t whylen);

/* One message out, without blocking longer than wait_ms for room.  0, or -1
   with errno (EAGAIN: still full). */
int rmsg_send(int fd, const void *m, size_t len, unsigned wait_ms);
/* One message in, without blocking: 1 with its full length in *len (more
   than sizeof(*m) when it was cut, 0 for an empty one), 0 when the peer
   closed, -1 with errno (EAGAIN: none now). */
int rmsg_recv(int fd, union rmsg *m, size_t *len);

/* The first message, of `type`, within wait_ms: 0 with it checked in *m, or
   -1 with why (none in time, the peer closed, a message refused). */
int rmsg_recv_first(int fd, enum rmsg_type type, unsigned wait_ms, union rmsg *m, char *why,
                    size_t whylen);
/* A warning at most ten a second, with the count of those not logged on the
   first line after a flood. */
void rmsg_warn_limited(struct ratelimit *rl, const char *line);
/* "refused a message from PEER: WHY", so limited. */
void rmsg_refused(struct ratelimit *rl, const char *peer, const char *why);

#endif
