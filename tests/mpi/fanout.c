/* qcg-mpi-fanout: rank 0 sends one number to every other rank, which
 * receives it with MPI_ANY_SOURCE and sends nothing: each rank but 0 only
 * accepts rank 0's connection, before its PML ever added rank 0 (the
 * accepting end of a peer it never sent to).  Every rank prints PASS or
 * FAIL with its rank. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, n, ok = 1;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (rank == 0) {
        for (int dst = 1; dst < n; dst++) {
            int v = 1000 + dst;
            ok = ok && MPI_Send(&v, 1, MPI_INT, dst, 5, MPI_COMM_WORLD) == MPI_SUCCESS;
        }
    } else {
        int v = 0;
        MPI_Status st;
        ok = MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 5, MPI_COMM_WORLD, &st) == MPI_SUCCESS &&
             st.MPI_SOURCE == 0 && v == 1000 + rank;
    }
    printf("%s fanout rank %d\n", ok ? "PASS" : "FAIL", rank);
    MPI_Finalize();
    return ok ? 0 : 1;
}
