/* Allgather by sites: each site's blocks gathered at its leader, the sites'
   runs of blocks exchanged among the leaders (one allgatherv: the only
   step across the WAN), everything broadcast in each site, then each rank
   puts the blocks in comm rank order (a site's ranks need not be
   contiguous in comm: a communicator split from another).  The blocks
   travel as rcount elements of rdtype throughout. */
#include <stdlib.h>

#include "coll_qcg.h"

int coll_qcg_allgather(const void *sbuf, int scount, ompi_datatype_t *sdtype, void *rbuf,
                       int rcount, ompi_datatype_t *rdtype, ompi_communicator_t *comm,
                       mca_coll_base_module_t *module)
{
    coll_qcg_module_t *m = (coll_qcg_module_t *)module;
    int rank = ompi_comm_rank(comm), size = ompi_comm_size(comm), rc = OMPI_SUCCESS, site;
    int *counts = NULL, *displs = NULL;
    ptrdiff_t lb, extent, gap = 0, block;
    char *base, *all, *mine;
    size_t span;

    if (coll_qcg_ready(m, comm) != QCG_COLL_SITES)
        return m->prev.allgather(sbuf, scount, sdtype, rbuf, rcount, rdtype, comm,
                                 m->prev.allgather_module);
    ompi_datatype_get_extent(rdtype, &lb, &extent);
    block = extent * rcount;
    mine = (char *)rbuf + (ptrdiff_t)rank * block;
    if (sbuf != MPI_IN_PLACE) {
        rc = ompi_datatype_sndrcv(sbuf, scount, sdtype, mine, rcount, rdtype);
        if (rc != OMPI_SUCCESS)
            return rc;
    }
    span = opal_datatype_span(&rdtype->super, (size_t)size * (size_t)rcount, &gap);
    base = malloc(span > 0 ? span : 1);
    if (base == NULL)
        return OMPI_ERR_OUT_OF_RESOURCE;
    all = base - gap; /* the blocks site by site, each site's in its ranks' order */
    site = m->site_of[rank];
    rc = m->local->c_coll->coll_gather(mine, rcount, rdtype, all + m->site_start[site] * block,
                                       rcount, rdtype, 0, m->local,
                                       m->local->c_coll->coll_gather_module);
    if (rc == OMPI_SUCCESS && m->leaders != NULL) {
        counts = malloc((size_t)m->sites * sizeof(int));
        displs = malloc((size_t)m->sites * sizeof(int));
        if (counts == NULL || displs == NULL)
            rc = OMPI_ERR_OUT_OF_RESOURCE;
        for (int s = 0; rc == OMPI_SUCCESS && s < m->sites; s++) {
            counts[s] = (m->site_start[s + 1] - m->site_start[s]) * rcount;
            displs[s] = m->site_start[s] * rcount;
        }
        if (rc == OMPI_SUCCESS && coll_qcg_flat(size * rcount, rdtype))
            rc = coll_qcg_flat_allgatherv(all, counts, displs, rdtype, m->leaders);
        else if (rc == OMPI_SUCCESS)
            rc = m->leaders->c_coll->coll_allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all,
                                                     counts, displs, rdtype, m->leaders,
                                                     m->leaders->c_coll->coll_allgatherv_module);
    }
    if (rc == OMPI_SUCCESS)
        rc = m->local->c_coll->coll_bcast(all, size * rcount, rdtype, 0, m->local,
                                          m->local->c_coll->coll_bcast_module);
    for (int r = 0; rc == OMPI_SUCCESS && r < size; r++) {
        ptrdiff_t at = (ptrdiff_t)coll_qcg_site_pos(m, r) * block;

        if (r != rank)
            rc = ompi_datatype_copy_content_same_ddt(rdtype, (size_t)rcount,
                                                     (char *)rbuf + (ptrdiff_t)r * block, all + at);
    }
    free(counts);
    free(displs);
    free(base);
    return rc;
}
