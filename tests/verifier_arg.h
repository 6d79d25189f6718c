/* The job credential argument of the SOAP test callers (broker-call,
   frontend-call), which stand in for a helper: a job SECRET, sent as its
   verifier as a helper would (core/verifier.h); "raw:TEXT" sends TEXT as
   the verifier field unchanged (a malformed one, or a leaked secret). */
#ifndef QCG_TEST_VERIFIER_ARG_H
#define QCG_TEST_VERIFIER_ARG_H

#include <string.h>

#include "verifier.h"

static inline char *verifier_arg(const char *job, char *arg, char out[QCG_VERIFIER_LEN + 1])
{
    if (strncmp(arg, "raw:", 4) == 0)
        return arg + 4;
    /* A job id too long to derive from still goes out with a well-formed
       verifier, so that the service's own check of the id is what refuses. */
    if (job_verifier(job, arg, out) < 0)
        memset(out, '0', QCG_VERIFIER_LEN), out[QCG_VERIFIER_LEN] = '\0';
    return out;
}

#endif
