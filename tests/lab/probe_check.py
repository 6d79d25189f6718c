#!/usr/bin/env python3
"""Checks qcg-probe --json output against what the lab's sites are.

    probe_check.py site FILE KIND            the site part (KIND: open, firewalled,
                                             nat, symnat as built by qcg-lab)
    probe_check.py peers FILE                every other site probed, every technique
                                             with works/why, a choice; prints
                                             "SITE CHOSEN" lines for the caller
    probe_check.py encryption FILE PATH      every test connection made went PATH
                                             (tls: any tls-*, or plain), the chosen
                                             one too, and at least one worked
    probe_check.py families FILE FAMILIES   FAMILIES (ipv4,ipv6 or one): in each, a
                                             hop count to the reflector and the
                                             punching variant it gives, and the proxy
                                             reached; in the other, no variant and no
                                             proxy checked; prints one line a family
    probe_check.py mismatch FILE DECLARED OBSERVED
    probe_check.py field FILE PATH           one value (dotted path) on stdout

Exit status 1 with one line per failed check on stderr.
"""
import json
import sys

# What qcg-lab builds (lab/README.md).
PUBLIC = {"nata": "203.0.113.66", "natb": "203.0.113.82", "sym": "203.0.113.98"}
TECHNIQUES = ["direct", "reversed", "traversing", "holepunch", "proxy"]
SITES = ["open", "fw", "nata", "natb", "sym"]

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def site(p, kind):
    name = p["site"]
    nat = p["nat"]
    check(p["declared"]["kind"] == kind, f"{name}: declared {p['declared']['kind']}, lab says {kind}")
    check(p["observed_kind"] == kind, f"{name}: observed {p['observed_kind']}, lab built {kind}")
    check(p["mismatch"] == [], f"{name}: unexpected mismatch {p['mismatch']}")
    if kind in ("open", "firewalled"):
        check(nat["mapping"] == "none", f"{name}: mapping {nat['mapping']}, expected none")
        check(p["public_address"] == p["address"],
              f"{name}: public address {p['public_address']} is not the node's {p['address']}")
    else:
        check(p["public_address"] == PUBLIC[name],
              f"{name}: public address {p['public_address']}, expected {PUBLIC[name]}")
        want = "endpoint-independent" if kind == "nat" else "endpoint-dependent"
        check(nat["mapping"] == want, f"{name}: mapping {nat['mapping']}, expected {want}")
        check(nat["port_preserving"] == (kind == "nat"),
              f"{name}: port_preserving {nat['port_preserving']}")
        observers = {o["observer"] for o in nat["observations"] if o["mapped"]}
        check(observers == {"reflector", "proxy"}, f"{name}: observers answering: {observers}")
    if kind == "open":
        check(p["inbound"] == "open", f"{name}: inbound {p['inbound']}, expected open")
    else:
        check(p["inbound"] == "filtered", f"{name}: inbound {p['inbound']}, expected filtered")
        # Every lab router drops unsolicited inbound packets, forwarded or
        # addressed to itself (the NATs' unmapped ports).
        want = "dropped"
        check(p["inbound_filtering"] == want,
              f"{name}: inbound filtering {p['inbound_filtering']}, expected {want}")
    # No lab router turns a connection to its public address back in, and none
    # offers a port-mapping protocol: each answers "port unreachable" on 5351.
    if kind in ("open", "firewalled"):
        check(p["hairpinning"] is None, f"{name}: hairpinning {p['hairpinning']} without a NAT")
    else:
        check(p["hairpinning"] is False and "refused" in p["hairpinning_why"],
              f"{name}: hairpinning {p['hairpinning']}: {p['hairpinning_why']}")
    pm = p["port_mapping"]
    for proto in ("nat_pmp", "pcp", "upnp"):
        check(pm[proto]["offered"] is False and pm[proto]["answered"] is False,
              f"{name}: {proto}: {pm[proto]}")
    for proto in ("nat_pmp", "pcp"):
        check("closed (port unreachable)" in pm[proto]["detail"], f"{name}: {proto} {pm[proto]['detail']}")
    check(p["helper"]["can_intercept"] is True, f"{name}: helper cannot intercept")
    rtts = {r["to"]: r for r in p["rtt_ms"]}
    for to in ("frontend", "broker", "reflector", "proxy"):
        check(to in rtts and rtts[to]["ms"] is not None and rtts[to]["ms"] > 0,
              f"{name}: no round trip to the {to}: {rtts.get(to)}")
    check(p["reported_to_broker"] is True, f"{name}: observation not reported to the broker")


def encryption(p, path):
    """Every connection the probe made towards another site went `path`."""
    def fits(e):
        return e is not None and (e.startswith("tls-") if path == "tls" else e == path)

    worked = 0
    for q in p["peers"]:
        where = f"{p['site']} -> {q['site']}"
        for t, r in q["techniques"].items():
            if r["works"] or r.get("encryption") is not None:
                check(fits(r.get("encryption")), f"{where} {t}: {r.get('encryption')}, not {path}")
            worked += 1 if r["works"] else 0
        if q["chosen"] is not None:
            check(fits(q.get("chosen_encryption")),
                  f"{where} chosen {q['chosen']}: {q.get('chosen_encryption')}, not {path}")
    check(worked > 0, f"{p['site']}: no technique worked, nothing to tell")


def peers(p):
    name = p["site"]
    seen = {q["site"] for q in p["peers"]}
    check(seen == set(SITES) - {name}, f"{name}: probed {sorted(seen)}")
    for q in p["peers"]:
        where = f"{name} -> {q['site']}"
        check(q["endpoint_node"] is not None, f"{where}: no test endpoint: {q.get('error')}")
        check(q["chosen"] in TECHNIQUES, f"{where}: chosen {q['chosen']}")
        techs = q["techniques"]
        check(sorted(techs) == sorted(TECHNIQUES), f"{where}: techniques {sorted(techs)}")
        for t, r in techs.items():
            if r["works"]:
                check(r["setup_ms"] is not None and r["setup_ms"] > 0, f"{where} {t}: no setup time")
            else:
                check(bool(r["why"]), f"{where} {t}: does not work and says no why")
        if q["chosen"] in techs:
            check(techs[q["chosen"]]["works"], f"{where}: chose {q['chosen']}, which did not work")
        # The proxy carries any pair.
        check(techs["proxy"]["works"], f"{where}: proxy did not work: {techs['proxy']['why']}")
        # A symmetric NAT on either side: the reason names it.
        if "sym" in (name, q["site"]):
            why = techs["holepunch"]["why"] or ""
            check(not techs["holepunch"]["works"] and "symmetric" in why,
                  f"{where}: holepunch why '{why}' does not name the symmetric NAT")
        # The technique chosen for the node that ran the test endpoint: a
        # site may have nodes that differ (nata2 in an IPv6 open range).
        print(q["site"], q["chosen"], q["endpoint_node"])
    # Every other site is another cluster: TLS by default (issue 17).
    check(p.get("encrypt") == "inter-site", f"{name}: policy {p.get('encrypt')}")
    encryption(p, "tls")


def families(p, fams):
    name = p["site"]
    pu = p["punching"]
    for fam in ("ipv4", "ipv6"):
        f = pu.get(fam, {"kind": None, "hops": None, "variant": ""})
        check(fam in pu, f"{name}: no punching.{fam}: {pu}")
        proxies = [x for x in p["families"][fam]["services"] if x["to"] == "proxy"]
        if fam not in fams:
            check(f["kind"] == "none", f"{name} {fam}: punching {f}, the node has no {fam}")
            check(proxies == [], f"{name} {fam}: checked the proxy over {fam}: {proxies}")
            continue
        hops = f["hops"]
        check(isinstance(hops, int) and hops >= 1, f"{name} {fam}: no hop count: {f}")
        if isinstance(hops, int):
            want = "hop-limited" if hops >= 2 else ("staggered" if fam == "ipv6" else "plain")
            check(f["kind"] == want and f"{hops} hop" in f["variant"],
                  f"{name} {fam}: {hops} hops, variant {f['kind']}: {f['variant']}")
        check(proxies != [] and all(x["reachable"] for x in proxies),
              f"{name} {fam}: the proxy not reached over {fam}: {proxies}")
        print(f"{fam}: {f['variant']}; proxy {' '.join(x['endpoint'] for x in proxies)}")


def mismatch(p, declared, observed):
    text = " ".join(p["mismatch"])
    check(p["declared"]["kind"] == declared, f"declared {p['declared']['kind']}, expected {declared}")
    check(p["observed_kind"] == observed, f"observed {p['observed_kind']}, expected {observed}")
    check(f"declares {declared}" in text and observed in text,
          f"mismatch does not say 'declares {declared}' and '{observed}': {p['mismatch']}")


def field(p, path):
    v = p
    for k in path.split("."):
        v = v[int(k)] if isinstance(v, list) else v[k]
    print(json.dumps(v) if not isinstance(v, str) else v)


def main():
    cmd, path = sys.argv[1], sys.argv[2]
    with open(path) as f:
        p = json.load(f)
    if cmd == "site":
        site(p, sys.argv[3])
    elif cmd == "peers":
        peers(p)
    elif cmd == "encryption":
        encryption(p, sys.argv[3])
    elif cmd == "families":
        families(p, sys.argv[3].split(","))
    elif cmd == "mismatch":
        mismatch(p, sys.argv[3], sys.argv[4])
    elif cmd == "field":
        field(p, sys.argv[3])
    else:
        sys.exit(f"unknown command {cmd}")
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
