/* One request to the local helper on a connection of its own (no HELLO: SITE,
   PROBE, OBSERVED and STATUS are allowed before one), through core's client. */
#include <stdio.h>
#include <string.h>

#include "lmsg.h"
#include "probe.h"

int helper_ask(const char *socket_path, uint16_t type, const void *payload, void *reply,
               size_t reply_size, int timeout_ms, int *code, char *why, size_t whylen)
{
    struct lmsg_reader r;
    int result = -1;

    *code = 0;
    if (lmsg_ask(socket_path, type, payload, timeout_ms, &r, why, whylen) < 0) {
        lmsg_reader_reset(&r);
        return -1;
    }
    if (r.hdr.type == LOCAL_ERROR) {
        *code = r.payload.error.code;
        snprintf(why, whylen, "%s", r.payload.error.message);
        result = LOCAL_ERROR;
    } else if (r.hdr.length > reply_size) {
        snprintf(why, whylen, "the helper answered with an unexpected message (type %u)",
                 (unsigned)r.hdr.type);
    } else {
        if (r.hdr.length > 0)
            memcpy(reply, &r.payload, r.hdr.length);
        result = r.hdr.type;
    }
    lmsg_reader_reset(&r);
    return result;
}
