/* One request to the local helper on a connection of its own, through
   core's client.  SITE and PROBE reach the broker, so the helper wants a
   HELLO first, like every process's: qcg-probe's names a job of its own,
   under which nothing is ever published, with a random secret (the helper
   refuses a weak one).  The HELLO names this probe's local protocol
   version; a helper of an older one refuses it naming its own, and the
   probe says HELLO again in that one (from LOCAL_VERSION_OLDEST), leaving
   out what that version lacks (PUNCHING). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "hex.h"
#include "lmsg.h"
#include "probe.h"

/* The version the helper takes: this probe's until it refuses it. */
static uint32_t speaks = LOCAL_VERSION;

uint32_t helper_version(void)
{
    return speaks;
}

/* A refused HELLO (reply r to request id hello_rid) naming an older
   version the probe also speaks: 1 with `speaks` set to it, else 0. */
static int older_helper(const struct lmsg_reader *r, uint32_t hello_rid)
{
    static const char says[] = "this helper speaks ";
    const char *at;

    if (r->hdr.type != LOCAL_ERROR || r->hdr.request_id != hello_rid ||
        r->payload.error.code != QCG_EPROTO ||
        (at = strstr(r->payload.error.message, says)) == NULL)
        return 0;
    long v = strtol(at + strlen(says), NULL, 10);
    if (v < LOCAL_VERSION_OLDEST || v >= (long)speaks)
        return 0;
    speaks = (uint32_t)v;
    return 1;
}

/* The probe's HELLO: a job of its own, a fresh random secret.  0 or -1. */
static int hello_make(struct local_hello *hello, char *why, size_t whylen)
{
    unsigned char raw[32];

    memset(hello, 0, sizeof(*hello));
    hello->version = speaks;
    snprintf(hello->job, sizeof(hello->job), "qcg-probe-%d", (int)getpid());
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        snprintf(why, whylen, "no randomness for the probe's job secret");
        return -1;
    }
    _Static_assert(sizeof(hello->secret) > 2 * sizeof(raw), "room for the hex secret");
    hex_encode(raw, sizeof(raw), hello->secret);
    return 0;
}

int helper_hello(const char *socket_path, struct local_hello_ok *ok, int timeout_ms, char *why,
                 size_t whylen)
{
    struct local_hello hello;
    struct lmsg_reader r;
    int result = -1;

    if (hello_make(&hello, why, whylen) < 0)
        return -1;
    /* HELLO as the request itself: its answer is the HELLO_OK. */
    for (int again = 1;; again = 0) {
        if (lmsg_ask(socket_path, LOCAL_HELLO, &hello, timeout_ms, &r, why, whylen) < 0) {
            lmsg_reader_reset(&r);
            return -1;
        }
        if (!again || !older_helper(&r, 1))
            break;
        lmsg_reader_reset(&r);
        hello.version = speaks;
    }
    if (r.hdr.type == LOCAL_HELLO_OK && r.hdr.length <= sizeof(*ok)) {
        memset(ok, 0, sizeof(*ok));
        memcpy(ok, &r.payload, r.hdr.length);
        result = 0;
    } else if (r.hdr.type == LOCAL_ERROR) {
        snprintf(why, whylen, "%s", r.payload.error.message);
    } else {
        snprintf(why, whylen, "the helper answered HELLO with type %u", (unsigned)r.hdr.type);
    }
    lmsg_reader_reset(&r);
    return result;
}

int helper_ask(const char *socket_path, uint16_t type, const void *payload, void *reply,
               size_t reply_size, int timeout_ms, int *code, char *why, size_t whylen)
{
    struct lmsg_reader r;
    int result = -1;
    struct local_hello hello;

    *code = 0;
    if (hello_make(&hello, why, whylen) < 0)
        return -1;
    for (int again = 1;; again = 0) {
        if (lmsg_ask_hello(socket_path, &hello, type, payload, timeout_ms, &r, why, whylen) < 0) {
            lmsg_reader_reset(&r);
            return -1;
        }
        if (!again || !older_helper(&r, 1))
            break;
        lmsg_reader_reset(&r);
        hello.version = speaks;
    }
    if (r.hdr.type == LOCAL_ERROR) {
        *code = r.payload.error.code;
        snprintf(why, whylen, "%s", r.payload.error.message);
        result = LOCAL_ERROR;
    } else if (r.hdr.length > reply_size) {
        snprintf(why, whylen, "the helper answered with an unexpected message (type %u)",
                 (unsigned)r.hdr.type);
    } else {
        if (r.hdr.length > 0)
            memcpy(reply, &r.payload, r.hdr.length);
        result = r.hdr.type;
    }
    lmsg_reader_reset(&r);
    return result;
}
