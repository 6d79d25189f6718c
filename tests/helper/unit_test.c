/* Unit tests of the helper's pure parts: the contacts table, the mapping of
   upstream answers to local errors and plans, and the configuration checks. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "soapH.h"

#include "check.h"
#include "cmdqueue.h"
#include "contacts.h"
#include "helper.h"
#include "punch.h"
#include "qcgconn.h"
#include "upstream.h"

static struct contact make(const char *job, int rank, unsigned port, pid_t pid)
{
    struct contact c;

    memset(&c, 0, sizeof(c));
    snprintf(c.job, sizeof(c.job), "%s", job);
    snprintf(c.secret, sizeof(c.secret), "secret");
    c.rank = rank;
    c.port = (uint16_t)port;
    c.pid = pid;
    return c;
}

static void test_contacts(void)
{
    struct contacts *cs = contacts_new(2);
    struct contact a = make("j", 0, 100, 11), b = make("j", 1, 101, 12), c = make("k", 0, 102, 13);
    struct contact *list;
    size_t n;
    pid_t holder;
    uid_t holder_uid;

    CHECKF(contacts_reserve(cs, &a, 1, &holder, &holder_uid) == 0, "reserve a free (job, rank)");
    CHECKF(contacts_reserve(cs, &a, 1, &holder, &holder_uid) == 0,
           "the owner may reserve it again");
    struct contact a2 = make("j", 0, 200, 14);
    CHECKF(contacts_reserve(cs, &a2, 1, &holder, &holder_uid) == QCG_EINVAL,
           "the owner may not switch ports silently");
    CHECKF(contacts_reserve(cs, &a2, 2, &holder, &holder_uid) == QCG_EBUSY && holder == 11,
           "another owner gets QCG_EBUSY naming the holder's pid");
    CHECKF(contacts_published(cs) == 0, "a pending contact is not counted as published");
    contacts_set_state(cs, "j", 0, 2, CONTACT_PUBLISHED);
    CHECKF(contacts_published(cs) == 0, "only the owner changes its state");
    contacts_set_state(cs, "j", 0, 1, CONTACT_PUBLISHED);
    CHECKF(contacts_published(cs) == 1, "published");
    CHECKF(contacts_reserve(cs, &b, 2, &holder, &holder_uid) == 0, "a second contact");
    CHECKF(contacts_reserve(cs, &c, 3, &holder, &holder_uid) == QCG_ENOMEM, "the table is bounded");
    CHECKF(contacts_snapshot(cs, &list, &n) == 0 && n == 1 && list[0].rank == 0,
           "the snapshot holds only published contacts");
    free(list);
    contacts_set_state(cs, "j", 0, 1, CONTACT_WITHDRAWING);
    CHECKF(contacts_reserve(cs, &a2, 2, &holder, &holder_uid) == QCG_EBUSY && holder == 0,
           "a contact being withdrawn is busy, with no holder");
    CHECKF(contacts_held(cs, "j", 0, 0) && !contacts_held(cs, "j", 0, 2), "held by anyone / owner");
    contacts_remove(cs, "j", 0, 2);
    CHECKF(contacts_held(cs, "j", 0, 1), "only the owner removes it");
    contacts_remove(cs, "j", 0, 1);
    CHECKF(!contacts_held(cs, "j", 0, 0), "removed");
    CHECKF(contacts_reserve(cs, &c, 3, &holder, &holder_uid) == 0, "its slot is free again");

    contacts_orphan_add(cs, &a);
    contacts_orphan_add(cs, &b);
    CHECKF(contacts_orphans_take(cs, &list, &n) == 0 && n == 2 && list[1].rank == 1,
           "orphans are taken in order");
    free(list);
    CHECKF(contacts_orphans_take(cs, &list, &n) == 0 && n == 0, "and only once");
    free(list);
    contacts_free(cs);
}

static void test_errors(void)
{
    CHECKF(upstream_error(CALL_OK, "") == 0, "ok -> 0");
    CHECKF(upstream_error(CALL_UNREACHABLE, "") == QCG_EUPSTREAM, "unreachable -> EUPSTREAM");
    CHECKF(upstream_error(CALL_FAULT, "busy") == QCG_EBUSY, "busy -> EBUSY");
    CHECKF(upstream_error(CALL_FAULT, "retry") == LOCAL_ERETRY, "retry -> LOCAL_ERETRY");
    CHECKF(upstream_error(CALL_FAULT, "denied") == QCG_EDENIED, "denied -> EDENIED");
    CHECKF(upstream_error(CALL_FAULT, "unavailable") == QCG_EUPSTREAM, "unavailable -> EUPSTREAM");
    CHECKF(upstream_error(CALL_FAULT, "notfound") == QCG_ENOTFOUND, "notfound -> ENOTFOUND");
    CHECKF(upstream_error(CALL_FAULT, "invalid") == QCG_EINVAL, "invalid -> EINVAL");
    CHECKF(upstream_error(CALL_FAULT, "") == QCG_EUPSTREAM, "unknown fault -> EUPSTREAM");
}

static void test_plans(void)
{
    struct qcg__plan p;
    struct local_plan out;
    char msg[LOCAL_MESSAGE_MAX];
    char longaddr[200];

    memset(&p, 0, sizeof(p));
    p.status = "ok";
    p.technique = "direct";
    p.cluster = "c1";
    p.node = "n1";
    p.address = "198.18.1.11";
    p.port = 40000;
    CHECKF(upstream_plan(&p, 3, &out, msg, sizeof(msg)) == 0 && out.technique == QCG_TECH_DIRECT &&
               out.port == 40000 && strcmp(out.address, "198.18.1.11") == 0 &&
               strcmp(out.node, "n1") == 0,
           "an ok direct plan is copied");
    p.port = 0;
    CHECKF(upstream_plan(&p, 3, &out, msg, sizeof(msg)) == QCG_EUPSTREAM,
           "a direct plan without a port is malformed");
    p.port = 70000;
    CHECKF(upstream_plan(&p, 3, &out, msg, sizeof(msg)) == QCG_EUPSTREAM,
           "a port above 65535 is malformed");
    p.port = 1;
    memset(longaddr, '1', sizeof(longaddr) - 1);
    longaddr[sizeof(longaddr) - 1] = '\0';
    p.address = longaddr;
    CHECKF(upstream_plan(&p, 3, &out, msg, sizeof(msg)) == QCG_EUPSTREAM && out.address[0] == '\0',
           "an oversized address is refused, nothing half-copied");
    p.address = "198.18.1.11";
    p.technique = "teleport";
    CHECKF(upstream_plan(&p, 3, &out, msg, sizeof(msg)) == QCG_EUPSTREAM,
           "an unknown technique is refused");
    p.status = "notfound";
    CHECKF(upstream_plan(&p, 3, &out, msg, sizeof(msg)) == QCG_ENOTFOUND, "notfound -> ENOTFOUND");
    p.status = "unavailable";
    p.technique = "holepunch";
    p.reason = "c1 (nat) -> c2 (nat): holepunch is not available in this version";
    CHECKF(upstream_plan(&p, 3, &out, msg, sizeof(msg)) == QCG_ETECHNIQUE &&
               strstr(msg, "holepunch") != NULL && strstr(msg, "c1 (nat)") != NULL,
           "unavailable -> ETECHNIQUE naming the technique and the reason (%s)", msg);
    p.status = NULL;
    CHECKF(upstream_plan(&p, 3, &out, msg, sizeof(msg)) == QCG_EUPSTREAM, "no status -> EUPSTREAM");
}

static int load(struct helper_config *cfg, const char *extra_name, const char *extra_value)
{
    char err[256];
    char *argv[] = {"qcg-helper", "--frontend",  "https://127.0.0.1:7701/",
                    "--ca",       "ca.crt",      "--cert",
                    "h.pem",      "--address",   "198.18.1.11",
                    "--ports",    "40000-40099", NULL,
                    NULL,         NULL};
    int argc = 11;

    if (extra_name != NULL) {
        argv[argc++] = (char *)extra_name;
        argv[argc++] = (char *)extra_value;
    }
    memset(cfg, 0, sizeof(*cfg));
    if (config_load(helper_options, cfg, argc, argv, "test", NULL, err, sizeof(err)) != CONFIG_OK)
        return -1;
    int rc = helper_config_check(cfg, err, sizeof(err));
    if (rc < 0)
        printf("     (%s)\n", err);
    return rc;
}

static void test_config(void)
{
    struct helper_config cfg;

    CHECKF(load(&cfg, NULL, NULL) == 0 && cfg.mode == 0666 && cfg.max_clients == 4096 &&
               strcmp(cfg.socket, "/run/qcg/helper.sock") == 0 && cfg.ports[0] == 40000,
           "defaults: socket, mode 0666, 4096 clients");
    CHECKF(cfg.max_clients_per_uid == 256 && cfg.max_requests == 64 &&
               cfg.max_requests_per_uid == 6 && cfg.threads == 8,
           "defaults: 256 clients per uid, 64 requests per connection, 6 per uid, 8 threads");
    CHECKF(cfg.nuids == 0 && helper_uid_allowed(&cfg, 1234), "empty allow-uids: everyone");
    config_free(helper_options, &cfg);
    CHECKF(load(&cfg, "--allow-uids", "0, 1000,root") == 0 && cfg.nuids == 3 &&
               helper_uid_allowed(&cfg, 1000) && !helper_uid_allowed(&cfg, 1001),
           "allow-uids: numbers and names");
    config_free(helper_options, &cfg);
    CHECKF(load(&cfg, "--allow-uids", "no-such-user-here") < 0, "allow-uids: unknown name");
    config_free(helper_options, &cfg);
    CHECKF(load(&cfg, "--address", "fd00::11") == 0, "an IPv6 address");
    config_free(helper_options, &cfg);
    CHECKF(load(&cfg, "--address", "node1.example") < 0, "a host name is not an address");
    config_free(helper_options, &cfg);
    CHECKF(load(&cfg, "--socket-mode", "0660") == 0 && cfg.mode == 0660, "socket-mode 0660");
    config_free(helper_options, &cfg);
    CHECKF(load(&cfg, "--socket-mode", "8") < 0, "socket-mode must be octal");
    config_free(helper_options, &cfg);
    CHECKF(load(&cfg, "--frontend", "http://127.0.0.1:7701/") < 0, "the frontend URL is https");
    config_free(helper_options, &cfg);
    CHECKF(load(&cfg, "--node", "bad/name") < 0, "node names follow the name rule");
    config_free(helper_options, &cfg);
    CHECKF(load(&cfg, "--log-level", "loud") < 0, "unknown log level");
    config_free(helper_options, &cfg);
    CHECKF(load(&cfg, "--max-requests", "1") == 0 && cfg.max_requests == 1,
           "max-requests 1: one request at a time");
    config_free(helper_options, &cfg);
    CHECKF(load(&cfg, "--max-clients-per-uid", "7") == 0 && cfg.max_clients_per_uid == 7 &&
               cfg.max_clients == 4096,
           "max-clients-per-uid is its own bound");
    config_free(helper_options, &cfg);
    CHECKF(load(&cfg, NULL, NULL) == 0 && cfg.first_ttl == 0, "punch-ttl: auto by default");
    config_free(helper_options, &cfg);
    CHECKF(load(&cfg, "--punch-ttl", "plain") == 0 && cfg.first_ttl == -1, "punch-ttl plain");
    config_free(helper_options, &cfg);
    CHECKF(load(&cfg, "--punch-ttl", "3") == 0 && cfg.first_ttl == 3, "punch-ttl 3");
    config_free(helper_options, &cfg);
    struct punch_params pp;
    const char addrs[2][QCG_ADDR_MAX] = {"198.18.1.11", "2001:db8:1::11"};
    CHECKF(punch_params_for_node(&pp, "203.0.113.10", 7704, "t", addrs, 2, cfg.ports, 3) == 0 &&
               pp.first_ttl == 3 && strcmp(pp.local, "198.18.1.11") == 0,
           "a node's punch takes its first SYN's TTL from punch-ttl, its IPv4 address");
    CHECKF(punch_params_for_node(&pp, "2001:db8::10", 7704, "t", addrs, 2, cfg.ports, 3) == 0 &&
               strcmp(pp.local, "2001:db8:1::11") == 0,
           "a punch through an IPv6 reflector binds the node's IPv6 address: %s", pp.local);
    CHECKF(punch_params_for_node(&pp, "2001:db8::10", 7704, "t", addrs, 1, cfg.ports, 3) < 0 &&
               pp.local[0] == '\0',
           "a node without IPv6 has no address for a punch through an IPv6 reflector");
    char path[] = "/tmp/qcg-helper-unit-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f != NULL) {
        fputs("max-requests = 8\nmax-requests-per-uid = 3\nthreads = 4\n", f);
        fclose(f);
    }
    CHECKF(f != NULL && load(&cfg, "--config", path) == 0 && cfg.max_requests == 8 &&
               cfg.max_requests_per_uid == 3 && cfg.threads == 4,
           "the bounds and threads from a config file");
    config_free(helper_options, &cfg);
    unlink(path);
    static const char *const out_of_range[][2] = {
        {"--max-clients", "0"},     {"--max-clients-per-uid", "0"},  {"--max-requests", "0"},
        {"--max-requests", "4097"}, {"--max-requests-per-uid", "0"}, {"--threads", "0"},
        {"--threads", "129"},       {"--max-requests", "many"},      {"--punch-ttl", "0"},
        {"--punch-ttl", "65"},      {"--punch-ttl", "low"},
    };
    for (size_t i = 0; i < sizeof(out_of_range) / sizeof(out_of_range[0]); i++) {
        CHECKF(load(&cfg, out_of_range[i][0], out_of_range[i][1]) < 0, "%s %s is refused",
               out_of_range[i][0], out_of_range[i][1]);
        config_free(helper_options, &cfg);
    }
}

static struct command order(const char *kind)
{
    struct command c;

    memset(&c, 0, sizeof(c));
    snprintf(c.kind, sizeof(c.kind), "%s", kind);
    snprintf(c.job, sizeof(c.job), "job1");
    snprintf(c.node, sizeof(c.node), "n1");
    snprintf(c.address, sizeof(c.address), "203.0.113.21");
    snprintf(c.token, sizeof(c.token), "0123456789abcdef0123456789abcdef");
    c.rank = 1;
    c.peer_rank = 0;
    c.port = 20001;
    return c;
}

/* Orders from the broker are checked before anything acts on them. */
static void test_orders(void)
{
    char why[200];
    struct command c = order("connect-back");

    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) == 0, "a connect-back order passes");
    c = order("proxy-connect");
    memset(c.token, 'a', 100);
    c.token[100] = '\0';
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) == 0,
           "a proxy-connect order with a 100-character token passes");
    c = order("connect-back");
    memset(c.token, 'a', 100);
    c.token[100] = '\0';
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) < 0 && strstr(why, "token"),
           "a connect-back token that does not fit the hello is refused (%s)", why);
    c = order("connect-back");
    CHECKF(upstream_order_check(&c, "n2", why, sizeof(why)) < 0 && strstr(why, "node"),
           "an order for another node is refused (%s)", why);
    c = order("teleport");
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) < 0 && strstr(why, "unknown"),
           "an unknown order is refused (%s)", why);
    c = order("connect-back");
    snprintf(c.address, sizeof(c.address), "proxy.example");
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) < 0 && strstr(why, "address"),
           "a host name instead of an address is refused (%s)", why);
    /* An inject's initiator over IPv6 (traversing over IPv6). */
    c = order("inject");
    snprintf(c.address, sizeof(c.address), "2001:db8:6::11");
    memset(c.packet, 'a', 160);
    c.packet[160] = '\0';
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) == 0,
           "an inject order from an IPv6 address passes (%s)", why);
    snprintf(c.address, sizeof(c.address), "2001:db8:6::11%%eth0");
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) < 0 && strstr(why, "address"),
           "an inject order from a scoped address is refused (%s)", why);
    c = order("connect-back");
    c.port = 0;
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) < 0, "port 0 is refused");
    c = order("connect-back");
    c.peer_rank = -1;
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) < 0, "a negative rank is refused");
    c = order("proxy-connect");
    c.token[0] = '\0';
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) < 0,
           "an order without a token is refused");
    c = order("connect-back");
    snprintf(c.job, sizeof(c.job), "bad job");
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) < 0, "a malformed job id is refused");

    /* probe-listen: a probe job, its secret, a life; no address or port. */
    memset(&c, 0, sizeof(c));
    snprintf(c.kind, sizeof(c.kind), "probe-listen");
    snprintf(c.job, sizeof(c.job), "probe-0123456789abcdef0123456789abcdef");
    snprintf(c.node, sizeof(c.node), "n1");
    snprintf(c.token, sizeof(c.token), "0123456789abcdef0123456789abcdef");
    c.rank = 1;
    c.seconds = 30;
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) == 0, "a probe-listen order passes");
    c.seconds = 500;
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) == 0,
           "a probe-listen of 500 s passes (clamped when started)");
    c.seconds = 0;
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) < 0 && strstr(why, "seconds"),
           "a probe-listen of 0 s is refused (%s)", why);
    c.seconds = 30;
    CHECKF(upstream_order_check(&c, "n2", why, sizeof(why)) < 0 && strstr(why, "node"),
           "a probe-listen for another node is refused (%s)", why);
    snprintf(c.job, sizeof(c.job), "job-of-real-processes");
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) < 0 && strstr(why, "probe"),
           "a probe-listen for a job that is not probe-... is refused (%s)", why);
    snprintf(c.job, sizeof(c.job), "probe-1");
    c.token[0] = '\0';
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) < 0 && strstr(why, "secret"),
           "a probe-listen without a secret is refused (%s)", why);
    snprintf(c.token, sizeof(c.token), "tab\there");
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) < 0, "a malformed secret is refused");
    snprintf(c.token, sizeof(c.token), "s");
    c.rank = -1;
    CHECKF(upstream_order_check(&c, "n1", why, sizeof(why)) < 0, "a negative rank is refused");

    char text[64];
    upstream_tried_text(0, true, text, sizeof(text));
    CHECKF(strcmp(text, "") == 0, "no technique tried: empty list");
    upstream_tried_text((1u << QCG_TECH_REVERSED) | (1u << QCG_TECH_PROXY), true, text,
                        sizeof(text));
    CHECKF(strcmp(text, "reversed,proxy") == 0, "reversed and proxy tried: '%s'", text);
    upstream_tried_text((1u << QCG_TECH_REVERSED) | (1u << TECH_PUNCH6), true, text, sizeof(text));
    CHECKF(strcmp(text, "reversed,holepunch6") == 0, "IPv6 punch tried: '%s'", text);
    upstream_tried_text(1u << TECH_PUNCH6, false, text, sizeof(text));
    CHECKF(strcmp(text, "holepunch") == 0, "to older services, the IPv6 punch: '%s'", text);
    upstream_tried_text((1u << QCG_TECH_HOLEPUNCH) | (1u << TECH_PUNCH6), false, text,
                        sizeof(text));
    CHECKF(strcmp(text, "holepunch") == 0, "both punches to older services, once: '%s'", text);
    upstream_tried_text(0xffffffffu, true, text, 12);
    CHECKF(strlen(text) < 12, "a small buffer is not overrun: '%s'", text);
}

int main(void)
{
    test_contacts();
    test_errors();
    test_plans();
    test_config();
    test_orders();
    return check_result("helper-unit");
}
