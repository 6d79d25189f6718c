/* Socket addresses as the logs and the wire protocols show them: numeric,
   an IPv4-mapped IPv6 address as plain IPv4. */
#ifndef QCG_COMMON_SOCKADDR_TEXT_H
#define QCG_COMMON_SOCKADDR_TEXT_H

#include <stddef.h>
#include <sys/socket.h>

/* The host ("203.0.113.5", "2001:db8::1") and port; -1 (host "?", port 0)
   when the address cannot be shown. */
int sockaddr_host(const struct sockaddr_storage *ss, socklen_t len, char *host, size_t hostlen,
                  int *port);

/* "a.b.c.d:port" or "[v6]:port"; "(unknown)" when it cannot be shown. */
void sockaddr_text(const struct sockaddr_storage *ss, socklen_t len, char *out, size_t outlen);

#endif
