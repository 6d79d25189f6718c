/* What the frontend drops when a reload's CRL revokes a helper (revoked.c). */
#ifndef FRONTEND_REVOKED_H
#define FRONTEND_REVOKED_H

#include "identity.h"

/* soap_server_on_revoked's hook; user is the struct frontend. */
void frontend_revoked(void *user, const struct identity *id);

#endif
