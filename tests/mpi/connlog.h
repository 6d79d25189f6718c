/* The connections btl_qcg made, read back from its connection log
   (btl_qcg_conn_log: a line "RANK PEER TECHNIQUE ROLE QCG_SETUP_US SETUP_US"
   per connection).  Header-only, for the MPI test programs. */
#ifndef CONNLOG_H
#define CONNLOG_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct connrec {
    int count; /* connections to this peer (exactly 1 when btl_qcg carries it) */
    char technique[16];
    char role; /* 'i' initiator, 'a' acceptor */
    double qcg_ms, setup_ms;
};

static char connlog_path[512];
static int connlog_ours; /* we chose the path (and remove the file) */

/* Before MPI_Init: point btl_qcg's log at a file of this process, unless
   the user set one (then lines are told apart by their first field). */
static inline void connlog_setup(void)
{
    const char *set = getenv("OMPI_MCA_btl_qcg_conn_log");

    if (set != NULL && set[0] != '\0') {
        snprintf(connlog_path, sizeof(connlog_path), "%s", set);
        return;
    }
    snprintf(connlog_path, sizeof(connlog_path), "%s/qcg-connlog.%ld",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid());
    unlink(connlog_path);
    setenv("OMPI_MCA_btl_qcg_conn_log", connlog_path, 1);
    connlog_ours = 1;
}

/* This rank's connections by peer (recs has n entries, zeroed here).
   Returns 0, or -1 when no log exists (btl_qcg made no connection). */
static inline int connlog_read(int rank, int n, struct connrec *recs)
{
    FILE *f = fopen(connlog_path, "r");
    char line[256], tech[16], role[16];
    unsigned me, peer;
    unsigned long long qus, sus;

    memset(recs, 0, sizeof(*recs) * (size_t)n);
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "%u %u %15s %15s %llu %llu", &me, &peer, tech, role, &qus, &sus) != 6)
            continue;
        if ((int)me != rank || (int)peer >= n)
            continue;
        recs[peer].count++;
        snprintf(recs[peer].technique, sizeof(recs[peer].technique), "%s", tech);
        recs[peer].role = role[0];
        recs[peer].qcg_ms = qus / 1000.0;
        recs[peer].setup_ms = sus / 1000.0;
    }
    fclose(f);
    return 0;
}

static inline void connlog_cleanup(void)
{
    if (connlog_ours)
        unlink(connlog_path);
}

/* Every rank's records on rank 0 (all[n*n], row = rank); MPI datatype-free:
   the struct is sent as bytes (same binary everywhere). */
static inline void connlog_gather(int rank, int n, struct connrec *mine, struct connrec *all)
{
    (void)rank;
    MPI_Gather(mine, (int)(sizeof(*mine) * (size_t)n), MPI_BYTE, all,
               (int)(sizeof(*mine) * (size_t)n), MPI_BYTE, 0, MPI_COMM_WORLD);
}

#endif
