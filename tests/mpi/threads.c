/* qcg-mpi-threads [--threads N] [--rounds R]: MPI_THREAD_MULTIPLE (FAIL if not
 * provided), N threads per rank (default 4) started together right after
 * MPI_Init_thread, so the first connection to each peer is asked for by
 * several threads at once.  Each thread sends to and receives from every
 * other rank at once, R rounds (default 3) of 0 B, 8 B, 4 KiB, 100 KiB and
 * 1 MiB (eager and rendezvous), with a tag of its own; contents and order
 * are checked.  PASS or FAIL on rank 0.
 *
 * qcg-mpi-threads --rate [--threads N] [--messages M] [--window W]: message
 * rate.  Ranks in pairs (0-1, 2-3, ...; an odd last rank idles), N threads
 * per rank each streaming M 8-byte messages (default 100000) to its twin on
 * the partner rank and receiving as many, W in flight (default 64).  Rank 0
 * prints one line: "rate: threads N ranks P size 8 messages TOTAL seconds S
 * msgs_per_s R" (TOTAL sent by all ranks; S the slowest rank's time), then
 * PASS or FAIL (each message carries its index, checked in order). */
#include <pthread.h>

#include "mpitest.h"

static const size_t sizes[] = {0, 8, 4096, 100 * 1024, 1024 * 1024};
#define NSIZES (int)(sizeof(sizes) / sizeof(sizes[0]))
#define MSG_SIZE 8

static int rank, nranks, nthreads = 4, rounds = 3, window = 64;
static long messages = 100000;
static pthread_barrier_t start;
static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;

#define ERROR(...)                                                                                 \
    do {                                                                                           \
        pthread_mutex_lock(&err_lock);                                                             \
        mt_error(rank, __VA_ARGS__);                                                               \
        pthread_mutex_unlock(&err_lock);                                                           \
    } while (0)

/* The tag of thread t's message i: each thread matches only its own. */
static int tag_of(int t, int i)
{
    return t * NSIZES + i;
}

/* One thread of the correctness mode: all its sends and receives of a
   round posted at once, then checked. */
static void *exchange(void *arg)
{
    int t = (int)(intptr_t)arg;
    size_t per_peer = 0;

    for (int i = 0; i < NSIZES; i++)
        per_peer += sizes[i];
    unsigned char *sbuf = mt_alloc(per_peer * (size_t)nranks);
    unsigned char *rbuf = mt_alloc(per_peer * (size_t)nranks), *scratch = mt_alloc(per_peer);
    MPI_Request *reqs = mt_alloc(sizeof(MPI_Request) * (size_t)(2 * NSIZES * nranks));

    pthread_barrier_wait(&start);
    for (int r = 0; r < rounds; r++) {
        int nreq = 0;

        for (int d = 1; d < nranks; d++) {
            int to = (rank + d) % nranks, from = (rank - d + nranks) % nranks;
            size_t soff = per_peer * (size_t)to, roff = per_peer * (size_t)from;

            for (int i = 0; i < NSIZES; soff += sizes[i], roff += sizes[i], i++) {
                int seq = (r * nthreads + t) * NSIZES + i;

                mt_fill(sbuf + soff, sizes[i], mt_seed(rank, to, sizes[i], seq));
                MPI_Irecv(rbuf + roff, (int)sizes[i], MPI_BYTE, from, tag_of(t, i), MPI_COMM_WORLD,
                          &reqs[nreq++]);
                MPI_Isend(sbuf + soff, (int)sizes[i], MPI_BYTE, to, tag_of(t, i), MPI_COMM_WORLD,
                          &reqs[nreq++]);
            }
        }
        MPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE);
        for (int from = 0; from < nranks; from++) {
            size_t off = per_peer * (size_t)from;

            if (from == rank)
                continue;
            for (int i = 0; i < NSIZES; off += sizes[i], i++) {
                int seq = (r * nthreads + t) * NSIZES + i;

                if (mt_sum(rbuf + off, sizes[i]) != mt_expected(from, rank, sizes[i], seq, scratch))
                    ERROR("thread %d round %d: %zu bytes from rank %d: wrong content", t, r,
                          sizes[i], from);
            }
        }
    }
    free(sbuf);
    free(rbuf);
    free(scratch);
    free(reqs);
    return NULL;
}

/* One thread of the rate mode: messages to and from its twin, window by
   window; each carries its index. */
static void *stream(void *arg)
{
    int t = (int)(intptr_t)arg, peer = rank ^ 1;
    uint64_t *sbuf = mt_alloc(sizeof(uint64_t) * (size_t)window);
    uint64_t *rbuf = mt_alloc(sizeof(uint64_t) * (size_t)window);
    MPI_Request *reqs = mt_alloc(sizeof(MPI_Request) * (size_t)(2 * window));

    pthread_barrier_wait(&start);
    for (long done = 0; done < messages;) {
        int w = messages - done < window ? (int)(messages - done) : window, nreq = 0;

        for (int i = 0; i < w; i++) {
            sbuf[i] = (uint64_t)(done + i);
            MPI_Irecv(&rbuf[i], MSG_SIZE, MPI_BYTE, peer, t, MPI_COMM_WORLD, &reqs[nreq++]);
            MPI_Isend(&sbuf[i], MSG_SIZE, MPI_BYTE, peer, t, MPI_COMM_WORLD, &reqs[nreq++]);
        }
        MPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE);
        for (int i = 0; i < w; i++)
            if (rbuf[i] != (uint64_t)(done + i))
                ERROR("thread %d: message %ld from rank %d carries %llu", t, done + i, peer,
                      (unsigned long long)rbuf[i]);
        done += w;
    }
    free(sbuf);
    free(rbuf);
    free(reqs);
    return NULL;
}

/* Runs fn in nthreads threads, started together; returns the seconds. */
static double run_threads(void *(*fn)(void *))
{
    pthread_t *tids = mt_alloc(sizeof(pthread_t) * (size_t)nthreads);
    double t0;

    pthread_barrier_init(&start, NULL, (unsigned)nthreads + 1);
    for (int t = 0; t < nthreads; t++)
        if (pthread_create(&tids[t], NULL, fn, (void *)(intptr_t)t) != 0) {
            fprintf(stderr, "rank %d: cannot start thread %d\n", rank, t);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    pthread_barrier_wait(&start);
    t0 = mt_now();
    for (int t = 0; t < nthreads; t++)
        pthread_join(tids[t], NULL);
    pthread_barrier_destroy(&start);
    free(tids);
    return mt_now() - t0;
}

static long arg_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s needs a value\n", argv[*i]);
        exit(2);
    }
    return strtol(argv[++*i], NULL, 10);
}

int main(int argc, char **argv)
{
    int provided, rc, rate = 0;
    double secs, slowest = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0)
            nthreads = (int)arg_value(argc, argv, &i);
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = (int)arg_value(argc, argv, &i);
        else if (strcmp(argv[i], "--messages") == 0)
            messages = arg_value(argc, argv, &i);
        else if (strcmp(argv[i], "--window") == 0)
            window = (int)arg_value(argc, argv, &i);
        else if (strcmp(argv[i], "--rate") == 0)
            rate = 1;
        else {
            fprintf(stderr,
                    "usage: %s [--rate] [--threads N] [--rounds R] [--messages M] "
                    "[--window W]\n",
                    argv[0]);
            return 2;
        }
    }
    if (nthreads < 1 || rounds < 1 || messages < 1 || window < 1) {
        fprintf(stderr, "--threads, --rounds, --messages and --window must be positive\n");
        return 2;
    }
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (provided < MPI_THREAD_MULTIPLE) {
        mt_error(rank, "MPI_THREAD_MULTIPLE not provided (got level %d)", provided);
        rc = mt_verdict("threads", "no MPI_THREAD_MULTIPLE");
        MPI_Finalize();
        return rc;
    }
    if (!rate) {
        secs = run_threads(exchange);
        rc = mt_verdict("threads",
                        "%d threads per rank, %d rounds of 0 B .. 1 MiB with every peer "
                        "at once, %.3f s",
                        nthreads, rounds, secs);
        MPI_Finalize();
        return rc;
    }
    /* Connections first (one message per pair), so that setup is not timed. */
    if ((rank ^ 1) < nranks)
        MPI_Sendrecv(&rank, 1, MPI_INT, rank ^ 1, 0, &provided, 1, MPI_INT, rank ^ 1, 0,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);
    secs = (rank ^ 1) < nranks ? run_threads(stream) : 0;
    MPI_Reduce(&secs, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        long total = (long)(nranks / 2 * 2) * nthreads * messages;

        printf("rate: threads %d ranks %d size %d messages %ld seconds %.6f msgs_per_s %.0f\n",
               nthreads, nranks, MSG_SIZE, total, slowest, slowest > 0 ? total / slowest : 0.0);
        fflush(stdout);
    }
    rc = mt_verdict("threads", "rate mode, %d threads per rank, %ld messages of %d B each",
                    nthreads, messages, MSG_SIZE);
    MPI_Finalize();
    return rc;
}
