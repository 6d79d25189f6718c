/* Allgatherv by sites, as Allgather (allgather.c) with a count per rank:
   each site's blocks gathered at its leader (a gatherv), the sites' runs
   exchanged among the leaders (the only step across the WAN), everything
   broadcast in each site, then each rank copies every block to its
   displacement.  Every rank knows every count, so the blocks travel as
   rdtype elements throughout; when all of them would not fit an int count
   (the site broadcast) or there are none, it is Open MPI's own. */
#include <limits.h>
#include <stdlib.h>

#include "coll_qcg.h"

/* The blocks site by site: the count and element offset of the block at
   each site position (at[pos], at[size] the total). */
static int layout(coll_qcg_module_t *m, const int *rcounts, int size, int **count, int **at)
{
    *count = malloc((size_t)size * sizeof(int));
    *at = malloc(((size_t)size + 1) * sizeof(int));
    if (*count == NULL || *at == NULL)
        return OMPI_ERR_OUT_OF_RESOURCE;
    for (int r = 0; r < size; r++)
        (*count)[coll_qcg_site_pos(m, r)] = rcounts[r];
    (*at)[0] = 0;
    for (int p = 0; p < size; p++)
        (*at)[p + 1] = (*at)[p] + (*count)[p];
    return OMPI_SUCCESS;
}

/* Among the leaders: every site's run to every other leader. */
static int leaders_step(coll_qcg_module_t *m, char *all, const int *at, ompi_datatype_t *rdtype)
{
    int *counts = malloc((size_t)m->sites * sizeof(int));
    int *displs = malloc((size_t)m->sites * sizeof(int)), rc = OMPI_SUCCESS;

    if (counts == NULL || displs == NULL)
        rc = OMPI_ERR_OUT_OF_RESOURCE;
    for (int s = 0; rc == OMPI_SUCCESS && s < m->sites; s++) {
        displs[s] = at[m->site_start[s]];
        counts[s] = at[m->site_start[s + 1]] - displs[s];
    }
    if (rc == OMPI_SUCCESS && coll_qcg_flat(at[m->site_start[m->sites]], rdtype))
        rc = coll_qcg_flat_allgatherv(all, counts, displs, rdtype, m->leaders);
    else if (rc == OMPI_SUCCESS)
        rc = QCG_SUB(m->leaders, allgatherv, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, counts,
                     displs, rdtype);
    free(counts);
    free(displs);
    return rc;
}

int coll_qcg_allgatherv(const void *sbuf, int scount, ompi_datatype_t *sdtype, void *rbuf,
                        const int *rcounts, const int *displs, ompi_datatype_t *rdtype,
                        ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    coll_qcg_module_t *m = (coll_qcg_module_t *)module;
    int rank = ompi_comm_rank(comm), size = ompi_comm_size(comm), rc, site, first, n, origin;
    int *count = NULL, *at = NULL;
    long long total = 0;
    ptrdiff_t lb, extent, gap = 0;
    char *base = NULL, *all, *mine;
    size_t span;

    for (int r = 0; r < size; r++)
        total += rcounts[r] > 0 ? rcounts[r] : 0;
    if (total == 0 || total > INT_MAX || coll_qcg_ready(m, comm) != QCG_COLL_SITES)
        return m->prev.allgatherv(sbuf, scount, sdtype, rbuf, rcounts, displs, rdtype, comm,
                                  m->prev.allgatherv_module);
    ompi_datatype_get_extent(rdtype, &lb, &extent);
    mine = (char *)rbuf + (ptrdiff_t)displs[rank] * extent;
    rc = sbuf == MPI_IN_PLACE
             ? OMPI_SUCCESS
             : ompi_datatype_sndrcv(sbuf, scount, sdtype, mine, rcounts[rank], rdtype);
    if (rc == OMPI_SUCCESS)
        rc = layout(m, rcounts, size, &count, &at);
    span = opal_datatype_span(&rdtype->super, (size_t)total, &gap);
    if (rc == OMPI_SUCCESS && (base = malloc(span > 0 ? span : 1)) == NULL)
        rc = OMPI_ERR_OUT_OF_RESOURCE;
    /* The blocks site by site, each site's in its ranks' order. */
    all = base != NULL ? base - gap : NULL;
    site = m->site_of[rank];
    first = m->site_start[site];
    n = m->site_start[site + 1] - first;
    /* The site's gatherv: its counts, and its offsets from its first
       position on (at made whole again after). */
    origin = rc == OMPI_SUCCESS ? at[first] : 0;
    for (int i = 0; rc == OMPI_SUCCESS && i < n; i++)
        at[first + i] -= origin;
    if (rc == OMPI_SUCCESS)
        rc = QCG_SUB(m->local, gatherv, mine, rcounts[rank], rdtype,
                     all + (ptrdiff_t)origin * extent, count + first, at + first, rdtype, 0);
    /* Back to offsets in all. */
    for (int p = 0; rc == OMPI_SUCCESS && p < size; p++)
        at[p + 1] = at[p] + count[p];
    if (rc == OMPI_SUCCESS && m->leaders != NULL)
        rc = leaders_step(m, all, at, rdtype);
    if (rc == OMPI_SUCCESS)
        rc = QCG_SUB(m->local, bcast, all, (int)total, rdtype, 0);
    for (int r = 0; rc == OMPI_SUCCESS && r < size; r++) {
        if (r != rank && rcounts[r] > 0)
            rc = ompi_datatype_copy_content_same_ddt(
                rdtype, (size_t)rcounts[r], (char *)rbuf + (ptrdiff_t)displs[r] * extent,
                all + (ptrdiff_t)at[coll_qcg_site_pos(m, r)] * extent);
    }
    free(count);
    free(at);
    free(base);
    return rc;
}
