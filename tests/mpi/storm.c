/* qcg-mpi-storm: the connection storm.  After MPI_Init and a barrier, every
 * rank sends one byte to every other rank and receives one from each, all
 * at once, so every connection of the job is set up at the same moment from
 * both ends.  A thread of our own (not MPI's) counts the process's open
 * descriptors every 2 ms meanwhile.  Rank 0 prints one line:
 *   STORM ranks N pairs P seconds S fds_max F
 * (S: the slowest rank's time from the barrier to its last message; F: the
 * most descriptors any rank had open), then PASS or FAIL (a wrong byte). */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "mpitest.h"

static atomic_int stop;
static atomic_int fds_max;

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    if (d == NULL)
        return 0;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

static void *sample(void *arg)
{
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 2000000};

    (void)arg;
    while (!atomic_load(&stop)) {
        int n = count_fds();

        if (n > atomic_load(&fds_max))
            atomic_store(&fds_max, n);
        nanosleep(&pause, NULL); /* a sampling period, not a wait for an event */
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int rank, n, rc, mine, fmax;
    unsigned char *out, *in;
    MPI_Request *req;
    double t0, took, slowest;
    pthread_t sampler;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    out = malloc((size_t)n);
    in = malloc((size_t)n);
    req = malloc(2 * (size_t)n * sizeof(*req));
    if (out == NULL || in == NULL || req == NULL)
        MPI_Abort(MPI_COMM_WORLD, 2);
    atomic_store(&fds_max, count_fds());
    if (pthread_create(&sampler, NULL, sample, NULL) != 0)
        MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = mt_now();
    for (int p = 0; p < n; p++) {
        out[p] = (unsigned char)(rank * 31 + p);
        in[p] = 0;
        MPI_Irecv(&in[p], 1, MPI_BYTE, p, 5, MPI_COMM_WORLD, &req[2 * p]);
        MPI_Isend(&out[p], 1, MPI_BYTE, p, 5, MPI_COMM_WORLD, &req[2 * p + 1]);
    }
    MPI_Waitall(2 * n, req, MPI_STATUSES_IGNORE);
    took = mt_now() - t0;
    atomic_store(&stop, 1);
    pthread_join(sampler, NULL);
    for (int p = 0; p < n; p++)
        mt_errors += in[p] != (unsigned char)(p * 31 + rank);
    mine = atomic_load(&fds_max);
    MPI_Reduce(&took, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&mine, &fmax, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("STORM ranks %d pairs %d seconds %.3f fds_max %d\n", n, n * (n - 1) / 2, slowest,
               fmax);
    rc = mt_verdict("storm", "every pair at once in %.3f s", slowest);
    free(out);
    free(in);
    free(req);
    MPI_Finalize();
    return rc;
}
