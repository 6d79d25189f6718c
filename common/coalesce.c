/* Blocking calls coalesced into batches; see coalesce.h. */
#include "coalesce.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

/* A caller's place in the queue, on its stack. */
struct waiting {
    void *item;
    bool done;
    struct waiting *next;
};

struct coalesce {
    coalesce_send_fn send;
    void *arg;
    int max, flights, busy;
    pthread_mutex_t lock;
    pthread_cond_t back; /* a batch came back */
    struct waiting *head, **tail;
};

struct coalesce *coalesce_new(coalesce_send_fn send, void *arg, int max, int flights)
{
    struct coalesce *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->send = send;
    c->arg = arg;
    c->max = max < 1 ? 1 : max > COALESCE_MAX ? COALESCE_MAX : max;
    c->flights = flights < 1 ? 1 : flights;
    c->tail = &c->head;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->back, NULL);
    return c;
}

/* Takes up to max waiting callers off the queue, the oldest first. */
static int take(struct coalesce *c, struct waiting **batch, void **items)
{
    int n = 0;

    while (c->head != NULL && n < c->max) {
        batch[n] = c->head;
        items[n++] = c->head->item;
        c->head = c->head->next;
    }
    if (c->head == NULL)
        c->tail = &c->head;
    return n;
}

void coalesce_call(struct coalesce *c, void *item)
{
    struct waiting me = {.item = item};
    struct waiting *batch[COALESCE_MAX];
    void *items[COALESCE_MAX];

    pthread_mutex_lock(&c->lock);
    *c->tail = &me;
    c->tail = &me.next;
    while (!me.done) {
        if (c->busy >= c->flights || c->head == NULL) {
            pthread_cond_wait(&c->back, &c->lock);
            continue;
        }
        /* Our turn to send: ours, if still queued, and whatever waits. */
        int n = take(c, batch, items);
        c->busy++;
        pthread_mutex_unlock(&c->lock);
        c->send(c->arg, items, n);
        pthread_mutex_lock(&c->lock);
        c->busy--;
        for (int i = 0; i < n; i++)
            batch[i]->done = true;
        pthread_cond_broadcast(&c->back);
    }
    pthread_mutex_unlock(&c->lock);
}

void coalesce_free(struct coalesce *c)
{
    if (c == NULL)
        return;
    pthread_cond_destroy(&c->back);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
