/* cg-kernel: conjugate gradients on the 1-D Poisson problem -u'' = 1 on N
   points per rank (Dirichlet ends), the vector split in rank order: each
   iteration a halo exchange with the two neighbour ranks (one double each
   way) and two dot products (MPI_Allreduce of one double), the pattern of
   every Krylov solver.  Prints the time per iteration (slowest rank, after
   WARM warm-up iterations) and the residual norm reached (the same in runs
   with and without coll_qcg, up to the last bits of the sums):
     cg iterations 200 ms_per_iter 41.2 residual 1.2e-03 start 3.2e+01
     cg-kernel [ITERS [N]]   (default 200 1000) */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static double dot(const double *a, const double *b, int n)
{
    double local = 0, all = 0;

    for (int i = 0; i < n; i++)
        local += a[i] * b[i];
    MPI_Allreduce(&local, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return all;
}

/* y = A x for A = tridiag(-1, 2, -1), x's neighbours from the next ranks. */
static void matvec(const double *x, double *y, int n, int rank, int size)
{
    double left = 0, right = 0;
    int lo = rank > 0 ? rank - 1 : MPI_PROC_NULL, hi = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;

    MPI_Sendrecv(&x[n - 1], 1, MPI_DOUBLE, hi, 1, &left, 1, MPI_DOUBLE, lo, 1, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    MPI_Sendrecv(&x[0], 1, MPI_DOUBLE, lo, 2, &right, 1, MPI_DOUBLE, hi, 2, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    for (int i = 0; i < n; i++)
        y[i] = 2 * x[i] - (i > 0 ? x[i - 1] : left) - (i < n - 1 ? x[i + 1] : right);
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 200, n = argc > 2 ? atoi(argv[2]) : 1000, warm = 5;
    int rank, size;
    double *x, *r, *p, *q, rr, rr0, t0 = 0, mine, slowest;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    x = calloc((size_t)n, sizeof(double));
    r = malloc((size_t)n * sizeof(double));
    p = malloc((size_t)n * sizeof(double));
    q = malloc((size_t)n * sizeof(double));
    if (iters < 1 || n < 1 || x == NULL || r == NULL || p == NULL || q == NULL) {
        MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }
    for (int i = 0; i < n; i++)
        r[i] = p[i] = 1.0; /* b - A*0 */
    rr = rr0 = dot(r, r, n);
    for (int k = 0; k < warm + iters; k++) {
        double alpha, beta, rr_new;

        if (k == warm) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        matvec(p, q, n, rank, size);
        alpha = rr / dot(p, q, n);
        for (int i = 0; i < n; i++) {
            x[i] += alpha * p[i];
            r[i] -= alpha * q[i];
        }
        rr_new = dot(r, r, n);
        beta = rr_new / rr;
        rr = rr_new;
        for (int i = 0; i < n; i++)
            p[i] = r[i] + beta * p[i];
    }
    mine = (MPI_Wtime() - t0) / iters;
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("cg iterations %d ms_per_iter %.2f residual %.3e start %.3e\n", iters, slowest * 1e3,
               sqrt(rr), sqrt(rr0));
    free(x);
    free(r);
    free(p);
    free(q);
    MPI_Finalize();
    return 0;
}
