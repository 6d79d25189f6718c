/*
 * The messages between qcg-broker and its reflector process, on the
 * privilege-separation channel of privsep/proc.h (SOCK_SEQPACKET, a
 * struct imsg_hdr first, exact sizes, checked there with the field checks of
 * reflector_msg.c).  Both ends are the same executable (the child is
 * qcg-broker executed again).
 *
 *   broker -> child   INIT      once, first: the punch key, how to log, whom to become
 *   broker -> child   LISTEN6   once, right after INIT when it says so: the IPv6
 *                               address's listening socket (a descriptor)
 *   child  -> broker  READY     once, the answer to INIT: serving, or why not
 *   broker -> child   EXPECT    reflector_expect: a planned pair
 *   child  -> broker  OBSERVED  the observe callback: what the reflector saw of a node
 *   child  -> broker  COUNTERS  its counters, about once a second while they change
 *
 * Each side takes only its own types, and INIT/READY (and LISTEN6) only
 * first; anything else is refused with a log line (at most IMSG_LOG_BURST a
 * second).  Neither side ever waits for the other: a message that does not
 * fit is dropped and said so.  The child gets the IPv4 listening socket at
 * its start (PROC_FD_GIVEN), the IPv6 one with LISTEN6; no other message
 * carries a descriptor.
 */
#ifndef QCG_BROKER_REFLECTOR_MSG_H
#define QCG_BROKER_REFLECTOR_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proc.h"
#include "reflector.h"
#include "token.h"

/* The child is `qcg-broker REFLECTOR_PROCESS_ARG`, its channel on
   PROC_FD_CHAN and the listening socket on PROC_FD_GIVEN. */
#define REFLECTOR_PROCESS_ARG "--reflector-process"

#define RMSG_VERSION 1
#define RMSG_NAME_LEN 64 /* cluster and node names, with the NUL */
#define RMSG_ADDR_LEN 64 /* addresses as text, with the NUL */
#define RMSG_WHY_LEN 256

enum rmsg_type {
    RMSG_INIT = 1,
    RMSG_READY,
    RMSG_EXPECT,
    RMSG_OBSERVED,
    RMSG_COUNTERS,
    RMSG_LISTEN6
};
/* What each end takes. */
#define RMSG_TO_CHILD IMSG_BIT(RMSG_EXPECT)
#define RMSG_TO_BROKER (IMSG_BIT(RMSG_OBSERVED) | IMSG_BIT(RMSG_COUNTERS))

struct rmsg_init {
    struct imsg_hdr h;
    uint32_t version;
    struct proxy_key key; /* the punch key */
    uint32_t log_level;   /* enum log_level */
    uint32_t syslog;      /* 0 or 1 */
    uint32_t setuser;     /* 1: become uid/gid (the broker runs as root) */
    uint32_t uid, gid;
    /* The bounds of struct reflector_tuning, 0 = the default; each at most
       RMSG_BOUND_MAX (the broker's options are narrower). */
    uint32_t read_timeout_ms, conns_max, conns_per_address, expected_max, expected_per_cluster;
    uint32_t listen6; /* 1: LISTEN6 follows */
};
#define RMSG_BOUND_MAX (1u << 22)

/* The IPv6 address's listening socket comes with it. */
struct rmsg_listen6 {
    struct imsg_hdr h;
};

struct rmsg_ready {
    struct imsg_hdr h;
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
    struct imsg_hdr h;
    uint64_t expiry; /* unix seconds, not 0 */
    unsigned char pair[TOKEN_PAIR_LEN];
    struct rmsg_side sides[2];
};

struct rmsg_observed {
    struct imsg_hdr h;
    uint32_t punch; /* 1: a PUNCH, cluster..local_port set; 0: MAP or DIAL, they are empty/0 */
    char cluster[RMSG_NAME_LEN], node[RMSG_NAME_LEN];
    char local_addr[RMSG_ADDR_LEN];
    char addr[RMSG_ADDR_LEN]; /* observed: an IP address */
    int32_t local_port, port; /* 1..65535 */
};

/* The child's counters so far (reflector_counters), about once a second
   while they change: for the broker's --stats. */
struct rmsg_counters {
    struct imsg_hdr h;
    struct reflector_counters counters;
};

union rmsg {
    struct imsg_hdr h;
    struct rmsg_init init;
    struct rmsg_listen6 listen6;
    struct rmsg_ready ready;
    struct rmsg_expect expect;
    struct rmsg_observed observed;
    struct rmsg_counters counters;
};

/* The types with their sizes and field checks (reflector_msg.c). */
extern const struct imsg_type rmsg_types[IMSG_TYPES];

#endif
