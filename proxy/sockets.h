/* The relay's sockets: the listener and per-connection options (addresses
   for the logs: sockaddr_text, util/acceptor.h). */
#ifndef PROXY_SOCKETS_H
#define PROXY_SOCKETS_H

#include <stddef.h>
#include <sys/socket.h>

/* A non-blocking listening TCP socket on addr (NULL or "" = any, IPv6 and
   IPv4) and port with the given backlog; -1 with a one-line reason in err. */
int sock_listen(const char *addr, int port, int backlog, char *err, size_t errlen);
/* The port a socket is bound to; 0 on error. */
int sock_port(int fd);
/* TCP_NODELAY and keepalive on an accepted connection (best effort). */
void sock_tune(int fd);

#endif
