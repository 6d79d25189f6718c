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
                         SESSION  WIRE_TOKEN_LEN random bytes, right after a LAUNCH it
                                  accepted: the token that resumes this session
     launcher -> agent   BYE      the launcher is done (mpirun's end): end the daemon now
                         RESUME   token, 8 bytes: frames the launcher has received; the
                                  first frame of a new connection to the agent
     agent -> launcher   RESUMED  8 bytes: frames the agent has received
     both                ACK      8 bytes: frames received so far; also the heartbeat,
                                  sent every second

   Every frame but ACK, RESUME and RESUMED is numbered, implicitly, 1, 2, ...
   in the order sent, and kept by its sender until the peer's ACK (or
   RESUMED) counts it.  When the connection breaks after SESSION, the
   launcher connects to the agent again (a new qcg_connect) and sends RESUME;
   the agent moves the session onto the new connection and answers RESUMED;
   each then resends, in order, the frames after the count the other gave,
   and the receiver goes on counting from there: nothing is delivered twice
   or out of order.  A RESUME naming no session the agent has gets REFUSED.

   Nothing in a frame is trusted: lengths are bounded before anything is
   allocated, and a frame the receiver does not expect ends the connection. */
#ifndef QCG_LAUNCH_WIRE_H
#define QCG_LAUNCH_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_VERSION 2
#define WIRE_HEADER 8
/* The largest frame either side accepts; data frames are sent smaller. */
#define WIRE_FRAME_MAX (64 * 1024)
#define WIRE_DATA_MAX (16 * 1024)
/* A LAUNCH's argument count bound (orted takes about 40). */
#define WIRE_ARGS_MAX 512
/* Channels per launch: an orted opens one runtime connection, rarely more. */
#define WIRE_CHANNELS_MAX 16
/* The session token's length: 128 random bits. */
#define WIRE_TOKEN_LEN 16
/* After a break, the launcher tries new connections for WIRE_RESUME_TRY_MS;
   the agent keeps the session (the daemon running, its output kept) for
   WIRE_RESUME_WAIT_MS, longer than the launcher may need to see the break
   (the link's stall bound) and to try. */
#define WIRE_RESUME_TRY_MS 60000
#define WIRE_RESUME_WAIT_MS 90000

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
    WIRE_SESSION,
    WIRE_BYE,
    WIRE_ACK,
    WIRE_RESUME,
    WIRE_RESUMED,
    WIRE_TYPE_LAST = WIRE_RESUMED,
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

/* EXIT and SIGNAL payloads; the counts of ACK, RESUME and RESUMED. */
void wire_u32_put(uint8_t *out, uint32_t v);
uint32_t wire_u32_get(const uint8_t *in);
void wire_u64_put(uint8_t *out, uint64_t v);
uint64_t wire_u64_get(const uint8_t *in);
/* True for the frames a link numbers and resends (all but ACK, RESUME,
   RESUMED). */
int wire_sequenced(unsigned type);

#endif
