/* qcg-mpi-alltoall: MPI_Alltoall with blocks of 1 byte, 1000 bytes and
 * 100 KiB, then MPI_Alltoallv with a different size for every pair; every
 * block is checked against its sender's checksum.  PASS or FAIL on rank 0. */
#include "mpitest.h"

static const int blocks[] = {1, 1000, 100 * 1024};

/* The size rank src sends to rank dst in the Alltoallv round. */
static int vsize(int src, int dst)
{
    return ((src * 7919 + dst * 104729) % 50000) + (src == dst ? 0 : 1);
}

int main(int argc, char **argv)
{
    int rank, n, rc, iters = 3;
    double t0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    t0 = mt_now();
    for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
        size_t bs = (size_t)blocks[b];
        unsigned char *sbuf = mt_alloc(bs * (size_t)n), *rbuf = mt_alloc(bs * (size_t)n);
        unsigned char *scratch = mt_alloc(bs);

        for (int it = 0; it < iters; it++) {
            for (int d = 0; d < n; d++)
                mt_fill(sbuf + bs * (size_t)d, bs, mt_seed(rank, d, bs, it));
            MPI_Alltoall(sbuf, (int)bs, MPI_BYTE, rbuf, (int)bs, MPI_BYTE, MPI_COMM_WORLD);
            for (int s = 0; s < n; s++)
                if (mt_sum(rbuf + bs * (size_t)s, bs) != mt_expected(s, rank, bs, it, scratch))
                    mt_error(rank, "alltoall %zu-byte block from rank %d (iteration %d) is wrong",
                             bs, s, it);
        }
        free(sbuf);
        free(rbuf);
        free(scratch);
    }

    int *scount = mt_alloc(sizeof(int) * (size_t)n), *sdispl = mt_alloc(sizeof(int) * (size_t)n);
    int *rcount = mt_alloc(sizeof(int) * (size_t)n), *rdispl = mt_alloc(sizeof(int) * (size_t)n);
    int stotal = 0, rtotal = 0;

    for (int p = 0; p < n; p++) {
        scount[p] = vsize(rank, p);
        sdispl[p] = stotal;
        stotal += scount[p];
        rcount[p] = vsize(p, rank);
        rdispl[p] = rtotal;
        rtotal += rcount[p];
    }
    unsigned char *sbuf = mt_alloc((size_t)stotal), *rbuf = mt_alloc((size_t)rtotal);
    unsigned char *scratch = mt_alloc(50001);

    for (int p = 0; p < n; p++)
        mt_fill(sbuf + sdispl[p], (size_t)scount[p], mt_seed(rank, p, (size_t)scount[p], 99));
    MPI_Alltoallv(sbuf, scount, sdispl, MPI_BYTE, rbuf, rcount, rdispl, MPI_BYTE, MPI_COMM_WORLD);
    for (int p = 0; p < n; p++)
        if (mt_sum(rbuf + rdispl[p], (size_t)rcount[p]) !=
            mt_expected(p, rank, (size_t)rcount[p], 99, scratch))
            mt_error(rank, "alltoallv block from rank %d (%d bytes) is wrong", p, rcount[p]);
    rc = mt_verdict("alltoall", "blocks of 1 B, 1000 B, 100 KiB x%d and an alltoallv, %.2f s",
                    iters, mt_now() - t0);
    free(sbuf);
    free(rbuf);
    free(scratch);
    free(scount);
    free(sdispl);
    free(rcount);
    free(rdispl);
    MPI_Finalize();
    return rc;
}
