/* What an epoll event points at: every object registered in the relay's
   epoll set starts with a struct handle saying what it is. */
#ifndef PROXY_HANDLE_H
#define PROXY_HANDLE_H

enum handle_kind {
    HANDLE_LISTEN,   /* the data listener */
    HANDLE_WAKE,     /* the eventfd relay_stop writes to */
    HANDLE_CONN,     /* a connection not yet paired */
    HANDLE_PAIR_END, /* one socket of a pair */
    HANDLE_DEAD,     /* closed during this batch of events; freed after it */
};

struct handle {
    enum handle_kind kind;
};

#endif
