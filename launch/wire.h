/* The launch connection: what qcg-launch (beside mpirun) and qcg-agent (on
   the node) say over the one qcg-connect connection between them.

   Every message is a frame: an 8-byte header (type, 0, channel, length,
   big-endian) and `length` bytes.  The launcher's first frame is LAUNCH;
   after it the connection carries the daemon's output, its runtime
   connections (one channel each) and, last, its exit status.

     launcher -> agent   LAUNCH   version, user job id, argv (NUL-terminated strings)
                         SIGNAL   4 bytes: signal number, for the daemon (it ends its ranks)
                         TDATA, TCLOSE  on a channel the agent opened
     agent -> launcher   REFUSED  why, as text: the launch did not happen
                         OUT, ERR the daemon's stdout, stderr
                         TOPEN    the daemon opened a runtime connection: channel
                         TDATA, TCLOSE
                         EXIT     8 bytes: exit code, terminating signal (0 if none)

   Nothing in a frame is trusted: lengths are bounded before anything is
   allocated, and a frame the receiver does not expect ends the connection. */
#ifndef QCG_LAUNCH_WIRE_H
#define QCG_LAUNCH_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_VERSION 1
#define WIRE_HEADER 8
/* The largest frame either side accepts; data frames are sent smaller. */
#define WIRE_FRAME_MAX (64 * 1024)
#define WIRE_DATA_MAX (16 * 1024)
/* A LAUNCH's argument count bound (orted takes about 40). */
#define WIRE_ARGS_MAX 512
/* Channels per launch: an orted opens one runtime connection, rarely more. */
#define WIRE_CHANNELS_MAX 16

enum wire_type {
    WIRE_LAUNCH = 1,
    WIRE_REFUSED,
    WIRE_OUT,
    WIRE_ERR,
    WIRE_EXIT,
    WIRE_TOPEN,
    WIRE_TDATA,
    WIRE_TCLOSE,
    WIRE_SIGNAL,
};

struct wire_header {
    uint8_t type;
    uint16_t chan;
    uint32_t len;
};

/* A decoded LAUNCH: pointers into the frame's payload, which must outlive it. */
struct wire_launch {
    const char *job;
    int argc;
    const char *argv[WIRE_ARGS_MAX + 1]; /* argv[argc] = NULL */
};

const char *wire_type_name(unsigned type);
void wire_header_put(uint8_t out[WIRE_HEADER], enum wire_type type, uint16_t chan, uint32_t len);
/* 0, or -1 when the header is not one of ours (unknown type, reserved byte
   set, length over WIRE_FRAME_MAX). */
int wire_header_get(const uint8_t in[WIRE_HEADER], struct wire_header *h);

/* Encodes a LAUNCH payload into out (cap bytes): its length, or -1 if it
   does not fit or has too many arguments. */
long wire_launch_encode(uint8_t *out, size_t cap, const char *job, int argc,
                        const char *const *argv);
/* Decodes a LAUNCH payload (len bytes, not NUL-terminated by the sender
   necessarily): 0, or -1 with a reason in why. */
int wire_launch_decode(const uint8_t *payload, size_t len, struct wire_launch *out, char *why,
                       size_t whylen);

/* EXIT and SIGNAL payloads. */
void wire_u32_put(uint8_t *out, uint32_t v);
uint32_t wire_u32_get(const uint8_t *in);

#endif
