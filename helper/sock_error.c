/* See sock_error.h. */
#include "sock_error.h"

#include <errno.h>
#include <sys/socket.h>

int sock_error(int fd, int status)
{
    int err = 0;
    socklen_t len = sizeof(err);

    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        return errno;
    if (err == 0 && status < 0)
        return -status;
    return err;
}
