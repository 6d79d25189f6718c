/* A communicator's module: the previous module's functions kept at enable,
   and the sites found at the first collective (one allgather of the site
   integers, then two splits: the site's ranks, and one leader per site). */
#include <stdlib.h>

#include "coll_qcg.h"

#include "opal/util/output.h"
#include "qcgcolour.h"

__thread int coll_qcg_making_subcomms;

static int qcg_module_enable(mca_coll_base_module_t *module, ompi_communicator_t *comm);

static void qcg_module_construct(coll_qcg_module_t *m)
{
    m->state = QCG_COLL_UNKNOWN;
    m->local = m->leaders = NULL;
    m->sites = 0;
    m->site_of = m->local_rank = m->site_start = m->leader = NULL;
    memset(&m->prev, 0, sizeof(m->prev));
    m->super.coll_module_enable = qcg_module_enable;
    m->super.coll_allgather = coll_qcg_allgather;
    m->super.coll_barrier = coll_qcg_barrier;
    m->super.coll_bcast = coll_qcg_bcast;
    m->super.coll_reduce = coll_qcg_reduce;
    m->super.coll_allreduce = coll_qcg_allreduce;
    m->super.coll_gather = coll_qcg_gather;
    m->super.coll_scatter = coll_qcg_scatter;
    m->super.coll_allgatherv = coll_qcg_allgatherv;
    m->super.coll_scatterv = coll_qcg_scatterv;
}

static void qcg_module_destruct(coll_qcg_module_t *m)
{
    if (m->local != NULL)
        ompi_comm_free(&m->local);
    if (m->leaders != NULL)
        ompi_comm_free(&m->leaders);
    free(m->site_of);
    free(m->local_rank);
    free(m->site_start);
    free(m->leader);
#define RELEASE(name)                                                                              \
    if (m->prev.name##_module != NULL)                                                             \
    OBJ_RELEASE(m->prev.name##_module)
    RELEASE(allgather);
    RELEASE(allgatherv);
    RELEASE(allreduce);
    RELEASE(barrier);
    RELEASE(bcast);
    RELEASE(gather);
    RELEASE(reduce);
    RELEASE(scatter);
    RELEASE(scatterv);
#undef RELEASE
}

OBJ_CLASS_INSTANCE(coll_qcg_module_t, mca_coll_base_module_t, qcg_module_construct,
                   qcg_module_destruct);

/* Modules are enabled from the lowest priority up: what comm has now is
   what Open MPI would run without us. */
static int qcg_module_enable(mca_coll_base_module_t *module, ompi_communicator_t *comm)
{
    coll_qcg_module_t *m = (coll_qcg_module_t *)module;

#define SAVE(name)                                                                                 \
    do {                                                                                           \
        m->prev.name = comm->c_coll->coll_##name;                                                  \
        m->prev.name##_module = comm->c_coll->coll_##name##_module;                                \
        if (m->prev.name == NULL || m->prev.name##_module == NULL)                                 \
            return OMPI_ERROR;                                                                     \
        OBJ_RETAIN(m->prev.name##_module);                                                         \
    } while (0)
    SAVE(allgather);
    SAVE(allgatherv);
    SAVE(allreduce);
    SAVE(barrier);
    SAVE(bcast);
    SAVE(gather);
    SAVE(reduce);
    SAVE(scatter);
    SAVE(scatterv);
#undef SAVE
    return OMPI_SUCCESS;
}

/* From every rank's site integer: each site's place among the sites in the
   order of their lowest rank (the leaders' order), each rank's place in its
   site, and where each site's run of ranks starts in that order. */
static int map_sites(coll_qcg_module_t *m, const int *site, int size)
{
    int *first = malloc((size_t)size * sizeof(int)); /* leader index -> its site integer */

    m->site_of = malloc((size_t)size * sizeof(int));
    m->local_rank = malloc((size_t)size * sizeof(int));
    if (first == NULL || m->site_of == NULL || m->local_rank == NULL) {
        free(first);
        return -1;
    }
    m->sites = 0;
    for (int r = 0; r < size; r++) {
        int s = 0, below = 0;

        while (s < m->sites && first[s] != site[r])
            s++;
        if (s == m->sites)
            first[m->sites++] = site[r];
        m->site_of[r] = s;
        for (int q = 0; q < r; q++)
            below += site[q] == site[r];
        m->local_rank[r] = below;
    }
    free(first);
    m->site_start = calloc((size_t)m->sites + 1, sizeof(int));
    m->leader = malloc((size_t)m->sites * sizeof(int));
    if (m->site_start == NULL || m->leader == NULL)
        return -1;
    for (int r = size - 1; r >= 0; r--)
        m->leader[m->site_of[r]] = r;
    for (int r = 0; r < size; r++)
        m->site_start[m->site_of[r] + 1]++;
    for (int s = 0; s < m->sites; s++)
        m->site_start[s + 1] += m->site_start[s];
    return 0;
}

enum coll_qcg_state coll_qcg_ready(coll_qcg_module_t *m, ompi_communicator_t *comm)
{
    int size = ompi_comm_size(comm), rank = ompi_comm_rank(comm), mine, rc, known = 1, one = 1;
    int *site;

    if (m->state == QCG_COLL_SITES || m->state == QCG_COLL_ONE_SITE)
        return m->state;
    if (m->state == QCG_COLL_FINDING)
        return QCG_COLL_ONE_SITE; /* the splits' own collectives */
    m->state = QCG_COLL_FINDING;
    mine = qcg_colour_int(QCG_COLOUR_SITE);
    site = malloc((size_t)size * sizeof(int));
    if (site == NULL) {
        m->state = QCG_COLL_ONE_SITE;
        return m->state;
    }
    /* Every rank takes part, whatever its own answer: a rank without a
       colour makes the whole communicator pass through. */
    rc = m->prev.allgather(&mine, 1, MPI_INT, site, 1, MPI_INT, comm, m->prev.allgather_module);
    for (int r = 0; rc == OMPI_SUCCESS && r < size; r++) {
        known &= site[r] >= 0;
        one &= site[r] == site[0];
    }
    if (rc != OMPI_SUCCESS || !known || one || map_sites(m, site, size) < 0) {
        free(site);
        m->state = QCG_COLL_ONE_SITE;
        if (mca_coll_qcg_component.verbose > 0 && rank == 0)
            opal_output(0, "coll_qcg: communicator %s of %d ranks: %s: Open MPI's collectives",
                        comm->c_name, size,
                        rc != OMPI_SUCCESS ? "gathering the sites failed"
                        : !known           ? "a rank does not know its site"
                                           : "one site");
        return m->state;
    }
    free(site);
    coll_qcg_making_subcomms = 1;
    rc = ompi_comm_split(comm, m->site_of[rank], rank, &m->local, false);
    if (rc == OMPI_SUCCESS)
        rc = ompi_comm_split(comm, m->local_rank[rank] == 0 ? 0 : MPI_UNDEFINED, rank, &m->leaders,
                             false);
    coll_qcg_making_subcomms = 0;
    if (m->leaders == &ompi_mpi_comm_null.comm)
        m->leaders = NULL;
    if (rc != OMPI_SUCCESS) {
        m->state = QCG_COLL_ONE_SITE;
        return m->state;
    }
    m->state = QCG_COLL_SITES;
    if (mca_coll_qcg_component.verbose > 0 && rank == 0)
        opal_output(0,
                    "coll_qcg: communicator %s of %d ranks spans %d sites: hierarchical "
                    "(barrier bcast reduce allreduce allgather allgatherv gather scatter scatterv)",
                    comm->c_name, size, m->sites);
    return m->state;
}
