/* coll_qcg: Open MPI collectives that cross the WAN between sites as few
   times as possible (README.md).  A communicator's module learns its sites
   at the first collective (the site integers of libqcgcolour, gathered once)
   and then runs each operation in three steps: inside each site, among one
   leader per site, inside each site again.  What it does not implement, and
   every operation on a communicator of one site, goes to the module Open
   MPI had chosen before it (saved at enable). */
#ifndef COLL_QCG_H
#define COLL_QCG_H

#include "opal_config.h"
#if OPAL_MAJOR_VERSION >= 5
/* btl_qcg's: Debian 13's libopenmpi-dev lacks the threads component's
   headers that every Open MPI 5 internal header reaches (btl_qcg/README.md). */
#include "ompi_compat.h"
#endif

#include "ompi_config.h"

#include "mpi.h"
#include "ompi/communicator/communicator.h"
#include "ompi/datatype/ompi_datatype.h"
#include "ompi/mca/coll/coll.h"
#include "ompi/request/request.h"

BEGIN_C_DECLS

struct coll_qcg_component {
    mca_coll_base_component_t super; /* 2.0.0 in Open MPI 4.1, 2.4.0 in 5.0 */
    int priority;
    int verbose;
    int flat_max;      /* bytes up to which the leaders' step is one flat exchange (flat.c) */
    int allreduce_max; /* bytes above which Allreduce is Open MPI's own (ops.c) */
    int reduce_max;    /* bytes above which Reduce is Open MPI's own (ops.c) */
};
extern struct coll_qcg_component mca_coll_qcg_component;

/* Set while this thread makes the component's own sub-communicators: they
   get no module of their own (they would make sub-communicators at their
   first collective too).  Per thread: another thread's communicator made
   meanwhile is not affected. */
extern __thread int coll_qcg_making_subcomms;

enum coll_qcg_state {
    QCG_COLL_UNKNOWN,  /* the sites are not known yet: the first collective finds them */
    QCG_COLL_FINDING,  /* finding them (collectives meanwhile go to the previous module) */
    QCG_COLL_ONE_SITE, /* every rank in one site (or a rank without colours): pass through */
    QCG_COLL_SITES,    /* the hierarchy is ready */
};

/* The previous module's function for one collective. */
#define QCG_PREV(name)                                                                             \
    mca_coll_base_module_##name##_fn_t name;                                                       \
    mca_coll_base_module_t *name##_module

struct coll_qcg_module {
    mca_coll_base_module_t super;
    enum coll_qcg_state state;
    ompi_communicator_t *local;   /* the ranks of this rank's site, in comm's order */
    ompi_communicator_t *leaders; /* the lowest rank of each site (NULL elsewhere) */
    int sites;
    int *site_of;    /* comm rank -> its site's rank in leaders (site order: first rank) */
    int *local_rank; /* comm rank -> its rank in its site's local communicator */
    int *site_start; /* site -> ranks in the sites before it (sites + 1 entries) */
    int *leader;     /* site -> its leader's (lowest) rank in comm */
    struct {
        QCG_PREV(allgather);
        QCG_PREV(allgatherv);
        QCG_PREV(allreduce);
        QCG_PREV(barrier);
        QCG_PREV(bcast);
        QCG_PREV(gather);
        QCG_PREV(reduce);
        QCG_PREV(scatter);
        QCG_PREV(scatterv);
    } prev;
};
typedef struct coll_qcg_module coll_qcg_module_t;
OBJ_CLASS_DECLARATION(coll_qcg_module_t);

mca_coll_base_module_t *coll_qcg_comm_query(ompi_communicator_t *comm, int *priority);
/* QCG_COLL_SITES or QCG_COLL_ONE_SITE once the sites are known (a
   collective over comm the first time). */
enum coll_qcg_state coll_qcg_ready(coll_qcg_module_t *m, ompi_communicator_t *comm);

/* Open MPI's collective NAME on the sub-communicator c (its own module). */
#define QCG_SUB(c, name, ...)                                                                      \
    (c)->c_coll->coll_##name(__VA_ARGS__, (c), (c)->c_coll->coll_##name##_module)

/* Where comm rank r's block sits when the blocks are laid out site by
   site (each site's in its ranks' order): Allgather, Gather, Scatter. */
static inline int coll_qcg_site_pos(const coll_qcg_module_t *m, int r)
{
    return m->site_start[m->site_of[r]] + m->local_rank[r];
}

/* Gather and Scatter (runs.c): the packed bytes of one rank's block, 0
   when there are none or all blocks would not fit an int count (then Open
   MPI's own runs); the root's exchange of every other site's run of
   blocks (all: the blocks site by site) with that site's leader. */
size_t coll_qcg_block_bytes(int count, ompi_datatype_t *dtype, int size);
/* A rank's buffer of packed blocks in Gather and Scatter: the root holds
   all (site by site), its site's collector (the root in the root's site,
   the leader elsewhere) its site's run, any other rank its own block. */
struct coll_qcg_runs {
    char *base;     /* the buffer (free it) */
    char *run;      /* this rank's site's run of blocks (collectors) */
    char *mine;     /* this rank's block */
    int n;          /* ranks in this rank's site */
    int collector;  /* this rank collects its site's blocks */
    int local_root; /* the collector's rank in the site's communicator */
};
int coll_qcg_runs_alloc(coll_qcg_module_t *m, int rank, int root, size_t bytes, int size,
                        struct coll_qcg_runs *b);
/* off: where the block at each site position starts in all (size + 1
   entries), or NULL when every block has bytes. */
int coll_qcg_root_runs(coll_qcg_module_t *m, char *all, const size_t *off, size_t bytes, int root,
                       ompi_communicator_t *comm, int tag, int sending);
/* Bytes and messages of any size (runs.c): count elements' data (0 for
   count <= 0); packing and unpacking them; the messages of at most 1 GiB
   that carry bytes; posting them to (sending) or from peer, k counting the
   requests in reqs; waiting for k requests and freeing reqs (flat.c). */
size_t coll_qcg_data_bytes(int count, ompi_datatype_t *dtype);
int coll_qcg_pack(const void *buf, int count, ompi_datatype_t *dtype, char *out, size_t bytes);
int coll_qcg_unpack(const char *in, size_t bytes, void *buf, int count, ompi_datatype_t *dtype);
size_t coll_qcg_pieces(size_t bytes);
int coll_qcg_post(char *p, size_t bytes, int peer, int tag, ompi_communicator_t *comm, int sending,
                  ompi_request_t **reqs, int *k);
int coll_qcg_finish(ompi_request_t **reqs, int k, int rc);

/* Scatterv (vruns.c): blocks of any size per rank, so every site first
   gathers its ranks' sizes at its collector.  (Gatherv is Open MPI's own:
   README.md.) */
struct coll_qcg_vruns {
    char *base;  /* root: every block, site by site; a collector: its site's run; else its block */
    size_t *off; /* site position -> its block's offset in base (size + 1; unknown sizes 0) */
    char *mine;  /* this rank's block */
    int collector;  /* this rank hands out its site's blocks (the root in the root's site) */
    int local_root; /* the collector's rank in the site's communicator */
};
/* mine: this rank's bytes; counts, dtype: the root's per-rank counts. */
int coll_qcg_vruns_init(coll_qcg_module_t *m, int rank, int root, size_t mine, const int *counts,
                        ompi_datatype_t *dtype, struct coll_qcg_vruns *v);
/* Inside the site: every rank's block from its collector. */
int coll_qcg_vruns_site(coll_qcg_module_t *m, int rank, struct coll_qcg_vruns *v, int tag);
/* Across the WAN: every other site's run from the root to its leader. */
int coll_qcg_vruns_wan(coll_qcg_module_t *m, int rank, int root, struct coll_qcg_vruns *v,
                       ompi_communicator_t *comm, int tag);
void coll_qcg_vruns_free(struct coll_qcg_vruns *v);

/* The leaders' step, one WAN latency (flat.c): for messages of up to
   flat_max bytes (coll_qcg_flat). */
double coll_qcg_bytes(int count, ompi_datatype_t *dtype); /* count elements' data */
int coll_qcg_flat(int count, ompi_datatype_t *dtype);
int coll_qcg_flat_barrier(ompi_communicator_t *leaders);
int coll_qcg_flat_bcast(void *buf, int count, ompi_datatype_t *dtype, int root,
                        ompi_communicator_t *leaders);
int coll_qcg_flat_allreduce(void *buf, int count, ompi_datatype_t *dtype, struct ompi_op_t *op,
                            ompi_communicator_t *leaders);
int coll_qcg_flat_reduce(void *buf, int count, ompi_datatype_t *dtype, struct ompi_op_t *op,
                         int root, ompi_communicator_t *leaders);
int coll_qcg_flat_allgatherv(void *all, const int *counts, const int *displs,
                             ompi_datatype_t *dtype, ompi_communicator_t *leaders);

int coll_qcg_allgather(const void *sbuf, int scount, ompi_datatype_t *sdtype, void *rbuf,
                       int rcount, ompi_datatype_t *rdtype, ompi_communicator_t *comm,
                       mca_coll_base_module_t *module);
int coll_qcg_allgatherv(const void *sbuf, int scount, ompi_datatype_t *sdtype, void *rbuf,
                        const int *rcounts, const int *displs, ompi_datatype_t *rdtype,
                        ompi_communicator_t *comm, mca_coll_base_module_t *module);
int coll_qcg_scatterv(const void *sbuf, const int *scounts, const int *displs,
                      ompi_datatype_t *sdtype, void *rbuf, int rcount, ompi_datatype_t *rdtype,
                      int root, ompi_communicator_t *comm, mca_coll_base_module_t *module);
int coll_qcg_gather(const void *sbuf, int scount, ompi_datatype_t *sdtype, void *rbuf, int rcount,
                    ompi_datatype_t *rdtype, int root, ompi_communicator_t *comm,
                    mca_coll_base_module_t *module);
int coll_qcg_scatter(const void *sbuf, int scount, ompi_datatype_t *sdtype, void *rbuf, int rcount,
                     ompi_datatype_t *rdtype, int root, ompi_communicator_t *comm,
                     mca_coll_base_module_t *module);
int coll_qcg_barrier(ompi_communicator_t *comm, mca_coll_base_module_t *module);
int coll_qcg_bcast(void *buf, int count, ompi_datatype_t *dtype, int root,
                   ompi_communicator_t *comm, mca_coll_base_module_t *module);
int coll_qcg_reduce(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
                    struct ompi_op_t *op, int root, ompi_communicator_t *comm,
                    mca_coll_base_module_t *module);
int coll_qcg_allreduce(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dtype,
                       struct ompi_op_t *op, ompi_communicator_t *comm,
                       mca_coll_base_module_t *module);

END_C_DECLS

#endif
