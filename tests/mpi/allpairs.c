/* qcg-mpi-allpairs [MAX_BYTES]: every rank sends to every other rank
 * payloads from 0 bytes to MAX_BYTES (default 16 MiB) across the eager,
 * rendezvous and pipelined paths of ob1, contiguous and strided (packed).
 * Each payload is checked against a checksum of what its sender must have
 * sent.  Prints PASS or FAIL on rank 0; exit status non-zero on failure. */
#include "mpitest.h"

static const size_t sizes[] = {0,     1,     8,      100,    1000,    4096,    12288,   65000,
                               65536, 65600, 131072, 262147, 1 << 20, 4 << 20, 16 << 20};

/* One round: rank r sends to r+d and receives from r-d, for every d. */
static void exchange(int rank, int n, size_t size, MPI_Datatype stype, int scount,
                     unsigned char *sbuf, size_t sbytes, unsigned char *rbuf,
                     unsigned char *scratch, int strided)
{
    for (int d = 1; d < n; d++) {
        int to = (rank + d) % n, from = (rank - d + n) % n;
        MPI_Request req[2];
        uint64_t want;
        int got = -1;
        MPI_Status st;

        mt_fill(sbuf, sbytes, mt_seed(rank, to, size, d + strided * 1000));
        MPI_Irecv(rbuf, (int)size, MPI_BYTE, from, d, MPI_COMM_WORLD, &req[0]);
        MPI_Isend(sbuf, scount, stype, to, d, MPI_COMM_WORLD, &req[1]);
        MPI_Wait(&req[0], &st);
        MPI_Wait(&req[1], MPI_STATUS_IGNORE);
        MPI_Get_count(&st, MPI_BYTE, &got);
        if (got != (int)size) {
            mt_error(rank, "from rank %d: %d bytes instead of %zu", from, got, size);
            continue;
        }
        /* What the sender's type selected out of its buffer. */
        mt_fill(scratch, sbytes, mt_seed(from, rank, size, d + strided * 1000));
        if (strided)
            for (size_t i = 0; i < size / 4; i++)
                memmove(scratch + 4 * i, scratch + 8 * i, 4);
        want = mt_sum(scratch, size);
        if (mt_sum(rbuf, size) != want)
            mt_error(rank, "from rank %d: %zu bytes%s: checksum mismatch", from, size,
                     strided ? " (strided)" : "");
    }
}

int main(int argc, char **argv)
{
    size_t max = 16u << 20, moved = 0, nsizes = 0;
    unsigned char *sbuf, *rbuf, *scratch;
    int rank, n, rc;
    double t0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc > 1)
        max = strtoull(argv[1], NULL, 0);
    sbuf = mt_alloc(2 * max + 8);
    rbuf = mt_alloc(max + 8);
    scratch = mt_alloc(2 * max + 8);
    t0 = mt_now();
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t size = sizes[i];

        if (size > max)
            break;
        nsizes++;
        exchange(rank, n, size, MPI_BYTE, (int)size, sbuf, size, rbuf, scratch, 0);
        moved += size * (size_t)(n - 1);
        /* Strided data goes through the BTL's packing path. */
        if (size % 4 == 0 && size >= 4096 && size <= (4u << 20)) {
            MPI_Datatype vec;

            MPI_Type_vector((int)(size / 4), 4, 8, MPI_BYTE, &vec);
            MPI_Type_commit(&vec);
            exchange(rank, n, size, vec, 1, sbuf, 2 * size, rbuf, scratch, 1);
            MPI_Type_free(&vec);
            moved += size * (size_t)(n - 1);
        }
    }
    rc = mt_verdict("allpairs", "%zu sizes 0..%zu bytes, %.1f MiB sent per rank in %.2f s", nsizes,
                    max, moved / 1048576.0, mt_now() - t0);
    free(sbuf);
    free(rbuf);
    free(scratch);
    MPI_Finalize();
    return rc;
}
