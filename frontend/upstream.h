/*
 * The link to the broker, a long-poll client (longpoll.h) in its own thread:
 * register the cluster, then the nodes and contacts held, then long-poll for
 * commands; on a broker restart (new epoch) or a lost connection, register
 * everything again.
 * Commands: invalidate/flush act on the cache; those naming a node go to that
 * node's helper queue.
 */
#ifndef FRONTEND_UPSTREAM_H
#define FRONTEND_UPSTREAM_H

#include <stddef.h>

struct frontend;
struct upstream;

/* Long-poll wait asked of the broker (the client allows 10 s more). */
#define UPSTREAM_POLL_WAIT 20

/* Starts the thread; NULL with a reason in err. */
struct upstream *upstream_start(struct frontend *fe, char *err, size_t errlen);
/* Interrupts a pending call, joins the thread and frees everything. */
void upstream_stop(struct upstream *up);

#endif
