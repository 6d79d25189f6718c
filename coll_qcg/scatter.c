/* Scatter by sites, Gather reversed: the root packs the blocks site by
   site and sends every other site's run straight to that site's leader
   (one WAN latency, each block across the WAN once); each site's collector
   (the root in its own site, the leader elsewhere) scatters the run in the
   site.  Only the root knows sdtype, so the blocks travel packed. */
#include <stdlib.h>

#include "coll_qcg.h"

#include "ompi/mca/coll/base/coll_tags.h"
#include "ompi/mca/pml/pml.h"

int coll_qcg_scatter(const void *sbuf, int scount, ompi_datatype_t *sdtype, void *rbuf, int rcount,
                     ompi_datatype_t *rdtype, int root, ompi_communicator_t *comm,
                     mca_coll_base_module_t *module)
{
    coll_qcg_module_t *m = (coll_qcg_module_t *)module;
    int rank = ompi_comm_rank(comm), size = ompi_comm_size(comm), rc = OMPI_SUCCESS, pos;
    int in_place = rank == root && rbuf == MPI_IN_PLACE;
    size_t bytes;
    ptrdiff_t lb, sext = 0;
    struct coll_qcg_runs b;

    if (coll_qcg_ready(m, comm) != QCG_COLL_SITES ||
        (bytes = rank == root ? coll_qcg_block_bytes(scount, sdtype, size)
                              : coll_qcg_block_bytes(rcount, rdtype, size)) == 0)
        return m->prev.scatter(sbuf, scount, sdtype, rbuf, rcount, rdtype, root, comm,
                               m->prev.scatter_module);
    rc = coll_qcg_runs_alloc(m, rank, root, bytes, size, &b);
    if (rc != OMPI_SUCCESS)
        return rc;
    if (rank == root) {
        ompi_datatype_get_extent(sdtype, &lb, &sext);
        for (int r = 0; rc == OMPI_SUCCESS && r < size; r++) {
            pos = coll_qcg_site_pos(m, r) * (int)bytes;
            rc = MPI_Pack((const char *)sbuf + (ptrdiff_t)r * scount * sext, scount, sdtype, b.base,
                          (int)((size_t)size * bytes), &pos, comm) == MPI_SUCCESS
                     ? OMPI_SUCCESS
                     : OMPI_ERROR;
        }
        if (rc == OMPI_SUCCESS)
            rc = coll_qcg_root_runs(m, b.base, NULL, bytes, root, comm, MCA_COLL_BASE_TAG_SCATTER,
                                    1);
    } else if (b.collector && m->site_of[rank] != m->site_of[root]) {
        rc = MCA_PML_CALL(recv(b.run, (int)((size_t)b.n * bytes), MPI_BYTE, root,
                               MCA_COLL_BASE_TAG_SCATTER, comm, MPI_STATUS_IGNORE));
    }
    if (rc == OMPI_SUCCESS)
        rc = QCG_SUB(m->local, scatter, b.run, (int)bytes, MPI_BYTE,
                     b.collector ? MPI_IN_PLACE : b.mine, (int)bytes, MPI_BYTE, b.local_root);
    pos = 0;
    if (rc == OMPI_SUCCESS && !in_place)
        rc = MPI_Unpack(b.mine, (int)bytes, &pos, rbuf, rcount, rdtype, comm) == MPI_SUCCESS
                 ? OMPI_SUCCESS
                 : OMPI_ERROR;
    free(b.base);
    return rc;
}
