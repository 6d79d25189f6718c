/* The hello a proxy client sends first (relay.h), apart from the relay's
   sockets so that tests and the fuzzer reach it. */
#include <string.h>

#include "relay.h"

enum relay_hello relay_hello_parse(const unsigned char buf[RELAY_HELLO_LEN],
                                   char token[RELAY_HELLO_TOKEN + 1])
{
    token[0] = '\0';
    if (memcmp(buf, RELAY_MAP_MAGIC, 4) == 0)
        return RELAY_HELLO_MAP;
    if (memcmp(buf, RELAY_MAGIC, 4) != 0)
        return RELAY_HELLO_BAD_MAGIC;
    memcpy(token, buf + 4, RELAY_HELLO_TOKEN);
    token[RELAY_HELLO_TOKEN] = '\0';
    /* One spelling of a hello: the token, then NULs only. */
    for (size_t i = strlen(token); i < RELAY_HELLO_TOKEN; i++) {
        if (token[i] != '\0') {
            token[0] = '\0';
            return RELAY_HELLO_NOT_PADDED;
        }
    }
    return RELAY_HELLO_TOKEN_TEXT;
}
