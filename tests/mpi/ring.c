/* qcg-mpi-ring [LAPS]: a token goes round the ring LAPS times (each rank adds
 * its rank), then a 1 MiB checksummed block travels once round in both
 * directions.  Prints PASS or FAIL on rank 0. */
#include "mpitest.h"

int main(int argc, char **argv)
{
    int rank, n, laps = 100, rc;
    size_t block = 1u << 20;
    unsigned char *buf, *scratch;
    long long token = 0, want;
    double t0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc > 1)
        laps = atoi(argv[1]);
    int next = (rank + 1) % n, prev = (rank - 1 + n) % n;

    t0 = mt_now();
    for (int lap = 0; lap < laps; lap++) {
        if (rank == 0) {
            token += 0;
            MPI_Send(&token, 1, MPI_LONG_LONG, next, lap, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_LONG_LONG, prev, lap, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_LONG_LONG, prev, lap, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token += rank;
            MPI_Send(&token, 1, MPI_LONG_LONG, next, lap, MPI_COMM_WORLD);
        }
    }
    double lap_us = (mt_now() - t0) / (laps ? laps : 1) * 1e6;
    want = (long long)laps * n * (n - 1) / 2;
    if (rank == 0 && token != want)
        mt_error(rank, "token %lld after %d laps, expected %lld", token, laps, want);

    /* A block round the ring, forwards then backwards, checked at each hop. */
    buf = mt_alloc(block);
    scratch = mt_alloc(block);
    for (int dir = 0; dir < 2; dir++) {
        int to = dir ? prev : next, from = dir ? next : prev;
        uint64_t expect = mt_expected(0, dir, block, 7, scratch);

        if (rank == 0) {
            mt_fill(buf, block, mt_seed(0, dir, block, 7));
            MPI_Send(buf, (int)block, MPI_BYTE, to, 100 + dir, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)block, MPI_BYTE, from, 100 + dir, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, (int)block, MPI_BYTE, from, 100 + dir, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (mt_sum(buf, block) != expect)
                mt_error(rank, "ring block (direction %d) corrupted on arrival", dir);
            MPI_Send(buf, (int)block, MPI_BYTE, to, 100 + dir, MPI_COMM_WORLD);
        }
        if (rank == 0 && mt_sum(buf, block) != expect)
            mt_error(rank, "ring block (direction %d) corrupted after the round", dir);
    }
    rc = mt_verdict("ring", "%d laps (%.1f us per lap), 1 MiB block both ways", laps, lap_us);
    free(buf);
    free(scratch);
    MPI_Finalize();
    return rc;
}
