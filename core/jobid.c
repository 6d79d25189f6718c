/* The grid job ids a user's job id stands for (jobid.h). */
#include "jobid.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "hex.h"
#include "proto.h"

bool user_job_valid(const char *job)
{
    return job != NULL && strlen(job) <= USER_JOB_MAX && job_valid(job);
}

/* FNV-1a, 64 bits: only to shorten a node name that does not fit; two names
   with one hash would make their agents busy, which the second one reports. */
static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

int agent_job_id(char out[GRID_JOB_MAX], const char *job, const char *node)
{
    int n;

    if (!user_job_valid(job) || !name_valid(node))
        return -1;
    n = snprintf(out, GRID_JOB_MAX, "%s.a.%s", job, node);
    if (n < 0 || n >= GRID_JOB_MAX)
        n = snprintf(out, GRID_JOB_MAX, "%s.h.%016llx", job, (unsigned long long)fnv1a(node));
    return n > 0 && n < GRID_JOB_MAX && job_valid(out) ? 0 : -1;
}

int mpi_job_id(char out[GRID_JOB_MAX], const char *job, uint32_t ompi_jobid)
{
    int n;

    if (!user_job_valid(job))
        return -1;
    n = snprintf(out, GRID_JOB_MAX, "%s.m.%u", job, ompi_jobid);
    return n > 0 && n < GRID_JOB_MAX && job_valid(out) ? 0 : -1;
}

int user_job_generate(char out[USER_JOB_MAX + 1])
{
    unsigned char r[16];
    size_t got = 0;

    while (got < sizeof(r)) {
        ssize_t n = getrandom(r + got, sizeof(r) - got, 0);
        if (n < 0)
            return -1;
        got += (size_t)n;
    }
    out[0] = 'j';
    hex_encode(r, sizeof(r), out + 1);
    return 0;
}
