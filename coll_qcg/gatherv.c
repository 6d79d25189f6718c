/* Gatherv by sites, as Gather (gather.c) with a size per rank: each site's
   sizes, then its blocks, gathered at its collector; every other site's
   leader sends its site's run straight to the root (one WAN latency, each
   block across the WAN once); the root unpacks each block at its
   displacement.  Only the root knows rdtype, so the blocks travel packed. */
#include "coll_qcg.h"

#include "ompi/mca/coll/base/coll_tags.h"

int coll_qcg_gatherv(const void *sbuf, int scount, ompi_datatype_t *sdtype, void *rbuf,
                     const int *rcounts, const int *displs, ompi_datatype_t *rdtype, int root,
                     ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    coll_qcg_module_t *m = (coll_qcg_module_t *)module;
    int rank = ompi_comm_rank(comm), size = ompi_comm_size(comm), rc;
    int in_place = rank == root && sbuf == MPI_IN_PLACE;
    size_t mine;
    ptrdiff_t lb, rext = 0;
    struct coll_qcg_vruns v;

    if (coll_qcg_ready(m, comm) != QCG_COLL_SITES)
        return m->prev.gatherv(sbuf, scount, sdtype, rbuf, rcounts, displs, rdtype, root, comm,
                               m->prev.gatherv_module);
    if (rank == root)
        ompi_datatype_get_extent(rdtype, &lb, &rext);
    mine =
        in_place ? coll_qcg_data_bytes(rcounts[root], rdtype) : coll_qcg_data_bytes(scount, sdtype);
    rc = coll_qcg_vruns_init(m, rank, root, mine, rcounts, rdtype, &v);
    /* In place the root's block stays where it is. */
    if (rc == OMPI_SUCCESS && !in_place)
        rc = coll_qcg_pack(sbuf, scount, sdtype, v.mine, mine);
    if (rc == OMPI_SUCCESS)
        rc = coll_qcg_vruns_site(m, rank, &v, MCA_COLL_BASE_TAG_GATHERV, 1);
    if (rc == OMPI_SUCCESS)
        rc = coll_qcg_vruns_wan(m, rank, root, &v, comm, MCA_COLL_BASE_TAG_GATHERV, 0);
    for (int r = 0; rc == OMPI_SUCCESS && rank == root && r < size; r++) {
        int pos = coll_qcg_site_pos(m, r);

        if (!(in_place && r == root))
            rc = coll_qcg_unpack(v.base + v.off[pos], v.off[pos + 1] - v.off[pos],
                                 (char *)rbuf + (ptrdiff_t)displs[r] * rext, rcounts[r], rdtype);
    }
    coll_qcg_vruns_free(&v);
    return rc;
}
