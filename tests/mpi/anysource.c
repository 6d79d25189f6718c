/* qcg-mpi-anysource [COUNT]: receive storms.  Every rank sends COUNT numbered
 * messages (sizes cycling from 0 bytes to 96 KiB, eager and rendezvous) to
 * every other rank at once, and receives all of them with MPI_ANY_SOURCE.
 * Checks: each message's checksum, the count per source, and that messages
 * of one source arrive in the order sent (MPI's non-overtaking rule).  Then
 * rank 0 alone is the target of everybody's storm.  PASS or FAIL on rank 0. */
#include "mpitest.h"

static const size_t sizes[] = {0, 16, 1024, 8000, 70000, 98304};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define MAXSZ 98304
#define TAG 42

/* Message i of a source: its size, and its sequence number in the first 4
   bytes when it has room for them. */
static size_t msg_size(int i)
{
    return sizes[(unsigned)i % NSIZES];
}

static void storm(int rank, int n, int count, int root)
{
    int nsend = (root < 0 || rank != root) ? count : 0;
    int nrecv = root < 0 ? count * (n - 1) : (rank == root ? count * (n - 1) : 0);
    int targets = root < 0 ? n - 1 : (rank == root ? 0 : 1);
    unsigned char *sbufs = mt_alloc((size_t)nsend * (size_t)(targets ? targets : 1) * MAXSZ);
    unsigned char *rbuf = mt_alloc(MAXSZ), *scratch = mt_alloc(MAXSZ);
    MPI_Request *reqs = mt_alloc(sizeof(MPI_Request) * (size_t)(nsend * targets + 1));
    int *next_seq = calloc((size_t)n, sizeof(int));
    int nreq = 0;

    /* All the sends at once, to every target. */
    for (int t = 0, k = 0; t < n && nsend > 0; t++) {
        if (t == rank || (root >= 0 && t != root))
            continue;
        for (int i = 0; i < count; i++, k++) {
            unsigned char *b = sbufs + (size_t)k * MAXSZ;
            size_t sz = msg_size(i);

            mt_fill(b, sz, mt_seed(rank, t, sz, i));
            MPI_Isend(b, (int)sz, MPI_BYTE, t, TAG, MPI_COMM_WORLD, &reqs[nreq++]);
        }
    }
    for (int r = 0; r < nrecv; r++) {
        MPI_Status st;
        int src, got, seq;

        MPI_Recv(rbuf, MAXSZ, MPI_BYTE, MPI_ANY_SOURCE, TAG, MPI_COMM_WORLD, &st);
        src = st.MPI_SOURCE;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if (src < 0 || src >= n || src == rank) {
            mt_error(rank, "message from impossible source %d", src);
            continue;
        }
        seq = next_seq[src]++;
        if (seq >= count) {
            mt_error(rank, "more than %d messages from rank %d", count, src);
            continue;
        }
        if ((size_t)got != msg_size(seq) ||
            mt_sum(rbuf, (size_t)got) != mt_expected(src, rank, msg_size(seq), seq, scratch))
            mt_error(rank, "message %d from rank %d (%d bytes) is not the one sent %d-th", seq, src,
                     got, seq);
    }
    MPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE);
    for (int s = 0; s < n; s++)
        if (s != rank && nrecv > 0 && next_seq[s] != count)
            mt_error(rank, "%d messages from rank %d, expected %d", next_seq[s], s, count);
    free(sbufs);
    free(rbuf);
    free(scratch);
    free(reqs);
    free(next_seq);
}

int main(int argc, char **argv)
{
    int rank, n, count = 40, rc;
    double t0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc > 1)
        count = atoi(argv[1]);
    t0 = mt_now();
    storm(rank, n, count, -1);
    MPI_Barrier(MPI_COMM_WORLD);
    storm(rank, n, count, 0);
    rc =
        mt_verdict("anysource", "%d messages per pair, all-to-all and all-to-rank-0 storms, %.2f s",
                   count, mt_now() - t0);
    MPI_Finalize();
    return rc;
}
