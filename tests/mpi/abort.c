/* qcg-mpi-abort [CODE]: rank 1 calls MPI_Abort(MPI_COMM_WORLD, CODE) (7 by
 * default) 0.2 s after MPI_Init while every other rank waits in MPI_Barrier,
 * which only the abort ends.  Every rank has exchanged a message with rank 1
 * before: a connection still being made to an aborting rank fails on its
 * own (the peer hangs up in the handshake), and that rank's error would
 * race the abort for the job's exit code.  Each rank first prints one line:
 *   ABORT rank 1 code C      or      BARRIER rank R
 * Tests of the launch path check that the job ends with it, everywhere. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    int rank, size, token = 1, got, code = argc > 1 ? atoi(argv[1]) : 7;
    struct timespec pause = {0, 200 * 1000 * 1000};

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank != 1 && size > 1)
        MPI_Sendrecv(&token, 1, MPI_INT, 1, 0, &got, 1, MPI_INT, 1, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
    if (rank == 1) {
        for (int r = 0; r < size; r++)
            if (r != 1)
                MPI_Sendrecv(&token, 1, MPI_INT, r, 0, &got, 1, MPI_INT, r, 0, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
        printf("ABORT rank 1 code %d\n", code);
        fflush(stdout);
        /* Time for the others to block in the barrier (the abort must
           reach ranks that wait); not a wait for an event: it kills them
           wherever they are. */
        nanosleep(&pause, NULL);
        MPI_Abort(MPI_COMM_WORLD, code);
    }
    printf("BARRIER rank %d\n", rank);
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
