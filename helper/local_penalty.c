/* Refusals by a per-uid rate, sent after a delay (issue 32, another uid on
   a node).  A uid past lookups-per-uid, publishes-per-uid or
   probes-per-uid was refused at once and asked again at once: under
   bench/helper-uid.sh's floods the helper answered 60,000-80,000 refusals
   a second on two cores, and another uid's requests waited for that CPU.
   Now each such refusal leaves PENALTY_MS after its request, and the
   connection is not read meanwhile: at most one refusal per connection
   every PENALTY_MS, whatever the uid sends.  A uid within its rates never
   waits here.

   The same for a connection past max-clients-per-uid: refused and closed
   at once, it was dialled again at once, 30,000-55,000 times a second,
   and that accept-refuse-close churn alone raised another uid's p99 from
   1.5-2.8 ms to 6-360 ms.  Its refusal now waits PENALTY_MS too, for at
   most PENALTY_HELD_PER_UID connections of a uid at once (each holds a
   descriptor meanwhile); past those it is refused at once, as before. */
#include <stdarg.h>

#include "local_internal.h"
#include "shares.h"

#define PENALTY_MS 100
#define PENALTY_HELD_PER_UID 64

static void on_penalty_over(uv_timer_t *t);

/* The timer follows the oldest refusal waiting: one delay for all keeps
   the list in the order of their due times. */
static void arm(struct local_server *srv)
{
    if (srv->penalized.head == NULL) {
        uv_timer_stop(&srv->penalty_timer);
        return;
    }
    const struct conn *first = dlist_entry(srv->penalized.head, struct conn, penalty_link);
    uint64_t now = uv_now(srv->loop);
    uint64_t due = first->penalty_due_ms;

    uv_timer_start(&srv->penalty_timer, on_penalty_over, due > now ? due - now : 0, 0);
}

static void on_penalty_over(uv_timer_t *t)
{
    struct local_server *srv = t->data;
    uint64_t now = uv_now(srv->loop);

    while (srv->penalized.head != NULL) {
        struct conn *c = dlist_entry(srv->penalized.head, struct conn, penalty_link);

        if (c->penalty_due_ms > now)
            break;
        int close_after = c->penalty_close;
        penalty_drop(c);
        send_msg(c, LOCAL_ERROR, c->penalty_rid, &c->penalty_error, sizeof(c->penalty_error),
                 close_after);
        update_reading(c);
    }
    arm(srv);
}

void penalty_start(struct local_server *srv)
{
    uv_timer_init(srv->loop, &srv->penalty_timer);
    srv->penalty_timer.data = srv;
}

void penalty_stop(struct local_server *srv)
{
    uv_close((uv_handle_t *)&srv->penalty_timer, NULL);
}

/* c waits out the delay, then is sent e (and closed with close_after). */
static void hold(struct conn *c, uint32_t rid, const struct local_error *e, int close_after)
{
    struct local_server *srv = c->srv;

    c->penalty_error = *e;
    c->penalized = 1;
    c->penalty_close = close_after;
    c->penalty_rid = rid;
    if (close_after) {
        c->share->refusals_held++;
        srv->refusals_held++;
    }
    uv_update_time(srv->loop); /* the loop's time is that of its pass */
    c->penalty_due_ms = uv_now(srv->loop) + PENALTY_MS;
    dlist_append(&srv->penalized, &c->penalty_link);
    update_reading(c);
    if (srv->penalized.head == &c->penalty_link)
        arm(srv);
}

/* At once when c already waits (not met: an unread connection sends no
   request, but never two refusals in one slot), the helper stops, or c's
   uid has PENALTY_HELD_PER_UID connections waiting their refusal. */
static void refuse(struct conn *c, uint32_t rid, int code, int close_after, const char *fmt,
                   va_list ap)
{
    struct local_error e;

    error_format(&e, code, fmt, ap);
    if (c->penalized || c->srv->closing ||
        (close_after && c->share->refusals_held >= PENALTY_HELD_PER_UID))
        send_msg(c, LOCAL_ERROR, rid, &e, sizeof(e), close_after);
    else
        hold(c, rid, &e, close_after);
}

void refuse_later(struct conn *c, uint32_t rid, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    refuse(c, rid, LOCAL_ERETRY, 0, fmt, ap);
    va_end(ap);
}

void refuse_conn_later(struct conn *c, int code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    refuse(c, 0, code, 1, fmt, ap);
    va_end(ap);
}

void penalty_drop(struct conn *c)
{
    if (!c->penalized)
        return;
    c->penalized = 0;
    if (c->penalty_close) {
        c->share->refusals_held--;
        c->srv->refusals_held--;
    }
    c->penalty_close = 0;
    dlist_remove(&c->srv->penalized, &c->penalty_link);
}
