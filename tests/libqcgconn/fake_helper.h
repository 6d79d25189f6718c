/* A fake qcg-helper for libqcgconn's tests: serves the local protocol from an
   in-memory contact table in its own thread, every plan direct to 127.0.0.1. */
#ifndef QCG_FAKE_HELPER_H
#define QCG_FAKE_HELPER_H

#include <stdint.h>

struct fake_helper;

/* Listens on the Unix socket path; nodes' ports are port_low..port_high. */
struct fake_helper *fake_helper_new(const char *path, uint16_t port_low, uint16_t port_high);
void fake_helper_free(struct fake_helper *fh);

/* Lookups of rank answer LOCAL_ERROR code with message (code 0: forget). */
void fake_helper_set_error(struct fake_helper *fh, int32_t rank, int32_t code, const char *msg);
/* Lookups of rank whose tried_mask is `tried` answer this plan, or (plan
   NULL) LOCAL_ERROR code with msg.  Checked before set_error's answers. */
struct local_plan;
void fake_helper_set_plan(struct fake_helper *fh, int32_t rank, uint32_t tried,
                          const struct local_plan *plan, int32_t code, const char *msg);
/* The same for lookups whose `only` is `only` (a technique; set_plan's are
   those with only 0). */
void fake_helper_set_plan_only(struct fake_helper *fh, int32_t rank, uint32_t tried, uint32_t only,
                               const struct local_plan *plan, int32_t code, const char *msg);
/* The tried_mask and the only of the last lookup. */
uint32_t fake_helper_last_tried(struct fake_helper *fh);
uint32_t fake_helper_last_only(struct fake_helper *fh);
/* fake_helper_incoming with a role and a token (struct local_incoming). */
int fake_helper_incoming_role(struct fake_helper *fh, int32_t rank, int32_t peer_rank,
                              uint32_t technique, uint32_t role, const char *token, int fd);
/* Sends an unsolicited LOCAL_INCOMING with fd (-1: none) on the connection
   whose HELLO introduced `rank`.  0, or -1 if there is none. */
int fake_helper_incoming(struct fake_helper *fh, int32_t rank, int32_t peer_rank,
                         uint32_t technique, int fd);
/* Answers the next HELLO with a header of bad magic. */
void fake_helper_garbage_next_hello(struct fake_helper *fh);
/* Never answers the next request of this type (a LOCAL_* message type). */
void fake_helper_mute_next(struct fake_helper *fh, uint16_t type);
/* Answers the next HELLO as the helper refuses a client: an unsolicited
   LOCAL_ERROR (request_id 0) with code, then closes. */
void fake_helper_refuse_next_hello(struct fake_helper *fh, int32_t code);

/* Holds the next n LOOKUPs (of any connection) until all n are here, then
   answers them last first: replies out of order. */
void fake_helper_hold_lookups(struct fake_helper *fh, unsigned n);
/* Answers every LOOKUP ms late (0: at once), serving nobody meanwhile: a
   helper stopped or starved of CPU for that long at each lookup. */
void fake_helper_stall_lookups(struct fake_helper *fh, unsigned ms);
/* Closes the connection whose HELLO introduced rank (the helper dies for
   that process).  0, or -1 if there is none. */
int fake_helper_drop_rank(struct fake_helper *fh, int32_t rank);

/* The next n PUBLISHes are refused for the moment (LOCAL_ERETRY, as the
   helper does past a uid's share or for a rank being withdrawn). */
void fake_helper_busy_publishes(struct fake_helper *fh, unsigned n);

/* Counters. */
unsigned fake_helper_hellos(struct fake_helper *fh);
unsigned fake_helper_publishes(struct fake_helper *fh);
unsigned fake_helper_connections(struct fake_helper *fh);
unsigned fake_helper_lookups(struct fake_helper *fh);
unsigned fake_helper_withdraws(struct fake_helper *fh);
unsigned fake_helper_reports(struct fake_helper *fh);
/* 1 if rank is published now. */
int fake_helper_published(struct fake_helper *fh, int32_t rank);

#endif
