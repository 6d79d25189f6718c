/*
 * The listen backlog of a server: every connection its configuration lets in
 * at once may arrive together (a broker restart, a NATed site's storm of
 * proxied pairs), and the server takes them as fast as they come, so a queue
 * that holds them all costs nothing.  The kernel keeps at most
 * net.core.somaxconn of it, which the servers say in their start line.
 */
#ifndef QCG_BACKLOG_H
#define QCG_BACKLOG_H

#include <stddef.h>

#define BACKLOG_MIN 128
#define BACKLOG_MAX 65535

/* want, within BACKLOG_MIN..BACKLOG_MAX. */
int backlog_for(long want);
/* net.core.somaxconn (of this network namespace), or -1. */
int backlog_kernel_max(void);
/* ", of which the kernel keeps N (net.core.somaxconn)" when it keeps less
   than backlog, else "": for the start line. */
void backlog_capped_text(int backlog, char *out, size_t outlen);

#endif
