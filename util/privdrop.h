/*
 * Giving up privileges for good, before a process reads what the world
 * sends: the helper's main process (nothing kept) and its packet engine
 * (CAP_NET_ADMIN and CAP_NET_RAW kept), the broker's reflector process
 * (nothing kept, another user when root).  capget/capset(2) directly:
 * libcap is not worth a dependency for this.
 */
#ifndef QCG_COMMON_PRIVDROP_H
#define QCG_COMMON_PRIVDROP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Whom to become, when root. */
struct privdrop_user {
    uid_t uid;
    gid_t gid;
};

/* In this order: every capability not in `keep` (bit n = capability n) out of
   the bounding set (as far as CAP_SETPCAP allows), the ambient set cleared,
   `as` (NULL: stay) taken with setgroups/setresgid/setresuid, permitted,
   effective and inheritable reduced to `keep`, `keep` raised as ambient
   again (so that a program the process runs, e.g. iptables, inherits it
   under a non-root uid), no_new_privs; then what the kernel says is checked.
   0, or -1 with a one-line reason. */
int privdrop(uint64_t keep, const struct privdrop_user *as, char *err, size_t errlen);

/* The effective capabilities of process pid (0: this one) as a mask; -1 if
   they cannot be read. */
int64_t privdrop_effective(pid_t pid);

#endif
