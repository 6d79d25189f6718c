/* The runtime connections carried by a launch connection, one channel each:
   on the node, those the daemon opens to the agent's loopback listener; beside
   mpirun, the launcher's connections to mpirun's runtime port.  Bytes go both
   ways unchanged; either end closing closes both. */
#ifndef QCG_LAUNCH_TUNNEL_H
#define QCG_LAUNCH_TUNNEL_H

#include <stdint.h>
#include <uv.h>

#include "link.h"

struct tunnels;

struct tunnels *tunnels_new(uv_loop_t *loop, struct link *link);
/* A handle for channel chan, initialised on the tunnels' loop, for the
   caller to accept or connect into; NULL if chan is out of range or in use. */
uv_tcp_t *tunnel_prepare(struct tunnels *ts, uint16_t chan);
/* A free channel number, or -1 when WIRE_CHANNELS_MAX are open. */
int tunnel_free_chan(const struct tunnels *ts);
/* Starts relaying a prepared channel (connected, or connecting: bytes for
   it are queued until then). */
void tunnel_start(struct tunnels *ts, uint16_t chan);
/* Closes a channel; tells the other end unless it is the one that closed. */
void tunnel_close(struct tunnels *ts, uint16_t chan, int tell);
/* TDATA and TCLOSE frames; -1 for a channel number out of range (one no
   longer open is dropped quietly: a close may cross bytes in flight). */
int tunnels_frame(struct tunnels *ts, const struct wire_header *h, const uint8_t *payload);
/* The link is congested / drained: stop / resume reading every channel. */
void tunnels_pause(struct tunnels *ts);
void tunnels_resume(struct tunnels *ts);
int tunnels_open_count(const struct tunnels *ts);
/* Closes every channel (without telling) and frees ts once they are closed. */
void tunnels_free(struct tunnels *ts);

#endif
