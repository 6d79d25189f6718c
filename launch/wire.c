/* The launch connection's frames (wire.h). */
#include "wire.h"

#include <stdio.h>
#include <string.h>

static const char *const type_names[] = {
    [WIRE_LAUNCH] = "LAUNCH",   [WIRE_REFUSED] = "REFUSED", [WIRE_OUT] = "OUT",
    [WIRE_ERR] = "ERR",         [WIRE_EXIT] = "EXIT",       [WIRE_TOPEN] = "TOPEN",
    [WIRE_TDATA] = "TDATA",     [WIRE_TCLOSE] = "TCLOSE",   [WIRE_SIGNAL] = "SIGNAL",
    [WIRE_SESSION] = "SESSION", [WIRE_BYE] = "BYE",         [WIRE_ACK] = "ACK",
    [WIRE_RESUME] = "RESUME",   [WIRE_RESUMED] = "RESUMED",
};

const char *wire_type_name(unsigned type)
{
    if (type >= sizeof(type_names) / sizeof(type_names[0]) || type_names[type] == NULL)
        return "unknown";
    return type_names[type];
}

void wire_u32_put(uint8_t *out, uint32_t v)
{
    out[0] = (uint8_t)(v >> 24);
    out[1] = (uint8_t)(v >> 16);
    out[2] = (uint8_t)(v >> 8);
    out[3] = (uint8_t)v;
}

uint32_t wire_u32_get(const uint8_t *in)
{
    return (uint32_t)in[0] << 24 | (uint32_t)in[1] << 16 | (uint32_t)in[2] << 8 | in[3];
}

void wire_u64_put(uint8_t *out, uint64_t v)
{
    wire_u32_put(out, (uint32_t)(v >> 32));
    wire_u32_put(out + 4, (uint32_t)v);
}

uint64_t wire_u64_get(const uint8_t *in)
{
    return (uint64_t)wire_u32_get(in) << 32 | wire_u32_get(in + 4);
}

int wire_sequenced(unsigned type)
{
    return type != WIRE_ACK && type != WIRE_RESUME && type != WIRE_RESUMED;
}

void wire_header_put(uint8_t out[WIRE_HEADER], enum wire_type type, uint16_t chan, uint32_t len)
{
    out[0] = (uint8_t)type;
    out[1] = 0;
    out[2] = (uint8_t)(chan >> 8);
    out[3] = (uint8_t)chan;
    wire_u32_put(out + 4, len);
}

int wire_header_get(const uint8_t in[WIRE_HEADER], struct wire_header *h)
{
    h->type = in[0];
    h->chan = (uint16_t)(in[2] << 8 | in[3]);
    h->len = wire_u32_get(in + 4);
    if (h->type < WIRE_LAUNCH || h->type > WIRE_TYPE_LAST || in[1] != 0 || h->len > WIRE_FRAME_MAX)
        return -1;
    return 0;
}

long wire_launch_encode(uint8_t *out, size_t cap, const char *job, int argc,
                        const char *const *argv)
{
    size_t n = 0, len;

    if (argc < 1 || argc > WIRE_ARGS_MAX || cap < 1)
        return -1;
    out[n++] = WIRE_VERSION;
    for (int i = -1; i < argc; i++) {
        const char *s = i < 0 ? job : argv[i];
        len = strlen(s) + 1;
        if (len > cap - n)
            return -1;
        memcpy(out + n, s, len);
        n += len;
    }
    return n <= WIRE_FRAME_MAX ? (long)n : -1;
}

int wire_launch_decode(const uint8_t *payload, size_t len, struct wire_launch *out, char *why,
                       size_t whylen)
{
    size_t at = 1;

    memset(out, 0, sizeof(*out));
    if (len < 1 || payload[0] != WIRE_VERSION) {
        snprintf(why, whylen, "launch version %d, this agent speaks %d", len < 1 ? -1 : payload[0],
                 WIRE_VERSION);
        return -1;
    }
    if (len > WIRE_FRAME_MAX || payload[len - 1] != '\0') {
        snprintf(why, whylen, "launch request not made of strings");
        return -1;
    }
    out->job = (const char *)payload + at;
    at += strlen(out->job) + 1;
    while (at < len) {
        if (out->argc == WIRE_ARGS_MAX) {
            snprintf(why, whylen, "more than %d arguments", WIRE_ARGS_MAX);
            return -1;
        }
        out->argv[out->argc++] = (const char *)payload + at;
        at += strlen((const char *)payload + at) + 1;
    }
    if (out->argc == 0) {
        snprintf(why, whylen, "no command");
        return -1;
    }
    out->argv[out->argc] = NULL;
    return 0;
}
