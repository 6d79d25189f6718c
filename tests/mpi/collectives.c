/* collectives: Barrier, Bcast, Reduce, Allreduce, Allgather (up to 1000
   ints a rank), Gather, Scatter, Allgatherv, Gatherv and Scatterv (up to 1
   MiB a rank; the v-variants with a count per rank, none on some ranks,
   and the blocks not in rank order) give the results MPI
   defines, whichever coll component runs them (coll_qcg across sites, Open
   MPI's own elsewhere): integer data, so every correct order of reduction
   gives the same bits, checked against values computed here.  Counts 0 to
   1 MiB of int, roots first, middle and last, contiguous and derived (a
   strided vector) datatypes, MPI_IN_PLACE, on MPI_COMM_WORLD, on one
   communicator per site (MPI_Comm_split by libqcgcolour's site integer),
   on one that mixes the sites (odd and even ranks, in reverse order) and on
   a copy of MPI_COMM_WORLD with its ranks reordered (the even ones first,
   then the odd: every site's ranks are apart, so the blocks of a site do
   not sit together in rank order).  Barriers are run (they must return), not timed.

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

/* A block of count ints: contiguous (MPI_INT, count of them), or count
   ints every other int (one vector of extent 2 * count ints). */
static void block_type(int count, int derived, MPI_Datatype *type, int *n)
{
    MPI_Datatype vec;

    *type = MPI_INT;
    *n = count;
    if (!derived)
        return;
    MPI_Type_vector(count > 0 ? count : 1, 1, 2, MPI_INT, &vec);
    MPI_Type_create_resized(vec, 0, (MPI_Aint)(2 * (count > 0 ? count : 1) * sizeof(int)), type);
    MPI_Type_free(&vec);
    MPI_Type_commit(type);
    *n = count > 0;
}

/* Wrong elements in size blocks of per ints (stride apart: the gaps -1),
   block q holding value(q, i, salt). */
static int wrong_blocks(const int *r, int size, size_t per, int stride, int salt)
{
    int errs = 0;

    for (int q = 0; q < size; q++) {
        for (size_t i = 0; i < per; i++) {
            int want = i % stride == 0 ? value(q, (int)(i / stride), salt) : -1;
            errs += r[(size_t)q * per + i] != want;
        }
    }
    return errs;
}

/* Allgather (root < 0) or Gather to root of count ints per rank: from a
   contiguous send buffer into a receive buffer of contiguous or vector
   blocks, or in place. */
static void check_gather(MPI_Comm comm, const char *name, int count, int root, int derived,
                         int in_place)
{
    int rank, size, stride = derived ? 2 : 1, errs = 0, n, salt = root < 0 ? 3 : 4;
    MPI_Datatype rtype;
    int *s, *r;
    size_t per = (size_t)count * stride;

    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    in_place = in_place && (root < 0 || rank == root);
    s = mt_alloc((size_t)count * sizeof(int));
    r = mt_alloc(per * size * sizeof(int));
    block_type(count, derived, &rtype, &n);
    for (int i = 0; i < count; i++)
        s[i] = value(rank, i, salt);
    for (size_t i = 0; i < per * size; i++)
        r[i] = -1;
    if (in_place)
        for (int i = 0; i < count; i++)
            r[(size_t)rank * per + (size_t)i * stride] = s[i];
    if (root < 0)
        MPI_Allgather(in_place ? MPI_IN_PLACE : s, count, MPI_INT, r, n, rtype, comm);
    else
        MPI_Gather(in_place ? MPI_IN_PLACE : s, count, MPI_INT, r, n, rtype, root, comm);
    if (root < 0 || rank == root)
        errs = wrong_blocks(r, size, per, stride, salt);
    if (errs)
        mt_error(rank, "%s: %s of %d (%s%s) root %d: %d wrong elements", name,
                 root < 0 ? "allgather" : "gather", count, derived ? "vector" : "contiguous",
                 in_place ? ", in place" : "", root, errs);
    if (derived)
        MPI_Type_free(&rtype);
    free(s);
    free(r);
}

/* Scatter from root of count ints per rank: from contiguous or vector
   blocks into a contiguous receive buffer, or in place at the root (its
   block stays in the send buffer, which must come back unchanged). */
static void check_scatter(MPI_Comm comm, const char *name, int count, int root, int derived,
                          int in_place)
{
    int rank, size, stride = derived ? 2 : 1, errs = 0, n;
    MPI_Datatype stype;
    int *s = NULL, *r;
    size_t per = (size_t)count * stride;

    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    in_place = in_place && rank == root;
    r = mt_alloc((size_t)count * sizeof(int));
    for (int i = 0; i < count; i++)
        r[i] = -1;
    block_type(count, derived, &stype, &n);
    if (rank == root) {
        s = mt_alloc(per * size * sizeof(int));
        for (int q = 0; q < size; q++)
            for (size_t i = 0; i < per; i++)
                s[(size_t)q * per + i] = i % stride == 0 ? value(q, (int)(i / stride), 5) : -1;
    }
    MPI_Scatter(s, n, stype, in_place ? MPI_IN_PLACE : r, count, MPI_INT, root, comm);
    if (in_place)
        errs = wrong_blocks(s, size, per, stride, 5);
    else
        for (int i = 0; i < count; i++)
            errs += r[i] != value(rank, i, 5);
    if (errs)
        mt_error(rank, "%s: scatter of %d (%s%s) root %d: %d wrong elements", name, count,
                 derived ? "vector" : "contiguous", in_place ? ", in place" : "", root, errs);
    if (derived)
        MPI_Type_free(&stype);
    free(s);
    free(r);
}

/* The v-variants' layout: rank q's count (none on every third rank, the
   others all different; none anywhere when count is 0) and displacement
   in elements, the blocks in reverse rank order with a one-element gap
   before each, so that neither their order nor their spacing is the
   ranks'.  Returns the elements the blocks span. */
static int v_layout(int size, int count, int *counts, int *displs)
{
    int d = 1;

    for (int q = size - 1; q >= 0; q--) {
        counts[q] = count == 0 || q % 3 == 1 ? 0 : count + q;
        displs[q] = d;
        d += counts[q] + 1;
    }
    return d;
}

/* Allgatherv ('a'), Gatherv ('g') or Scatterv ('s', from root) of
   v_layout's blocks: the side with counts and displacements uses ints or
   a derived element (an int every other int), the other side contiguous
   ints; or in place (the root's, every rank's in Allgatherv).  The buffer
   of blocks must equal the one built here, gaps untouched. */
static void check_v(MPI_Comm comm, const char *name, int count, int root, char op, int derived,
                    int in_place)
{
    int rank, size, stride = derived ? 2 : 1, errs = 0, salt = op == 'a' ? 6 : op == 'g' ? 7 : 8;
    int *counts, *displs, *all, *want, *mine, elems;
    MPI_Datatype et = MPI_INT;
    size_t nints;

    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    counts = mt_alloc((size_t)size * sizeof(int));
    displs = mt_alloc((size_t)size * sizeof(int));
    elems = v_layout(size, count, counts, displs);
    nints = (size_t)elems * stride;
    all = mt_alloc(nints * sizeof(int));
    want = mt_alloc(nints * sizeof(int));
    mine = mt_alloc(((size_t)counts[rank] + 1) * sizeof(int));
    if (derived) {
        MPI_Type_create_resized(MPI_INT, 0, (MPI_Aint)(2 * sizeof(int)), &et);
        MPI_Type_commit(&et);
    }
    for (size_t i = 0; i < nints; i++)
        want[i] = -1;
    for (int q = 0; q < size; q++)
        for (int i = 0; i < counts[q]; i++)
            want[(size_t)(displs[q] + i) * stride] = value(q, i, salt);
    in_place = in_place && (op == 'a' || rank == root);
    for (size_t i = 0; i < nints; i++)
        all[i] = op == 's' && rank == root ? want[i] : -1;
    for (int i = 0; i <= counts[rank]; i++)
        mine[i] = op != 's' && i < counts[rank] ? value(rank, i, salt) : -1;
    if (in_place && op != 's')
        for (int i = 0; i < counts[rank]; i++)
            all[(size_t)(displs[rank] + i) * stride] = mine[i];
    if (op == 'a')
        MPI_Allgatherv(in_place ? MPI_IN_PLACE : mine, counts[rank], MPI_INT, all, counts, displs,
                       et, comm);
    else if (op == 'g')
        MPI_Gatherv(in_place ? MPI_IN_PLACE : mine, counts[rank], MPI_INT, all, counts, displs, et,
                    root, comm);
    else
        MPI_Scatterv(all, counts, displs, et, in_place ? MPI_IN_PLACE : mine, counts[rank], MPI_INT,
                     root, comm);
    if (op == 'a' || rank == root)
        for (size_t i = 0; i < nints; i++)
            errs += all[i] != want[i];
    if (op == 's' && !in_place)
        for (int i = 0; i <= counts[rank]; i++)
            errs += mine[i] != (i < counts[rank] ? value(rank, i, salt) : -1);
    if (errs)
        mt_error(rank, "%s: %s of %d+ (%s%s) root %d: %d wrong elements", name,
                 op == 'a'   ? "allgatherv"
                 : op == 'g' ? "gatherv"
                             : "scatterv",
                 count, derived ? "derived" : "contiguous", in_place ? ", in place" : "", root,
                 errs);
    if (derived)
        MPI_Type_free(&et);
    free(counts);
    free(displs);
    free(all);
    free(want);
    free(mine);
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
            check_gather(comm, name, counts[c], -1, 0, 0);
            check_gather(comm, name, counts[c], -1, 0, 1);
            check_gather(comm, name, counts[c], -1, 1, 0);
        }
        /* 1 MiB a rank from one root only (size MiB at the root). */
        for (int ri = counts[c] <= 1000 ? 0 : 2; ri < 3; ri++) {
            for (int v = 0; v < 3; v++) { /* contiguous, vector, in place */
                check_gather(comm, name, counts[c], roots[ri], v == 1, v == 2);
                check_scatter(comm, name, counts[c], roots[ri], v == 1, v == 2);
                check_v(comm, name, counts[c], roots[ri], 'g', v == 1, v == 2);
                check_v(comm, name, counts[c], roots[ri], 's', v == 1, v == 2);
            }
        }
        /* Above 64 KiB in all: the leaders' step is Open MPI's allgatherv. */
        for (int v = 0; v < 3; v++)
            check_v(comm, name, counts[c], -1, 'a', v == 1, v == 2);
    }
}

int main(int argc, char **argv)
{
    int rank, size, quick = 0, site;
    MPI_Comm by_site, mixed, reordered;

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
    MPI_Comm_split(MPI_COMM_WORLD, 0, (rank % 2) * size + rank, &reordered);
    run_all(reordered, "reordered", quick);
    MPI_Comm_free(&by_site);
    MPI_Comm_free(&mixed);
    MPI_Comm_free(&reordered);
    {
        int rc = mt_verdict("collectives", "%s", quick ? "quick" : "up to 1 MiB");

        MPI_Finalize();
        return rc;
    }
}
