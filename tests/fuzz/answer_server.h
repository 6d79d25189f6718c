/* A hostile upstream for the harnesses of our SOAP clients: a mutual-TLS
   server on an ephemeral port of 127.0.0.1, in a thread of its own, that
   reads each HTTP request (headers and Content-Length body), answers it
   with the bytes last given to answer_server_set, whatever they are (or a
   fixed answer for its operation), and
   closes the connection (close_notify): a client never waits for more than
   the answer holds. */
#ifndef QCG_FUZZ_ANSWER_SERVER_H
#define QCG_FUZZ_ANSWER_SERVER_H

#include <stddef.h>
#include <stdint.h>

struct answer_server;

/* Serves with the certificate and key of pem, trusting ca's clients;
   aborts on failure.  Stopped and freed at exit. */
struct answer_server *answer_server_start(const char *ca, const char *pem);
int answer_server_port(const struct answer_server *s);
/* What every request gets from now on (copied). */
void answer_server_set(struct answer_server *s, const uint8_t *data, size_t size);
/* What a request for operation op ("publish": its body holds <qcg:publish>)
   gets instead, from now on: a SOAP body's content (copied), put in an
   envelope and an HTTP answer.  At most ANSWER_SERVER_OPS operations. */
#define ANSWER_SERVER_OPS 16
void answer_server_set_op(struct answer_server *s, const char *op, const char *body);
/* Requests answered so far. */
unsigned long answer_server_count(struct answer_server *s);

#endif
