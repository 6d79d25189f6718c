/* The test server's state: what its operations need from the test. */
#ifndef QCG_TEST_SOAP_OPS_H
#define QCG_TEST_SOAP_OPS_H

#include <stdatomic.h>

#include "cmdqueue.h"

struct test_state {
    struct cmdqueue *queue; /* behind qcg__poll */
    atomic_int polls;       /* polls that reached the queue */
};

#endif
