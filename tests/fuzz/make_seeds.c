/* Writes the seed corpora of tests/fuzz (corpus/<harness>/<seed>) with the
   real encoders: the local protocol's structs, token_issue, hs_identity_build,
   wire_launch_encode and gSOAP's client serializer, plus known answers and
   near misses.  The output is committed; run it again when a format changes:
     cmake --build DIR --target fuzz-seeds && DIR/tests/fuzz/fuzz-seeds tests/fuzz/corpus */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"
#include "proto.h"
#include "probe.h"
#include "relay.h"
#include "soapH.h"
#include "token.h"
#include "wire.h"

static const char *top;
/* What a helper sends for job-42 instead of its secret (any 64 lowercase hex). */
#define JOB_VERIFIER "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* corpus/<harness>/<name>: [prefix byte, unless < 0] then n bytes of a. */
static void seed(const char *harness, const char *name, int prefix, const void *a, size_t n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", top, harness);
    if (mkdir(path, 0755) < 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/%s/%s", top, harness, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || (prefix >= 0 && fputc(prefix, f) == EOF) ||
        (n > 0 && fwrite(a, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static void text_seed(const char *harness, const char *name, int prefix, const char *s)
{
    seed(harness, name, prefix, s, strlen(s));
}

/* ---- local protocol ---- */

static size_t local_msg(uint8_t *out, uint16_t type, uint32_t rid, const void *payload)
{
    struct local_header h = {.magic = LOCAL_MAGIC,
                             .type = type,
                             .length = (uint32_t)local_payload_size[type],
                             .request_id = rid};
    memcpy(out, &h, sizeof(h));
    if (h.length > 0)
        memcpy(out + sizeof(h), payload, h.length);
    return sizeof(h) + h.length;
}

static void localproto(void)
{
    static uint8_t buf[4 * sizeof(union local_payload)];
    union local_payload p;
    size_t n;

    memset(&p, 0, sizeof(p));
    p.hello.version = LOCAL_VERSION;
    p.hello.rank = 1;
    strcpy(p.hello.job, "job-42");
    strcpy(p.hello.secret, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    n = local_msg(buf, LOCAL_HELLO, 1, &p);
    seed("localproto", "hello", -1, buf, n);
    /* A process's whole session: HELLO, PUBLISH, LOOKUP, REPORT, WITHDRAW. */
    memset(&p, 0, sizeof(p));
    p.publish.port = 23001;
    p.publish.addresses = 3; /* a dual-stack node's two addresses */
    n += local_msg(buf + n, LOCAL_PUBLISH, 2, &p);
    memset(&p, 0, sizeof(p));
    p.lookup.to_rank = 2;
    p.lookup.timeout_ms = 5000;
    p.lookup.tried_mask = 1u << QCG_TECH_DIRECT;
    n += local_msg(buf + n, LOCAL_LOOKUP, 3, &p);
    memset(&p, 0, sizeof(p));
    p.report.to_rank = 2;
    p.report.technique = QCG_TECH_REVERSED;
    p.report.ok = 1;
    p.report.setup_ms = 12;
    n += local_msg(buf + n, LOCAL_REPORT, 4, &p);
    n += local_msg(buf + n, LOCAL_WITHDRAW, 5, NULL);
    seed("localproto", "session", -1, buf, n);

    n = local_msg(buf, LOCAL_STATUS, 1, NULL);
    n += local_msg(buf + n, LOCAL_SITE, 2, NULL);
    memset(&p, 0, sizeof(p));
    strcpy(p.probe.cluster, "natb");
    p.probe.seconds = 30;
    n += local_msg(buf + n, LOCAL_PROBE, 3, &p);
    memset(&p, 0, sizeof(p));
    strcpy(p.observed.kind, "nat");
    strcpy(p.observed.public_address, "203.0.113.20");
    p.observed.port_preserving = 1;
    strcpy(p.observed.mapping, "endpoint-independent");
    strcpy(p.observed.inbound, "dropped");
    n += local_msg(buf + n, LOCAL_OBSERVED, 4, &p);
    n += local_msg(buf + n, LOCAL_PUNCHING, 5, NULL);
    seed("localproto", "probe", -1, buf, n);
    /* PUNCHING_OK of a dual-stack node: IPv4 measured, IPv6 not. */
    memset(&p, 0, sizeof(p));
    strcpy(p.punching.family[LOCAL_PUNCH_IPV4].reflector, "203.0.113.10:7701");
    strcpy(p.punching.family[LOCAL_PUNCH_IPV4].address, "198.18.1.11");
    p.punching.family[LOCAL_PUNCH_IPV4].hops = 3;
    p.punching.family[LOCAL_PUNCH_IPV4].first_ttl = 3;
    p.punching.family[LOCAL_PUNCH_IPV4].measured = 1;
    strcpy(p.punching.family[LOCAL_PUNCH_IPV6].reflector, "[2001:db8::10]:7701");
    strcpy(p.punching.family[LOCAL_PUNCH_IPV6].address, "2001:db8:3::11");
    p.punching.family[LOCAL_PUNCH_IPV6].hops = -1;
    strcpy(p.punching.family[LOCAL_PUNCH_IPV6].why, "the reflector is not reached within 16 hops");
    n = local_msg(buf, LOCAL_PUNCHING_OK, 5, &p);
    seed("localproto", "punching-ok", -1, buf, n);

    /* The helper's answers, as the library reads them. */
    memset(&p, 0, sizeof(p));
    p.hello_ok.version = LOCAL_VERSION;
    p.hello_ok.port_low = 23000;
    p.hello_ok.port_high = 23999;
    strcpy(p.hello_ok.cluster, "nata");
    strcpy(p.hello_ok.node, "nata1");
    strcpy(p.hello_ok.address, "198.18.1.11");
    strcpy(p.hello_ok.other_address[0], "2001:db8:1::11");
    n = local_msg(buf, LOCAL_HELLO_OK, 1, &p);
    n += local_msg(buf + n, LOCAL_OK, 2, NULL);
    memset(&p, 0, sizeof(p));
    p.plan.technique = QCG_TECH_DIRECT;
    p.plan.port = 23001;
    strcpy(p.plan.address, "2001:db8:1::12");
    strcpy(p.plan.fallback_address, "198.18.1.12");
    n += local_msg(buf + n, LOCAL_PLAN, 3, &p);
    memset(&p, 0, sizeof(p));
    p.plan.technique = QCG_TECH_PROXY;
    p.plan.port = 7800;
    strcpy(p.plan.address, "203.0.113.30");
    strcpy(p.plan.token, "0123abcd");
    n += local_msg(buf + n, LOCAL_PLAN, 3, &p);
    memset(&p, 0, sizeof(p));
    p.incoming.peer_rank = 2;
    p.incoming.technique = QCG_TECH_REVERSED;
    p.incoming.role = LOCAL_ROLE_HELLO;
    strcpy(p.incoming.token, "0123abcd");
    n += local_msg(buf + n, LOCAL_INCOMING, 3, &p);
    memset(&p, 0, sizeof(p));
    p.error.code = QCG_ENOTFOUND;
    strcpy(p.error.message, "rank 2 is not published");
    n += local_msg(buf + n, LOCAL_ERROR, 4, &p);
    seed("localproto", "replies", -1, buf, n);

    /* Near misses: a string without its NUL, a wrong length, a wrong magic. */
    memset(&p, 'x', sizeof(p));
    p.hello.version = LOCAL_VERSION;
    n = local_msg(buf, LOCAL_HELLO, 1, &p);
    seed("localproto", "hello-unterminated", -1, buf, n);
    n = local_msg(buf, LOCAL_PUBLISH, 1, &p);
    buf[8] = 3;
    seed("localproto", "publish-short", -1, buf, n);
    n = local_msg(buf, LOCAL_STATUS, 1, NULL);
    buf[0] ^= 0xff;
    seed("localproto", "bad-magic", -1, buf, n);
}

/* ---- proxy hello and tokens (the key of fuzz_proxy.c) ---- */

static const struct proxy_key fuzz_key = {{1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                           12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                                           23, 24, 25, 26, 27, 28, 29, 30, 31, 32}};

static void proxy(void)
{
    unsigned char pair[TOKEN_PAIR_LEN] = {0xde, 0xad, 0xbe, 0xef, 1, 2,  3,  4,
                                          5,    6,    7,    8,    9, 10, 11, 12};
    unsigned char hello[RELAY_HELLO_LEN] = {0};
    unsigned char fields[TOKEN_PAIR_LEN + 11];
    char text[TOKEN_TEXT_LEN + 1];
    /* After fuzz_proxy.c's clock (NOW 1700000000). */
    uint64_t expiry = 1700000100;

    if (token_issue(&fuzz_key, pair, TOKEN_SIDE_TARGET, expiry, text, sizeof(text)) < 0)
        exit(1);
    memcpy(hello, RELAY_MAGIC, 4);
    memcpy(hello + 4, text, TOKEN_TEXT_LEN);
    seed("proxy", "hello-good", 0, hello, sizeof(hello));
    hello[4 + TOKEN_TEXT_LEN + 1] = 'x';
    seed("proxy", "hello-not-padded", 0, hello, sizeof(hello));
    hello[4 + TOKEN_TEXT_LEN + 1] = 0;
    hello[10] ^= 1;
    seed("proxy", "hello-bad-mac", 0, hello, sizeof(hello));
    memcpy(hello, RELAY_MAP_MAGIC, 4);
    seed("proxy", "hello-map", 0, hello, 4);
    if (token_issue(&fuzz_key, pair, TOKEN_SIDE_INITIATOR, 1600000000, text, sizeof(text)) < 0)
        exit(1);
    memcpy(hello, RELAY_MAGIC, 4);
    memcpy(hello + 4, text, TOKEN_TEXT_LEN);
    seed("proxy", "hello-expired", 0, hello, sizeof(hello));

    memcpy(fields, pair, TOKEN_PAIR_LEN);
    fields[TOKEN_PAIR_LEN] = 1;
    for (int i = 0; i < 8; i++)
        fields[TOKEN_PAIR_LEN + 1 + i] = (unsigned char)(expiry >> (56 - 8 * i));
    fields[TOKEN_PAIR_LEN + 9] = 40;
    fields[TOKEN_PAIR_LEN + 10] = 'A';
    seed("proxy", "issued", 1, fields, sizeof(fields));
}

/* ---- reflector lines ---- */

static void reflector(void)
{
    char line[256], text[TOKEN_TEXT_LEN + 1];
    unsigned char pair[TOKEN_PAIR_LEN] = {7};

    if (token_issue(&fuzz_key, pair, 0, 1700000100, text, sizeof(text)) < 0)
        exit(1);
    text_seed("reflector", "map", 0, "MAP");
    text_seed("reflector", "dial", 0, "DIAL 23001");
    snprintf(line, sizeof(line), "PUNCH %s 198.18.1.11 23001", text);
    text_seed("reflector", "punch", 0, line);
    snprintf(line, sizeof(line), "PUNCH %s 2001:db8::11 65535", text);
    text_seed("reflector", "punch-v6", 0, line);
    text_seed("reflector", "dial-zero", 0, "DIAL 023001");
    text_seed("reflector", "two-spaces", 0, "DIAL  1");
    /* The reflector's answers to a punch, as a helper reads them. */
    text_seed("reflector", "answer-peer", 1, "PEER 203.0.113.20 23001 203.0.113.30 24001");
    text_seed("reflector", "answer-peer-v6", 1, "PEER 2001:db8:6::11 23001 2001:db8:3:2::11 24001");
    text_seed("reflector", "answer-fail", 1, "FAIL the other side did not come in 5000 ms");
    text_seed("reflector", "answer-port-zero", 1, "PEER 203.0.113.20 0 203.0.113.30 024001");
    /* Accepted before punch_answer_parse counted a sixth field (test_punch.c). */
    text_seed("reflector", "answer-six-fields", 1, "PEER 203.0.113.20 23001 203.0.113.30 24001 x");
}

/* ---- process handshake (the self of fuzz_handshake.c) ---- */

static void handshake(void)
{
    uint8_t id[HS_IDENTITY_SIZE];
    struct hs_hello h;

    if (hs_identity_build(id, &h, "job-42", 5, "siteB", 3, "0123abcd", 0) < 0)
        exit(1);
    seed("handshake", "identity", 0, id, sizeof(id));
    /* The start of a TLS record, as a peer's answer would begin. */
    const uint8_t record[] = {0x16, 0x03, 0x03, 0x00, 0x7a, 0x02, 0x00, 0x00, 0x76, 0x03, 0x03};
    seed("handshake", "answer-record", 1, record, sizeof(record));
    const uint8_t changed[] = {3, 0, 17, 'z', 'a', 'b', 'c'};
    seed("handshake", "changed", 2, changed, sizeof(changed));
}

/* ---- raw packets (the node and port of fuzz_rawpkt.c) ---- */

static void rawpkt(void)
{
    /* A connect() as NFQUEUE delivers it (tests/helper/test_rawpkt.c's
       kernel SYN), towards 198.18.1.11 port 23001, checksums left as they
       were: MSS, SACK permitted, timestamps, window scale. */
    uint8_t syn[] = {
        0x45, 0x00, 0x00, 0x3c, 0xb2, 0x0d, 0x40, 0x00, 0x40, 0x06, 0x32, 0x94, 0xc6, 0x12, 0x65,
        0x0b, 0xc6, 0x12, 0x01, 0x0b, 0x9d, 0xbc, 0x59, 0xd9, 0x50, 0x6e, 0xa5, 0xc4, 0x00, 0x00,
        0x00, 0x00, 0xa0, 0x02, 0xfa, 0xf0, 0xdb, 0x31, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04,
        0x02, 0x08, 0x0a, 0x76, 0xee, 0xfc, 0x90, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x0a,
    };
    seed("rawpkt", "syn", -1, syn, sizeof(syn));
    syn[33] = 0x12; /* SYN|ACK */
    seed("rawpkt", "synack", -1, syn, sizeof(syn));
    syn[32] = 0x50; /* no options */
    syn[3] = 0x28;
    seed("rawpkt", "synack-bare", -1, syn, 40);
    seed("rawpkt", "short", -1, syn, 19);
    /* The first crash fuzz-rawpkt found (test_rawpkt.c test_short_buffers). */
    seed("rawpkt", "crash-empty", -1, syn, 0);
    /* The SYN over IPv6: 2001:db8:65::b -> 2001:db8:1::11 (fuzz_rawpkt.c's
       NODE6) port 23001, checksum left as it was. */
    uint8_t syn6[80] = {0x60, 0, 0, 0, 0, 40, 6, 64};
    const uint8_t src6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0x65, [15] = 0x0b};
    const uint8_t dst6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0x01, [15] = 0x11};
    memcpy(syn6 + 8, src6, 16);
    memcpy(syn6 + 24, dst6, 16);
    syn[32] = 0xa0; /* the options back */
    syn[33] = 0x02; /* SYN */
    memcpy(syn6 + 40, syn + 20, 40);
    seed("rawpkt", "syn6", -1, syn6, sizeof(syn6));
}

/* ---- qcg-probe's port-mapping answers (tests/probe/test_portmap.c) ---- */

static void portmap(void)
{
    const unsigned char natpmp[12] = {0, 128, 0, 0, 0, 0, 0x12, 0x34, 203, 0, 113, 66};
    const unsigned char natpmp_fail[8] = {0, 128, 0, 3, 0, 0, 0, 1};
    unsigned char pcp[24] = {2, 0x80, 0, 0};
    seed("portmap", "natpmp", PORTMAP_NATPMP, natpmp, sizeof(natpmp));
    seed("portmap", "natpmp-failure", PORTMAP_NATPMP, natpmp_fail, sizeof(natpmp_fail));
    seed("portmap", "pcp", PORTMAP_PCP, pcp, sizeof(pcp));
    pcp[3] = 2;
    seed("portmap", "pcp-denied", PORTMAP_PCP, pcp, sizeof(pcp));
    seed("portmap", "pcp-from-natpmp", PORTMAP_PCP, natpmp_fail, 4);
    text_seed("portmap", "ssdp", PORTMAP_UPNP,
              "HTTP/1.1 200 OK\r\nCACHE-CONTROL: max-age=120\r\nST: "
              "urn:schemas-upnp-org:device:InternetGatewayDevice:1\r\nLOCATION: "
              "http://198.18.1.1:5000/rootDesc.xml\r\n\r\n");
    text_seed("portmap", "ssdp-no-location", PORTMAP_UPNP,
              "HTTP/1.1 200 OK\r\nST: upnp:rootdevice\r\n\r\n");
}

/* ---- config files: the examples of etc/ and a key file ---- */

static void config(const char *etc)
{
    static const char *const files[] = {"qcg-broker.conf", "qcg-frontend.conf", "qcg-proxy.conf",
                                        "qcg-helper.conf"};
    static char data[65536];
    char path[512];

    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", etc, files[i]);
        FILE *f = fopen(path, "rb");
        size_t n = f != NULL ? fread(data, 1, sizeof(data), f) : 0;
        if (f == NULL || ferror(f)) {
            perror(path);
            exit(1);
        }
        fclose(f);
        seed("config", files[i], i, data, n);
    }
    /* Readable files for ca and cert, so that the checks after them run. */
    text_seed("config", "broker-minimal", 0,
              "ca = /etc/hostname\ncert = /etc/hostname\nport = 7700\n"
              "reflector = 127.0.0.1:7704\nproxy = p1@203.0.113.30:7800\n");
    text_seed("config", "helper-minimal", 3,
              "frontend = https://198.18.1.10:7701/\nca = /etc/hostname\ncert = /etc/hostname\n"
              "address = 198.18.1.11\nports = 23000-23999\nallow-uids = 0, root\n"
              "socket-mode = \"0660\"\n");
    /* IPv6 in every form the address module reads (core/address.h). */
    text_seed("config", "broker-ipv6", 0,
              "ca = /etc/hostname\ncert = /etc/hostname\nlisten = ::\nport = 7700\n"
              "reflector = [2001:db8::10]:7704\nproxy = p1@[2001:db8::20]:7703, "
              "p2@[::ffff:203.0.113.30]:7703\nmetrics-listen = [::1]:9701\n");
    /* A dual-stack proxy: one name, an address in each family. */
    text_seed("config", "broker-proxy2", 0,
              "ca = /etc/hostname\ncert = /etc/hostname\nlisten = ::\nport = 7700\n"
              "proxy = p1@203.0.113.20:7703, p1@[2001:db8::20]:7703\n"
              "proxy-key = /etc/hostname\n");
    text_seed("config", "helper-ipv6", 3,
              "frontend = https://[2001:db8:1::10]:7701/\nca = /etc/hostname\n"
              "cert = /etc/hostname\naddress = 2001:db8:1::11\nports = 23000-23999\n");
    text_seed("config", "proxy-ipv6", 2,
              "listen = 2001:db8::20\nbroker = https://[2001:db8::10]:7700/\n"
              "ca = /etc/hostname\ncert = /etc/hostname\n");
    text_seed("config", "key", 4,
              "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n");
    /* qcg-agent's: every option once (there is no example in etc/). */
    text_seed("config", "agent", 5,
              "job = job-42\nnode = nata1\norted = orted\nhelper-socket = /run/qcg/helper.sock\n"
              "idle-timeout = 600\npersist = yes\nmax-launches = 8\nlaunch-timeout = 10000\n"
              "grace = 3000\nallow-root = yes\nlog-level = debug\n");
}

/* ---- launch wire ---- */

static void launch(void)
{
    static uint8_t buf[4096];
    const char *const argv[] = {
        "orted", "-mca", "ess", "env", "-mca", "orte_hnp_uri", "1234.0;tcp://198.18.1.11:40000",
        NULL};
    long n = wire_launch_encode(buf, sizeof(buf), "job-42", 7, argv);
    if (n < 0)
        exit(1);
    seed("launch", "launch", -1, buf, (size_t)n);
    wire_header_put(buf, WIRE_LAUNCH, 1, 100);
    seed("launch", "header", -1, buf, WIRE_HEADER);
    const char words[] = "\x10orted -mca ess \"env\"\0tcp://10.0.0.1,198.18.1.11:4242";
    seed("launch", "words", -1, words, sizeof(words) - 1);
}

/* ---- SOAP requests, serialized by gSOAP's client code ---- */

static char soap_out[65536];
static size_t soap_len;

static int to_buffer(struct soap *soap, const char *s, size_t n)
{
    (void)soap;
    if (soap_len + n > sizeof(soap_out))
        return SOAP_EOM;
    memcpy(soap_out + soap_len, s, n);
    soap_len += n;
    return SOAP_OK;
}

/* No connection: gSOAP writes the request into soap_out. */
static SOAP_SOCKET no_connect(struct soap *soap, const char *endpoint, const char *host, int port)
{
    (void)soap;
    (void)endpoint;
    (void)host;
    (void)port;
    return 1000;
}

static int no_close(struct soap *soap)
{
    (void)soap;
    return SOAP_OK;
}

static struct soap *soap_recorder(void)
{
    struct soap *s = soap_new1(SOAP_XML_STRICT | SOAP_C_UTFSTRING);
    s->fopen = no_connect;
    s->fsend = to_buffer;
    s->fclose = no_close;
    soap_len = 0;
    return s;
}

/* Every SOAP server gets every request: the frontend and the proxy refuse
   some, from some callers, which is worth fuzzing too. */
static const char *const soap_harnesses[] = {"soap", "soap_frontend", "soap_proxy"};

/* The request as it was sent, with HTTP/1.0 and no Content-Length: the
   server reads the body up to the end of the connection, so a mutated body
   is parsed however long it is. */
static void soap_seed(struct soap *s, int rc, const char *name, int prefix)
{
    char *at;
    if (rc != SOAP_OK) {
        soap_print_fault(s, stderr);
        exit(1);
    }
    soap_out[soap_len] = '\0';
    if ((at = strstr(soap_out, "HTTP/1.1")) != NULL)
        memcpy(at, "HTTP/1.0", 8);
    if ((at = strstr(soap_out, "Content-Length: ")) != NULL) {
        char *end = strstr(at, "\r\n");
        memmove(at, end + 2, strlen(end + 2) + 1);
    }
    for (size_t i = 0; i < sizeof(soap_harnesses) / sizeof(soap_harnesses[0]); i++)
        text_seed(soap_harnesses[i], name, prefix, soap_out);
    soap_destroy(s);
    soap_end(s);
    soap_free(s);
}

static void soap(void)
{
    const char *url = "http://127.0.0.1:7700/";
    struct soap *s;

    char *publics[] = {"203.0.113.20"};
    char *ranges[] = {"198.18.1.0/24", "2001:db8:1::/48"}, *open[] = {"2001:db8:1:5::/64"};
    char *others[] = {"2001:db8:1:5::11"};
    struct qcg__cluster cl = {.name = "nata",
                              .kind = "nat",
                              .__sizePublicAddress = 1,
                              .publicAddress = publics,
                              .__sizeNodeRange = 2,
                              .nodeRange = ranges,
                              .__sizeOpenRange = 1,
                              .openRange = open};
    s = soap_recorder();
    soap_seed(s, soap_send_qcg__registerCluster(s, url, NULL, QCG_PROTOCOL_VERSION, &cl),
              "registerCluster", 1);
    struct qcg__node node = {.name = "nata1",
                             .address = "198.18.1.11",
                             .portLow = 23000,
                             .portHigh = 23999,
                             .canIntercept = 1,
                             .__sizeOtherAddress = 1,
                             .otherAddress = others};
    s = soap_recorder();
    soap_seed(s, soap_send_qcg__registerNode(s, url, NULL, QCG_PROTOCOL_VERSION, &node),
              "registerNode", 1);
    struct qcg__contact c = {.job = "job-42",
                             .verifier = JOB_VERIFIER,
                             .rank = 1,
                             .cluster = "nata",
                             .node = "nata1",
                             .address = "198.18.1.11",
                             .port = 23001,
                             .__sizeOtherAddress = 1,
                             .otherAddress = others};
    s = soap_recorder();
    soap_seed(s, soap_send_qcg__publish(s, url, NULL, QCG_PROTOCOL_VERSION, &c), "publish", 1);
    s = soap_recorder();
    soap_seed(s,
              soap_send_qcg__lookup(s, url, NULL, QCG_PROTOCOL_VERSION, "job-42", JOB_VERIFIER, 1,
                                    2, "direct,reversed", NULL),
              "lookup", 1);
    s = soap_recorder();
    soap_seed(s, soap_send_qcg__poll(s, url, NULL, QCG_PROTOCOL_VERSION, 0, 0, 0), "poll", 1);
    s = soap_recorder();
    soap_seed(s,
              soap_send_qcg__report(s, url, NULL, QCG_PROTOCOL_VERSION, "job-42", JOB_VERIFIER, 1,
                                    2, "proxy", 0, 0, "timed out"),
              "report", 1);
    struct qcg__attempt at[2] = {{.job = "job-42",
                                  .verifier = JOB_VERIFIER,
                                  .fromRank = 1,
                                  .toRank = 2,
                                  .technique = "direct",
                                  .ok = 1,
                                  .setupMs = 3},
                                 {.job = "job-42",
                                  .verifier = JOB_VERIFIER,
                                  .fromRank = 1,
                                  .toRank = 3,
                                  .technique = "proxy",
                                  .ok = 0,
                                  .setupMs = 900,
                                  .why = "timed out"}};
    struct qcg__attempts list = {.__sizeAttempt = 2, .attempt = at};
    s = soap_recorder();
    soap_seed(s, soap_send_qcg__reports(s, url, NULL, QCG_PROTOCOL_VERSION, &list), "reports", 1);
    struct qcg__lookupAsk asks[2] = {
        {.job = "job-42", .verifier = JOB_VERIFIER, .fromRank = 1, .toRank = 2},
        {.job = "job-42", .verifier = JOB_VERIFIER, .fromRank = 1, .toRank = 3}};
    struct qcg__lookupAsks alist = {.__sizeAsk = 2, .ask = asks};
    s = soap_recorder();
    soap_seed(s, soap_send_qcg__lookups(s, url, NULL, QCG_PROTOCOL_VERSION, &alist), "lookups", 1);
    s = soap_recorder();
    soap_seed(s,
              soap_send_qcg__traverse(s, url, NULL, QCG_PROTOCOL_VERSION, "0123abcd",
                                      "4500003c00004000400600000000000000000000"),
              "traverse", 1);
    s = soap_recorder();
    soap_seed(s, soap_send_qcg__siteInfo(s, url, NULL, QCG_PROTOCOL_VERSION), "siteInfo", 2);
    s = soap_recorder();
    soap_seed(s, soap_send_qcg__probe(s, url, NULL, QCG_PROTOCOL_VERSION, "natb", 30, "nata1"),
              "probe", 2);
    struct qcg__observation obs = {
        .kind = "nat", .mapping = "endpoint-independent", .inbound = "dropped"};
    s = soap_recorder();
    soap_seed(s, soap_send_qcg__observed(s, url, NULL, QCG_PROTOCOL_VERSION, &obs), "observed", 2);
    s = soap_recorder();
    soap_seed(s, soap_send_qcg__stats(s, url, NULL, QCG_PROTOCOL_VERSION), "stats", 1);
    for (size_t i = 0; i < sizeof(soap_harnesses) / sizeof(soap_harnesses[0]); i++) {
        text_seed(soap_harnesses[i], "wsdl", 1, "GET /?wsdl HTTP/1.0\r\n\r\n");
        text_seed(soap_harnesses[i], "tls-garbage", 0, "\x16\x03\x01\x00\x05hello");
    }
}

/* ---- answers of an upstream, serialized by gSOAP's server code ---- */

/* The HTTP header of an answer: no Content-Length, so that a mutated body
   is read up to the end of the connection (the answer server closes it). */
static const char answer_header[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/xml; charset=utf-8\r\n\r\n";

/* An answer of `type` in an envelope, as soap_serve_* writes it: the seed
   is the mode byte, the HTTP header and the envelope. */
#define ANSWER_SEED(name, mode, type, tag, value)                                                  \
    do {                                                                                           \
        struct soap *s_ = soap_recorder();                                                         \
        soap_serialize_##type(s_, (value));                                                        \
        if (soap_begin_send(s_) || soap_envelope_begin_out(s_) || soap_body_begin_out(s_) ||       \
            soap_put_##type(s_, (value), tag, "") || soap_body_end_out(s_) ||                      \
            soap_envelope_end_out(s_) || soap_end_send(s_))                                        \
            soap_print_fault(s_, stderr), exit(1);                                                 \
        answer_seed(name, mode);                                                                   \
        soap_destroy(s_);                                                                          \
        soap_end(s_);                                                                              \
        soap_free(s_);                                                                             \
    } while (0)

static void answer_seed(const char *name, int mode)
{
    static char out[sizeof(soap_out) + sizeof(answer_header)];
    snprintf(out, sizeof(out), "%s%.*s", answer_header, (int)soap_len, soap_out);
    text_seed("upstream", name, mode, out);
}

static void answers(void)
{
    struct qcg__lookupResponse direct = {.version = QCG_PROTOCOL_VERSION,
                                         .plan = {.status = "ok",
                                                  .technique = "direct",
                                                  .cluster = "natb",
                                                  .node = "natb1",
                                                  .address = "198.18.2.11",
                                                  .port = 23001,
                                                  .cacheable = 1}};
    struct qcg__lookupResponse proxy = {.version = QCG_PROTOCOL_VERSION,
                                        .plan = {.status = "ok",
                                                 .technique = "proxy",
                                                 .cluster = "natb",
                                                 .node = "natb1",
                                                 .address = "203.0.113.50",
                                                 .port = 7800,
                                                 .token = "0123456789abcdef"}};
    struct qcg__lookupResponse direct6 = {.version = QCG_PROTOCOL_VERSION,
                                          .plan = {.status = "ok",
                                                   .technique = "direct",
                                                   .cluster = "natb",
                                                   .node = "natb1",
                                                   .address = "2001:db8:2::11",
                                                   .port = 23001,
                                                   .cacheable = 1,
                                                   .fallbackAddress = "198.18.2.11"}};
    struct qcg__lookupResponse unavailable = {
        .version = QCG_PROTOCOL_VERSION,
        .plan = {.status = "unavailable", .technique = "proxy", .reason = "no proxy configured"}};
    ANSWER_SEED("lookup-direct", 0, qcg__lookupResponse, "qcg:lookupResponse", &direct);
    ANSWER_SEED("lookup-direct6", 0, qcg__lookupResponse, "qcg:lookupResponse", &direct6);
    ANSWER_SEED("lookup-proxy", 1, qcg__lookupResponse, "qcg:lookupResponse", &proxy);
    ANSWER_SEED("lookup-unavailable", 1, qcg__lookupResponse, "qcg:lookupResponse", &unavailable);
    ANSWER_SEED("relay-lookup", 10, qcg__lookupResponse, "qcg:lookupResponse", &direct);

    char *publics[] = {"203.0.113.20", "203.0.113.21"};
    struct qcg__cluster clusters[] = {
        {.name = "nata", .kind = "nat", .__sizePublicAddress = 2, .publicAddress = publics},
        {.name = "fwb", .kind = "firewalled", .portLow = 23000, .portHigh = 23999}};
    struct qcg__endpoint reflector = {.address = "203.0.113.1", .port = 7702};
    struct qcg__endpoint proxies[] = {{.address = "203.0.113.50", .port = 7800}};
    struct qcg__siteInfoResponse site = {.version = QCG_PROTOCOL_VERSION,
                                         .cluster = clusters[0],
                                         .broker = "https://203.0.113.1:7700/",
                                         .frontendSeenFrom = "203.0.113.20",
                                         .reflector = &reflector,
                                         .__sizeProxy = 1,
                                         .proxy = proxies,
                                         .__sizePeer = 2,
                                         .peer = clusters};
    ANSWER_SEED("siteInfo", 2, qcg__siteInfoResponse, "qcg:siteInfoResponse", &site);
    ANSWER_SEED("relay-siteInfo", 11, qcg__siteInfoResponse, "qcg:siteInfoResponse", &site);
    /* A dual-stack proxy: its two addresses one after the other. */
    struct qcg__endpoint proxies2[] = {{.address = "203.0.113.20", .port = 7703},
                                       {.address = "2001:db8::20", .port = 7703}};
    site.__sizeProxy = 2;
    site.proxy = proxies2;
    ANSWER_SEED("siteInfo-proxy2", 2, qcg__siteInfoResponse, "qcg:siteInfoResponse", &site);
    ANSWER_SEED("relay-siteInfo-proxy2", 11, qcg__siteInfoResponse, "qcg:siteInfoResponse", &site);

    struct qcg__probeResponse probe = {.version = QCG_PROTOCOL_VERSION,
                                       .job = "probe-0123456789abcdef0123456789abcdef",
                                       .secret = "0123456789abcdef0123456789abcdef",
                                       .rank = 1,
                                       .cluster = "natb",
                                       .node = "natb1",
                                       .address = "198.18.2.11",
                                       .seconds = 30};
    ANSWER_SEED("probe", 3, qcg__probeResponse, "qcg:probeResponse", &probe);
    ANSWER_SEED("relay-probe", 12, qcg__probeResponse, "qcg:probeResponse", &probe);

    struct qcg__ackResponse ack = {.version = QCG_PROTOCOL_VERSION};
    static const char *const acked[] = {"publish", "withdraw", "traverse", "report", "observed"};
    for (int i = 0; i < 5; i++)
        ANSWER_SEED(acked[i], 4 + i, qcg__ackResponse, "qcg:ackResponse", &ack);

    struct qcg__registerResponse reg = {.version = QCG_PROTOCOL_VERSION, .epoch = 1};
    ANSWER_SEED("relay-registerCluster", 13, qcg__registerResponse, "qcg:registerResponse", &reg);

    struct qcg__command cmds[4] = {{.seq = 1, .kind = "invalidate", .job = "job-42", .rank = 2},
                                   {.seq = 2,
                                    .kind = "connect-back",
                                    .job = "job-42",
                                    .rank = 2,
                                    .node = "nata1",
                                    .address = "198.18.2.11",
                                    .port = 23001,
                                    .token = "0123456789abcdef",
                                    .peerRank = 1}};
    /* The same order as an inject, with the initiator's SYN. */
    cmds[2] = cmds[1];
    cmds[2].seq = 3;
    cmds[2].kind = "inject";
    cmds[2].packet = "4500002800004000400600000000000000000000"
                     "0000000000000000000000005002000000000000";
    cmds[3] = (struct qcg__command){.seq = 4,
                                    .kind = "probe-listen",
                                    .job = "probe-0123456789abcdef0123456789abcdef",
                                    .rank = 1,
                                    .node = "nata1",
                                    .token = "0123456789abcdef0123456789abcdef",
                                    .seconds = 30};
    struct qcg__pollResponse poll = {
        .version = QCG_PROTOCOL_VERSION, .epoch = 1, .__sizeCommand = 4, .command = cmds};
    ANSWER_SEED("poll", 9, qcg__pollResponse, "qcg:pollResponse", &poll);
    ANSWER_SEED("relay-poll", 14, qcg__pollResponse, "qcg:pollResponse", &poll);

    text_seed("upstream", "fault-denied", 0,
              "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/xml\r\n\r\n"
              "<?xml version=\"1.0\"?><SOAP-ENV:Envelope "
              "xmlns:SOAP-ENV=\"http://schemas.xmlsoap.org/soap/envelope/\" "
              "xmlns:qcg=\"urn:qcg-connect:1\"><SOAP-ENV:Body><SOAP-ENV:Fault>"
              "<faultcode>qcg:denied</faultcode><faultstring>wrong job secret</faultstring>"
              "</SOAP-ENV:Fault></SOAP-ENV:Body></SOAP-ENV:Envelope>");
    text_seed("upstream", "chunked", 2,
              "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n<?xml\r\n0\r\n\r\n");
}

/* ---- qcg-probe's observers ---- */

static void probelines(void)
{
    text_seed("probelines", "mapped", -1, "MAPPED 203.0.113.20 40001\n");
    text_seed("probelines", "mapped-v6", -1, "MAPPED 2001:db8::20 40001\n");
    text_seed("probelines", "dialed-open", -1, "DIALED 203.0.113.20 40002 open\n");
    text_seed("probelines", "dialed-timeout", -1, "DIALED 203.0.113.20 40002 timeout\n");
    text_seed("probelines", "error", -1, "ERR unknown request\n");
}

/* ---- the metrics endpoint's requests (tests/common/test_metrics.c) ---- */

static void metrics(void)
{
    text_seed("metrics", "get", -1, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9701\r\n\r\n");
    text_seed("metrics", "prometheus", -1,
              "GET /metrics HTTP/1.1\r\nHost: 198.51.100.10:9700\r\nUser-Agent: "
              "Prometheus/2.42.0\r\nAccept: application/openmetrics-text;version=1.0.0,"
              "text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\nAccept-Encoding: gzip\r\n"
              "X-Prometheus-Scrape-Timeout-Seconds: 4\r\n\r\n");
    text_seed("metrics", "head-lf", -1, "HEAD /metrics?x=1 HTTP/1.0\n\n");
    text_seed("metrics", "post", -1, "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
    text_seed("metrics", "partial", -1, "GET /metrics HTTP/1.1\r\nHost: x");
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fuzz-seeds CORPUS_DIR ETC_DIR\n");
        return 2;
    }
    top = argv[1];
    localproto();
    proxy();
    reflector();
    handshake();
    rawpkt();
    portmap();
    config(argv[2]);
    launch();
    soap();
    answers();
    probelines();
    metrics();
    return 0;
}
