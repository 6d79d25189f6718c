/* How a TCP connect was refused: a reset, or an ICMP error (and which).
   Linux reports an ICMP port unreachable for a SYN as ECONNREFUSED, the
   very errno of a reset; only the socket's error queue (IP_RECVERR,
   IPV6_RECVERR) tells them apart.  qcg-probe and the broker's reflector
   (its dial-back) classify with this. */
#ifndef QCG_CORE_REFUSAL_H
#define QCG_CORE_REFUSAL_H

#include <stddef.h>

enum refusal_kind {
    REFUSAL_NONE,  /* err is not a refusal (0, a timeout, a local error) */
    REFUSAL_RESET, /* ECONNREFUSED with no ICMP error queued: a TCP reset */
    REFUSAL_ICMP   /* an ICMP or ICMPv6 error came back */
};

struct refusal {
    enum refusal_kind kind;
    int icmp_type, icmp_code; /* REFUSAL_ICMP: as sent (ICMP or ICMPv6 numbering) */
    int icmp6;                /* 1 when ICMPv6 */
    char from[46];            /* the ICMP error's sender, "" when not told */
};

/* Asks the kernel to queue ICMP errors on fd (before connect).  0 or -1. */
int refusal_watch(int fd);

/* What the failed connect's error err (SO_ERROR or connect's errno) was,
   reading fd's error queue (non-blocking).  Returns r->kind. */
enum refusal_kind refusal_read(int fd, int err, struct refusal *r);

/* "port unreachable", "administratively prohibited", ... for logs. */
const char *refusal_icmp_text(const struct refusal *r);

/* "reset", "icmp" or NULL: the words of observations and of the
   reflector's DIALED line. */
const char *refusal_word(enum refusal_kind kind);

#endif
