/* What the broker drops when a reload's CRL revokes a frontend (revoked.c). */
#ifndef BROKER_REVOKED_H
#define BROKER_REVOKED_H

#include "identity.h"

/* soap_server_on_revoked's hook; user is the struct broker. */
void broker_revoked(void *user, const struct identity *id);

#endif
