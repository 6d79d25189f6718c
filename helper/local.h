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

/* Loop thread.  1 when a live local connection publishes (job, rank) and
   the broker accepted its PUBLISH; 2 while that PUBLISH is still on its way
   (the broker may have taken it and sent an order before its answer is back
   here, or refuse it for a wrong secret: hold the order until then); else 0.
   why says why not 1. */
int local_server_publishes(struct local_server *srv, const char *job, int32_t rank, char *why,
                           size_t whylen);
/* Loop thread.  Sends LOCAL_INCOMING `in` with a copy of fd to the connection
   that publishes (job, rank).  0 sent (*pid = the process), 1 its connection
   is busy writing (retry soon), -1 no such process or the send failed (why). */
int local_server_deliver(struct local_server *srv, const char *job, int32_t rank,
                         const struct local_incoming *in, int fd, pid_t *pid, char *why,
                         size_t whylen);

/* Loop thread.  The port (job, rank) published (accepted) on this node, 0
   when none. */
int local_server_published_port(struct local_server *srv, const char *job, int32_t rank);
struct attempts;
/* Before serving: where traversing and hole-punching plans go. */
void local_server_set_attempts(struct local_server *srv, struct attempts *as);

/* Before serving: what SITE says of interception (can, its NFQUEUE number,
   one line why it can or cannot). */
void local_server_set_intercept(struct local_server *srv, int can_intercept, int nfqueue,
                                const char *why);

/* A process's connection, for attempts.c (loop thread).  hold/drop keep its
   memory while an attempt may still answer on it; alive: not closing. */
struct conn;
void local_conn_hold(struct conn *c);
void local_conn_drop(struct conn *c);
int local_conn_alive(const struct conn *c);
/* An ERROR with request id rid. */
void local_conn_error(struct conn *c, uint32_t rid, int code, const char *msg);
/* The PLAN answering request rid; with why (not NULL) the attempt cannot
   start: logged, and an ERROR follows the plan. */
void local_conn_plan(struct conn *c, uint32_t rid, const struct local_plan *plan, const char *why);
/* An INCOMING with a copy of fd, request id rid: 0 sent, 1 busy (retry), -1
   failed (why). */
int local_conn_pass(struct conn *c, uint32_t rid, const struct local_incoming *in, int fd,
                    char *why, size_t whylen);

#endif
