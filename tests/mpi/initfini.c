/* qcg-mpi-initfini [--connect]: how long MPI_Init and MPI_Finalize take (what
 * btl_qcg adds: qcg_open and the publish of our contact, the withdrawal).
 * With --connect, an MPI_Alltoall of 1 byte between them sets up every
 * connection of the job, timed too.  Every rank prints one line:
 *   INITFINI rank R init_s I connect_s C finalize_s F
 * (seconds; connect_s 0 without --connect).  Benchmarks take the maximum. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    int connect = argc > 1 && strcmp(argv[1], "--connect") == 0;
    double t0 = now(), t1, t2, t3;
    int rank, n;

    MPI_Init(&argc, &argv);
    t1 = now();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (connect) {
        char *s = calloc((size_t)n, 1), *r = calloc((size_t)n, 1);

        MPI_Alltoall(s, 1, MPI_CHAR, r, 1, MPI_CHAR, MPI_COMM_WORLD);
        free(s);
        free(r);
    }
    t2 = now();
    MPI_Finalize();
    t3 = now();
    printf("INITFINI rank %d init_s %.4f connect_s %.4f finalize_s %.4f\n", rank, t1 - t0, t2 - t1,
           t3 - t2);
    return 0;
}
