/*
 * Intrusive doubly linked lists: each element holds a struct dlink, found
 * back from it with dlist_entry.  Append and removal are O(1) and keep the
 * order of arrival, which the daemons use as deadline order (every element
 * of a list gets the same timeout) or activity order (an element touched
 * moves to the tail).
 */
#ifndef QCG_COMMON_DLIST_H
#define QCG_COMMON_DLIST_H

#include <stddef.h>

struct dlink {
    struct dlink *prev, *next;
};

struct dlist {
    struct dlink *head, *tail;
};

#define dlist_entry(link, type, member) ((type *)(void *)((char *)(link)-offsetof(type, member)))

/* The element of a link that may be NULL. */
#define dlist_entry_or_null(link, type, member)                                                    \
    ((link) != NULL ? dlist_entry(link, type, member) : NULL)

static inline void dlist_append(struct dlist *l, struct dlink *n)
{
    n->next = NULL;
    n->prev = l->tail;
    if (l->tail != NULL)
        l->tail->next = n;
    else
        l->head = n;
    l->tail = n;
}

static inline void dlist_remove(struct dlist *l, struct dlink *n)
{
    if (n->prev != NULL)
        n->prev->next = n->next;
    else
        l->head = n->next;
    if (n->next != NULL)
        n->next->prev = n->prev;
    else
        l->tail = n->prev;
    n->prev = n->next = NULL;
}

#endif
