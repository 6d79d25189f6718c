/*
 * Whether a failed socket call is this node's want of a resource (ports,
 * descriptors, memory) rather than the network's or the peer's answer: such
 * a call is tried again after a backoff, not counted against a technique.
 * One copy for libqcgconn's connects and the helper's orders.
 */
#ifndef QCG_SHORTAGE_H
#define QCG_SHORTAGE_H

#include <stdbool.h>

/* err is an errno: out of ports (every local port towards that address and
   port in use or in TIME_WAIT), descriptors or memory. */
bool local_shortage(int err);

#endif
