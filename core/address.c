/* See address.h. */
#include "address.h"

#include <arpa/inet.h>
#include <string.h>

#include "proto.h"

bool address_valid(const char *text)
{
    unsigned char buf[sizeof(struct in6_addr)];

    if (text == NULL || strnlen(text, QCG_ADDR_MAX) >= QCG_ADDR_MAX)
        return false;
    return inet_pton(AF_INET, text, buf) == 1 || inet_pton(AF_INET6, text, buf) == 1;
}
