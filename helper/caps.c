/* Which capabilities a helper process holds, and giving them up for good.
   Whether the node may intercept (NFQUEUE) and inject (raw socket) packets
   goes to the frontend as canIntercept.  capget/capset(2) directly: libcap
   is not worth a dependency for two bits. */
#include <errno.h>
#include <linux/capability.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "helper.h"
#include "log.h"

/* Capabilities above this do not exist on any kernel we meet; the bounding
   set loop stops earlier, at the first the kernel does not know. */
#define CAP_SCAN_MAX 64

static int caps_get(pid_t pid, struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3])
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = pid};

    return (int)syscall(SYS_capget, &hdr, data);
}

int helper_caps_missing(pid_t pid, char *out, size_t outlen)
{
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    static const struct {
        int cap;
        const char *name;
    } caps[] = {{CAP_NET_ADMIN, "CAP_NET_ADMIN"}, {CAP_NET_RAW, "CAP_NET_RAW"}};
    size_t used = 0;
    int missing = 0;

    if (outlen > 0)
        out[0] = '\0';
    if (caps_get(pid, data) != 0) {
        snprintf(out, outlen, "CAP_NET_ADMIN and CAP_NET_RAW (capget failed)");
        return 2;
    }
    for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
        if (data[CAP_TO_INDEX(caps[i].cap)].effective & CAP_TO_MASK(caps[i].cap))
            continue;
        int n = snprintf(out + used, outlen - used, "%s%s", missing ? " and " : "", caps[i].name);
        if (n > 0 && (size_t)n < outlen - used)
            used += (size_t)n;
        missing++;
    }
    return missing;
}

int helper_can_intercept(pid_t pid)
{
    char unused[64];

    return helper_caps_missing(pid, unused, sizeof(unused)) == 0;
}

static int kept(uint64_t keep, int cap)
{
    return cap < 64 && (keep >> cap) & 1;
}

int helper_caps_limit(uint64_t keep, char *err, size_t errlen)
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    unsigned bounding_left = 0;
    int cap, held;

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
    if (caps_get(0, data) != 0) {
        snprintf(err, errlen, "capget: %s", strerror(errno));
        return -1;
    }
    held = data[0].permitted != 0 || data[1].permitted != 0;
    /* EINVAL: a kernel without ambient capabilities, nothing to clear. */
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL) {
        snprintf(err, errlen, "cannot clear the ambient capabilities: %s", strerror(errno));
        return -1;
    }
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
    /* Ambient again for what is kept: iptables, run by the privileged
       process, inherits them when the helper is not root (systemd's
       AmbientCapabilities=). */
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
        log_info("%u capabilities stay in the bounding set (no CAP_SETPCAP to drop them); "
                 "no_new_privs keeps them from ever coming back",
                 bounding_left);
    return 0;
}
