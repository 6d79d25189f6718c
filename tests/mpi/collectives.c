/* collectives: Barrier, Bcast, Reduce, Allreduce and Allgather (up to 1000
   ints a rank) give the results MPI
   defines, whichever coll component runs them (coll_qcg across sites, Open
   MPI's own elsewhere): integer data, so every correct order of reduction
   gives the same bits, checked against values computed here.  Counts 0 to
   1 MiB of int, roots first, middle and last, contiguous and derived (a
   strided vector) datatypes, MPI_IN_PLACE, on MPI_COMM_WORLD, on one
   communicator per site (MPI_Comm_split by libqcgcolour's site integer)
   and on one that mixes the sites (odd and even ranks, in reverse order).
   Barriers are run (they must return), not timed.

     qcg-mpi-collectives [--quick] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpitest.h"
#include "qcgcolour.h"

static int value(int rank, int i, int salt)
{
    return (rank + 1) * 131 + i * 7 + salt;
}

/* The sum over the ranks of value(r, i, salt). */
static long long sum_of(int size, int i, int salt)
{
    long long s = 0;

    for (int r = 0; r < size; r++)
        s += value(r, i, salt);
    return s;
}

static void check_bcast(MPI_Comm comm, const char *name, int count, int root, int derived)
{
    int rank, size, stride = derived ? 3 : 1, errs = 0;
    MPI_Datatype type = MPI_INT;
    int *buf;

    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    buf = mt_alloc((size_t)count * stride * sizeof(int) + sizeof(int));
    if (derived) {
        MPI_Type_vector(count > 0 ? count : 1, 1, stride, MPI_INT, &type);
        MPI_Type_commit(&type);
    }
    for (int i = 0; i < count * stride; i++)
        buf[i] = rank == root ? value(root, i, 1) : -1;
    MPI_Bcast(buf, derived ? (count > 0 ? 1 : 0) : count, type, root, comm);
    for (int i = 0; i < count * stride; i++) {
        int want = (i % stride == 0 || rank == root) ? value(root, i, 1) : -1;
        errs += buf[i] != want;
    }
    if (errs)
        mt_error(rank, "%s: bcast of %d (%s) from %d: %d wrong elements", name, count,
                 derived ? "vector" : "contiguous", root, errs);
    if (derived)
        MPI_Type_free(&type);
    free(buf);
}

static void check_reduce(MPI_Comm comm, const char *name, int count, int root, int all,
                         int in_place)
{
    int rank, size, errs = 0;
    long long *s, *r;

    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    s = mt_alloc((size_t)count * sizeof(*s));
    r = mt_alloc((size_t)count * sizeof(*r));
    for (int i = 0; i < count; i++) {
        s[i] = value(rank, i, 2);
        r[i] = in_place ? s[i] : -7;
    }
    if (all)
        MPI_Allreduce(in_place ? MPI_IN_PLACE : s, r, count, MPI_LONG_LONG, MPI_SUM, comm);
    else
        MPI_Reduce(in_place && rank == root ? MPI_IN_PLACE : s, r, count, MPI_LONG_LONG, MPI_SUM,
                   root, comm);
    if (all || rank == root) {
        for (int i = 0; i < count; i++)
            errs += r[i] != sum_of(size, i, 2);
    }
    if (errs)
        mt_error(rank, "%s: %s of %d%s (root %d): %d wrong sums", name,
                 all ? "allreduce" : "reduce", count, in_place ? " in place" : "", root, errs);
    /* MPI_MAX of the ranks: the largest, everywhere. */
    if (all && count > 0) {
        int mine = rank * 3 + 1, max = -1;

        MPI_Allreduce(&mine, &max, 1, MPI_INT, MPI_MAX, comm);
        if (max != (size - 1) * 3 + 1)
            mt_error(rank, "%s: allreduce MPI_MAX gave %d", name, max);
    }
    free(s);
    free(r);
}

/* Allgather of count ints per rank: from a contiguous send buffer into a
   receive buffer of contiguous or vector blocks, or in place. */
static void check_allgather(MPI_Comm comm, const char *name, int count, int derived, int in_place)
{
    int rank, size, stride = derived ? 2 : 1, errs = 0;
    MPI_Datatype rtype = MPI_INT, vec;
    int *s, *r;
    size_t per = (size_t)count * stride;

    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    s = mt_alloc((size_t)count * sizeof(int));
    r = mt_alloc(per * size * sizeof(int));
    if (derived) {
        /* A block is count ints every other int: extent 2 * count ints. */
        MPI_Type_vector(count > 0 ? count : 1, 1, 2, MPI_INT, &vec);
        MPI_Type_create_resized(vec, 0, (MPI_Aint)(2 * (count > 0 ? count : 1) * sizeof(int)),
                                &rtype);
        MPI_Type_free(&vec);
        MPI_Type_commit(&rtype);
    }
    for (int i = 0; i < count; i++)
        s[i] = value(rank, i, 3);
    for (size_t i = 0; i < per * size; i++)
        r[i] = -1;
    if (in_place)
        for (int i = 0; i < count; i++)
            r[(size_t)rank * per + (size_t)i * stride] = s[i];
    MPI_Allgather(in_place ? MPI_IN_PLACE : s, count, MPI_INT, r, derived ? (count > 0) : count,
                  rtype, comm);
    for (int q = 0; q < size; q++) {
        for (size_t i = 0; i < per; i++) {
            int want = i % stride == 0 ? value(q, (int)(i / stride), 3) : -1;
            errs += r[(size_t)q * per + i] != want;
        }
    }
    if (errs)
        mt_error(rank, "%s: allgather of %d (%s%s): %d wrong elements", name, count,
                 derived ? "vector" : "contiguous", in_place ? ", in place" : "", errs);
    if (derived)
        MPI_Type_free(&rtype);
    free(s);
    free(r);
}

static void run_all(MPI_Comm comm, const char *name, int quick)
{
    const int counts[] = {0, 1, 7, 1000, 262144};
    int size, n = quick ? 4 : 5;

    MPI_Comm_size(comm, &size);
    for (int k = 0; k < 3; k++)
        MPI_Barrier(comm);
    for (int c = 0; c < n; c++) {
        int roots[] = {0, size / 2, size - 1};

        for (int ri = 0; ri < 3; ri++) {
            check_bcast(comm, name, counts[c], roots[ri], 0);
            check_bcast(comm, name, counts[c], roots[ri], 1);
            check_reduce(comm, name, counts[c], roots[ri], 0, 0);
            check_reduce(comm, name, counts[c], roots[ri], 0, 1);
        }
        check_reduce(comm, name, counts[c], 0, 1, 0);
        check_reduce(comm, name, counts[c], 0, 1, 1);
        if (counts[c] <= 1000) {
            check_allgather(comm, name, counts[c], 0, 0);
            check_allgather(comm, name, counts[c], 0, 1);
            check_allgather(comm, name, counts[c], 1, 0);
        }
    }
}

int main(int argc, char **argv)
{
    int rank, size, quick = 0, site;
    MPI_Comm by_site, mixed;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i < argc; i++)
        quick |= strcmp(argv[i], "--quick") == 0;
    site = qcg_colour_int(QCG_COLOUR_SITE);
    if (site < 0)
        site = 0;
    run_all(MPI_COMM_WORLD, "world", quick);
    MPI_Comm_split(MPI_COMM_WORLD, site, rank, &by_site);
    run_all(by_site, "site", quick);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &mixed);
    run_all(mixed, "odd/even", quick);
    MPI_Comm_free(&by_site);
    MPI_Comm_free(&mixed);
    {
        int rc = mt_verdict("collectives", "%s", quick ? "quick" : "up to 1 MiB");

        MPI_Finalize();
        return rc;
    }
}
