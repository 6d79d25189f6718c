/* The component: parameters, and btl_init, which joins the grid (qcg_open,
   qcg_listen) or opts out so that the other BTLs still run. */
#include "btl_qcg.h"
#include "help.h"
#include "jobid.h"
#include "verifier.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/btl/base/base.h"
#include "opal/runtime/opal.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"

static int component_register(void);
static int component_open(void);
static int component_close(void);
static mca_btl_base_module_t **component_init(int *num_btls, bool progress_threads,
                                              bool mpi_threads);

/* The one symbol Open MPI looks up (everything else is hidden). */
__attribute__((visibility("default"))) struct btl_qcg_component mca_btl_qcg_component = {
    .super =
        {
            .btl_version =
                {
                    MCA_BTL_DEFAULT_VERSION("qcg"),
                    .mca_open_component = component_open,
                    .mca_close_component = component_close,
                    .mca_register_component_params = component_register,
                },
            .btl_data = {.param_field = MCA_BASE_METADATA_PARAM_CHECKPOINT},
            .btl_init = component_init,
            /* NULL on purpose: the BML registers btl_progress only once a
               peer was added, and with dynamic add_procs (Open MPI's default
               cutoff) a rank learns of a peer only by receiving from it:
               btl_init registers our progress itself. */
            .btl_progress = NULL,
        },
    .verbose = 0,
    .connect_timeout_ms = 30000,
    .conn_log = NULL,
    .local_peers = -1,
    .cluster_peers = -1,
    .max_connects = 32,
    .reconnect_timeout_ms = 60000,
    .stall_timeout_ms = 10000,
    .resend_buffer = 4 * 1024 * 1024,
    .copy_max = 128 * 1024,
    .test_break_every = 0,
    .test_drop_incoming = 0,
};

static int component_register(void)
{
    mca_base_component_t *c = &mca_btl_qcg_component.super.btl_version;

    mca_btl_qcg_component.verbose = 0;
    (void)mca_base_component_var_register(
        c, "verbose",
        "0: errors only; 1: one line per peer (technique, setup time); 2: connection debugging",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_1, MCA_BASE_VAR_SCOPE_LOCAL,
        &mca_btl_qcg_component.verbose);
    mca_btl_qcg_component.connect_timeout_ms = 30000;
    (void)mca_base_component_var_register(
        c, "connect_timeout",
        "Milliseconds a connection to a peer may go without progress (lookup, technique, "
        "handshake), 3 times that in all at most, before the send fails with an error naming "
        "the peer",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_1, MCA_BASE_VAR_SCOPE_LOCAL,
        &mca_btl_qcg_component.connect_timeout_ms);
    mca_btl_qcg_component.conn_log = NULL;
    (void)mca_base_component_var_register(
        c, "conn_log",
        "File to which a line 'RANK PEER TECHNIQUE initiator|acceptor QCG_SETUP_US "
        "SETUP_US' is appended for every connection (empty: none)",
        MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_LOCAL,
        &mca_btl_qcg_component.conn_log);
    mca_btl_qcg_component.encrypt = "inter-site";
    (void)mca_base_component_var_register(
        c, "encrypt",
        "Which connections are encrypted (TLS 1.3 keyed by the job secret): inter-site (those "
        "to another cluster), always, never (plain unless the peer asks); every connection is "
        "authenticated by the job secret either way",
        MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_1, MCA_BASE_VAR_SCOPE_LOCAL,
        &mca_btl_qcg_component.encrypt);
    mca_btl_qcg_component.local_peers = -1;
    (void)mca_base_component_var_register(
        c, "local_peers",
        "Carry peers on the same node: -1 only when no shared-memory BTL (vader, sm) runs, "
        "0 never, 1 always",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_1, MCA_BASE_VAR_SCOPE_LOCAL,
        &mca_btl_qcg_component.local_peers);
    mca_btl_qcg_component.cluster_peers = -1;
    (void)mca_base_component_var_register(
        c, "cluster_peers",
        "Carry peers of our own cluster (site): -1 only when no other network BTL (tcp, a "
        "fabric) runs, so that the cluster's own network carries them; 0 never; 1 always",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_1, MCA_BASE_VAR_SCOPE_LOCAL,
        &mca_btl_qcg_component.cluster_peers);
    mca_btl_qcg_component.max_connects = 32;
    (void)mca_base_component_var_register(
        c, "max_connects",
        "Connections a process sets up at once; more peers wait for a slot (each setup holds "
        "descriptors and a lookup at the node's helper)",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_4, MCA_BASE_VAR_SCOPE_LOCAL,
        &mca_btl_qcg_component.max_connects);
    mca_btl_qcg_component.reconnect_timeout_ms = 60000;
    (void)mca_base_component_var_register(
        c, "reconnect_timeout",
        "Milliseconds a broken connection to a peer may take to be re-established (the "
        "messages it lost are sent again) before the job fails: the peer process is gone",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_4, MCA_BASE_VAR_SCOPE_LOCAL,
        &mca_btl_qcg_component.reconnect_timeout_ms);
    mca_btl_qcg_component.stall_timeout_ms = 10000;
    (void)mca_base_component_var_register(
        c, "stall_timeout",
        "Milliseconds a connection may have data in flight with no acknowledgement at all from "
        "the peer's host (a NAT or firewall on the way forgot it) before it is taken as broken "
        "and re-established (the messages it lost are sent again); 0: never (TCP retries for "
        "minutes)",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_4, MCA_BASE_VAR_SCOPE_LOCAL,
        &mca_btl_qcg_component.stall_timeout_ms);
    mca_btl_qcg_component.resend_buffer = 4 * 1024 * 1024;
    (void)mca_base_component_var_register(
        c, "resend_buffer",
        "Bytes of copies of small sent messages kept per peer until it acknowledges them (to "
        "send them again over a new connection); when full, sends complete only once "
        "acknowledged",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_LOCAL,
        &mca_btl_qcg_component.resend_buffer);
    mca_btl_qcg_component.copy_max = 128 * 1024;
    (void)mca_base_component_var_register(
        c, "copy_max",
        "Frames up to this many payload bytes are copied into the resend buffer (their send "
        "completes at once); larger ones are kept in place and their send completes when the "
        "peer acknowledges them",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_LOCAL,
        &mca_btl_qcg_component.copy_max);
    mca_btl_qcg_component.test_break_every = 0;
    (void)mca_base_component_var_register(
        c, "test_break_every",
        "Test hook, 0 (off) in production: abort (reset) the connection to a peer after every N "
        "new frames sent to it, to test reconnection and resending",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_LOCAL,
        &mca_btl_qcg_component.test_break_every);
    mca_btl_qcg_component.test_drop_incoming = 0;
    (void)mca_base_component_var_register(
        c, "test_drop_incoming",
        "Test hook, 0 (off) in production: reset the first N connections the peers make to "
        "this process before answering them, to test that first connections are tried again",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_LOCAL,
        &mca_btl_qcg_component.test_drop_incoming);

    /* TCP-like defaults; exclusivity above btl_tcp's so that qcg carries a
       peer both could reach. */
    btl_qcg_module_template.btl_exclusivity = MCA_BTL_EXCLUSIVITY_LOW + 200;
    btl_qcg_module_template.btl_eager_limit = 64 * 1024;
    btl_qcg_module_template.btl_rndv_eager_limit = 64 * 1024;
    btl_qcg_module_template.btl_max_send_size = 128 * 1024;
    btl_qcg_module_template.btl_rdma_pipeline_send_length = 128 * 1024;
    btl_qcg_module_template.btl_rdma_pipeline_frag_size = 128 * 1024;
    btl_qcg_module_template.btl_min_rdma_pipeline_size = 0;
    btl_qcg_module_template.btl_flags = MCA_BTL_FLAGS_SEND | MCA_BTL_FLAGS_SEND_INPLACE;
    btl_qcg_module_template.btl_latency = 100;
    btl_qcg_module_template.btl_bandwidth = 100;
    /* The btl base registers exclusivity at level 7; registered here first
       (same variable, same storage, the base's registration keeps our
       level) a plain `ompi_info --param btl qcg` shows it: it is what a
       user sets to let btl_tcp carry the peers it can reach. */
    (void)mca_base_component_var_register(
        c, "exclusivity",
        "BTL exclusivity: of the BTLs reaching a peer, the highest carries it (btl_tcp 100, "
        "vader and self 65536); to let another BTL carry the peers of our own cluster, see "
        "btl_qcg_cluster_peers",
        MCA_BASE_VAR_TYPE_UNSIGNED_INT, NULL, 0, 0, OPAL_INFO_LVL_1, MCA_BASE_VAR_SCOPE_READONLY,
        &btl_qcg_module_template.btl_exclusivity);
    return mca_btl_base_param_register(c, &btl_qcg_module_template);
}

static int component_open(void)
{
    btl_qcg_help_init();
    return OPAL_SUCCESS;
}

static int component_close(void)
{
    return OPAL_SUCCESS;
}

/* Our cluster's name in the modex, so that peers of the same cluster can be
   left to its own network (btl_qcg_cluster_peers). */
static void publish_cluster(struct btl_qcg_module *m)
{
    struct qcg_contact c;
    char *value = m->cluster;
    int rc;

    if (qcg_local_contact(m->ctx, &c) != 0)
        return;
    snprintf(m->cluster, sizeof(m->cluster), "%s", c.cluster);
    OPAL_MODEX_SEND_VALUE(rc, BTL_QCG_MODEX_GLOBAL, BTL_QCG_MODEX_CLUSTER, value,
                          BTL_QCG_MODEX_STRING);
    if (rc != OPAL_SUCCESS)
        m->cluster[0] = '\0';
}

static mca_btl_base_module_t **component_init(int *num_btls, bool progress_threads,
                                              bool mpi_threads)
{
    opal_process_name_t me = OPAL_PROC_MY_NAME;
    struct qcg_options opts = {.job = NULL, .rank = -1, .secret = NULL, .helper_socket = NULL};
    mca_btl_base_module_t **modules;
    struct btl_qcg_module *m;
    const char *secret = getenv("QCG_JOB_SECRET"), *user_job = getenv("QCG_JOB");
    char job[GRID_JOB_MAX];
    qcg_ctx *ctx = NULL;
    int rc;

    (void)progress_threads;
    (void)mpi_threads; /* MPI_THREAD_MULTIPLE is fine: see README.md, "Threads" */
    *num_btls = 0;
    if (btl_qcg_abi_mismatch() != NULL) {
        btl_qcg_opt_out("wrong open mpi", true,
                        "%s has another size in this Open MPI (%s) than in the headers "
                        "mca_btl_qcg.so was built with (%d.%d.%d)",
                        btl_qcg_abi_mismatch(), opal_version_string, OPAL_MAJOR_VERSION,
                        OPAL_MINOR_VERSION, OPAL_RELEASE_VERSION);
        return NULL;
    }
    if (secret == NULL || secret[0] == '\0') {
        btl_qcg_opt_out("no secret", false, "QCG_JOB_SECRET is not set (mpirun -x QCG_JOB_SECRET)");
        return NULL;
    }
    if (!secret_strong(secret)) {
        btl_qcg_opt_out("weak secret", true, "QCG_JOB_SECRET has about %d bits, at least %d needed",
                        secret_entropy_bits(secret), QCG_SECRET_MIN_BITS);
        return NULL;
    }
    if (me.vpid > (uint32_t)INT32_MAX) {
        btl_qcg_log(1, "not used: rank %u out of range", me.vpid);
        return NULL;
    }
    /* The user's job, not Open MPI's 16-bit-hashed job id that anyone seeing
       `ps` could claim first: QCG_JOB (from the node's qcg-agent, or the
       user's environment) names it; Open MPI's job tells the jobs of one
       mpirun apart (spawn). */
    if (user_job == NULL || user_job[0] == '\0') {
        btl_qcg_opt_out("no job", false,
                        "QCG_JOB is not set (qcg-mpirun sets it; with plain mpirun, "
                        "export QCG_JOB and -x QCG_JOB)");
        return NULL;
    }
    if (mpi_job_id(job, user_job, me.jobid) < 0) {
        btl_qcg_opt_out("bad job", true,
                        "QCG_JOB '%.64s' is not 1..%d characters of A-Z a-z 0-9 . _ -", user_job,
                        USER_JOB_MAX);
        return NULL;
    }
    opts.job = job;
    opts.rank = (int)me.vpid;
    opts.encrypt = qcg_encrypt_parse(mca_btl_qcg_component.encrypt);
    if (opts.encrypt < 0) {
        btl_qcg_opt_out("bad encrypt", true,
                        "btl_qcg_encrypt '%.32s' is not inter-site, always or never",
                        mca_btl_qcg_component.encrypt ? mca_btl_qcg_component.encrypt : "");
        return NULL;
    }
    rc = qcg_open(&ctx, &opts);
    if (rc < 0) {
        btl_qcg_opt_out("no helper", false, "no qcg-helper (QCG_HELPER_SOCKET=%s): %s: %s",
                        getenv("QCG_HELPER_SOCKET") ? getenv("QCG_HELPER_SOCKET") : "(default)",
                        qcg_strerror(rc), qcg_last_error(NULL));
        return NULL;
    }
    rc = qcg_listen(ctx);
    if (rc < 0) {
        /* A helper is there but the grid does not take us: worth saying. */
        btl_qcg_opt_out("cannot publish", true, "cannot publish a contact: %s: %s",
                        qcg_strerror(rc), qcg_last_error(ctx));
        qcg_close(ctx);
        return NULL;
    }
    m = btl_qcg_module_new(ctx, me.jobid, me.vpid);
    modules = malloc(sizeof(*modules));
    if (m == NULL || modules == NULL) {
        free(modules);
        if (m != NULL)
            m->super.btl_finalize(&m->super);
        else
            qcg_close(ctx);
        return NULL;
    }
    publish_cluster(m);
    btl_qcg_active = m;
    if (opal_progress_register(btl_qcg_progress) != OPAL_SUCCESS) {
        btl_qcg_active = NULL;
        free(modules);
        m->super.btl_finalize(&m->super);
        return NULL;
    }
    if (mca_btl_qcg_component.verbose >= 2) {
        struct qcg_contact c;

        if (qcg_local_contact(ctx, &c) == 0)
            btl_qcg_log(2, "job %s rank %u listens on %s:%u (cluster %s, node %s)", job, me.vpid,
                        c.address, c.port, c.cluster, c.node);
    }
    modules[0] = &m->super;
    *num_btls = 1;
    return modules;
}
