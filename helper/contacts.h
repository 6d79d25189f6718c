/*
 * The contacts published through this helper, one per (job, rank), each owned
 * by the local connection that published it.  Shared by the loop thread (which
 * reserves and releases), the request workers (which call upstream) and the
 * registration thread (which re-publishes after a reconnect), hence the lock.
 *
 * The sync lock orders upstream calls: publish/withdraw workers take it
 * shared, a re-publish takes it exclusive, so a withdraw can never be undone
 * by a re-publish of a stale snapshot.  The loop thread never takes it.
 */
#ifndef QCG_HELPER_CONTACTS_H
#define QCG_HELPER_CONTACTS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "localproto.h"

struct contact {
    char job[LOCAL_JOB_MAX];
    char secret[LOCAL_SECRET_MAX];
    int32_t rank;
    uint16_t port;
    uint16_t addresses; /* the node's addresses its listener takes (local_publish) */
    pid_t pid;          /* the publishing process, for log lines */
    uid_t uid;          /* its user: only that user learns the pid */
};

enum contact_state {
    CONTACT_PENDING, /* reserved, upstream publish in flight */
    CONTACT_PUBLISHED,
    CONTACT_WITHDRAWING, /* owner gone, upstream withdraw in flight */
};

struct contacts;

/* max: contacts held at once (one per local connection at most). */
struct contacts *contacts_new(size_t max);
void contacts_free(struct contacts *cs);

/* Reserves c's (job, rank) for owner.  0 when free or already owner's (port
   unchanged); QCG_EBUSY when another owner holds it (*holder = its pid, or 0
   while it is being withdrawn, *holder_uid its user); QCG_EINVAL when owner
   holds it with another port; QCG_ENOMEM when full. */
int contacts_reserve(struct contacts *cs, const struct contact *c, uint64_t owner, pid_t *holder,
                     uid_t *holder_uid);
/* Sets the state of owner's (job, rank); no-op when absent. */
void contacts_set_state(struct contacts *cs, const char *job, int32_t rank, uint64_t owner,
                        enum contact_state state);
/* Whether owner's (job, rank) is still held (in any state); owner 0 = anyone's.
   Owners are numbered from 1. */
int contacts_held(struct contacts *cs, const char *job, int32_t rank, uint64_t owner);
void contacts_remove(struct contacts *cs, const char *job, int32_t rank, uint64_t owner);
/* Published contacts now; a malloc'd copy (*out, caller frees), -1 on ENOMEM. */
int contacts_snapshot(struct contacts *cs, struct contact **out, size_t *n);
size_t contacts_published(struct contacts *cs);

/* Withdrawals that failed upstream, retried by the registration thread; the
   oldest are dropped (with a warning) beyond the cap. */
void contacts_orphan_add(struct contacts *cs, const struct contact *c);
/* Takes them all (caller frees *out); 0, or -1 on ENOMEM. */
int contacts_orphans_take(struct contacts *cs, struct contact **out, size_t *n);

void contacts_sync_shared(struct contacts *cs);
void contacts_sync_exclusive(struct contacts *cs);
void contacts_sync_end(struct contacts *cs);

#endif
