/*
 * qcg-delayline: a WAN delay line built on NFQUEUE, for the lab (this kernel has no
 * netem).  Every packet the kernel queues to us is held for a fixed time, then
 * accepted.  All packets get the same delay, so a FIFO of packet ids gives the order
 * for free and one timer (the ppoll timeout for the oldest packet) serves the whole
 * queue: no sleep per packet.  Only metadata is copied from the kernel (we need the
 * packet id and nothing else), GSO packets are queued whole, and expired packets are
 * released with one batch verdict per wake-up, so the line keeps up with
 * multi-gigabit traffic.
 *
 * Memory is bounded: at most --max-held packets are held; beyond that a packet is
 * accepted at once and counted as an overflow.  SIGTERM/SIGINT accept everything
 * still held before exiting, so stopping the line drops nothing.  SIGUSR1 prints the
 * counters.  Use it with `-j NFQUEUE --queue-num N --queue-bypass`, so that no
 * delay line (dead or not yet started) means no delay rather than a black hole.
 *
 * It runs at a real-time priority (SCHED_FIFO) where it may: a link does not wait
 * for the CPU.  At normal priority, with 80 ranks spinning on two cores, a line
 * that was runnable but not run for 10-18 s held its router's packets as long
 * (seen in the lab's 80-rank storm).  It sleeps between packets and does little per
 * packet; the kernel's real-time throttling (95% of each second by default) bounds
 * what a runaway line could take, but whether it ever held a line back was not
 * measured.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#define PROG "qcg-delayline"
#define DEFAULT_MAX_HELD 65536u
#define MAX_MAX_HELD (1u << 22)
#define MAX_DELAY_MS 60000.0
/* Netlink receive buffer: room for bursts while we are busy releasing packets. */
#define RCVBUF_BYTES (8u * 1024u * 1024u)
/* Messages read per wake-up before expired packets are released again. */
#define RECV_BUDGET 512
/* Low among real-time priorities: above every normal process, below the kernel's
   own real-time threads. */
#define RT_PRIORITY 10

struct held {
    uint32_t id;
    uint64_t due_ns;
};

struct delayline {
    struct nfq_handle *h;
    struct nfq_q_handle *qh;
    uint16_t queue;
    uint64_t delay_ns;
    /* Ring buffer of held packets, oldest at head. */
    struct held *ring;
    uint32_t cap, head, count;
    /* Highest id received, to release everything on exit. */
    uint32_t last_id;
    bool have_id;
    /* Counters. */
    uint64_t received, delayed, overflowed, lost_msgs, verdict_errors;
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: " PROG " --queue NUM --delay MS [--max-held N]\n"
            "\n"
            "Holds every packet of NFQUEUE queue NUM for MS milliseconds, then accepts it.\n"
            "Order is preserved. Run as root inside the network namespace whose iptables\n"
            "rules send packets to the queue (use --queue-bypass in those rules).\n"
            "\n"
            "  -q, --queue NUM      queue number, 0-65535\n"
            "  -d, --delay MS       one-way delay in milliseconds (decimals allowed), 0-%.0f\n"
            "  -m, --max-held N     hold at most N packets; beyond that packets are accepted\n"
            "                       at once and counted as overflow (default %u, max %u)\n"
            "  -h, --help           this text\n"
            "\n"
            "Runs at real-time priority %d (SCHED_FIFO) when allowed.\n"
            "SIGTERM/SIGINT: accept all held packets, print counters, exit 0.\n"
            "SIGUSR1: print counters to stderr.\n",
            MAX_DELAY_MS, DEFAULT_MAX_HELD, MAX_MAX_HELD, RT_PRIORITY);
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
    char *end;
    unsigned long v;

    if (s == NULL || *s == '\0' || *s == '-')
        return -1;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > max)
        return -1;
    *out = v;
    return 0;
}

static int parse_ms(const char *s, double *out)
{
    char *end;
    double v;

    if (s == NULL || *s == '\0')
        return -1;
    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v) || v < 0.0 || v > MAX_DELAY_MS)
        return -1;
    *out = v;
    return 0;
}

static void print_counters(const struct delayline *dl)
{
    fprintf(stderr,
            PROG ": queue %u: %" PRIu64 " packets, %" PRIu64 " delayed, %" PRIu64
                 " overflowed (accepted undelayed), %" PRIu64 " lost messages, %" PRIu64
                 " verdict errors, %u held\n",
            dl->queue, dl->received, dl->delayed, dl->overflowed, dl->lost_msgs, dl->verdict_errors,
            dl->count);
}

/* Real-time where the system lets us (root, or CAP_SYS_NICE); else a line in the
   log, and the delay holds only while the machine has CPU to spare. */
static void go_realtime(void)
{
    struct sched_param sp = {.sched_priority = RT_PRIORITY};

    if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0)
        fprintf(stderr,
                PROG ": note: cannot run at a real-time priority (%s): under load the "
                     "delay may grow\n",
                strerror(errno));
}

/* Accepts every held packet whose time has come (all of them if `all`). */
static void release(struct delayline *dl, bool all)
{
    uint64_t now = now_ns();
    uint32_t last = 0;
    bool any = false;

    while (dl->count > 0) {
        const struct held *p = &dl->ring[dl->head];

        if (!all && p->due_ns > now)
            break;
        last = p->id;
        any = true;
        dl->head = (dl->head + 1) % dl->cap;
        dl->count--;
    }
    /* On exit, also release packets whose messages we never saw (lost on ENOBUFS):
     * a batch verdict covers every queued packet up to the given id. */
    if (all && dl->have_id) {
        last = dl->last_id;
        any = true;
    }
    if (!any)
        return;
    /* Ids are handed out in queue order and we hold packets in that order, so one
     * batch verdict up to the newest expired id releases exactly the expired ones. */
    if (nfq_set_verdict_batch(dl->qh, last, NF_ACCEPT) < 0)
        dl->verdict_errors++;
}

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa,
                     void *data)
{
    struct delayline *dl = data;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    uint32_t id;

    (void)msg;
    if (ph == NULL)
        return 0;
    id = ntohl(ph->packet_id);
    dl->received++;
    dl->last_id = id;
    dl->have_id = true;
    if (dl->count == dl->cap) {
        dl->overflowed++;
        if (nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL) < 0)
            dl->verdict_errors++;
        return 0;
    }
    dl->ring[(dl->head + dl->count) % dl->cap] =
        (struct held){.id = id, .due_ns = now_ns() + dl->delay_ns};
    dl->count++;
    dl->delayed++;
    return 0;
}

static int open_queue(struct delayline *dl)
{
    int fd;

    dl->h = nfq_open();
    if (dl->h == NULL) {
        fprintf(stderr, PROG ": cannot open netfilter queue handle: %s%s\n", strerror(errno),
                errno == EPERM ? " (run as root)" : "");
        return -1;
    }
    dl->qh = nfq_create_queue(dl->h, dl->queue, on_packet, dl);
    if (dl->qh == NULL) {
        fprintf(stderr,
                PROG ": cannot bind queue %u: %s (is another program bound to it? "
                     "are you root?)\n",
                dl->queue, strerror(errno));
        return -1;
    }
    if (nfq_set_mode(dl->qh, NFQNL_COPY_META, 0) < 0) {
        fprintf(stderr, PROG ": cannot set copy mode: %s\n", strerror(errno));
        return -1;
    }
    /* Twice our own bound, so that it is us who see (and count) an overflow while
     * the kernel's fail-open remains a last resort. */
    if (nfq_set_queue_maxlen(dl->qh, 2 * dl->cap) < 0)
        fprintf(stderr, PROG ": warning: cannot set queue length: %s\n", strerror(errno));
    /* GSO: queue large packets whole instead of having the kernel segment them.
     * FAIL_OPEN: should the kernel queue fill up, accept rather than drop. */
    if (nfq_set_queue_flags(dl->qh, NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN,
                            NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN) < 0)
        fprintf(stderr, PROG ": warning: cannot set queue flags: %s\n", strerror(errno));
    nfnl_rcvbufsiz(nfq_nfnlh(dl->h), RCVBUF_BYTES);
    fd = nfq_fd(dl->h);
    return fd;
}

static void close_queue(struct delayline *dl)
{
    if (dl->qh != NULL)
        nfq_destroy_queue(dl->qh);
    if (dl->h != NULL)
        nfq_close(dl->h);
}

static int open_signals(void)
{
    sigset_t set;
    int fd;

    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGUSR1);
    if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
        return -1;
    fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return fd;
}

/* Returns true when asked to stop. */
static bool handle_signals(int sfd, const struct delayline *dl)
{
    struct signalfd_siginfo si;
    bool stop = false;

    while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGUSR1)
            print_counters(dl);
        else
            stop = true;
    }
    return stop;
}

/* Reads up to RECV_BUDGET queued messages; returns true once the socket is empty. */
static bool receive(struct delayline *dl, int fd)
{
    /* Metadata-only messages are small; a page holds any of them. */
    char buf[8192] __attribute__((aligned));

    for (int i = 0; i < RECV_BUDGET; i++) {
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

        if (n < 0) {
            /* A full socket buffer loses messages; the packets behind them are
             * released by the next batch verdict, which covers every id up to
             * the one given. */
            if (errno == ENOBUFS) {
                dl->lost_msgs++;
                continue;
            }
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                fprintf(stderr, PROG ": recv: %s\n", strerror(errno));
            return true;
        }
        nfq_handle_packet(dl->h, buf, (int)n);
    }
    return false;
}

/*
 * Stops without losing a packet: unbinding the queue would drop whatever the kernel
 * still holds for us.  A queue length of 0 with FAIL_OPEN makes the kernel accept
 * new packets itself; then the messages already sent to us are read and everything
 * up to the newest id is accepted in one batch verdict.
 */
static void stop(struct delayline *dl, int fd)
{
    if (nfq_set_queue_maxlen(dl->qh, 0) < 0)
        fprintf(stderr, PROG ": warning: cannot close the queue to new packets: %s\n",
                strerror(errno));
    /* Bounded: the socket buffer holds a finite number of messages and no new
     * ones arrive once the queue length is 0. */
    for (int i = 0; i < 1024 && !receive(dl, fd); i++)
        ;
    release(dl, true);
}

static int run(struct delayline *dl, int qfd, int sfd)
{
    struct pollfd pfd[2] = {
        {.fd = qfd, .events = POLLIN},
        {.fd = sfd, .events = POLLIN},
    };

    for (;;) {
        struct timespec ts, *timeout = NULL;

        if (dl->count > 0) {
            uint64_t now = now_ns();
            uint64_t due = dl->ring[dl->head].due_ns;
            uint64_t wait = due > now ? due - now : 0;

            ts.tv_sec = (time_t)(wait / 1000000000u);
            ts.tv_nsec = (long)(wait % 1000000000u);
            timeout = &ts;
        }
        if (ppoll(pfd, 2, timeout, NULL) < 0 && errno != EINTR) {
            fprintf(stderr, PROG ": ppoll: %s\n", strerror(errno));
            return -1;
        }
        if (pfd[1].revents & POLLIN) {
            if (handle_signals(sfd, dl))
                return 0;
        }
        if (pfd[0].revents & (POLLIN | POLLERR))
            receive(dl, qfd);
        release(dl, false);
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"queue", required_argument, NULL, 'q'},
        {"delay", required_argument, NULL, 'd'},
        {"max-held", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct delayline dl = {.cap = DEFAULT_MAX_HELD};
    unsigned long queue = 0, max_held;
    double delay_ms = -1.0;
    bool have_queue = false;
    int c, qfd, sfd, rc;

    while ((c = getopt_long(argc, argv, "q:d:m:h", opts, NULL)) != -1) {
        switch (c) {
        case 'q':
            if (parse_uint(optarg, 65535, &queue) < 0) {
                fprintf(stderr, PROG ": bad --queue '%s': want 0-65535\n", optarg);
                return 2;
            }
            have_queue = true;
            break;
        case 'd':
            if (parse_ms(optarg, &delay_ms) < 0) {
                fprintf(stderr, PROG ": bad --delay '%s': want milliseconds, 0-%.0f\n", optarg,
                        MAX_DELAY_MS);
                return 2;
            }
            break;
        case 'm':
            if (parse_uint(optarg, MAX_MAX_HELD, &max_held) < 0 || max_held == 0) {
                fprintf(stderr, PROG ": bad --max-held '%s': want 1-%u\n", optarg, MAX_MAX_HELD);
                return 2;
            }
            dl.cap = (uint32_t)max_held;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!have_queue || delay_ms < 0.0) {
        fprintf(stderr, PROG ": --queue and --delay are required\n");
        usage(stderr);
        return 2;
    }
    dl.queue = (uint16_t)queue;
    dl.delay_ns = (uint64_t)llround(delay_ms * 1e6);
    dl.ring = calloc(dl.cap, sizeof(*dl.ring));
    if (dl.ring == NULL) {
        fprintf(stderr, PROG ": out of memory for %u held packets\n", dl.cap);
        return 1;
    }
    /* The default 50 µs timer slack would be a visible share of sub-ms delays. */
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    go_realtime();

    sfd = open_signals();
    if (sfd < 0) {
        fprintf(stderr, PROG ": signalfd: %s\n", strerror(errno));
        return 1;
    }
    qfd = open_queue(&dl);
    if (qfd < 0) {
        close_queue(&dl);
        return 1;
    }
    fprintf(stderr, PROG ": queue %u bound, delay %.3f ms, at most %u held\n", dl.queue, delay_ms,
            dl.cap);

    rc = run(&dl, qfd, sfd);
    stop(&dl, qfd);
    print_counters(&dl);
    close_queue(&dl);
    close(sfd);
    free(dl.ring);
    return rc == 0 ? 0 : 1;
}
