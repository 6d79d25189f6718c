/* Socket addresses as text; see sockaddr_text.h. */
#include "sockaddr_text.h"

#include "address.h"

#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sockaddr_host(const struct sockaddr_storage *ss, socklen_t len, char *host, size_t hostlen,
                  int *port)
{
    char h[INET6_ADDRSTRLEN], serv[NI_MAXSERV];

    if (getnameinfo((const struct sockaddr *)ss, len, h, sizeof(h), serv, sizeof(serv),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(host, hostlen, "?");
        *port = 0;
        return -1;
    }
    const char *shown = strncmp(h, "::ffff:", 7) == 0 && strchr(h + 7, ':') == NULL ? h + 7 : h;
    snprintf(host, hostlen, "%s", shown);
    *port = atoi(serv);
    return 0;
}

void sockaddr_text(const struct sockaddr_storage *ss, socklen_t len, char *out, size_t outlen)
{
    char host[INET6_ADDRSTRLEN];
    int port;

    if (sockaddr_host(ss, len, host, sizeof(host), &port) < 0)
        snprintf(out, outlen, "(unknown)");
    else
        hostport_format(host, port, out, outlen);
}
