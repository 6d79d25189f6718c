/* coll_qcg's component: its parameters, and which communicators get a
   module (only those of a job of several sites: a one-site job never pays
   for the first collective's gathering of sites). */
#include "coll_qcg.h"

#include "qcgcolour.h"

/* The coll framework's version: 2.0.0 in Open MPI 4.1, 2.4.0 in 5.0. */
#ifdef MCA_COLL_BASE_VERSION_2_4_0
#define QCG_COLL_BASE_VERSION MCA_COLL_BASE_VERSION_2_4_0
#else
#define QCG_COLL_BASE_VERSION MCA_COLL_BASE_VERSION_2_0_0
#endif

static int qcg_register(void);
static int qcg_init_query(bool enable_progress_threads, bool enable_mpi_threads);

__attribute__((visibility("default"))) struct coll_qcg_component mca_coll_qcg_component = {
    .super =
        {
            .collm_version =
                {
                    QCG_COLL_BASE_VERSION,
                    .mca_component_name = "qcg",
                    MCA_BASE_MAKE_VERSION(component, OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION,
                                          OMPI_RELEASE_VERSION),
                    .mca_register_component_params = qcg_register,
                },
            .collm_data = {MCA_BASE_METADATA_PARAM_CHECKPOINT},
            .collm_init_query = qcg_init_query,
            .collm_comm_query = coll_qcg_comm_query,
        },
    /* Above tuned (30) and han (0 in 4.1): on a communicator of several
       sites the hierarchy wins; below hcoll (90), a fabric's own. */
    .priority = 50,
    .flat_max = 65536,
    .allreduce_max = 65536,
    .reduce_max = 65536,
};

static int qcg_register(void)
{
    mca_base_component_t *c = &mca_coll_qcg_component.super.collm_version;

    (void)mca_base_component_var_register(
        c, "priority",
        "Priority of coll qcg on communicators of several sites (0: never used; a one-site "
        "job never uses it)",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_6, MCA_BASE_VAR_SCOPE_READONLY,
        &mca_coll_qcg_component.priority);
    (void)mca_base_component_var_register(
        c, "flat_max",
        "Bytes up to which the step among the sites' leaders is one exchange of every leader "
        "with every other (one WAN latency); above, Open MPI's own algorithm among the leaders",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_6, MCA_BASE_VAR_SCOPE_READONLY,
        &mca_coll_qcg_component.flat_max);
    (void)mca_base_component_var_register(
        c, "allreduce_max",
        "Bytes up to which Allreduce runs by sites; above, Open MPI's own algorithm over all "
        "ranks (bandwidth-bound: the sites' reduce and bcast would only add to it)",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_6, MCA_BASE_VAR_SCOPE_READONLY,
        &mca_coll_qcg_component.allreduce_max);
    (void)mca_base_component_var_register(
        c, "reduce_max",
        "Bytes up to which Reduce runs by sites; above, Open MPI's own algorithm over all ranks "
        "(a pipeline through every rank: the sites' reduce and the leaders' step one after the "
        "other would only add to it)",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_6, MCA_BASE_VAR_SCOPE_READONLY,
        &mca_coll_qcg_component.reduce_max);
    (void)mca_base_component_var_register(
        c, "verbose", "1: a line per communicator saying how many sites it spans",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_6, MCA_BASE_VAR_SCOPE_LOCAL,
        &mca_coll_qcg_component.verbose);
    return OMPI_SUCCESS;
}

static int qcg_init_query(bool enable_progress_threads, bool enable_mpi_threads)
{
    (void)enable_progress_threads;
    (void)enable_mpi_threads;
    return OMPI_SUCCESS;
}

/* The same answer on every rank of comm, or collectives would not match:
   QCG_COLOURS_SITE is the same everywhere (mpirun -x), and
   coll_qcg_making_subcomms is set on every rank of the split that makes a
   sub-communicator. */
mca_coll_base_module_t *coll_qcg_comm_query(ompi_communicator_t *comm, int *priority)
{
    coll_qcg_module_t *m;

    if (OMPI_COMM_IS_INTER(comm) || ompi_comm_size(comm) < 2 ||
        mca_coll_qcg_component.priority <= 0 || coll_qcg_making_subcomms ||
        qcg_colour_count(QCG_COLOUR_SITE) < 2)
        return NULL;
    m = OBJ_NEW(coll_qcg_module_t);
    if (m == NULL)
        return NULL;
    *priority = mca_coll_qcg_component.priority;
    return &m->super;
}
