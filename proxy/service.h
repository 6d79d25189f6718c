/* The proxy's control endpoint: the SOAP operations, of which it serves only
   stats.  soap_server's user pointer is a struct proxy_service. */
#ifndef PROXY_SERVICE_H
#define PROXY_SERVICE_H

#include "proto.h"

struct relay;

struct proxy_service {
    struct relay *relay;
    char name[2 * QCG_NAME_MAX]; /* the proxy's CN */
};

#endif
