#!/usr/bin/env bash
# lab-grid-page: the grid's picture an admin opens in a browser (qcg-broker
# --grid --html, docs/admin.md section 10) after an MPI job over the five
# sites (qcg-mpi-pairs), rendered by headless Chromium
# (tests/lib/chromium_page.py): the page loads without a console error,
# every site of the lab is drawn on it, inside the page, with its kind and
# its two compute nodes; every cluster pair the job connected through the
# broker's plans has its arrow, with a technique the job used there; and each
# arrow says what `--grid --json` says of that pair (the technique that
# worked last, its setup time, successes over attempts).
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
require_mpi_programs
command -v chromium >/dev/null 2>&1 || skip "chromium is not installed (scripts/install-deps)"
scratch

timeout -k 10 180 "$LAB" mpirun -- "$progs/qcg-mpi-pairs" >"$WORK/mpi.out" 2>&1 ||
	{ show "$WORK/mpi.out" 30; fail "qcg-mpi-pairs over the five sites"; }
grep -q "^PASS pairs" "$WORK/mpi.out" || { show "$WORK/mpi.out" 30; fail "qcg-mpi-pairs: no PASS"; }

# The reports travel helper -> frontend -> broker after each connection: wait
# until the broker's count stands still for 2 s, so that the page and the
# JSON below show the same outcomes.
last=-1 same=0
for ((i = 0; i < 30 && same < 2; i++)); do
	now=$(broker_stat reports_ok)
	[ "$now" = "$last" ] && same=$((same + 1)) || same=0
	last=$now
	sleep 1
done
[ "$same" -ge 2 ] || fail "the broker's reports_ok still moves after 30 s"

grid() { "$LAB" exec broker -- qcg-broker --config "$LAB_STATE/etc/broker.conf" --url "$BROKER_URL" --grid "$@"; }
grid --html "$WORK/grid.html" >"$WORK/html.out" 2>&1 || { show "$WORK/html.out"; fail "qcg-broker --grid --html"; }
note "$(cat "$WORK/html.out")"
grid --json >"$WORK/grid.json" || fail "qcg-broker --grid --json"
timeout -k 5 90 python3 "$LAB_SRC/../lib/chromium_page.py" "$WORK/grid.html" \
	--screenshot "$WORK/grid.png" >"$WORK/page.json" || fail "Chromium did not render the page"

python3 - "$WORK/page.json" "$WORK/grid.json" "$WORK/mpi.out" <<-'PY' || fail "the page does not show the lab's grid"
	import collections, json, re, sys
	page, grid = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
	text = open(sys.argv[3]).read()
	bad = []
	if page["errors"]:
	    bad.append("Chromium logged: %s" % page["errors"])
	kinds = {"open": "open", "fw": "firewalled", "nata": "nat", "natb": "nat", "sym": "symnat"}
	drawn = {c["name"]: c for c in page["clusters"]}
	if set(drawn) != set(kinds):
	    bad.append("clusters drawn: %s, the lab's: %s" % (sorted(drawn), sorted(kinds)))
	for name, c in drawn.items():
	    inside = (c["x"] >= 0 and c["y"] >= 0 and c["x"] + c["width"] <= page["width"]
	              and c["y"] + c["height"] <= page["height"] and c["width"] > 20)
	    if not inside:
	        bad.append("%s is not drawn inside the page: %s" % (name, c))
	    if c["kind"] != kinds.get(name) or name not in c["text"] or "2 nodes" not in c["text"]:
	        bad.append("%s: kind %s, text %r" % (name, c["kind"], c["text"]))
	# What the job connected through the broker's plans (a direct plan from a
	# frontend's cache is not reported, so not on the page).
	node = dict(kv.split("=") for kv in re.search(r"^ranks:(.*)$", text, re.M).group(1).split())
	# A pair may also have connected direct where a node takes it (nata2,
	# in nata's IPv6 open range): direct is then one of the job's there.
	used, every = collections.defaultdict(set), collections.defaultdict(set)
	for i, j, tech in re.findall(r"^(\d+) -> (\d+) +(direct|reversed|traversing|holepunch|proxy) ", text, re.M):
	    f, t = node[i].rstrip("0123456789"), node[j].rstrip("0123456789")
	    if f != t:
	        every[(f, t)].add(tech)
	        if tech != "direct":
	            used[(f, t)].add(tech)
	arrows = {(p["from"], p["to"]): p for p in page["pairs"]}
	for pair, techs in sorted(used.items()):
	    a = arrows.get(pair)
	    if a is None or a["technique"] not in every[pair]:
	        bad.append("%s -> %s: the job used %s, the page shows %s" % (*pair, sorted(techs), a))
	if not used:
	    bad.append("the job made no connection the broker planned")
	# Each arrow as --grid --json says: the technique that worked last, its
	# setup time, successes over attempts of every technique.
	per = collections.defaultdict(list)
	for o in grid["outcomes"]:
	    per[(o["from"], o["to"])].append(o)
	if set(per) != set(arrows):
	    bad.append("pairs in --grid --json %s, on the page %s" % (sorted(per), sorted(arrows)))
	for pair, os_ in per.items():
	    ok = sum(o["ok"] for o in os_)
	    attempts = sum(o["ok"] + o["failed"] for o in os_)
	    good = [o for o in os_ if o["last_ok"]]
	    if good:
	        last = min(good, key=lambda o: o["age_s"])
	        want = "%s %d ms %d%%" % (last["technique"], last["last_setup_ms"], ok * 100 // attempts)
	    else:
	        want = "failed %d%%" % (ok * 100 // attempts if attempts else 0)
	    got = arrows.get(pair, {}).get("label")
	    # Two techniques that worked within the same second: either is the last.
	    if got != want and not (good and got and got.split()[0] in {o["technique"] for o in good if o["age_s"] == last["age_s"]}):
	        bad.append("%s -> %s: the page says %r, --grid --json %r" % (*pair, got, want))
	for b in bad:
	    print("   ", b, file=sys.stderr)
	print("-- page: %d clusters, %d arrows (%s); the job's planned pairs: %s" % (
	    len(drawn), len(arrows), "; ".join("%s->%s %s" % (f, t, a["label"]) for (f, t), a in sorted(arrows.items())),
	    " ".join("%s->%s:%s" % (f, t, "/".join(sorted(v))) for (f, t), v in sorted(used.items()))))
	sys.exit(1 if bad else 0)
PY
[ -s "$WORK/grid.png" ] || fail "no screenshot of the page"
note "the page loads in Chromium without errors and shows the lab's five sites and the job's pairs"
