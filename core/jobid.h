/* The grid job ids a user's job id stands for.  A user's job J (QCG_JOB) is
   several jobs of the grid, one per role, so that their ranks never meet:
     J.a.NODE        the qcg-agent of NODE is rank 0; launchers connect from
                     ranks >= 1 (J.h.HASH when J.a.NODE is too long)
     J.m.JOBID       the MPI ranks of Open MPI job JOBID (its ranks are the
                     MPI ranks; one mpirun may run several jobs: spawn)
   All of them are bound by the broker to the same job secret. */
#ifndef QCG_JOBID_H
#define QCG_JOBID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest user job id: room for the longest suffix within QCG_JOB_MAX. */
#define USER_JOB_MAX 40
/* Text of a derived id, NUL included (QCG_JOB_MAX). */
#define GRID_JOB_MAX 64

/* 1..USER_JOB_MAX characters of the job-id alphabet. */
bool user_job_valid(const char *job);
/* The agent job of `node` in job `job`: 0, or -1 if either is not valid. */
int agent_job_id(char out[GRID_JOB_MAX], const char *job, const char *node);
/* The job of the MPI ranks of Open MPI job `ompi_jobid`: 0, or -1. */
int mpi_job_id(char out[GRID_JOB_MAX], const char *job, uint32_t ompi_jobid);
/* A new user job id with 128 bits from the kernel's generator ("j" and 32
   hex digits): 0, or -1 with errno. */
int user_job_generate(char out[USER_JOB_MAX + 1]);

#endif
