/* Runtime connections over a launch connection (tunnel.h). */
#include "tunnel.h"

#include <stdlib.h>
#include <string.h>

struct tunnel {
    uv_tcp_t tcp;
    struct tunnels *ts;
    uint16_t chan;
    int reading;
    int full; /* our writes to the local socket are backed up: the link is paused */
    uint8_t rbuf[WIRE_DATA_MAX];
};

struct tunnels {
    uv_loop_t *loop;
    struct link *link;
    struct tunnel *t[WIRE_CHANNELS_MAX];
    int paused;
    int freeing;
    int handles; /* tunnels whose handle is not closed yet */
};

struct tunnel_write {
    uv_write_t req;
    struct tunnel *t;
    uint8_t bytes[];
};

struct tunnels *tunnels_new(uv_loop_t *loop, struct link *link)
{
    struct tunnels *ts = calloc(1, sizeof(*ts));

    if (ts != NULL) {
        ts->loop = loop;
        ts->link = link;
    }
    return ts;
}

static void on_closed(uv_handle_t *h)
{
    struct tunnel *t = h->data;
    struct tunnels *ts = t->ts;

    free(t);
    ts->handles--;
    if (ts->freeing && ts->handles == 0)
        free(ts);
}

static void full_check(struct tunnels *ts)
{
    /* The link reads again once no channel is backed up. */
    for (int i = 0; i < WIRE_CHANNELS_MAX; i++)
        if (ts->t[i] != NULL && ts->t[i]->full)
            return;
    if (!ts->freeing)
        link_resume(ts->link);
}

void tunnel_close(struct tunnels *ts, uint16_t chan, int tell)
{
    struct tunnel *t;

    if (chan >= WIRE_CHANNELS_MAX || (t = ts->t[chan]) == NULL)
        return;
    ts->t[chan] = NULL;
    if (tell && !ts->freeing)
        link_send(ts->link, WIRE_TCLOSE, chan, NULL, 0);
    uv_close((uv_handle_t *)&t->tcp, on_closed);
    if (t->full)
        full_check(ts);
}

int tunnel_free_chan(const struct tunnels *ts)
{
    for (int i = 0; i < WIRE_CHANNELS_MAX; i++)
        if (ts->t[i] == NULL)
            return i;
    return -1;
}

uv_tcp_t *tunnel_prepare(struct tunnels *ts, uint16_t chan)
{
    struct tunnel *t;

    if (chan >= WIRE_CHANNELS_MAX || ts->t[chan] != NULL || ts->freeing)
        return NULL;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->ts = ts;
    t->chan = chan;
    uv_tcp_init(ts->loop, &t->tcp);
    t->tcp.data = t;
    ts->t[chan] = t;
    ts->handles++;
    return &t->tcp;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct tunnel *t = h->data;

    (void)hint;
    *b = uv_buf_init((char *)t->rbuf, sizeof(t->rbuf));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct tunnel *t = s->data;
    struct tunnels *ts = t->ts;

    (void)b;
    if (n < 0) {
        tunnel_close(ts, t->chan, 1);
        return;
    }
    if (n > 0 && link_send(ts->link, WIRE_TDATA, t->chan, t->rbuf, (size_t)n) == 0 &&
        link_congested(ts->link))
        tunnels_pause(ts);
}

static void read_on(struct tunnel *t)
{
    if (!t->reading && uv_read_start((uv_stream_t *)&t->tcp, on_alloc, on_read) == 0)
        t->reading = 1;
}

void tunnel_start(struct tunnels *ts, uint16_t chan)
{
    if (chan < WIRE_CHANNELS_MAX && ts->t[chan] != NULL && !ts->paused)
        read_on(ts->t[chan]);
}

static void on_written(uv_write_t *req, int status)
{
    struct tunnel_write *w = (struct tunnel_write *)req;
    struct tunnel *t = w->t;

    free(w);
    if (status == UV_ECANCELED)
        return; /* the channel is closing */
    if (status < 0) {
        tunnel_close(t->ts, t->chan, 1);
        return;
    }
    if (t->full && uv_stream_get_write_queue_size((uv_stream_t *)&t->tcp) <= LINK_HIGH_WATER) {
        t->full = 0;
        full_check(t->ts);
    }
}

int tunnels_frame(struct tunnels *ts, const struct wire_header *h, const uint8_t *payload)
{
    struct tunnel *t = h->chan < WIRE_CHANNELS_MAX ? ts->t[h->chan] : NULL;
    struct tunnel_write *w;
    uv_buf_t b;

    /* A channel we closed may still get the bytes and the close the other
       side sent before it heard of it: dropped, not an error. */
    if (h->chan >= WIRE_CHANNELS_MAX)
        return -1;
    if (t == NULL)
        return 0;
    if (h->type == WIRE_TCLOSE) {
        tunnel_close(ts, h->chan, 0);
        return 0;
    }
    if (h->len == 0)
        return 0;
    w = malloc(sizeof(*w) + h->len);
    if (w == NULL) {
        tunnel_close(ts, h->chan, 1);
        return 0;
    }
    w->t = t;
    memcpy(w->bytes, payload, h->len);
    b = uv_buf_init((char *)w->bytes, h->len);
    if (uv_write(&w->req, (uv_stream_t *)&t->tcp, &b, 1, on_written) < 0) {
        free(w);
        tunnel_close(ts, h->chan, 1);
        return 0;
    }
    if (uv_stream_get_write_queue_size((uv_stream_t *)&t->tcp) > LINK_HIGH_WATER) {
        t->full = 1;
        link_pause(ts->link);
    }
    return 0;
}

void tunnels_pause(struct tunnels *ts)
{
    ts->paused = 1;
    for (int i = 0; i < WIRE_CHANNELS_MAX; i++)
        if (ts->t[i] != NULL && ts->t[i]->reading) {
            uv_read_stop((uv_stream_t *)&ts->t[i]->tcp);
            ts->t[i]->reading = 0;
        }
}

void tunnels_resume(struct tunnels *ts)
{
    ts->paused = 0;
    for (int i = 0; i < WIRE_CHANNELS_MAX; i++)
        if (ts->t[i] != NULL)
            read_on(ts->t[i]);
}

int tunnels_open_count(const struct tunnels *ts)
{
    int n = 0;

    for (int i = 0; i < WIRE_CHANNELS_MAX; i++)
        n += ts->t[i] != NULL;
    return n;
}

void tunnels_free(struct tunnels *ts)
{
    if (ts == NULL)
        return;
    ts->freeing = 1;
    for (int i = 0; i < WIRE_CHANNELS_MAX; i++)
        tunnel_close(ts, (uint16_t)i, 0);
    if (ts->handles == 0)
        free(ts);
}
