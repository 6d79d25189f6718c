/* Whether this helper may intercept (NFQUEUE) and inject (raw socket) packets,
   which the frontend passes on to the broker as the node's canIntercept.
   capget(2) directly: libcap is not worth a dependency for two bits. */
#include <linux/capability.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "helper.h"

int helper_caps_missing(char *out, size_t outlen)
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    static const struct {
        int cap;
        const char *name;
    } caps[] = {{CAP_NET_ADMIN, "CAP_NET_ADMIN"}, {CAP_NET_RAW, "CAP_NET_RAW"}};
    size_t used = 0;
    int missing = 0;

    if (outlen > 0)
        out[0] = '\0';
    if (syscall(SYS_capget, &hdr, data) != 0) {
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

int helper_can_intercept(void)
{
    char unused[64];

    return helper_caps_missing(unused, sizeof(unused)) == 0;
}
