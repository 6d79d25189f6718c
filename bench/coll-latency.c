/* coll-latency: the time of one collective, as the slowest rank sees it.
   For each case (barrier; bcast of 8 B and 1 MiB; reduce of 8 B and 1 MiB;
   allreduce of 8 B, 64 KiB and 1 MiB; allgather, gather, scatter and
   alltoall of 1 KiB a rank; allgatherv, gatherv and scatterv of 1 KiB a
   rank, the counts and displacements given per rank), after two
   warm-up calls: BLOCKS blocks of ITERS calls.  Every block starts on
   every rank at one instant of rank 0's clock (each rank's offset from
   it measured first, by ping-pong), and each rank times it from that
   instant to the end of its last call; the block's time is the maximum
   over the ranks.  Only point-to-point messages run between the blocks,
   so no collective compared decides where the next block starts.  A
   block some rank began late (its start came after the instant) runs
   again.  One line per case with the median and the spread (min, max)
   of the blocks' per-call times in microseconds, and how many blocks
   ran again:
     case barrier median_us 20512.3 min_us ... max_us ... late 0
   Run under mpirun (bench/coll.sh compares coll_qcg with Open MPI's own).

     coll-latency [ITERS [BLOCKS]]   (default 10 5) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind {
    BARRIER,
    BCAST,
    REDUCE,
    ALLREDUCE,
    ALLGATHER,
    GATHER,
    SCATTER,
    ALLTOALL,
    ALLGATHERV,
    GATHERV,
    SCATTERV
};

/* The v-variants' counts and displacements: the same bytes from every rank,
   packed, as the plain calls lay them out, so the two compare. */
static int *counts, *displs;

static void one(enum kind k, char *a, char *b, int bytes)
{
    switch (k) {
    case BARRIER:
        MPI_Barrier(MPI_COMM_WORLD);
        break;
    case BCAST:
        MPI_Bcast(a, bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        break;
    case REDUCE:
        MPI_Reduce(a, b, bytes / 8, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        break;
    case ALLREDUCE:
        MPI_Allreduce(a, b, bytes / 8, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        break;
    case ALLGATHER: /* bytes from each rank: a and b hold 1 MiB, enough for 1024 ranks */
        MPI_Allgather(a, bytes, MPI_BYTE, b, bytes, MPI_BYTE, MPI_COMM_WORLD);
        break;
    case GATHER:
        MPI_Gather(a, bytes, MPI_BYTE, b, bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        break;
    case SCATTER:
        MPI_Scatter(a, bytes, MPI_BYTE, b, bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        break;
    case ALLTOALL:
        MPI_Alltoall(a, bytes, MPI_BYTE, b, bytes, MPI_BYTE, MPI_COMM_WORLD);
        break;
    case ALLGATHERV:
        MPI_Allgatherv(a, bytes, MPI_BYTE, b, counts, displs, MPI_BYTE, MPI_COMM_WORLD);
        break;
    case GATHERV:
        MPI_Gatherv(a, bytes, MPI_BYTE, b, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD);
        break;
    case SCATTERV:
        MPI_Scatterv(a, counts, displs, MPI_BYTE, b, bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        break;
    }
}

/* Tags of the bench's own point-to-point messages. */
enum { TAG_PING = 95, TAG_OFFSET, TAG_START, TAG_TIME };

/* This rank's clock minus rank 0's, from the ping-pong of least round trip
   (NTP's rule: the reply's time against the middle of that round trip).
   Rank 0 gets the longest of those round trips instead, to size the lead
   of each block's start. */
static double clock_offset(int rank, int size)
{
    enum { PINGS = 8 };
    double worst = 0;

    if (rank != 0) {
        double t, off;
        for (int k = 0; k < PINGS; k++) {
            MPI_Recv(NULL, 0, MPI_BYTE, 0, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            t = MPI_Wtime();
            MPI_Send(&t, 1, MPI_DOUBLE, 0, TAG_PING, MPI_COMM_WORLD);
        }
        MPI_Recv(&off, 1, MPI_DOUBLE, 0, TAG_OFFSET, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        return off;
    }
    for (int r = 1; r < size; r++) {
        double best_rtt = -1, off = 0;
        for (int k = 0; k < PINGS; k++) {
            double t1 = MPI_Wtime(), t2, t3;
            MPI_Send(NULL, 0, MPI_BYTE, r, TAG_PING, MPI_COMM_WORLD);
            MPI_Recv(&t2, 1, MPI_DOUBLE, r, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            t3 = MPI_Wtime();
            if (best_rtt < 0 || t3 - t1 < best_rtt) {
                best_rtt = t3 - t1;
                off = t2 - (t1 + t3) / 2;
            }
        }
        MPI_Send(&off, 1, MPI_DOUBLE, r, TAG_OFFSET, MPI_COMM_WORLD);
        if (best_rtt > worst)
            worst = best_rtt;
    }
    return worst;
}

/* The next block's instant, from rank 0 (its clock, `lead` seconds ahead)
   to every rank: 1 and the instant on this rank's clock, or 0 when the
   case has no more blocks. */
static int next_start(int rank, int size, double offset, double lead, int more, double *start)
{
    double msg[2] = {MPI_Wtime() + lead, more};

    if (rank == 0) {
        for (int r = 1; r < size; r++)
            MPI_Send(msg, 2, MPI_DOUBLE, r, TAG_START, MPI_COMM_WORLD);
    } else {
        MPI_Recv(msg, 2, MPI_DOUBLE, 0, TAG_START, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        msg[0] += offset;
    }
    *start = msg[0];
    return msg[1] != 0;
}

/* One block from its instant: each rank waits for it on its own clock,
   runs the calls and sends rank 0 its time from the instant and how late
   it began.  On rank 0: the slowest rank's time; *late: the latest start. */
static double timed_block(int rank, int size, double start, int iters,
                          void (*run)(int iters, void *arg), void *arg, double *late)
{
    double begin, mine[2], worst;

    while ((begin = MPI_Wtime()) < start)
        ;
    run(iters, arg);
    mine[0] = MPI_Wtime() - start;
    mine[1] = begin - start;
    if (rank != 0) {
        MPI_Send(mine, 2, MPI_DOUBLE, 0, TAG_TIME, MPI_COMM_WORLD);
        return 0;
    }
    *late = mine[1];
    worst = mine[0];
    for (int r = 1; r < size; r++) {
        double t[2];
        MPI_Recv(t, 2, MPI_DOUBLE, r, TAG_TIME, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (t[0] > worst)
            worst = t[0];
        if (t[1] > *late)
            *late = t[1];
    }
    return worst;
}

/* What a block runs: ITERS calls of one case. */
struct case_arg {
    enum kind kind;
    char *a, *b;
    int bytes;
};

static void run_case(int iters, void *arg)
{
    const struct case_arg *c = arg;

    for (int i = 0; i < iters; i++)
        one(c->kind, c->a, c->b, c->bytes);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;

    return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
    const struct {
        const char *name;
        enum kind kind;
        int bytes;
    } cases[] = {{"barrier", BARRIER, 0},
                 {"bcast-8B", BCAST, 8},
                 {"bcast-1MiB", BCAST, 1 << 20},
                 {"reduce-8B", REDUCE, 8},
                 {"reduce-1MiB", REDUCE, 1 << 20},
                 {"allreduce-8B", ALLREDUCE, 8},
                 {"allreduce-64KiB", ALLREDUCE, 1 << 16},
                 {"allreduce-1MiB", ALLREDUCE, 1 << 20},
                 {"allgather-1KiB", ALLGATHER, 1024},
                 {"gather-1KiB", GATHER, 1024},
                 {"scatter-1KiB", SCATTER, 1024},
                 {"alltoall-1KiB", ALLTOALL, 1024},
                 {"allgatherv-1KiB", ALLGATHERV, 1024},
                 {"gatherv-1KiB", GATHERV, 1024},
                 {"scatterv-1KiB", SCATTERV, 1024}};
    int iters = argc > 1 ? atoi(argv[1]) : 10, blocks = argc > 2 ? atoi(argv[2]) : 5, rank, size;
    char *a = calloc(1, 1 << 20), *b = calloc(1, 1 << 20);
    double *t = calloc((size_t)(blocks > 0 ? blocks : 1), sizeof(double));

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    counts = calloc((size_t)size, sizeof(int));
    displs = calloc((size_t)size, sizeof(int));
    for (int r = 0; counts != NULL && displs != NULL && r < size; r++) {
        counts[r] = 1024;
        displs[r] = r * 1024;
    }
    if (iters < 1 || blocks < 1 || a == NULL || b == NULL || t == NULL || counts == NULL ||
        displs == NULL || size > 1024) {
        if (rank == 0)
            fprintf(stderr,
                    "usage: coll-latency [ITERS [BLOCKS]] (both >= 1, at most 1024 ranks)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* Each block starts this far ahead of rank 0's clock: a few of the
       longest round trips, doubled after a block some rank began late. */
    double offset = clock_offset(rank, size);
    double lead = 0.001 + 4 * (rank == 0 ? offset : 0);
    if (rank == 0)
        printf("clock: longest ping-pong to rank 0 %.1f us; blocks start %.1f us ahead\n",
               offset * 1e6, lead * 1e6);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct case_arg arg = {cases[c].kind, a, b, cases[c].bytes};
        int late_blocks = 0;

        run_case(2, &arg); /* warm-up */
        double start;
        for (int k = 0; next_start(rank, size, offset, lead, k < blocks, &start);) {
            double late = 0, slowest = timed_block(rank, size, start, iters, run_case, &arg, &late);
            if (rank != 0)
                continue;
            /* A start some rank missed by more than a tenth of the lead
               was not one instant: the block runs again (at most BLOCKS
               more times a case), and the next ones wait longer. */
            if (late > lead / 10 && late_blocks < blocks) {
                late_blocks++;
                lead *= 2;
                continue;
            }
            t[k++] = slowest / iters * 1e6;
        }
        if (rank == 0) {
            qsort(t, (size_t)blocks, sizeof(double), cmp_double);
            printf("case %s median_us %.1f min_us %.1f max_us %.1f late %d\n", cases[c].name,
                   t[blocks / 2], t[0], t[blocks - 1], late_blocks);
            fflush(stdout);
        }
    }
    free(a);
    free(b);
    free(t);
    free(counts);
    free(displs);
    MPI_Finalize();
    return 0;
}
