/* Each uid its turn on the event loop (issue 32, another uid on a node).
   libuv reads every readable connection in one pass of the loop, and each
   up to 32 times: a uid with hundreds of connections whose requests are
   answered at once (refused by a rate, say) had thousands of its messages
   served in every pass, and another uid's request waited behind all of
   them: 45-50 ms at the median under bench/helper-uid.sh's lookup flood.
   So while another uid is connected, a uid whose connections sent
   TURN_MESSAGES messages in this pass is not read again until the next
   one: its messages wait in the kernel, and the next pass starts with
   everyone's.  A uid alone on the helper is read as before. */
#include "local_internal.h"
#include "shares.h"

#define TURN_MESSAGES 16

/* A pass of the loop has ended (its I/O callbacks ran): the uids whose turn
   was spent are read again. */
static void on_pass_end(uv_check_t *h)
{
    struct local_server *srv = h->data;

    srv->turn++;
    if (!srv->turn_spent)
        return;
    srv->turn_spent = 0;
    /* The next link first: a connection that cannot be read closes. */
    for (struct dlink *l = srv->conns.head, *next; l != NULL; l = next) {
        next = l->next;
        update_reading(dlist_entry(l, struct conn, link));
    }
}

void turns_start(struct local_server *srv)
{
    uv_check_init(srv->loop, &srv->turn_check);
    srv->turn_check.data = srv;
    uv_check_start(&srv->turn_check, on_pass_end);
    /* It must not keep the loop running once everything else has closed. */
    uv_unref((uv_handle_t *)&srv->turn_check);
}

void turns_stop(struct local_server *srv)
{
    uv_close((uv_handle_t *)&srv->turn_check, NULL);
}

int turn_spent(const struct conn *c)
{
    return c->share->turn == c->srv->turn && c->share->turn_over;
}

void turn_charge(struct conn *c)
{
    struct local_server *srv = c->srv;
    struct share *sh = c->share;

    if (sh->turn != srv->turn) {
        sh->turn = srv->turn;
        sh->turn_messages = 0;
        sh->turn_over = 0;
    }
    if (++sh->turn_messages < TURN_MESSAGES || !share_others_connected(srv->shares, sh))
        return;
    /* Stop reading all of the uid's connections now, not only this one:
       the others' events of this pass are then skipped. */
    sh->turn_over = 1;
    srv->turn_spent = 1;
    for (struct dlink *l = srv->conns.head, *next; l != NULL; l = next) {
        struct conn *o = dlist_entry(l, struct conn, link);
        next = l->next;
        if (o->share == sh)
            update_reading(o);
    }
}
