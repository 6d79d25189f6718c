/* The addresses the frontend's SOAP server counts as known before any client
   there logs in (soap_server_know): its nodes' declared ranges and its
   broker's address, so that after a restart under attack its own nodes are
   never strangers in the handshake stage. */
#ifndef FRONTEND_KNOWN_H
#define FRONTEND_KNOWN_H

struct frontend_config;
struct soap_server;

/* Names them to srv; a range it cannot take gets a warn line (never fatal:
   a stranger's limits still hold for it). */
void frontend_know(struct soap_server *srv, const struct frontend_config *cfg);

#endif
