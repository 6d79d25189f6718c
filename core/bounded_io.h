/* Clocks and I/O bounded by a deadline on non-blocking descriptors: what a
   client of the helper (libqcgconn, the tools) waits with.  Errors are the
   public codes of qcgconn.h, which the local protocol carries too. */
#ifndef QCG_BOUNDED_IO_H
#define QCG_BOUNDED_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in microseconds: what deadlines are measured in. */
uint64_t now_us(void);
int set_nonblocking(int fd, bool on);
/* Waits for events on fd until deadline_us: 1 ready, 0 timed out, -1 error. */
int wait_fd(int fd, short events, uint64_t deadline_us);
/* Reads/writes exactly len bytes before the deadline on a non-blocking fd.
   0, QCG_ETIMEDOUT, QCG_EPEER (EOF) or QCG_ESYS (errno kept). */
int read_full(int fd, void *buf, size_t len, uint64_t deadline_us);
int write_full(int fd, const void *buf, size_t len, uint64_t deadline_us);
/* Connects a new non-blocking, close-on-exec Unix socket to path, waiting at
   most timeout_ms for room in the listener's backlog.  fd or -1 (errno). */
int unix_connect(const char *path, int timeout_ms);

#endif
