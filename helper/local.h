/*
 * The helper's Unix socket: accepts processes (libqcgconn) and the status
 * tool, checks every message (localproto.h) and dispatches it through a table.
 * Upstream requests run on the libuv thread pool; the loop never blocks.
 */
#ifndef QCG_HELPER_LOCAL_H
#define QCG_HELPER_LOCAL_H

#include <stddef.h>
#include <uv.h>

#include "contacts.h"
#include "helper.h"
#include "upstream.h"

struct local_server;

/* Creates the socket (parent directory, stale file removed, mode set) and
   listens.  Everything passed in must outlive the server.  NULL with a
   one-line reason in err (a helper already listening there is one). */
struct local_server *local_server_new(uv_loop_t *loop, const struct helper_config *cfg,
                                      struct contacts *cs, struct upstream *up, char *err,
                                      size_t errlen);
/* Stops accepting, closes every connection (withdrawing their contacts while
   the frontend is reachable) and removes the socket file.  The loop finishes
   the closing; free once uv_run has returned. */
void local_server_close(struct local_server *srv);
void local_server_free(struct local_server *srv);

#endif
