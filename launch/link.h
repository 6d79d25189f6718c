/* A launch connection as frames (wire.h) over libuv, with back-pressure:
   the sources that feed it (the daemon's output, runtime connections) stop
   being read while too much waits to be written, and resume once it drains;
   a sink that cannot keep up stops the link's own reading the same way. */
#ifndef QCG_LAUNCH_LINK_H
#define QCG_LAUNCH_LINK_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "wire.h"

/* Bytes waiting to be written above which sources pause. */
#define LINK_HIGH_WATER (1024 * 1024)

struct link;

struct link_ops {
    /* A complete frame; the payload is valid only during the call. */
    void (*frame)(struct link *l, const struct wire_header *h, const uint8_t *payload);
    /* The connection ended (EOF, error, a frame that is not ours): why. The
       link is closed; link_free only after this or link_close. */
    void (*closed)(struct link *l, const char *why);
    /* Below the high water again: resume the sources. */
    void (*drained)(struct link *l);
};

/* Takes over fd (a connected TCP socket), also when it fails: NULL with
   errno, fd closed. */
struct link *link_new(uv_loop_t *loop, int fd, const struct link_ops *ops, void *data);
void *link_data(const struct link *l);
/* Queues one frame: 0, or -1 if the link is closed. */
int link_send(struct link *l, enum wire_type type, uint16_t chan, const void *data, size_t len);
/* True while more than LINK_HIGH_WATER waits to be written. */
int link_congested(const struct link *l);
/* Stop / resume reading frames (a sink is full). */
void link_pause(struct link *l);
void link_resume(struct link *l);
/* Sends what is queued, then closes; ops->closed is not called after it.
   The struct is freed once libuv has closed the handle. */
void link_close(struct link *l);

#endif
