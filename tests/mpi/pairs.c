/* qcg-mpi-pairs: shows, for every pair of ranks, how they were connected.
 * Every rank exchanges a message with every other, then rank 0 prints each
 * rank's node and a line per pair: btl_qcg's technique and setup time (read
 * back from btl_qcg's connection log), or the shared-memory/other BTL that
 * carried it.  Node names come from $QCG_LAB_NODE (set by qcg-lab mpirun)
 * or MPI_Get_processor_name.  PASS or FAIL on rank 0 (a failed exchange). */
#include "connlog.h"
#include "mpitest.h"

#define NAMELEN 64

int main(int argc, char **argv)
{
    char node[NAMELEN] = "", *nodes;
    int rank, n, rc, len, local_rank, *locals;
    unsigned char scratch[64], out[64], in[64];
    MPI_Comm shm;

    connlog_setup();
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (getenv("QCG_LAB_NODE") != NULL)
        snprintf(node, sizeof(node), "%.63s", getenv("QCG_LAB_NODE"));
    else {
        char name[MPI_MAX_PROCESSOR_NAME];

        MPI_Get_processor_name(name, &len);
        snprintf(node, sizeof(node), "%.63s", name);
    }
    /* Which ranks share a node in Open MPI's eyes (their peers go to vader). */
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shm);
    MPI_Comm_rank(shm, &local_rank);
    int leader = rank, *leaders = mt_alloc(sizeof(int) * (size_t)n);

    MPI_Bcast(&leader, 1, MPI_INT, 0, shm);
    MPI_Gather(&leader, 1, MPI_INT, leaders, 1, MPI_INT, 0, MPI_COMM_WORLD);
    locals = leaders;

    for (int d = 1; d < n; d++) {
        int to = (rank + d) % n, from = (rank - d + n) % n;

        mt_fill(out, sizeof(out), mt_seed(rank, to, sizeof(out), d));
        MPI_Sendrecv(out, sizeof(out), MPI_BYTE, to, d, in, sizeof(in), MPI_BYTE, from, d,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (mt_sum(in, sizeof(in)) != mt_expected(from, rank, sizeof(in), d, scratch))
            mt_error(rank, "the message from rank %d is wrong", from);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    struct connrec *mine = mt_alloc(sizeof(*mine) * (size_t)n);
    struct connrec *all = mt_alloc(sizeof(*all) * (size_t)n * (size_t)n);

    nodes = mt_alloc((size_t)NAMELEN * (size_t)n);
    connlog_read(rank, n, mine);
    connlog_gather(rank, n, mine, all);
    MPI_Gather(node, NAMELEN, MPI_CHAR, nodes, NAMELEN, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        int counts[8] = {0};
        const char *names[8] = {"direct", "reversed",      "traversing", "holepunch",
                                "proxy",  "shared memory", "other BTL",  NULL};

        printf("ranks:");
        for (int i = 0; i < n; i++)
            printf(" %d=%s", i, nodes + (size_t)i * NAMELEN);
        printf("\n%-12s %-14s %s\n", "pair", "connected by", "setup (initiator's view)");
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++) {
                struct connrec *a = &all[i * n + j], *b = &all[j * n + i];
                struct connrec *init = a->role == 'i' ? a : b;
                char pair[32];
                int k;

                snprintf(pair, sizeof(pair), "%d%s%d", a->role == 'i' ? i : j,
                         a->count || b->count ? " -> " : " -- ", a->role == 'i' ? j : i);
                if (a->count || b->count) {
                    for (k = 0; k < 5 && strcmp(names[k], init->technique) != 0; k++)
                        ;
                    counts[k < 5 ? k : 6]++;
                    printf("%-12s %-14s %.1f ms (qcg %.1f ms)\n", pair, init->technique,
                           init->setup_ms, init->qcg_ms);
                } else if (locals[i] == locals[j]) {
                    counts[5]++;
                    printf("%-12s %-14s\n", pair, "same node (shared memory BTL)");
                } else {
                    counts[6]++;
                    printf("%-12s %-14s\n", pair, "other BTL");
                }
            }
        printf("summary:");
        for (int k = 0; names[k] != NULL; k++)
            if (counts[k])
                printf(" %s %d", names[k], counts[k]);
        printf("\n");
        fflush(stdout);
    }
    rc = mt_verdict("pairs", "%d pairs exchanged", n * (n - 1) / 2);
    connlog_cleanup();
    free(mine);
    free(all);
    free(nodes);
    free(leaders);
    MPI_Comm_free(&shm);
    MPI_Finalize();
    return rc;
}
