/* qcg-mpi-resend [ROUNDS [STOP_RANK [STOP_FILE]]]: every rank streams
 * checksummed messages to every other at once, both directions (each round a
 * window of WINDOW Isend/Irecv per peer, sizes 8 bytes to 256 KiB), each
 * message carrying its index: the receiver checks that every message arrives
 * once, in order, intact.  Run with btl_qcg_test_break_every, the
 * connections are reset under it.  PASS or FAIL on rank 0, with the messages
 * and bytes each rank received.  With STOP_RANK, after the rounds that rank
 * stops itself (SIGSTOP: a peer gone without exiting) and the others, once
 * /proc shows it stopped, send it messages: their btl_qcg cannot reconnect
 * once a break occurs, and the job must fail (no PASS line).  With STOP_FILE
 * (STOP_RANK -1), ROUNDS is a maximum: the job ends after the round in which
 * rank 0 saw that file exist (lab-chaos: as long as its faults last), and
 * rank 0 prints "round N" at most once a second: each such line says every
 * pair of ranks carried data since the last one. */
#include "mpitest.h"

#include <signal.h>
#include <unistd.h>

#define WINDOW 8
#define TAG 5

static const size_t sizes[] = {8, 100, 1000, 4096, 16000, 20000, 65536, 70000, 262144};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Waits (bounded) until process pid is stopped. */
static void wait_stopped(int rank, int pid)
{
    char path[64], stat[256];

    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    for (int i = 0; i < 1000; i++) {
        FILE *f = fopen(path, "r");
        char *end = NULL;

        if (f != NULL) {
            size_t n = fread(stat, 1, sizeof(stat) - 1, f);

            fclose(f);
            stat[n] = '\0';
            end = strrchr(stat, ')');
        }
        if (end != NULL && end[1] == ' ' && end[2] == 'T')
            return;
        usleep(10000);
    }
    mt_error(rank, "process %d did not stop within 10 s", pid);
}

/* The stop phase (see the top). */
static void stop_phase(int rank, int n, int stop_rank, unsigned char *buf)
{
    int pid = (int)getpid();
    MPI_Request reqs[4 * WINDOW];

    MPI_Bcast(&pid, 1, MPI_INT, stop_rank, MPI_COMM_WORLD);
    if (rank == stop_rank) {
        fprintf(stderr, "rank %d: stopping itself (SIGSTOP)\n", rank);
        raise(SIGSTOP);
        return;
    }
    wait_stopped(rank, pid);
    memset(buf, 1, 8);
    for (int k = 0; k < 4 * WINDOW; k++)
        MPI_Isend(buf, 8, MPI_BYTE, stop_rank, TAG + 1, MPI_COMM_WORLD, &reqs[k]);
    MPI_Waitall(4 * WINDOW, reqs, MPI_STATUSES_IGNORE);
    (void)n;
}

static size_t size_of(long long index)
{
    return sizes[(size_t)index % NSIZES];
}

/* The index in the first 8 bytes, the rest from (src, dst, size, index). */
static void make(unsigned char *buf, int src, int dst, long long index)
{
    size_t size = size_of(index);

    mt_fill(buf, size, mt_seed(src, dst, size, (int)index));
    memcpy(buf, &index, sizeof(index));
}

int main(int argc, char **argv)
{
    int rank, n, rounds = 20, stop_rank = -1, rc;
    const char *stop_file = NULL;
    unsigned char **out, **in, *want;
    MPI_Request *reqs;
    long long messages = 0, bytes = 0;
    double t0, said = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc > 1)
        rounds = atoi(argv[1]);
    if (argc > 2)
        stop_rank = atoi(argv[2]);
    if (argc > 3)
        stop_file = argv[3];
    out = mt_alloc(sizeof(*out) * (size_t)n * WINDOW);
    in = mt_alloc(sizeof(*in) * (size_t)n * WINDOW);
    for (int i = 0; i < n * WINDOW; i++) {
        out[i] = mt_alloc(sizes[NSIZES - 1]);
        in[i] = mt_alloc(sizes[NSIZES - 1]);
    }
    want = mt_alloc(sizes[NSIZES - 1]);
    reqs = mt_alloc(sizeof(*reqs) * 2 * (size_t)n * WINDOW);

    t0 = mt_now();
    for (int r = 0; r < rounds; r++) {
        int nreq = 0;

        for (int p = 0; p < n; p++) {
            if (p == rank)
                continue;
            for (int k = 0; k < WINDOW; k++) {
                long long index = (long long)r * WINDOW + k;

                MPI_Irecv(in[p * WINDOW + k], (int)size_of(index), MPI_BYTE, p, TAG, MPI_COMM_WORLD,
                          &reqs[nreq++]);
            }
        }
        for (int d = 1; d < n; d++) {
            int p = (rank + d) % n;

            for (int k = 0; k < WINDOW; k++) {
                long long index = (long long)r * WINDOW + k;

                make(out[p * WINDOW + k], rank, p, index);
                MPI_Isend(out[p * WINDOW + k], (int)size_of(index), MPI_BYTE, p, TAG,
                          MPI_COMM_WORLD, &reqs[nreq++]);
            }
        }
        MPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE);
        if (stop_file != NULL) {
            int last = rank == 0 && access(stop_file, F_OK) == 0;
            if (rank == 0 && mt_now() - said >= 1.0) {
                said = mt_now();
                printf("round %d\n", r);
                fflush(stdout);
            }
            MPI_Bcast(&last, 1, MPI_INT, 0, MPI_COMM_WORLD);
            if (last)
                rounds = r + 1;
        }
        for (int p = 0; p < n; p++) {
            if (p == rank)
                continue;
            for (int k = 0; k < WINDOW; k++) {
                long long index = (long long)r * WINDOW + k, got;
                size_t size = size_of(index);

                memcpy(&got, in[p * WINDOW + k], sizeof(got));
                make(want, p, rank, index);
                if (got != index)
                    mt_error(rank, "message %lld from rank %d arrived as number %lld", index, p,
                             got);
                else if (memcmp(in[p * WINDOW + k], want, size) != 0)
                    mt_error(rank, "message %lld from rank %d (%zu bytes) corrupted", index, p,
                             size);
                messages++;
                bytes += (long long)size;
            }
        }
    }
    if (stop_rank >= 0 && stop_rank < n) {
        stop_phase(rank, n, stop_rank, want);
        mt_error(rank, "the stop phase ended");
    }
    rc = mt_verdict("resend",
                    "%lld messages (%.1f MiB) received per rank in order and intact "
                    "in %.2f s",
                    messages, bytes / 1048576.0, mt_now() - t0);
    for (int i = 0; i < n * WINDOW; i++) {
        free(out[i]);
        free(in[i]);
    }
    free(out);
    free(in);
    free(want);
    free(reqs);
    MPI_Finalize();
    return rc;
}
