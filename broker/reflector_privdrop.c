/* What the reflector's process gives up before it reads the network; see
   reflector.h. */
#include "reflector.h"

#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static int capset_none(void)
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    memset(data, 0, sizeof(data));
    return (int)syscall(SYS_capset, &hdr, data);
}

/* Whether any capability is still effective or permitted. */
static int caps_left(void)
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    memset(data, 0, sizeof(data));
    if (syscall(SYS_capget, &hdr, data) < 0)
        return -1;
    for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
        if (data[i].effective != 0 || data[i].permitted != 0 || data[i].inheritable != 0)
            return 1;
    return 0;
}

int reflector_privdrop(bool setuser, unsigned uid, unsigned gid, char *why, size_t whylen)
{
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        snprintf(why, whylen, "PR_SET_NO_NEW_PRIVS: %s", strerror(errno));
        return -1;
    }
    /* The bounding set needs CAP_SETPCAP, which root has; a process without
       it has none to give up that an exec could regain (no new privileges). */
    for (int cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EPERM) {
            snprintf(why, whylen, "dropping capability %d from the bounding set: %s", cap,
                     strerror(errno));
            return -1;
        }
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL) {
        snprintf(why, whylen, "clearing the ambient capabilities: %s", strerror(errno));
        return -1;
    }
    if (setuser) {
        gid_t g = (gid_t)gid;
        uid_t ru, eu, su;
        if (setgroups(1, &g) < 0 || setresgid(g, g, g) < 0 || setresuid(uid, uid, uid) < 0) {
            snprintf(why, whylen, "becoming uid %u gid %u: %s", uid, gid, strerror(errno));
            return -1;
        }
        if (getresuid(&ru, &eu, &su) < 0 || ru != uid || eu != uid || su != uid) {
            snprintf(why, whylen, "still not uid %u after setresuid", uid);
            return -1;
        }
    }
    if (capset_none() < 0) {
        snprintf(why, whylen, "dropping every capability: %s", strerror(errno));
        return -1;
    }
    if (caps_left() != 0) {
        snprintf(why, whylen, "capabilities are left after dropping them all");
        return -1;
    }
    return 0;
}
