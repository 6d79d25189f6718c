/* Refusals by a per-uid rate, sent after a delay (issue 32, another uid on
   a node).  A uid past lookups-per-uid, publishes-per-uid or
   probes-per-uid was refused at once and asked again at once: under
   bench/helper-uid.sh's floods the helper answered 60,000-80,000 refusals
   a second on two cores, and another uid's requests waited for that CPU.
   Now each such refusal leaves PENALTY_MS after its request, and the
   connection is not read meanwhile: at most one refusal per connection
   every PENALTY_MS, whatever the uid sends.  A uid within its rates never
   waits here. */
#include <stdarg.h>

#include "local_internal.h"

#define PENALTY_MS 100

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
        penalty_drop(c);
        send_msg(c, LOCAL_ERROR, c->penalty_rid, &c->penalty_error, sizeof(c->penalty_error), 0);
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

void refuse_later(struct conn *c, uint32_t rid, const char *fmt, ...)
{
    struct local_server *srv = c->srv;
    struct local_error e;
    va_list ap;

    va_start(ap, fmt);
    error_format(&e, LOCAL_ERETRY, fmt, ap);
    va_end(ap);
    if (c->penalized || srv->closing) {
        /* Not met (an unread connection sends no request), but never two
           refusals in one slot. */
        send_msg(c, LOCAL_ERROR, rid, &e, sizeof(e), 0);
        return;
    }
    c->penalty_error = e;
    c->penalized = 1;
    c->penalty_rid = rid;
    c->penalty_due_ms = uv_now(srv->loop) + PENALTY_MS;
    dlist_append(&srv->penalized, &c->penalty_link);
    update_reading(c);
    if (srv->penalized.head == &c->penalty_link)
        arm(srv);
}

void penalty_drop(struct conn *c)
{
    if (!c->penalized)
        return;
    c->penalized = 0;
    dlist_remove(&c->srv->penalized, &c->penalty_link);
}
