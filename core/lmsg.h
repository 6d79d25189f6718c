/* Framing of local messages (localproto.h) on a Unix stream socket, and the
   client's requests: libqcgconn's one connection to the helper, the tools'
   one-request connections (qcg-helper --status, qcg-probe) and the tests'. */
#ifndef QCG_LMSG_H
#define QCG_LMSG_H

#include <stddef.h>
#include <stdint.h>

#include "localproto.h"

/* Reassembles one local message from a stream socket, with the descriptor
   that may travel with it. */
struct lmsg_reader {
    struct local_header hdr;
    union local_payload payload;
    size_t have; /* bytes of header + payload received */
    int fd;      /* descriptor received with this message, or -1 */
};

void lmsg_reader_init(struct lmsg_reader *r);
/* Closes a descriptor held by the reader. */
void lmsg_reader_reset(struct lmsg_reader *r);
/* Reads what is available on a non-blocking socket: 1 = a whole checked
   message is in r, 0 = not yet (EAGAIN), QCG_ENOHELPER on EOF, QCG_EPROTO on
   a bad message, QCG_ESYS. */
int lmsg_read(int sock, struct lmsg_reader *r);
/* Sends one message, waiting at most until deadline_us. */
int lmsg_send(int sock, uint16_t type, uint32_t request_id, const void *payload,
              uint64_t deadline_us);
/* Waits for one whole message until deadline_us (r, initialised, is reset
   first): 0, or lmsg_read's errors and QCG_ETIMEDOUT. */
int lmsg_recv(int sock, struct lmsg_reader *r, uint64_t deadline_us);

/* One request on a fresh connection to the helper at path (no HELLO: for
   STATUS and OBSERVED), its reply in *reply (of any type, a
   LOCAL_ERROR included; the caller resets it).  0, or a negative QCG_E*
   code with one line in why naming the socket: no helper there, no answer
   within timeout_ms, a malformed reply or one to another request. */
int lmsg_ask(const char *path, uint16_t type, const void *payload, int timeout_ms,
             struct lmsg_reader *reply, char *why, size_t whylen);
/* The same after hello (SITE, PROBE need one): a refused HELLO's reply is
   the reply. */
int lmsg_ask_hello(const char *path, const struct local_hello *hello, uint16_t type,
                   const void *payload, int timeout_ms, struct lmsg_reader *reply, char *why,
                   size_t whylen);

#endif
