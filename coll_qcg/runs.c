/* Gather and Scatter move each site's run of blocks (packed bytes, the same
   number from every rank) between the root and every other site's leader
   in one step: one WAN latency, each block across the WAN once. */
#include <limits.h>
#include <stdlib.h>

#include "coll_qcg.h"

#include "ompi/mca/pml/pml.h"
#include "ompi/request/request.h"

size_t coll_qcg_block_bytes(int count, ompi_datatype_t *dtype, int size)
{
    size_t tsize = 0;

    ompi_datatype_type_size(dtype, &tsize);
    if (count <= 0 || tsize == 0 || tsize * (size_t)count * (size_t)size > INT_MAX)
        return 0;
    return tsize * (size_t)count;
}

int coll_qcg_runs_alloc(coll_qcg_module_t *m, int rank, int root, size_t bytes, int size,
                        struct coll_qcg_runs *b)
{
    int site = m->site_of[rank];

    b->n = m->site_start[site + 1] - m->site_start[site];
    b->local_root = site == m->site_of[root] ? m->local_rank[root] : 0;
    b->collector = m->local_rank[rank] == b->local_root;
    b->base = malloc(rank == root   ? (size_t)size * bytes
                     : b->collector ? (size_t)b->n * bytes
                                    : bytes);
    if (b->base == NULL)
        return OMPI_ERR_OUT_OF_RESOURCE;
    b->run = rank == root ? b->base + (size_t)m->site_start[site] * bytes : b->base;
    b->mine = b->collector ? b->run + (size_t)m->local_rank[rank] * bytes : b->base;
    return OMPI_SUCCESS;
}

int coll_qcg_root_runs(coll_qcg_module_t *m, char *all, size_t bytes, int root,
                       ompi_communicator_t *comm, int tag, int sending)
{
    ompi_request_t **reqs = malloc((size_t)m->sites * sizeof(*reqs));
    int k = 0, rc = OMPI_SUCCESS;

    if (reqs == NULL)
        return OMPI_ERR_OUT_OF_RESOURCE;
    for (int s = 0; rc == OMPI_SUCCESS && s < m->sites; s++) {
        char *run = all + (size_t)m->site_start[s] * bytes;
        int n = (int)((size_t)(m->site_start[s + 1] - m->site_start[s]) * bytes);

        if (s == m->site_of[root])
            continue;
        if (sending)
            rc = MCA_PML_CALL(isend(run, n, MPI_BYTE, m->leader[s], tag, MCA_PML_BASE_SEND_STANDARD,
                                    comm, &reqs[k++]));
        else
            rc = MCA_PML_CALL(irecv(run, n, MPI_BYTE, m->leader[s], tag, comm, &reqs[k++]));
    }
    /* Also after a failure to post more: none may outlive the buffer. */
    if (k > 0) {
        int wrc = ompi_request_wait_all((size_t)k, reqs, MPI_STATUSES_IGNORE);

        rc = rc != OMPI_SUCCESS ? rc : wrc;
    }
    free(reqs);
    return rc;
}
