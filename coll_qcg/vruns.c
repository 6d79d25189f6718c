/* Scatterv's blocks: unlike Scatter's, each rank's has its own size,
   which only the root and the rank itself know.  So every site first
   gathers its ranks' sizes at its collector (inside the site, no WAN
   latency); then the blocks move as in Scatter: across the WAN from the
   root to every other site's leader, each site's run in one step, and
   inside the site from the collector to each rank. */
#include <stdint.h>
#include <stdlib.h>

#include "coll_qcg.h"

int coll_qcg_vruns_init(coll_qcg_module_t *m, int rank, int root, size_t mine, const int *counts,
                        ompi_datatype_t *dtype, struct coll_qcg_vruns *v)
{
    int size = m->site_start[m->sites], site = m->site_of[rank], first = m->site_start[site];
    int n = m->site_start[site + 1] - first, rc;
    uint64_t me = mine, *got = NULL;

    v->local_root = site == m->site_of[root] ? m->local_rank[root] : 0;
    v->collector = m->local_rank[rank] == v->local_root;
    v->base = NULL;
    v->off = calloc((size_t)size + 1, sizeof(size_t));
    if (v->collector)
        got = malloc((size_t)n * sizeof(*got));
    /* Every rank takes part even when short of memory: none is left waiting. */
    rc = QCG_SUB(m->local, gather, &me, 1, MPI_UINT64_T, got, 1, MPI_UINT64_T, v->local_root);
    if (rc == OMPI_SUCCESS && (v->off == NULL || (v->collector && got == NULL)))
        rc = OMPI_ERR_OUT_OF_RESOURCE;
    if (rc == OMPI_SUCCESS) {
        /* Sizes first (off[pos + 1]), then their running sums. */
        if (rank == root)
            for (int r = 0; r < size; r++)
                v->off[coll_qcg_site_pos(m, r) + 1] = coll_qcg_data_bytes(counts[r], dtype);
        else if (v->collector)
            for (int i = 0; i < n; i++)
                v->off[first + i + 1] = got[i];
        else
            v->off[coll_qcg_site_pos(m, rank) + 1] = mine;
        for (int p = 0; p < size; p++)
            v->off[p + 1] += v->off[p];
        v->base = malloc(v->off[size] > 0 ? v->off[size] : 1);
        if (v->base == NULL)
            rc = OMPI_ERR_OUT_OF_RESOURCE;
        else
            v->mine = v->base + v->off[coll_qcg_site_pos(m, rank)];
    }
    free(got);
    return rc;
}

/* Posts the block at site position pos to (sending) or from peer. */
static int post_block(const struct coll_qcg_vruns *v, int pos, int peer, int tag,
                      ompi_communicator_t *comm, int sending, ompi_request_t **reqs, int *k)
{
    return coll_qcg_post(v->base + v->off[pos], v->off[pos + 1] - v->off[pos], peer, tag, comm,
                         sending, reqs, k);
}

int coll_qcg_vruns_site(coll_qcg_module_t *m, int rank, struct coll_qcg_vruns *v, int tag)
{
    int site = m->site_of[rank], first = m->site_start[site];
    int n = m->site_start[site + 1] - first, me = m->local_rank[rank], k = 0, rc = OMPI_SUCCESS;
    size_t pieces = 0;
    ompi_request_t **reqs;

    for (int i = 0; i < n; i++)
        if (v->collector ? i != me : i == me)
            pieces += coll_qcg_pieces(v->off[first + i + 1] - v->off[first + i]);
    reqs = malloc((pieces > 0 ? pieces : 1) * sizeof(*reqs));
    if (reqs == NULL)
        return OMPI_ERR_OUT_OF_RESOURCE;
    if (!v->collector)
        rc = post_block(v, first + me, v->local_root, tag, m->local, 0, reqs, &k);
    for (int i = 0; v->collector && rc == OMPI_SUCCESS && i < n; i++)
        if (i != me)
            rc = post_block(v, first + i, i, tag, m->local, 1, reqs, &k);
    return coll_qcg_finish(reqs, k, rc);
}

int coll_qcg_vruns_wan(coll_qcg_module_t *m, int rank, int root, struct coll_qcg_vruns *v,
                       ompi_communicator_t *comm, int tag)
{
    int site = m->site_of[rank], k = 0, rc;
    size_t from = v->off[m->site_start[site]], bytes = v->off[m->site_start[site + 1]] - from;
    ompi_request_t **reqs;

    if (rank == root)
        return coll_qcg_root_runs(m, v->base, v->off, 0, root, comm, tag, 1);
    if (!v->collector || site == m->site_of[root])
        return OMPI_SUCCESS;
    reqs = malloc((coll_qcg_pieces(bytes) > 0 ? coll_qcg_pieces(bytes) : 1) * sizeof(*reqs));
    if (reqs == NULL)
        return OMPI_ERR_OUT_OF_RESOURCE;
    rc = coll_qcg_post(v->base + from, bytes, root, tag, comm, 0, reqs, &k);
    return coll_qcg_finish(reqs, k, rc);
}

void coll_qcg_vruns_free(struct coll_qcg_vruns *v)
{
    free(v->base);
    free(v->off);
}
