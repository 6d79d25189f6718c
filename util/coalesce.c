#include "coalesce.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* One caller's item, on its stack while it waits. */
struct waiter {
    void *item;
    bool done;
};

struct coalesce {
    pthread_mutex_t lock;
    pthread_cond_t changed; /* a batch went or came back: look again */
    struct waiter **pending;
    int npending, cap, max_batch, in_flight, max_in_flight;
    unsigned long long batches, items;
    coalesce_send_fn send;
    void *arg;
};

struct coalesce *coalesce_new(int max_batch, int in_flight, coalesce_send_fn send, void *arg)
{
    struct coalesce *c = calloc(1, sizeof(*c));
    if (c == NULL || max_batch < 1 || in_flight < 1)
        return free(c), NULL;
    /* Room for a few batches: more callers wait for room, not for memory. */
    c->cap = 4 * max_batch;
    c->pending = calloc((size_t)c->cap, sizeof(*c->pending));
    if (c->pending == NULL)
        return free(c), NULL;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->changed, NULL);
    c->max_batch = max_batch;
    c->max_in_flight = in_flight;
    c->send = send;
    c->arg = arg;
    return c;
}

/* Takes the oldest pending items (at most a batch) and sends them; called
   and returns with the lock held. */
static void send_batch(struct coalesce *c)
{
    int n = c->npending < c->max_batch ? c->npending : c->max_batch;
    struct waiter *w[n];
    void *items[n];
    memcpy(w, c->pending, (size_t)n * sizeof(*w));
    memmove(c->pending, c->pending + n, (size_t)(c->npending - n) * sizeof(*c->pending));
    c->npending -= n;
    c->in_flight++;
    c->batches++;
    c->items += (unsigned long long)n;
    for (int i = 0; i < n; i++)
        items[i] = w[i]->item;
    pthread_cond_broadcast(&c->changed); /* room for more callers */
    pthread_mutex_unlock(&c->lock);
    c->send(c->arg, items, n);
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < n; i++)
        w[i]->done = true;
    c->in_flight--;
    pthread_cond_broadcast(&c->changed);
}

void coalesce_call(struct coalesce *c, void *item)
{
    struct waiter me = {.item = item};
    pthread_mutex_lock(&c->lock);
    while (c->npending == c->cap)
        pthread_cond_wait(&c->changed, &c->lock);
    c->pending[c->npending++] = &me;
    /* Whoever finds a batch's room free sends what waits, its own item or
       not: until ours went, each caller may be the one that sends it. */
    while (!me.done) {
        if (c->in_flight < c->max_in_flight && c->npending > 0)
            send_batch(c);
        else
            pthread_cond_wait(&c->changed, &c->lock);
    }
    pthread_mutex_unlock(&c->lock);
}

void coalesce_counts(struct coalesce *c, unsigned long long *batches, unsigned long long *items,
                     int *waiting)
{
    pthread_mutex_lock(&c->lock);
    *batches = c->batches;
    *items = c->items;
    *waiting = c->npending;
    pthread_mutex_unlock(&c->lock);
}

void coalesce_free(struct coalesce *c)
{
    if (c == NULL)
        return;
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->changed);
    free(c->pending);
    free(c);
}
