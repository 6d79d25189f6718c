/* qcg-mpi-vanish: rank 1 exchanges a message with rank 0, then exits
 * without MPI_Finalize (_exit: its kernel closes its sockets with a FIN,
 * an encrypted channel's without a close_notify: a peer process that
 * vanished), while rank 0 waits for a second message that never comes.
 * Open MPI then ends the job (a rank exited without finalizing); meanwhile
 * rank 0's btl_qcg sees the channel break, and btl_qcg_verbose says why.
 * Each rank prints "VANISH rank R" once its exchange is done. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, v = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        MPI_Send(&v, 1, MPI_INT, 1, 1, MPI_COMM_WORLD);
        MPI_Recv(&v, 1, MPI_INT, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("VANISH rank 0\n");
        fflush(stdout);
        MPI_Recv(&v, 1, MPI_INT, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
        MPI_Recv(&v, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&v, 1, MPI_INT, 0, 1, MPI_COMM_WORLD);
        printf("VANISH rank 1\n");
        fflush(stdout);
        /* Time for the message to leave (no progress runs in a sleep). */
        usleep(300000);
        _exit(0);
    }
    MPI_Finalize();
    return 0;
}
