/* Giving up privileges for good; see privdrop.h. */
#include "privdrop.h"

#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"

/* Capabilities above this do not exist on any kernel we meet; the bounding
   set loop stops earlier, at the first the kernel does not know. */
#define CAP_SCAN_MAX 64

static int caps_get(pid_t pid, struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3])
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = pid};

    memset(data, 0, sizeof(*data) * _LINUX_CAPABILITY_U32S_3);
    return (int)syscall(SYS_capget, &hdr, data);
}

static bool kept(uint64_t keep, int cap)
{
    return cap < 64 && (keep >> cap) & 1;
}

int64_t privdrop_effective(pid_t pid)
{
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

    if (caps_get(pid, data) != 0)
        return -1;
    return (int64_t)(((uint64_t)data[1].effective << 32) | data[0].effective);
}

static int become(const struct privdrop_user *as, char *err, size_t errlen)
{
    uid_t ru, eu, su;
    gid_t g = as->gid;

    /* Capabilities survive the uid change only until the capset below. */
    if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 || setgroups(1, &g) < 0 || setresgid(g, g, g) < 0 ||
        setresuid(as->uid, as->uid, as->uid) < 0) {
        snprintf(err, errlen, "becoming uid %u gid %u: %s", (unsigned)as->uid, (unsigned)as->gid,
                 strerror(errno));
        return -1;
    }
    prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
    if (getresuid(&ru, &eu, &su) < 0 || ru != as->uid || eu != as->uid || su != as->uid) {
        snprintf(err, errlen, "still not uid %u after setresuid", (unsigned)as->uid);
        return -1;
    }
    return 0;
}

int privdrop(uint64_t keep, const struct privdrop_user *as, char *err, size_t errlen)
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    unsigned bounding_left = 0;
    int cap;

    /* The bounding set first: dropping from it takes CAP_SETPCAP, which the
       capset below gives up.  Without it (systemd's User= with ambient
       capabilities, a container) the set stays; no_new_privs below keeps
       execve from granting anything from it. */
    for (cap = 0; cap < CAP_SCAN_MAX; cap++) {
        int in = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
        if (in < 0)
            break; /* the kernel's last capability */
        if (in == 1 && !kept(keep, cap) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0)
            bounding_left++;
    }
    /* EINVAL: a kernel without ambient capabilities, nothing to clear. */
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL) {
        snprintf(err, errlen, "cannot clear the ambient capabilities: %s", strerror(errno));
        return -1;
    }
    if (as != NULL && become(as, err, errlen) < 0)
        return -1;
    if (caps_get(0, data) != 0) {
        snprintf(err, errlen, "capget: %s", strerror(errno));
        return -1;
    }
    bool held = data[0].permitted != 0 || data[1].permitted != 0;
    for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++) {
        uint32_t mask = (uint32_t)(keep >> (32 * i));
        data[i].permitted &= mask;
        data[i].effective = data[i].permitted;
        data[i].inheritable = data[i].permitted;
    }
    if (syscall(SYS_capset, &hdr, data) != 0) {
        snprintf(err, errlen, "capset: %s", strerror(errno));
        return -1;
    }
    for (cap = 0; cap < CAP_SCAN_MAX; cap++)
        if (kept(keep, cap) && (data[CAP_TO_INDEX(cap)].permitted & CAP_TO_MASK(cap)))
            prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        snprintf(err, errlen, "no_new_privs: %s", strerror(errno));
        return -1;
    }
    /* What the kernel now says, not what we asked. */
    if (caps_get(0, data) != 0) {
        snprintf(err, errlen, "capget: %s", strerror(errno));
        return -1;
    }
    for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++) {
        uint32_t mask = (uint32_t)(keep >> (32 * i));
        if ((data[i].permitted | data[i].effective | data[i].inheritable) & ~mask) {
            snprintf(err, errlen, "capabilities still held after capset");
            return -1;
        }
    }
    if (bounding_left > 0 && held)
        log_info("%u capabilities stay in the bounding set (dropping them needs CAP_SETPCAP, "
                 "which this process was not given): harmless, it holds none of them and "
                 "no_new_privs keeps any program it runs from gaining them",
                 bounding_left);
    return 0;
}
