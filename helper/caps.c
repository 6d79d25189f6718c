/* Whether this helper may intercept (NFQUEUE) and inject (raw socket) packets,
   which the frontend passes on to the broker as the node's canIntercept.
   capget(2) directly: libcap is not worth a dependency for two bits. */
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "helper.h"

int helper_can_intercept(void)
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

    if (syscall(SYS_capget, &hdr, data) != 0)
        return 0;
    const int caps[] = {CAP_NET_ADMIN, CAP_NET_RAW};
    for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
        if (!(data[CAP_TO_INDEX(caps[i])].effective & CAP_TO_MASK(caps[i])))
            return 0;
    }
    return 1;
}
