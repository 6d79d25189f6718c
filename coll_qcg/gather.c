/* Gather by sites: each site's blocks gathered at its collector (the root
   in the root's site, the leader elsewhere), every other site's leader
   sends its site's run of blocks straight to the root (one WAN latency, and
   each block crosses the WAN once), and the root puts the blocks in comm
   rank order.  Only the root knows rdtype, so the blocks travel packed
   (MPI_Pack: bytes, the same number from every rank). */
#include <stdlib.h>

#include "coll_qcg.h"

#include "ompi/mca/coll/base/coll_tags.h"
#include "ompi/mca/pml/pml.h"

int coll_qcg_gather(const void *sbuf, int scount, ompi_datatype_t *sdtype, void *rbuf, int rcount,
                    ompi_datatype_t *rdtype, int root, ompi_communicator_t *comm,
                    mca_coll_base_module_t *module)
{
    coll_qcg_module_t *m = (coll_qcg_module_t *)module;
    int rank = ompi_comm_rank(comm), size = ompi_comm_size(comm), rc = OMPI_SUCCESS, pos = 0;
    int in_place = rank == root && sbuf == MPI_IN_PLACE;
    size_t bytes;
    ptrdiff_t lb, rext = 0;
    struct coll_qcg_runs b;

    if (coll_qcg_ready(m, comm) != QCG_COLL_SITES ||
        (bytes = rank == root ? coll_qcg_block_bytes(rcount, rdtype, size)
                              : coll_qcg_block_bytes(scount, sdtype, size)) == 0)
        return m->prev.gather(sbuf, scount, sdtype, rbuf, rcount, rdtype, root, comm,
                              m->prev.gather_module);
    if (rank == root)
        ompi_datatype_get_extent(rdtype, &lb, &rext);
    rc = coll_qcg_runs_alloc(m, rank, root, bytes, size, &b);
    if (rc != OMPI_SUCCESS)
        return rc;
    if (in_place)
        rc = MPI_Pack((char *)rbuf + (ptrdiff_t)root * rcount * rext, rcount, rdtype, b.mine,
                      (int)bytes, &pos, comm);
    else
        rc = MPI_Pack(sbuf, scount, sdtype, b.mine, (int)bytes, &pos, comm);
    rc = rc == MPI_SUCCESS ? OMPI_SUCCESS : OMPI_ERROR;
    if (rc == OMPI_SUCCESS)
        rc = QCG_SUB(m->local, gather, b.collector ? MPI_IN_PLACE : b.mine, (int)bytes, MPI_BYTE,
                     b.run, (int)bytes, MPI_BYTE, b.local_root);
    if (rc == OMPI_SUCCESS && rank == root)
        rc = coll_qcg_root_runs(m, b.base, NULL, bytes, root, comm, MCA_COLL_BASE_TAG_GATHER, 0);
    else if (rc == OMPI_SUCCESS && b.collector && m->site_of[rank] != m->site_of[root])
        rc = MCA_PML_CALL(send(b.run, (int)((size_t)b.n * bytes), MPI_BYTE, root,
                               MCA_COLL_BASE_TAG_GATHER, MCA_PML_BASE_SEND_STANDARD, comm));
    for (int r = 0; rc == OMPI_SUCCESS && rank == root && r < size; r++) {
        pos = coll_qcg_site_pos(m, r) * (int)bytes;
        if (!(in_place && r == root))
            rc = MPI_Unpack(b.base, (int)((size_t)size * bytes), &pos,
                            (char *)rbuf + (ptrdiff_t)r * rcount * rext, rcount, rdtype,
                            comm) == MPI_SUCCESS
                     ? OMPI_SUCCESS
                     : OMPI_ERROR;
    }
    free(b.base);
    return rc;
}
