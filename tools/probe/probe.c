/* qcg-probe: what connects from this node, how, how fast, and why not. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "address.h"
#include "json.h"
#include "probe.h"

#define DEFAULT_TIMEOUT_S 120
#define PEERS_MAX LOCAL_CLUSTERS_MAX
#define DEFAULT_HELPER_SOCKET "/run/qcg/helper.sock"

/* Exit statuses (documented in --help). */
enum {
    EXIT_DONE = 0,
    EXIT_NO_HELPER = 1,
    EXIT_USAGE = 2,
    EXIT_NO_FRONTEND = 3,
    EXIT_NO_BROKER = 4,
    EXIT_TIMEOUT = 5,
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: qcg-probe [options]\n"
            "\n"
            "Tells what the grid can do from this node, through the node's qcg-helper:\n"
            "this site's public address and NAT (the broker's reflector and a proxy\n"
            "observe the same local port: does the mapping depend on the destination?\n"
            "are ports kept?), whether unsolicited inbound TCP gets in (dropped, reset\n"
            "or an ICMP error), whether the NAT hair-pins, whether the gateway offers NAT-PMP,\n"
            "PCP or UPnP, round trips to the frontend, the broker and each proxy, whether\n"
            "the helper can intercept, what the site's frontend declares against what is\n"
            "observed, and, towards each other site, whether each technique connects\n"
            "right now to a test endpoint the helpers start there, how fast, which one\n"
            "a job would get, and why a technique cannot work.  No job is needed.\n"
            "\n"
            "options:\n"
            "  --helper PATH     the helper's socket (default $QCG_HELPER_SOCKET or %s)\n"
            "  --site NAME       probe towards this site only (default: every other site)\n"
            "  --local-only      this node and site only, no technique tests\n"
            "  --timeout SEC     bound on the whole run (default %d)\n"
            "  --capture FILE    write the probe's own packets to FILE (pcap; needs root or\n"
            "                    CAP_NET_RAW)\n"
            "  --encrypt MODE    which test connections are encrypted, as in a job:\n"
            "                    inter-site (the default, or $QCG_ENCRYPT: every one, since\n"
            "                    each goes to another site), always, or never (plain; the\n"
            "                    test endpoint takes what the probe asks for).  The report\n"
            "                    says per connection whether its times went through TLS\n"
            "  --no-report       do not tell the broker what was observed\n"
            "  --json            one JSON object on stdout\n"
            "  --help            this text\n"
            "  --version         print the version and exit\n"
            "\n"
            "exit status: 0 the checks ran (whatever they found), 1 no helper on this\n"
            "node, 2 usage error, 3 the frontend cannot be reached, 4 the broker cannot\n"
            "be reached, 5 --timeout ended the run early.\n",
            DEFAULT_HELPER_SOCKET, DEFAULT_TIMEOUT_S);
}

/* MODE of --encrypt or QCG_ENCRYPT (what qcg-launch and qcg-agent read too). */
static int set_encrypt(struct probe_opts *o, const char *mode)
{
    o->encrypt = qcg_encrypt_parse(mode);
    if (o->encrypt < 0) {
        fprintf(stderr,
                "qcg-probe: --encrypt (or QCG_ENCRYPT): want inter-site, always or never, not "
                "'%s'\n",
                mode);
        return -1;
    }
    return 0;
}

static int parse_args(int argc, char **argv, struct probe_opts *o, bool *local_only)
{
    const char *mode = getenv("QCG_ENCRYPT");

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = strcmp(a, "--helper") == 0 || strcmp(a, "--site") == 0 ||
                     strcmp(a, "--timeout") == 0 || strcmp(a, "--capture") == 0 ||
                     strcmp(a, "--encrypt") == 0;
        if (takes && next == NULL) {
            fprintf(stderr, "qcg-probe: %s needs a value\n", a);
            return -1;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 1;
        } else if (strcmp(a, "--version") == 0) {
            printf("qcg-probe %s\n", QCG_VERSION);
            return 1;
        } else if (strcmp(a, "--json") == 0) {
            o->json = true;
        } else if (strcmp(a, "--no-report") == 0) {
            o->report = false;
        } else if (strcmp(a, "--local-only") == 0) {
            *local_only = true;
        } else if (strcmp(a, "--helper") == 0) {
            o->helper_socket = argv[++i];
        } else if (strcmp(a, "--site") == 0) {
            o->site = argv[++i];
        } else if (strcmp(a, "--capture") == 0) {
            o->capture = argv[++i];
        } else if (strcmp(a, "--encrypt") == 0) {
            mode = argv[++i];
        } else if (strcmp(a, "--timeout") == 0) {
            char *end;
            errno = 0;
            long v = strtol(argv[++i], &end, 10);
            if (errno != 0 || *end != '\0' || v < 1 || v > 3600) {
                fprintf(stderr, "qcg-probe: --timeout: '%s' is not 1..3600 seconds\n", argv[i]);
                return -1;
            }
            o->timeout_s = (int)v;
        } else {
            fprintf(stderr, "qcg-probe: unknown argument '%s' (see --help)\n", a);
            return -1;
        }
    }
    return mode != NULL ? set_encrypt(o, mode) : 0;
}

/* The hosts the probe talks to: the capture's filter. */
static void capture_hosts(const struct probe_site *s, char *hosts, size_t len)
{
    char addr[LOCAL_ENDPOINT_MAX], why[200];
    int port;
    hosts[0] = '\0';
    const char *ends[2 + LOCAL_PROXIES_MAX];
    int n = 0;
    ends[n++] = s->info.reflector;
    for (uint32_t i = 0; i < s->info.proxies && i < LOCAL_PROXIES_MAX; i++)
        ends[n++] = s->info.proxy[i];
    for (int i = 0; i < n; i++) {
        if (hostport_parse(ends[i], false, addr, sizeof(addr), &port, why, sizeof(why)) < 0)
            continue;
        capture_filter_add(hosts, len, "%shost %s ", hosts[0] ? "or " : "", addr);
    }
    for (uint32_t i = 0; i < s->info.clusters && i < LOCAL_CLUSTERS_MAX; i++)
        for (int j = 0; j < LOCAL_PUBLIC_MAX && s->info.peer[i].public_address[j][0]; j++)
            capture_filter_add(hosts, len, "%shost %s ", hosts[0] ? "or " : "",
                               s->info.peer[i].public_address[j]);
    if (hosts[0] == '\0')
        snprintf(hosts, len, "host %s ", s->info.address);
}

/* The helper answered, the grid did not: which service failed. */
static int upstream_failure(const struct probe_run *r)
{
    const struct probe_site *s = &r->site;
    if (!s->helper_ok)
        return EXIT_NO_HELPER;
    if (s->nrtt > 0 && !s->rtt[0].ok)
        return EXIT_NO_FRONTEND;
    return EXIT_NO_BROKER;
}

static void print_failure(const struct probe_opts *o, const struct probe_run *r, int status)
{
    const struct probe_site *s = &r->site;
    const char *what = status == EXIT_NO_HELPER     ? "no helper"
                       : status == EXIT_NO_FRONTEND ? "the frontend cannot be reached"
                                                    : "the broker cannot be reached";
    if (o->json) {
        printf("{\"error\":");
        json_string(stdout, what);
        printf(",\"detail\":");
        json_string(stdout, s->upstream_why);
        printf(",\"helper\":%s,\"frontend\":", s->helper_ok ? "true" : "false");
        if (s->nrtt > 0) {
            printf("{\"endpoint\":");
            json_string(stdout, s->rtt[0].endpoint);
            printf(",\"reachable\":%s}", s->rtt[0].ok ? "true" : "false");
        } else {
            printf("null");
        }
        printf("}\n");
        return;
    }
    fprintf(stderr, "qcg-probe: %s: %s\n", what, s->upstream_why);
    if (s->nrtt > 0)
        fprintf(stderr, "qcg-probe: the frontend %s %s%s%s\n", s->rtt[0].endpoint,
                s->rtt[0].ok ? "accepts TCP from this node" : "is unreachable from this node",
                s->rtt[0].ok ? "" : ": ", s->rtt[0].ok ? "" : s->rtt[0].why);
}

int main(int argc, char **argv)
{
    struct probe_opts o = {
        .timeout_s = DEFAULT_TIMEOUT_S, .encrypt = QCG_ENCRYPT_INTER_SITE, .report = true};
    static struct probe_run run;
    static struct probe_peer peers[PEERS_MAX];
    static char hosts[4096];
    struct capture *cap = NULL;
    bool local_only = false;
    char why[256];

    o.helper_socket = getenv("QCG_HELPER_SOCKET");
    if (o.helper_socket == NULL || o.helper_socket[0] == '\0')
        o.helper_socket = DEFAULT_HELPER_SOCKET;
    int rc = parse_args(argc, argv, &o, &local_only);
    if (rc != 0)
        return rc > 0 ? EXIT_DONE : EXIT_USAGE;
    o.progress = isatty(STDERR_FILENO);
    run.opts = &o;
    run.peers = peers;

    double start = probe_now_ms(), deadline = start + o.timeout_s * 1000.0;
    if (site_probe(&o, &run.site, deadline) < 0) {
        probe_progress_done(&o);
        int status = upstream_failure(&run);
        print_failure(&o, &run, status);
        return status;
    }
    if (o.capture != NULL) {
        capture_hosts(&run.site, hosts, sizeof(hosts));
        run.capture_file = o.capture;
        cap = capture_start(o.capture, hosts, run.capture_why, sizeof(run.capture_why));
    }
    site_measure(&o, &run.site, cap, deadline);
    if (!local_only) {
        run.npeers = peers_select(&o, &run.site, peers, PEERS_MAX, why, sizeof(why));
        if (run.npeers == 0 && o.site != NULL) {
            probe_progress_done(&o);
            fprintf(stderr, "qcg-probe: %s\n", why);
            if (cap != NULL)
                capture_stop(cap);
            return EXIT_USAGE;
        }
        for (int i = 0; i < run.npeers; i++)
            peer_probe(&o, &run.site, &peers[i], cap, hosts, sizeof(hosts), deadline);
    }
    if (cap != NULL)
        run.capture_packets = capture_stop(cap);
    probe_progress_done(&o);
    run.elapsed_ms = probe_now_ms() - start;
    run.timed_out = probe_left_ms(deadline) == 0;
    if (o.json)
        report_json(stdout, &run);
    else
        report_human(stdout, &run);
    return run.timed_out ? EXIT_TIMEOUT : EXIT_DONE;
}
