/* Scatterv by sites, as Scatter (scatter.c) with a size per rank: each
   site's sizes gathered at its collector; the root packs the blocks site
   by site and sends every other site's run straight to that site's leader
   (one WAN latency, each block across the WAN once); each collector sends
   every rank of its site its block.  Only the root knows sdtype, so the
   blocks travel packed. */
#include "coll_qcg.h"

#include "ompi/mca/coll/base/coll_tags.h"

int coll_qcg_scatterv(const void *sbuf, const int *scounts, const int *displs,
                      ompi_datatype_t *sdtype, void *rbuf, int rcount, ompi_datatype_t *rdtype,
                      int root, ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    coll_qcg_module_t *m = (coll_qcg_module_t *)module;
    int rank = ompi_comm_rank(comm), size = ompi_comm_size(comm), rc;
    int in_place = rank == root && rbuf == MPI_IN_PLACE;
    size_t mine;
    ptrdiff_t lb, sext = 0;
    struct coll_qcg_vruns v;

    if (coll_qcg_ready(m, comm) != QCG_COLL_SITES)
        return m->prev.scatterv(sbuf, scounts, displs, sdtype, rbuf, rcount, rdtype, root, comm,
                                m->prev.scatterv_module);
    if (rank == root)
        ompi_datatype_get_extent(sdtype, &lb, &sext);
    mine = rank == root ? coll_qcg_data_bytes(scounts[root], sdtype)
                        : coll_qcg_data_bytes(rcount, rdtype);
    rc = coll_qcg_vruns_init(m, rank, root, mine, scounts, sdtype, &v);
    for (int r = 0; rc == OMPI_SUCCESS && rank == root && r < size; r++) {
        int pos = coll_qcg_site_pos(m, r);

        /* In place the root's block stays where it is. */
        if (!(in_place && r == root))
            rc = coll_qcg_pack((const char *)sbuf + (ptrdiff_t)displs[r] * sext, scounts[r], sdtype,
                               v.base + v.off[pos], v.off[pos + 1] - v.off[pos]);
    }
    if (rc == OMPI_SUCCESS)
        rc = coll_qcg_vruns_wan(m, rank, root, &v, comm, MCA_COLL_BASE_TAG_SCATTERV);
    if (rc == OMPI_SUCCESS)
        rc = coll_qcg_vruns_site(m, rank, &v, MCA_COLL_BASE_TAG_SCATTERV);
    if (rc == OMPI_SUCCESS && !in_place)
        rc = coll_qcg_unpack(v.mine, mine, rbuf, rcount, rdtype);
    coll_qcg_vruns_free(&v);
    return rc;
}
