/* coll-latency: the time of one collective, as the slowest rank sees it.
   For each case (barrier; bcast of 8 B and 1 MiB; reduce of 8 B and 1 MiB;
   allreduce of 8 B, 64 KiB and 1 MiB; allgather, gather, scatter and
   alltoall of 1 KiB a rank; allgatherv, gatherv and scatterv of 1 KiB a
   rank, the counts and displacements given per rank), after two
   warm-up calls: BLOCKS blocks of ITERS calls, each block timed on every
   rank from the end of a synchronisation of its own (sync_all) to the end
   of its last call, the block's time the maximum over the ranks; one
   line per case with the median and the spread (min, max) of the blocks'
   per-call times in microseconds:
     case barrier median_us 20512.3 min_us ... max_us ...
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

/* A dissemination barrier of point-to-point messages before each block,
   the same code in every run: MPI_Barrier is one of the collectives
   compared, and which rank leaves it last changes what a rooted one
   measures (Open MPI's own Gatherv, the same code in both runs, measured
   1.38x behind coll_qcg's barrier: bench/README.md, issue 35). */
static void sync_all(int rank, int size)
{
    for (int d = 1; d < size; d *= 2)
        MPI_Sendrecv(NULL, 0, MPI_BYTE, (rank + d) % size, 99, NULL, 0, MPI_BYTE,
                     (rank - d + size) % size, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
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
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        for (int w = 0; w < 2; w++)
            one(cases[c].kind, a, b, cases[c].bytes);
        for (int k = 0; k < blocks; k++) {
            double t0, mine, slowest;

            sync_all(rank, size);
            t0 = MPI_Wtime();
            for (int i = 0; i < iters; i++)
                one(cases[c].kind, a, b, cases[c].bytes);
            mine = (MPI_Wtime() - t0) / iters;
            MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            t[k] = slowest * 1e6;
        }
        if (rank == 0) {
            qsort(t, (size_t)blocks, sizeof(double), cmp_double);
            printf("case %s median_us %.1f min_us %.1f max_us %.1f\n", cases[c].name, t[blocks / 2],
                   t[0], t[blocks - 1]);
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
