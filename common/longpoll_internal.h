/* One long-poll of a client made by longpoll_new, outside its thread: for
   tests/fuzz, which feeds a poll's answer to the command handling without
   the thread's timing.  Not for the daemons: longpoll.h is the interface. */
#ifndef QCG_LONGPOLL_INTERNAL_H
#define QCG_LONGPOLL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

struct longpoll;

/* One poll with the service's epoch `epoch`: 0 answered (*server_epoch: the
   service's; the new commands above *ack handed on, *ack moved past them),
   -1 failed (why). */
int longpoll_poll_once(struct longpoll *lp, uint64_t epoch, uint64_t *ack, uint64_t *server_epoch,
                       char *why, size_t whylen);

#endif
