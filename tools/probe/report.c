/* What qcg-probe found: a page for people, an object for scripts. */
#include <stdio.h>
#include <string.h>

#include "address.h"
#include "json.h"
#include "probe.h"
#include "technique.h"

static const char *yes_no_unknown(int v)
{
    return v == 1 ? "yes" : v == 0 ? "no" : "unknown";
}

/* One line when nothing answers, the usual case; a line more for each
   protocol that answered or was not asked. */
static void human_portmap(FILE *out, const struct probe_site *s)
{
    bool offered = false;
    if (s->gateway[0] == '\0') {
        fprintf(out, "  %-14s unknown: %s\n", "port mapping", s->portmap[0].detail);
        return;
    }
    fprintf(out, "  %-14s gateway %s:", "port mapping", s->gateway);
    for (int i = 0; i < PROBE_PORTMAP_PROTOCOLS; i++)
        fprintf(out, "%s %s %s", i ? "," : "", s->portmap[i].name,
                yes_no_unknown(s->portmap[i].offered));
    fprintf(out, " (qcg-connect uses none)\n");
    for (int i = 0; i < PROBE_PORTMAP_PROTOCOLS; i++) {
        const struct probe_portmap *pm = &s->portmap[i];
        if (pm->offered != 0 || pm->answered)
            fprintf(out, "  %-14s %s: %s\n", "", pm->name, pm->detail);
        offered = offered || pm->offered == 1;
    }
    if (offered)
        fprintf(out,
                "  %-14s any host of this site may open inbound ports on this router: "
                "turn it off unless you rely on it\n",
                "");
}

static void human_site(FILE *out, const struct probe_site *s)
{
    const struct local_cluster *c = &s->info.cluster;

    fprintf(out, "this site\n");
    fprintf(out, "  %-14s %s", "declared", c->kind);
    for (int i = 0; i < LOCAL_PUBLIC_MAX && c->public_address[i][0]; i++)
        fprintf(out, "%s%s", i ? ", " : ", public address ", c->public_address[i]);
    if (c->open_low > 0)
        fprintf(out, ", open ports %u-%u", c->open_low, c->open_high);
    fprintf(out, "\n");
    fprintf(out, "  %-14s %s", "observed", s->observed_kind ? s->observed_kind : "unknown");
    if (s->public_address[0])
        fprintf(out, ": public address %s", s->public_address);
    fprintf(out, "\n  %-14s %s, keeps ports: %s\n", "NAT mapping", s->mapping,
            yes_no_unknown(s->port_preserving));
    fprintf(out, "  %-14s %s\n", "", s->mapping_why);
    for (int i = 0; i < s->nmap; i++) {
        const struct probe_mapping *m = &s->map[i];
        if (m->ok)
            fprintf(out, "  %-14s local port %d -> %s saw %s:%d\n", "", m->local_port, m->observer,
                    m->addr, m->port);
        else
            fprintf(out, "  %-14s local port %d -> %s %s: %s\n", "", m->local_port, m->observer,
                    m->endpoint, m->why);
    }
    fprintf(out, "  %-14s %s%s%s%s: %s\n", "inbound TCP", s->in4.state,
            s->in4.filtering ? " (" : "", s->in4.filtering ? s->in4.filtering : "",
            s->in4.filtering ? ")" : "", s->in4.why);
    fprintf(out, "  %-14s %s: %s\n", "hair-pinning",
            s->hairpin == 1                   ? "yes"
            : s->hairpin == 0                 ? "no"
            : strcmp(s->mapping, "none") == 0 ? "n/a"
                                              : "unknown",
            s->hairpin_why);
    human_portmap(out, s);
    fprintf(out, "  %-14s %s: %s\n", "helper",
            s->info.can_intercept ? "can intercept and inject" : "cannot intercept",
            s->info.intercept);
    punching_human(out, s);
    fprintf(out, "  %-14s", "round trips");
    for (int i = 0; i < s->nrtt; i++) {
        const struct probe_rtt *r = &s->rtt[i];
        fprintf(out, "%s%s", i ? "\n                 " : " ", r->name);
        if (strcmp(r->name, "proxy") == 0 || strcmp(r->name, "reflector") == 0)
            fprintf(out, " %s", r->endpoint);
        if (r->ok)
            fprintf(out, r->ms < 10 ? " %.2f ms" : " %.1f ms", r->ms); /* a LAN: 0.05 ms */
        else
            fprintf(out, " unreachable: %s", r->why);
    }
    fprintf(out, "\n");
    if (!s->reported && s->report_why[0])
        fprintf(out, "  %-14s not sent to the broker: %s\n", "", s->report_why);
}

/* --encrypt's word for the policy. */
static const char *policy_name(int encrypt)
{
    return encrypt == QCG_ENCRYPT_ALWAYS  ? "always"
           : encrypt == QCG_ENCRYPT_NEVER ? "never"
                                          : "inter-site";
}

/* Under a site's cells: each connection's path (plain, tls-user, ...), so
   that a time measured through TLS says so. */
static void human_encryption(FILE *out, const struct probe_peer *p)
{
    fprintf(out, "  %-8s %-11s %-9s", "", "", "");
    for (int t = QCG_TECH_DIRECT; t <= QCG_TECH_PROXY; t++)
        fprintf(out, " %-11s", p->tech[t].encryption ? p->tech[t].encryption : "");
    fprintf(out, " %s\n", p->chosen_encryption ? p->chosen_encryption : "");
}

static void human_peers(FILE *out, const struct probe_run *r)
{
    int n = 0;

    fprintf(out,
            "\ntowards other sites (setup time; \"-\" the broker says it cannot work, "
            "\"x\" tried and failed;\nbelow: each connection plain or encrypted, "
            "--encrypt %s)\n",
            policy_name(r->opts->encrypt));
    fprintf(out, "  %-8s %-11s %-9s", "site", "declared", "endpoint");
    for (int t = QCG_TECH_DIRECT; t <= QCG_TECH_PROXY; t++)
        fprintf(out, " %-11s", technique_name((enum technique)t));
    fprintf(out, " chosen\n");
    for (int i = 0; i < r->npeers; i++) {
        const struct probe_peer *p = &r->peers[i];
        fprintf(out, "  %-8s %-11s %-9s", p->site, p->kind, p->endpoint_ok ? p->node : "none");
        if (!p->endpoint_ok) {
            fprintf(out, " %s\n", p->why);
            continue;
        }
        for (int t = QCG_TECH_DIRECT; t <= QCG_TECH_PROXY; t++) {
            char cell[32];
            const struct probe_technique *x = &p->tech[t];
            if (x->works)
                snprintf(cell, sizeof(cell), "ok %.1fms", x->setup_ms);
            else
                snprintf(cell, sizeof(cell), "%s", !x->tried ? "?" : x->impossible ? "-" : "x");
            fprintf(out, " %-11s", cell);
        }
        if (p->chosen != QCG_TECH_NONE)
            fprintf(out, " %s\n", qcg_technique_name(p->chosen));
        else
            fprintf(out, " none: %s\n", p->chosen_why);
        human_encryption(out, p);
    }
    for (int i = 0; i < r->npeers; i++) {
        const struct probe_peer *p = &r->peers[i];
        for (int t = QCG_TECH_DIRECT; p->endpoint_ok && t <= QCG_TECH_PROXY; t++) {
            const struct probe_technique *x = &p->tech[t];
            if (x->works || !x->tried)
                continue;
            if (n++ == 0)
                fprintf(out, "\nwhy not\n");
            fprintf(out, "  %s %s: %s\n", p->site, technique_name((enum technique)t), x->why);
        }
    }
}

void report_human(FILE *out, const struct probe_run *r)
{
    const struct probe_site *s = &r->site;

    fprintf(out, "qcg-probe: node %s (", s->info.node);
    for (int i = 0; i < s->naddresses; i++)
        fprintf(out, "%s%s", i ? ", " : "", s->addresses[i]);
    fprintf(out, "%s) of site %s\n", s->naddresses ? "" : s->info.address, s->info.cluster.name);
    fprintf(out, "  frontend %s, broker %s\n\n", s->info.frontend,
            s->info.broker[0] ? s->info.broker : "(not told)");
    human_site(out, s);
    for (int i = 0; i < s->nmismatch; i++)
        fprintf(out, "\n!! MISMATCH: %s\n", s->mismatch[i]);
    if (r->npeers > 0)
        human_peers(out, r);
    family_human(out, r);
    if (r->capture_file != NULL) {
        if (r->capture_why[0])
            fprintf(out, "\ncapture: none: %s\n", r->capture_why);
        else
            fprintf(out, "\ncapture: %ld packets in %s (tcpdump -nr %s, or Wireshark)\n",
                    r->capture_packets, r->capture_file, r->capture_file);
    }
    fprintf(out, "\n%s in %.1f s\n", r->timed_out ? "stopped by --timeout" : "done",
            r->elapsed_ms / 1000.0);
}

/* ,"key":"value" (NULL as null). */
static void jstr(FILE *out, const char *sep, const char *key, const char *value)
{
    fprintf(out, "%s\"%s\":", sep, key);
    if (value == NULL)
        fputs("null", out);
    else
        json_string(out, value);
}

static void jtri(FILE *out, const char *sep, const char *key, int v)
{
    fprintf(out, "%s\"%s\":%s", sep, key, v == 1 ? "true" : v == 0 ? "false" : "null");
}

static void json_site(FILE *out, const struct probe_site *s)
{
    const struct local_cluster *c = &s->info.cluster;

    jstr(out, "", "site", c->name);
    jstr(out, ",", "node", s->info.node);
    jstr(out, ",", "address", s->info.address);
    fprintf(out, ",\"addresses\":[");
    for (int i = 0; i < s->naddresses; i++) {
        fprintf(out, "%s", i ? "," : "");
        json_string(out, s->addresses[i]);
    }
    fprintf(out, "]");
    jstr(out, ",", "public_address", s->public_address[0] ? s->public_address : NULL);
    fprintf(out, ",\"nat\":{");
    jstr(out, "", "mapping", s->mapping);
    jtri(out, ",", "port_preserving", s->port_preserving);
    jstr(out, ",", "why", s->mapping_why);
    fprintf(out, ",\"observations\":[");
    for (int i = 0; i < s->nmap; i++) {
        const struct probe_mapping *m = &s->map[i];
        char mapped[LOCAL_ENDPOINT_MAX];
        hostport_format(m->addr, m->port, mapped, sizeof(mapped));
        fprintf(out, "%s{", i ? "," : "");
        jstr(out, "", "observer", m->observer);
        jstr(out, ",", "endpoint", m->endpoint);
        fprintf(out, ",\"local_port\":%d", m->local_port);
        jstr(out, ",", "mapped", m->ok ? mapped : NULL);
        jstr(out, ",", "error", m->ok ? NULL : m->why);
        fprintf(out, "}");
    }
    fprintf(out, "]}");
    jstr(out, ",", "inbound", s->in4.state);
    jstr(out, ",", "inbound_filtering", s->in4.filtering);
    jstr(out, ",", "inbound_why", s->in4.why);
    jtri(out, ",", "hairpinning", s->hairpin);
    jstr(out, ",", "hairpinning_why", s->hairpin_why);
    fprintf(out, ",\"port_mapping\":{");
    jstr(out, "", "gateway", s->gateway[0] ? s->gateway : NULL);
    for (int i = 0; i < PROBE_PORTMAP_PROTOCOLS; i++) {
        static const char *const key[PROBE_PORTMAP_PROTOCOLS] = {"nat_pmp", "pcp", "upnp"};
        const struct probe_portmap *pm = &s->portmap[i];
        fprintf(out, ",\"%s\":{", key[i]);
        jtri(out, "", "offered", pm->offered);
        fprintf(out, ",\"answered\":%s", pm->answered ? "true" : "false");
        jstr(out, ",", "detail", pm->detail);
        fprintf(out, "}");
    }
    fprintf(out, "}");
    if (s->in4.syns_seen >= 0)
        fprintf(out, ",\"inbound_syns_reached_node\":%d", s->in4.syns_seen);
    jstr(out, ",", "observed_kind", s->observed_kind);
    fprintf(out, ",\"declared\":{");
    jstr(out, "", "kind", c->kind);
    fprintf(out, ",\"public_addresses\":[");
    for (int i = 0; i < LOCAL_PUBLIC_MAX && c->public_address[i][0]; i++) {
        fprintf(out, "%s", i ? "," : "");
        json_string(out, c->public_address[i]);
    }
    fprintf(out, "]}");
    fprintf(out, ",\"mismatch\":[");
    for (int i = 0; i < s->nmismatch; i++) {
        fprintf(out, "%s", i ? "," : "");
        json_string(out, s->mismatch[i]);
    }
    fprintf(out, "],\"reported_to_broker\":%s", s->reported ? "true" : "false");
    fprintf(out, ",\"helper\":{\"can_intercept\":%s,\"nfqueue\":%u",
            s->info.can_intercept ? "true" : "false", s->info.nfqueue);
    jstr(out, ",", "detail", s->info.intercept);
    fputs("}", out);
    punching_json(out, s);
    fprintf(out, ",\"services\":{");
    jstr(out, "", "frontend", s->info.frontend);
    jstr(out, ",", "broker", s->info.broker[0] ? s->info.broker : NULL);
    jstr(out, ",", "reflector", s->info.reflector[0] ? s->info.reflector : NULL);
    fprintf(out, ",\"proxies\":[");
    for (uint32_t i = 0; i < s->info.proxies && i < LOCAL_PROXIES_MAX; i++) {
        fprintf(out, "%s", i ? "," : "");
        json_string(out, s->info.proxy[i]);
    }
    fprintf(out, "]},\"rtt_ms\":[");
    for (int i = 0; i < s->nrtt; i++) {
        const struct probe_rtt *r = &s->rtt[i];
        fprintf(out, "%s{", i ? "," : "");
        jstr(out, "", "to", r->name);
        jstr(out, ",", "endpoint", r->endpoint);
        if (r->ok)
            fprintf(out, ",\"ms\":%.3f", r->ms);
        else
            fprintf(out, ",\"ms\":null");
        jstr(out, ",", "error", r->ok ? NULL : r->why);
        fprintf(out, "}");
    }
    fprintf(out, "]");
}

static void json_peer(FILE *out, const struct probe_peer *p)
{
    fprintf(out, "{");
    jstr(out, "", "site", p->site);
    jstr(out, ",", "declared_kind", p->kind);
    jstr(out, ",", "endpoint_node", p->endpoint_ok ? p->node : NULL);
    jstr(out, ",", "error", p->endpoint_ok ? NULL : p->why);
    jstr(out, ",", "chosen", p->chosen != QCG_TECH_NONE ? qcg_technique_name(p->chosen) : NULL);
    if (p->chosen != QCG_TECH_NONE) {
        fprintf(out, ",\"chosen_setup_ms\":%.3f", p->chosen_ms);
        jstr(out, ",", "chosen_family",
             p->chosen_family ? family_name(p->chosen_family, true) : NULL);
    } else
        jstr(out, ",", "chosen_why", p->endpoint_ok ? p->chosen_why : NULL);
    jstr(out, ",", "chosen_encryption", p->chosen_encryption);
    fprintf(out, ",\"techniques\":{");
    for (int t = QCG_TECH_DIRECT; t <= QCG_TECH_PROXY; t++) {
        const struct probe_technique *x = &p->tech[t];
        fprintf(out, "%s\"%s\":{\"works\":%s", t > QCG_TECH_DIRECT ? "," : "",
                technique_name((enum technique)t), x->works ? "true" : "false");
        if (x->works)
            fprintf(out, ",\"setup_ms\":%.3f,\"echo_ms\":%.3f", x->setup_ms, x->echo_ms);
        else
            fprintf(out, ",\"setup_ms\":null");
        /* The path the times were measured through (null: no connection). */
        jstr(out, ",", "encryption", x->encryption);
        /* The family and far end of the connection made (null: none). */
        jstr(out, ",", "family", x->works && x->family ? family_name(x->family, true) : NULL);
        jstr(out, ",", "address", x->works && x->address[0] ? x->address : NULL);
        fprintf(out, ",\"tried\":%s,\"possible\":%s", x->tried ? "true" : "false",
                x->impossible ? "false" : "true");
        jstr(out, ",", "why", x->works || !x->tried ? NULL : x->why);
        fprintf(out, "}");
    }
    fprintf(out, "}}");
}

void report_json(FILE *out, const struct probe_run *r)
{
    fprintf(out, "{");
    json_site(out, &r->site);
    jstr(out, ",", "encrypt", policy_name(r->opts->encrypt));
    fprintf(out, ",\"peers\":[");
    for (int i = 0; i < r->npeers; i++) {
        fprintf(out, "%s", i ? "," : "");
        json_peer(out, &r->peers[i]);
    }
    fprintf(out, "]");
    family_json(out, r);
    if (r->capture_file != NULL) {
        fprintf(out, ",\"capture\":{");
        jstr(out, "", "file", r->capture_file);
        fprintf(out, ",\"packets\":%ld", r->capture_packets);
        jstr(out, ",", "error", r->capture_why[0] ? r->capture_why : NULL);
        fprintf(out, "}");
    }
    fprintf(out, ",\"timed_out\":%s,\"elapsed_ms\":%.1f}\n", r->timed_out ? "true" : "false",
            r->elapsed_ms);
}
