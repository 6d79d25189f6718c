/* qcg-mpi-firstsend [--all-qcg]: right after MPI_Init (which ends in a
 * fence: every rank leaves it within milliseconds of the others), every rank
 * sends to every other rank before receiving anything, so every connection
 * of the job is attempted from both ends at once.  Per pair: small, eager,
 * rendezvous and small messages again, all with one tag, checked for content
 * and order.  Then btl_qcg's connection log: at most one connection per peer
 * (exactly one with --all-qcg, when btl_qcg carries every peer), and both
 * ends of a pair agree on who initiated it.  PASS or FAIL on rank 0. */
#include "connlog.h"
#include "mpitest.h"

static const size_t sizes[] = {8, 100, 65000, 262144, 16, 3 << 20, 8};
#define NMSG (int)(sizeof(sizes) / sizeof(sizes[0]))
#define TAG 7

int main(int argc, char **argv)
{
    int all_qcg = argc > 1 && strcmp(argv[1], "--all-qcg") == 0;
    size_t per_peer = 0;
    int rank, n, rc, nlogged = 0;
    double t0, t_first;

    connlog_setup();
    MPI_Init(&argc, &argv);
    t0 = mt_now();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (int i = 0; i < NMSG; i++)
        per_peer += sizes[i];

    unsigned char *sbuf = mt_alloc(per_peer * (size_t)n), *rbuf = mt_alloc(per_peer * (size_t)n);
    unsigned char *scratch = mt_alloc(per_peer);
    MPI_Request *reqs = mt_alloc(sizeof(MPI_Request) * (size_t)(2 * NMSG * n));
    int nreq = 0;

    /* Sends first (to everybody, nearest peer first), then the receives. */
    for (int d = 1; d < n; d++) {
        int to = (rank + d) % n;
        size_t off = per_peer * (size_t)to;

        for (int i = 0; i < NMSG; off += sizes[i], i++) {
            mt_fill(sbuf + off, sizes[i], mt_seed(rank, to, sizes[i], i));
            MPI_Isend(sbuf + off, (int)sizes[i], MPI_BYTE, to, TAG, MPI_COMM_WORLD, &reqs[nreq++]);
        }
    }
    for (int d = 1; d < n; d++) {
        int from = (rank - d + n) % n;
        size_t off = per_peer * (size_t)from;

        for (int i = 0; i < NMSG; off += sizes[i], i++)
            MPI_Irecv(rbuf + off, (int)sizes[i], MPI_BYTE, from, TAG, MPI_COMM_WORLD,
                      &reqs[nreq++]);
    }
    MPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE);
    t_first = mt_now() - t0;
    for (int from = 0; from < n; from++) {
        size_t off = per_peer * (size_t)from;

        if (from == rank)
            continue;
        for (int i = 0; i < NMSG; off += sizes[i], i++)
            if (mt_sum(rbuf + off, sizes[i]) != mt_expected(from, rank, sizes[i], i, scratch))
                mt_error(rank, "message %d (%zu bytes) from rank %d: wrong content or order", i,
                         sizes[i], from);
    }

    /* Exactly one channel per pair, agreed by both ends. */
    MPI_Barrier(MPI_COMM_WORLD);
    struct connrec *mine = mt_alloc(sizeof(*mine) * (size_t)n);
    struct connrec *all = mt_alloc(sizeof(*all) * (size_t)n * (size_t)n);

    connlog_read(rank, n, mine);
    for (int p = 0; p < n; p++) {
        if (p == rank)
            continue;
        if (mine[p].count > 1)
            mt_error(rank, "%d connections to rank %d (one expected)", mine[p].count, p);
        if (all_qcg && mine[p].count == 0)
            mt_error(rank, "no btl_qcg connection to rank %d", p);
        nlogged += mine[p].count > 0;
    }
    connlog_gather(rank, n, mine, all);
    if (rank == 0)
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++) {
                struct connrec *a = &all[i * n + j], *b = &all[j * n + i];

                if (a->count != b->count)
                    mt_error(rank, "ranks %d and %d disagree: %d and %d connections", i, j,
                             a->count, b->count);
                else if (a->count == 1 && a->role == b->role)
                    mt_error(rank, "ranks %d and %d both think they were the %s", i, j,
                             a->role == 'i' ? "initiator" : "acceptor");
            }
    int total_logged = 0;

    MPI_Reduce(&nlogged, &total_logged, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    rc = mt_verdict("firstsend",
                    "%d messages per pair sent at once, first exchange %.3f s, %d btl_qcg "
                    "channel ends",
                    NMSG, t_first, total_logged);
    connlog_cleanup();
    free(mine);
    free(all);
    free(sbuf);
    free(rbuf);
    free(scratch);
    free(reqs);
    MPI_Finalize();
    return rc;
}
