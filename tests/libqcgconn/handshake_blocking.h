/* The handshake run to completion with blocking waits, for the peers the
   tests play (the library runs it as non-blocking steps in connect.c and
   accept.c, and ships none of this). */
#ifndef QCG_TEST_HANDSHAKE_BLOCKING_H
#define QCG_TEST_HANDSHAKE_BLOCKING_H

#include <stddef.h>
#include <stdint.h>

#include "handshake.h"

/* read_full: core's (bounded_io.h). */
#include "bounded_io.h"

/* The initiator's side over a connected non-blocking socket, bounded by
   deadline_us.  0 or a negative QCG_E* code with a reason in err. */
int hs_initiate(int fd, const struct hs_self *self, int32_t to_rank, uint64_t deadline_us,
                char *err, size_t errlen);
/* The acceptor's side: reads and checks the hello, answers it.  peer receives
   the hello.  A refused hello is answered with its status before failing. */
int hs_respond(int fd, const struct hs_self *self, uint64_t deadline_us, struct hs_hello *peer,
               char *err, size_t errlen);

#endif
