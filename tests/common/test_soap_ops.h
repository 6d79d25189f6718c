/* The test server's state: what its operations need from the test. */
#ifndef QCG_TEST_SOAP_OPS_H
#define QCG_TEST_SOAP_OPS_H

#include <stdatomic.h>

#include "cmdqueue.h"

struct test_state {
    /* Behind qcg__poll; test_longpoll swaps it when it "restarts" the
       server with a new epoch. */
    _Atomic(struct cmdqueue *) queue;
    atomic_int polls; /* polls that reached the server */
    /* test_longpoll: the epoch poll answers with (0: the caller's; another
       one: no commands, register again), and how many polls act as if their
       ack had been lost (the queue hears 0). */
    _Atomic unsigned long long epoch;
    _Atomic int forget_acks;
};

#endif
