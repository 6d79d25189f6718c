/* The leaders' step for small messages: every leader sends to every other
   at once, so the step costs one WAN latency whatever the number of sites
   (Open MPI's trees and butterflies over S leaders take ceil(log2 S) or
   more).  It sends S - 1 copies of the data from each leader, so it is
   used only up to coll_qcg_flat_max bytes (README.md).  Reductions combine
   the S contributions in leader order, the same on every leader, so every
   leader (and through the site broadcast every rank) gets the same bits. */
#include <stdlib.h>

#include "coll_qcg.h"

#include "ompi/mca/coll/base/coll_tags.h"
#include "ompi/mca/pml/pml.h"
#include "ompi/request/request.h"

double coll_qcg_bytes(int count, ompi_datatype_t *dtype)
{
    size_t size = 0;

    ompi_datatype_type_size(dtype, &size);
    return (double)size * count;
}

int coll_qcg_flat(int count, ompi_datatype_t *dtype)
{
    return coll_qcg_bytes(count, dtype) <= (double)mca_coll_qcg_component.flat_max;
}

/* Waits for the k requests posted (also after a failure to post more:
   none may outlive its buffers), frees the array; the first error. */
int coll_qcg_finish(ompi_request_t **reqs, int k, int rc)
{
    int wrc = k > 0 ? ompi_request_wait_all((size_t)k, reqs, MPI_STATUSES_IGNORE) : OMPI_SUCCESS;

    free(reqs);
    return rc != OMPI_SUCCESS ? rc : wrc;
}

/* Posts a receive from and a send to every other leader (NULL buffers
   skip that side), waits for all. */
static int exchange(ompi_communicator_t *leaders, int tag, const void *out, int count,
                    ompi_datatype_t *dtype, char *in, ptrdiff_t in_stride, int sending,
                    int receiving)
{
    int n = ompi_comm_size(leaders), me = ompi_comm_rank(leaders), k = 0, rc = OMPI_SUCCESS;
    ompi_request_t **reqs = malloc(2 * (size_t)n * sizeof(*reqs));

    if (reqs == NULL)
        return OMPI_ERR_OUT_OF_RESOURCE;
    for (int i = 0; rc == OMPI_SUCCESS && receiving && i < n; i++) {
        if (i != me)
            rc = MCA_PML_CALL(irecv(in + i * in_stride, count, dtype, i, tag, leaders, &reqs[k++]));
    }
    for (int i = 0; rc == OMPI_SUCCESS && sending && i < n; i++) {
        if (i != me)
            rc = MCA_PML_CALL(
                isend(out, count, dtype, i, tag, MCA_PML_BASE_SEND_STANDARD, leaders, &reqs[k++]));
    }
    return coll_qcg_finish(reqs, k, rc);
}

int coll_qcg_flat_barrier(ompi_communicator_t *leaders)
{
    static char none; /* zero bytes go nowhere, but from a real address */

    return exchange(leaders, MCA_COLL_BASE_TAG_BARRIER, &none, 0, MPI_BYTE, &none, 0, 1, 1);
}

int coll_qcg_flat_bcast(void *buf, int count, ompi_datatype_t *dtype, int root,
                        ompi_communicator_t *leaders)
{
    if (ompi_comm_rank(leaders) == root)
        return exchange(leaders, MCA_COLL_BASE_TAG_BCAST, buf, count, dtype, NULL, 0, 1, 0);
    return MCA_PML_CALL(
        recv(buf, count, dtype, root, MCA_COLL_BASE_TAG_BCAST, leaders, MPI_STATUS_IGNORE));
}

/* buf (in place) := c[0] op c[1] op ... op c[n-1], c[i] leader i's
   contribution, evaluated from the right: the same order everywhere. */
static int combine(void *buf, int count, ompi_datatype_t *dtype, struct ompi_op_t *op,
                   ompi_communicator_t *leaders, int tag, int root)
{
    int n = ompi_comm_size(leaders), me = ompi_comm_rank(leaders), rc;
    ptrdiff_t lb, extent, gap = 0;
    size_t span = opal_datatype_span(&dtype->super, (size_t)count, &gap);
    char *base, *in;

    ompi_datatype_get_extent(dtype, &lb, &extent);
    if (root >= 0 && me != root)
        return MCA_PML_CALL(
            send(buf, count, dtype, root, tag, MCA_PML_BASE_SEND_STANDARD, leaders));
    /* n blocks of span bytes: the others' contributions, block me unused. */
    base = malloc(span > 0 ? span * (size_t)n : 1);
    if (base == NULL)
        return OMPI_ERR_OUT_OF_RESOURCE;
    in = base - gap;
    rc = exchange(leaders, tag, buf, count, dtype, in, (ptrdiff_t)span, root < 0, 1);
    /* Gathered into block n-1 (or buf, when it is ours), then leftwards. */
    if (rc == OMPI_SUCCESS && count > 0) {
        char *acc = me == n - 1 ? (char *)buf : in + (ptrdiff_t)(n - 1) * (ptrdiff_t)span;

        for (int i = n - 2; rc == OMPI_SUCCESS && i >= 0; i--) {
            char *c = i == me ? (char *)buf : in + (ptrdiff_t)i * (ptrdiff_t)span;

            rc = MPI_Reduce_local(c, acc, count, dtype, op) == MPI_SUCCESS ? OMPI_SUCCESS
                                                                           : OMPI_ERROR;
        }
        if (rc == OMPI_SUCCESS && acc != buf)
            rc = ompi_datatype_copy_content_same_ddt(dtype, (size_t)count, buf, acc);
    }
    free(base);
    return rc;
}

int coll_qcg_flat_allreduce(void *buf, int count, ompi_datatype_t *dtype, struct ompi_op_t *op,
                            ompi_communicator_t *leaders)
{
    return combine(buf, count, dtype, op, leaders, MCA_COLL_BASE_TAG_ALLREDUCE, -1);
}

int coll_qcg_flat_reduce(void *buf, int count, ompi_datatype_t *dtype, struct ompi_op_t *op,
                         int root, ompi_communicator_t *leaders)
{
    return combine(buf, count, dtype, op, leaders, MCA_COLL_BASE_TAG_REDUCE, root);
}

/* Each leader's run of blocks (counts[i] elements at displs[i] of all) to
   every other leader, in place. */
int coll_qcg_flat_allgatherv(void *all, const int *counts, const int *displs,
                             ompi_datatype_t *dtype, ompi_communicator_t *leaders)
{
    int n = ompi_comm_size(leaders), me = ompi_comm_rank(leaders), k = 0, rc = OMPI_SUCCESS;
    ptrdiff_t lb, extent;
    ompi_request_t **reqs = malloc(2 * (size_t)n * sizeof(*reqs));
    char *base = all;

    if (reqs == NULL)
        return OMPI_ERR_OUT_OF_RESOURCE;
    ompi_datatype_get_extent(dtype, &lb, &extent);
    for (int i = 0; rc == OMPI_SUCCESS && i < n; i++) {
        if (i != me)
            rc = MCA_PML_CALL(irecv(base + displs[i] * extent, counts[i], dtype, i,
                                    MCA_COLL_BASE_TAG_ALLGATHER, leaders, &reqs[k++]));
    }
    for (int i = 0; rc == OMPI_SUCCESS && i < n; i++) {
        if (i != me)
            rc = MCA_PML_CALL(isend(base + displs[me] * extent, counts[me], dtype, i,
                                    MCA_COLL_BASE_TAG_ALLGATHER, MCA_PML_BASE_SEND_STANDARD,
                                    leaders, &reqs[k++]));
    }
    return coll_qcg_finish(reqs, k, rc);
}
