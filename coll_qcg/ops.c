/* The hierarchical collectives: inside the site, among the site leaders
   (the only step that crosses the WAN), inside the site again.  Each step
   is Open MPI's own collective on the step's sub-communicator, so its
   algorithm (tuned's choice by size) still applies within a step.

   Reductions reorder the ranks (site by site), so a non-commutative
   operation goes to the previous module.  For a commutative one the
   order is: within each site in the site's rank order (as Open MPI
   reduces a communicator of the site's ranks), then the sites' partial
   results in the order of their lowest rank; in Allreduce each site's
   ranks get their leader's bits.  Integers give exactly Open MPI's
   results; floating point sums may differ from them in the last bits
   (another order of additions), as they differ between Open MPI's own
   algorithms (README.md, "Results"). */
#include <stdlib.h>

#include "coll_qcg.h"

#include "ompi/mca/coll/base/coll_tags.h"
#include "ompi/mca/pml/pml.h"

#define M(module) ((coll_qcg_module_t *)(module))

/* Through the public call: ompi/op/op.h needs Fortran headers Debian does
   not install. */
static int commutative(struct ompi_op_t *op)
{
    int yes = 0;

    return MPI_Op_commutative(op, &yes) == MPI_SUCCESS && yes;
}

int coll_qcg_barrier(ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    coll_qcg_module_t *m = M(module);
    int rc;

    if (coll_qcg_ready(m, comm) != QCG_COLL_SITES)
        return m->prev.barrier(comm, m->prev.barrier_module);
    rc = m->local->c_coll->coll_barrier(m->local, m->local->c_coll->coll_barrier_module);
    if (rc == OMPI_SUCCESS && m->leaders != NULL)
        rc = coll_qcg_flat_barrier(m->leaders);
    if (rc == OMPI_SUCCESS)
        rc = m->local->c_coll->coll_barrier(m->local, m->local->c_coll->coll_barrier_module);
    return rc;
}

/* The root's site: from the root to its site; then from that site's leader
   to the other leaders; then in each other site from its leader. */
int coll_qcg_bcast(void *buf, int count, ompi_datatype_t *dtype, int root,
                   ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    coll_qcg_module_t *m = M(module);
    int rank = ompi_comm_rank(comm), rc = OMPI_SUCCESS, root_site;

    if (coll_qcg_ready(m, comm) != QCG_COLL_SITES)
        return m->prev.bcast(buf, count, dtype, root, comm, m->prev.bcast_module);
    root_site = m->site_of[root];
    if (m->site_of[rank] == root_site)
        rc = QCG_SUB(m->local, bcast, buf, count, dtype, m->local_rank[root]);
    if (rc == OMPI_SUCCESS && m->leaders != NULL)
        rc = coll_qcg_flat(count, dtype)
                 ? coll_qcg_flat_bcast(buf, count, dtype, root_site, m->leaders)
                 : QCG_SUB(m->leaders, bcast, buf, count, dtype, root_site);
    if (rc == OMPI_SUCCESS && m->site_of[rank] != root_site)
        rc = QCG_SUB(m->local, bcast, buf, count, dtype, 0);
    return rc;
}

/* A buffer for count elements of dtype, and where element 0 sits in it. */
static char *scratch(ompi_datatype_t *dtype, int count, char **base)
{
    ptrdiff_t gap = 0;
    size_t span = opal_datatype_span(&dtype->super, (size_t)count, &gap);

    *base = malloc(span > 0 ? span : 1);
    return *base == NULL ? NULL : *base - gap;
}

/* Each site's result at its leader: into rbuf (a leader's own result
   buffer, which it may also have given as MPI_IN_PLACE). */
static int reduce_in_site(coll_qcg_module_t *m, const void *sbuf, void *rbuf, int count,
                          ompi_datatype_t *dtype, struct ompi_op_t *op)
{
    int leader = m->leaders != NULL;

    return QCG_SUB(m->local, reduce, leader && sbuf == rbuf ? MPI_IN_PLACE : sbuf, rbuf, count,
                   dtype, op, 0);
}

int coll_qcg_reduce(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
                    struct ompi_op_t *op, int root, ompi_communicator_t *comm,
                    mca_coll_base_module_t *module)
{
    coll_qcg_module_t *m = M(module);
    int rank = ompi_comm_rank(comm), rc, root_site;
    char *base = NULL, *part;

    /* Above reduce_max Open MPI's segmented pipeline through all ranks
       overlaps what the hierarchy does one step after the other: 1 MiB
       took 1.82x as long by sites (bench/README.md, coll.sh). */
    if (!commutative(op) || coll_qcg_bytes(count, dtype) > mca_coll_qcg_component.reduce_max ||
        coll_qcg_ready(m, comm) != QCG_COLL_SITES)
        return m->prev.reduce(sbuf, rbuf, count, dtype, op, root, comm, m->prev.reduce_module);
    root_site = m->site_of[root];
    if (sbuf == MPI_IN_PLACE) /* the root's only */
        sbuf = rbuf;
    /* A leader's partial result: the root's rbuf when the root leads its
       site, else a buffer of its own. */
    part = rbuf;
    if (m->leaders != NULL && rank != root) {
        part = scratch(dtype, count, &base);
        if (part == NULL)
            return OMPI_ERR_OUT_OF_RESOURCE;
    }
    rc = reduce_in_site(m, sbuf, part, count, dtype, op);
    if (rc == OMPI_SUCCESS && m->leaders != NULL)
        rc = coll_qcg_flat(count, dtype)
                 ? coll_qcg_flat_reduce(part, count, dtype, op, root_site, m->leaders)
                 : QCG_SUB(m->leaders, reduce, m->site_of[rank] == root_site ? MPI_IN_PLACE : part,
                           part, count, dtype, op, root_site);
    /* The root's site's leader hands the result to the root. */
    if (rc == OMPI_SUCCESS && m->site_of[rank] == root_site && m->local_rank[root] != 0) {
        if (m->leaders != NULL)
            rc = MCA_PML_CALL(send(part, count, dtype, m->local_rank[root],
                                   MCA_COLL_BASE_TAG_REDUCE, MCA_PML_BASE_SEND_STANDARD, m->local));
        else if (rank == root)
            rc = MCA_PML_CALL(
                recv(rbuf, count, dtype, 0, MCA_COLL_BASE_TAG_REDUCE, m->local, MPI_STATUS_IGNORE));
    }
    free(base);
    return rc;
}

int coll_qcg_allreduce(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
                       struct ompi_op_t *op, ompi_communicator_t *comm,
                       mca_coll_base_module_t *module)
{
    coll_qcg_module_t *m = M(module);
    int rc;

    /* Above allreduce_max the hierarchy's reduce and bcast in each site
       cost more than Open MPI's bandwidth-bound algorithm over all ranks
       saves on the WAN (bench/README.md, coll.sh). */
    if (!commutative(op) || coll_qcg_bytes(count, dtype) > mca_coll_qcg_component.allreduce_max ||
        coll_qcg_ready(m, comm) != QCG_COLL_SITES)
        return m->prev.allreduce(sbuf, rbuf, count, dtype, op, comm, m->prev.allreduce_module);
    if (sbuf == MPI_IN_PLACE)
        sbuf = rbuf;
    rc = reduce_in_site(m, sbuf, rbuf, count, dtype, op);
    if (rc == OMPI_SUCCESS && m->leaders != NULL)
        rc = coll_qcg_flat(count, dtype)
                 ? coll_qcg_flat_allreduce(rbuf, count, dtype, op, m->leaders)
                 : QCG_SUB(m->leaders, allreduce, MPI_IN_PLACE, rbuf, count, dtype, op);
    if (rc == OMPI_SUCCESS)
        rc = QCG_SUB(m->local, bcast, rbuf, count, dtype, 0);
    return rc;
}
