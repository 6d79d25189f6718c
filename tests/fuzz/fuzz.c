/* See fuzz.h. */
#include "fuzz.h"

#include <sys/socket.h>
#include <unistd.h>

volatile size_t fuzz_sink;

void *fuzz_copy(const uint8_t *data, size_t size)
{
    void *copy = malloc(size > 0 ? size : 1);
    if (copy == NULL)
        abort();
    memcpy(copy, data, size);
    return copy;
}

int fuzz_socket_holding(const uint8_t *data, size_t size, int *writer)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    /* Inputs are far below the socket's buffer: one write. */
    if (size > 0 && write(sv[0], data, size) != (ssize_t)size)
        abort();
    shutdown(sv[0], SHUT_WR);
    *writer = sv[0];
    return sv[1];
}
