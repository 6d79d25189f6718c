/* The addresses the broker's SOAP server counts as known before any client
   there logs in (soap_server_know): the clusters' frontend addresses, those
   the state file kept at the start and each registration's, so that after
   a restart under attack a registered frontend is never a stranger in the
   handshake stage. */
#ifndef BROKER_KNOWN_H
#define BROKER_KNOWN_H

struct broker;
struct reg_cluster;

/* Every cluster's the registry holds (at the start: the state file's);
   b->server must be set. */
void broker_know_frontends(struct broker *b);
/* A registration's public addresses (the one it came from is known by its
   login already). */
void broker_know_cluster(struct broker *b, const struct reg_cluster *c);

#endif
