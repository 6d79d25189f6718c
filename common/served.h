/*
 * Which daemon serves which operation of the qcg service.  The three
 * daemons speak one schema (qcg_service.h: one set of stubs, one wire), but
 * each performs only its share: the broker every operation, a frontend what
 * its nodes call it for, a proxy its stats.  This table says so once: the
 * refusal of another daemon's operation (not_served.c) and the service
 * description each daemon hands out (GET /?wsdl) follow from it.
 */
#ifndef QCG_SERVED_H
#define QCG_SERVED_H

#include <stdbool.h>
#include <stddef.h>

enum served_role { SERVED_BROKER, SERVED_FRONTEND, SERVED_PROXY };

/* "broker", "frontend" or "proxy". */
const char *served_role_name(enum served_role role);
/* Whether role performs op ("publish"); false for an unknown name. */
bool served_by(enum served_role role, const char *op);
/* "lookup is not served by a proxy (it is the broker's and the frontends')". */
void served_refusal(enum served_role role, const char *op, char *buf, size_t len);
/* The service description (soapcpp2's WSDL) with role's operations only:
   the others' <operation> elements, and the messages only they used, are
   left out.  malloc'd; NULL when out of memory. */
char *served_wsdl(enum served_role role, const char *wsdl);

#endif
