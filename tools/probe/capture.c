/* --capture: the probe's own packets (filtered to the grid's services and the
   peers' addresses) written to a pcap file by a thread of its own, while the
   checks run.  The same packets say whether the reflector's dial-back SYN
   ever reached this node. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pcap/pcap.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe.h"

#define SNAPLEN 256 /* headers and a little payload: evidence, not data */
#define POLL_MS 50
#define SYN_PORTS_MAX 64

struct capture {
    pcap_t *pcap;
    pcap_dumper_t *dump;
    pthread_t thread;
    pthread_mutex_t lock; /* the pcap handle: the thread reads, refilters are rare */
    atomic_bool stop;
    long packets;
    int linktype;
    uint16_t syn_port[SYN_PORTS_MAX]; /* destination ports of SYNs seen, with counts */
    int syn_count[SYN_PORTS_MAX];
    int nsyn;
};

/* The offset of the IPv4 header in a frame of this link type, or -1. */
static int ip_offset(int linktype, const unsigned char *p, unsigned len)
{
    switch (linktype) {
    case DLT_LINUX_SLL: /* "any": 16-byte cooked header, protocol at 14 */
        return len >= 16 && p[14] == 0x08 && p[15] == 0x00 ? 16 : -1;
    case DLT_EN10MB:
        return len >= 14 && p[12] == 0x08 && p[13] == 0x00 ? 14 : -1;
    case DLT_RAW:
        return 0;
    default:
        return -1;
    }
}

/* Counts TCP SYNs (no ACK) by destination port. */
static void note_syn(struct capture *c, const unsigned char *p, unsigned len)
{
    int off = ip_offset(c->linktype, p, len);
    if (off < 0 || len < (unsigned)off + 20 || (p[off] >> 4) != 4 || p[off + 9] != IPPROTO_TCP)
        return;
    unsigned ihl = (unsigned)(p[off] & 0x0f) * 4;
    const unsigned char *tcp = p + off + ihl;
    if (ihl < 20 || len < (unsigned)off + ihl + 14)
        return;
    uint8_t flags = tcp[13];
    if (!(flags & 0x02) || (flags & 0x10))
        return;
    uint16_t dport = (uint16_t)(tcp[2] << 8 | tcp[3]);
    for (int i = 0; i < c->nsyn; i++)
        if (c->syn_port[i] == dport) {
            c->syn_count[i]++;
            return;
        }
    if (c->nsyn < SYN_PORTS_MAX) {
        c->syn_port[c->nsyn] = dport;
        c->syn_count[c->nsyn++] = 1;
    }
}

static void on_packet(unsigned char *arg, const struct pcap_pkthdr *h, const unsigned char *p)
{
    struct capture *c = (struct capture *)arg;
    pcap_dump((unsigned char *)c->dump, h, p);
    c->packets++;
    note_syn(c, p, h->caplen);
}

static void *capture_main(void *arg)
{
    struct capture *c = arg;
    int fd = pcap_get_selectable_fd(c->pcap);
    while (!atomic_load(&c->stop)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, POLL_MS) < 0 && errno != EINTR)
            break;
        pthread_mutex_lock(&c->lock);
        (void)pcap_dispatch(c->pcap, -1, on_packet, (unsigned char *)c);
        pthread_mutex_unlock(&c->lock);
    }
    return NULL;
}

void capture_filter_add(char *filter, size_t len, const char *fmt, ...)
{
    va_list ap;
    size_t used = strlen(filter);
    if (used + 1 >= len)
        return;
    va_start(ap, fmt);
    vsnprintf(filter + used, len - used, fmt, ap);
    va_end(ap);
}

/* hosts: "host A or host B ...": the probe's TCP and the ICMP errors it may
   draw, to and from those hosts only. */
static int set_filter(pcap_t *p, const char *hosts, char *why, size_t whylen)
{
    struct bpf_program prog;
    char filter[4096];
    snprintf(filter, sizeof(filter), "(tcp or icmp) and (%s)", hosts);
    if (pcap_compile(p, &prog, filter, 1, PCAP_NETMASK_UNKNOWN) < 0) {
        snprintf(why, whylen, "capture filter '%s': %s", filter, pcap_geterr(p));
        return -1;
    }
    int rc = pcap_setfilter(p, &prog);
    pcap_freecode(&prog);
    if (rc < 0)
        snprintf(why, whylen, "capture filter: %s", pcap_geterr(p));
    return rc;
}

struct capture *capture_start(const char *path, const char *filter, char *why, size_t whylen)
{
    char err[PCAP_ERRBUF_SIZE] = "";
    struct capture *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->pcap = pcap_create("any", err);
    if (c->pcap == NULL || pcap_set_snaplen(c->pcap, SNAPLEN) != 0 ||
        pcap_set_immediate_mode(c->pcap, 1) != 0 || pcap_set_timeout(c->pcap, POLL_MS) != 0) {
        snprintf(why, whylen, "capture: %s", c->pcap ? pcap_geterr(c->pcap) : err);
        goto fail;
    }
    int rc = pcap_activate(c->pcap);
    if (rc < 0) {
        snprintf(why, whylen, "capture on all interfaces: %s%s", pcap_geterr(c->pcap),
                 rc == PCAP_ERROR_PERM_DENIED ? " (needs root or CAP_NET_RAW)" : "");
        goto fail;
    }
    c->linktype = pcap_datalink(c->pcap);
    if (set_filter(c->pcap, filter, why, whylen) < 0 || pcap_setnonblock(c->pcap, 1, err) < 0)
        goto fail;
    c->dump = pcap_dump_open(c->pcap, path);
    if (c->dump == NULL) {
        snprintf(why, whylen, "capture file %s: %s", path, pcap_geterr(c->pcap));
        goto fail;
    }
    if ((rc = pthread_create(&c->thread, NULL, capture_main, c)) != 0) {
        snprintf(why, whylen, "capture thread: %s", strerror(rc));
        pcap_dump_close(c->dump);
        goto fail;
    }
    return c;
fail:
    if (c->pcap != NULL)
        pcap_close(c->pcap);
    pthread_mutex_destroy(&c->lock);
    free(c);
    return NULL;
}

int capture_refilter(struct capture *c, const char *filter, char *why, size_t whylen)
{
    pthread_mutex_lock(&c->lock);
    int rc = set_filter(c->pcap, filter, why, whylen);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int capture_syns_to(struct capture *c, int port)
{
    int n = 0;
    pthread_mutex_lock(&c->lock);
    (void)pcap_dispatch(c->pcap, -1, on_packet, (unsigned char *)c);
    for (int i = 0; i < c->nsyn; i++)
        if (c->syn_port[i] == port)
            n = c->syn_count[i];
    pthread_mutex_unlock(&c->lock);
    return n;
}

long capture_stop(struct capture *c)
{
    atomic_store(&c->stop, true);
    pthread_join(c->thread, NULL);
    /* What the kernel still holds. */
    (void)pcap_dispatch(c->pcap, -1, on_packet, (unsigned char *)c);
    long n = c->packets;
    pcap_dump_close(c->dump);
    pcap_close(c->pcap);
    pthread_mutex_destroy(&c->lock);
    free(c);
    return n;
}
