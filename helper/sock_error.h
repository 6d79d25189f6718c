/* The error behind a libuv poll callback's status on a socket. */
#ifndef QCG_HELPER_SOCK_ERROR_H
#define QCG_HELPER_SOCK_ERROR_H

/* The socket's pending error (SO_ERROR), else -status (a libuv error is a
   negative errno).  libuv reports POLLERR as UV_EBADF, so a poll
   callback's status says only that there is one: a refused or reset
   connection would read "bad file descriptor". */
int sock_error(int fd, int status);

/* Takes one entry off the socket's error queue (IP_RECVERR or
   IPV6_RECVERR set): the errno an ICMP error carried, 0 for an entry of
   another kind, -1 when the queue is empty. */
int sock_queued_error(int fd);

#endif
