#!/usr/bin/env bash
# lab-monitor: `qcg-lab up --monitor` runs a real Prometheus (monitor.sh) that
# scrapes every service of the lab over the management network.  Checked
# through Prometheus's HTTP API, as an admin's dashboard reads it: every
# target is up, the alert rules of etc/qcg-alerts.yml are loaded and healthy
# and none fires; after three qcg-cat connections of known techniques
# (sym1 -> nata1 proxy, open1 -> nata1 reversed, nata1 -> open1 direct) the
# broker's successes per cluster pair and technique grew by exactly those;
# after an MPI job over the five sites (qcg-mpi-pairs) every cluster pair and
# technique the job's own table shows grew by at least the job's count there,
# and Prometheus's totals equal the broker's --stats.  Then `up` without
# --monitor removes Prometheus, its namespace and the metrics lines.
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
require_mpi_programs
command -v prometheus >/dev/null 2>&1 || skip "prometheus is not installed (scripts/install-deps)"
scratch
MON=http://198.19.255.1:9090

"$LAB" up --monitor >"$WORK/up.log" 2>&1 || { show "$WORK/up.log"; fail "qcg-lab up --monitor"; }
note "$(tail -n 1 "$WORK/up.log")"
prom_pid=$(cat "$LAB_STATE/run/prometheus.pid")

api() { ip netns exec qcg-mon curl -fsS -m 5 "$MON/api/v1/$1" "${@:2}"; }
# query PROMQL: the result vector as "labels value" lines (python3 reads the JSON).
query() {
	api query --data-urlencode "query=$1" | python3 -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
for s in r:
    m = s["metric"]
    print(",".join("%s=%s" % (k, m[k]) for k in sorted(m)), s["value"][1])'
}

# poll_s SECONDS WHAT CMD...: poll's bounded wait, once a second (each try asks
# the broker and Prometheus).
poll_s() {
	local secs=$1 what=$2 i
	shift 2
	for ((i = 0; i < secs; i++)); do
		"$@" && return 0
		sleep 1
	done
	echo "timed out after ${secs}s waiting for $what" >&2
	return 1
}

services=$(ls "$LAB_STATE"/etc/*.conf | wc -l)
# Every service a target, every target up (a scrape every 5 s: bounded wait).
targets_up() {
	api targets >"$WORK/targets.json" 2>/dev/null || return 1
	python3 - "$WORK/targets.json" "$services" <<-'PY'
		import json, sys
		t = json.load(open(sys.argv[1]))["data"]["activeTargets"]
		sys.exit(0 if len(t) == int(sys.argv[2]) and all(x["health"] == "up" for x in t) else 1)
	PY
}
poll 60 "Prometheus to see all $services services up" targets_up || {
	python3 -c 'import json,sys; [print(x["labels"].get("node"), x["scrapeUrl"], x["health"], x["lastError"]) for x in json.load(open(sys.argv[1]))["data"]["activeTargets"]]' \
		"$WORK/targets.json" >&2 || true
	fail "not every service is an up target of the lab's Prometheus"
}
note "$services targets up: $(python3 -c 'import json,sys; print(" ".join(sorted(x["labels"]["node"] + "/" + x["labels"]["job"][4:] for x in json.load(open(sys.argv[1]))["data"]["activeTargets"])))' "$WORK/targets.json")"

api rules >"$WORK/rules.json" || fail "GET /api/v1/rules"
python3 - "$WORK/rules.json" <<-'PY' || fail "the alert rules are not loaded and healthy"
	import json, sys
	rules = [r for g in json.load(open(sys.argv[1]))["data"]["groups"] for r in g["rules"]]
	bad = [r["name"] for r in rules if r.get("health") != "ok"]
	print("-- %d alert rules loaded: %s" % (len(rules), " ".join(r["name"] for r in rules)))
	sys.exit(1 if len(rules) < 7 or bad else 0)
PY
firing=$(api alerts | python3 -c 'import json,sys; print(" ".join(a["labels"]["alertname"] for a in json.load(sys.stdin)["data"]["alerts"] if a["state"] == "firing"))')
[ -z "$firing" ] || bad "alerts fire on a healthy lab: $firing"

# Prometheus caught up with the broker: its latest scrape shows the reports
# the broker's --stats counts.
reports_stat() {
	local js
	js=$("$LAB" exec broker -- qcg-broker --config "$LAB_STATE/etc/broker.conf" --stats --json \
		--url "$BROKER_URL")
	echo $(($(json_field reports_ok <<<"$js") + $(json_field reports_failed <<<"$js") + $(json_field reports_refused <<<"$js")))
}
caught_up() {
	local want
	want=$(reports_stat)
	[ "$(query 'sum(qcg_broker_reports_total)' | awk '{ print $NF }')" = "$want" ]
}
successes() { query 'sum by (from, to, technique) (qcg_broker_pair_successes_total)' | sort; }

# delta BEFORE AFTER: "from=A,to=B,technique=T N" for what grew.
delta() {
	awk 'FILENAME == ARGV[1] { b[$1] = $2; next } { d = $2 - b[$1]; if (d > 0) print $1, d }' "$1" "$2" | sort
}

# 1. Three connections of known technique, nothing else running in the lab.
poll_s 30 "Prometheus to catch up with the broker" caught_up || fail "Prometheus never shows the broker's reports"
successes >"$WORK/s0"
JOB=$(new_job monitor)
head -c 65536 /dev/urandom >"$WORK/in"
# held FROM TO TECHNIQUE: one qcg-cat connection FROM -> TO whose two ends stay
# until the broker counted its report: a report that reaches the broker after
# the target withdrew its contact is not counted (the broker no longer knows
# the target's cluster), and MPI ranks live on, unlike a qcg-cat that exits.
rank=0
held() {
	local from=$1 to=$2 tech=$3 before listener conn i
	before=$(broker_stat reports_ok)
	cat_listen "$to" "$rank" "held-$rank" --timeout 60
	listener=$BG_PID
	rm -f "$WORK/release"
	{ cat "$WORK/in"; for ((i = 0; i < 300; i++)); do [ -e "$WORK/release" ] && break; sleep 0.1; done; } |
		"$LAB" exec "$from" -- qcg-cat --job "$JOB" --rank $((rank + 1)) --json --timeout 30 \
			connect "$rank" >/dev/null 2>"$WORK/held-$rank.cerr" &
	conn=$!
	BG_PIDS+=("$conn")
	for ((i = 0; i < 150; i++)); do
		[ "$(broker_stat reports_ok)" -gt "$before" ] && break
		sleep 0.2
	done
	touch "$WORK/release"
	wait_exit "$conn" 60 || { cat "$WORK/held-$rank.cerr"; fail "$from -> $to: connect failed"; }
	wait_exit "$listener" 60 || fail "$from -> $to: the listener failed"
	cmp -s "$WORK/in" "$WORK/held-$rank.out" || fail "$from -> $to: what arrived differs"
	used=$(json_event "$WORK/held-$rank.cerr" sent | json_field technique)
	[ "$used" = "$tech" ] || fail "$from -> $to used $used, not $tech (the lab's plan table changed?)"
	rank=$((rank + 2))
}
expect=()
for t in "sym1 nata1 proxy" "open1 nata1 reversed" "nata1 open1 direct"; do
	set -- $t
	held "$1" "$2" "$3"
	expect+=("from=${1%[0-9]},technique=$3,to=${2%[0-9]} 1")
done
printf '%s\n' "${expect[@]}" | sort >"$WORK/e1"
# The reports travel helper -> frontend -> broker after each connection.
grown_as_expected() {
	caught_up || return 1
	successes >"$WORK/s1"
	delta "$WORK/s0" "$WORK/s1" >"$WORK/d1"
	cmp -s "$WORK/e1" "$WORK/d1"
}
if poll_s 30 "the 3 connections in Prometheus's counters" grown_as_expected; then
	note "qcg_broker_pair_successes_total grew by exactly the 3 connections: $(tr '\n' ';' <"$WORK/d1")"
else
	bad "successes per pair grew by $(tr '\n' ';' <"$WORK/d1"), expected $(tr '\n' ';' <"$WORK/e1")"
fi
# The setup time histogram counted them too.
n=$(query 'sum(qcg_connect_setup_seconds_count)' | awk '{ print $NF }')
total=$(awk '{ s += $2 } END { print s + 0 }' "$WORK/s1")
[ "$n" = "$total" ] && note "qcg_connect_setup_seconds counts every success ($n)" ||
	bad "qcg_connect_setup_seconds_count is $n, successes $total"

# 2. An MPI job over the five sites; its table says which pair used what.
timeout -k 10 180 "$LAB" mpirun -- "$progs/qcg-mpi-pairs" >"$WORK/mpi.out" 2>&1 ||
	{ show "$WORK/mpi.out" 30; fail "qcg-mpi-pairs over the five sites"; }
grep -q "^PASS pairs" "$WORK/mpi.out" || { show "$WORK/mpi.out" 30; fail "qcg-mpi-pairs: no PASS"; }
poll_s 30 "Prometheus to catch up with the job's reports" caught_up || fail "Prometheus never shows the broker's reports"
successes >"$WORK/s2"
delta "$WORK/s1" "$WORK/s2" >"$WORK/d2"
# Pair lines "I -> J  TECHNIQUE ...": the initiator's and target's clusters.
python3 - "$WORK/mpi.out" >"$WORK/e2" <<-'PY'
	import re, sys, collections
	text = open(sys.argv[1]).read()
	node = dict(kv.split("=") for kv in re.search(r"^ranks:(.*)$", text, re.M).group(1).split())
	count = collections.Counter()
	for i, j, tech in re.findall(r"^(\d+) -> (\d+) +(direct|reversed|traversing|holepunch|proxy) ", text, re.M):
	    count[(node[i].rstrip("0123456789"), node[j].rstrip("0123456789"), tech)] += 1
	for (f, t, tech), n in sorted(count.items()):
	    print("from=%s,technique=%s,to=%s %d" % (f, tech, t, n))
PY
note "the job's pairs: $(tr '\n' ';' <"$WORK/e2")"
note "Prometheus, grown since: $(tr '\n' ';' <"$WORK/d2")"
[ -s "$WORK/e2" ] || bad "no pair of the job was carried by btl_qcg"
while read -r key n; do
	got=$(awk -v k="$key" '$1 == k { print $2 }' "$WORK/d2")
	# A plan of the broker is reported; a direct plan from a frontend's cache
	# may not be (the broker did not issue it).
	case $key in *technique=direct,*) continue ;; esac
	[ "${got:-0}" -ge "$n" ] || bad "$key: the job made $n such connections, Prometheus counted ${got:-0}"
done <"$WORK/e2"
# Prometheus's totals are the broker's own.
ok_prom=$(query 'sum(qcg_broker_reports_total{result="ok"})' | awk '{ print $NF }')
ok_stat=$("$LAB" exec broker -- qcg-broker --config "$LAB_STATE/etc/broker.conf" --stats --json \
	--url "$BROKER_URL" | json_field reports_ok)
sum_pairs=$(awk '{ s += $2 } END { print s + 0 }' "$WORK/s2")
[ "$ok_prom" = "$ok_stat" ] && [ "$sum_pairs" = "$ok_stat" ] &&
	note "successful reports: Prometheus $ok_prom, per pair $sum_pairs, broker --stats $ok_stat" ||
	bad "successful reports: Prometheus $ok_prom, per pair $sum_pairs, broker --stats $ok_stat"
# Every daemon's build info, one version.
versions=$(query 'count by (version) (qcg_build_info)')
[ "$(wc -l <<<"$versions")" = 1 ] && [ "$(awk '{ print $NF }' <<<"$versions")" = "$services" ] &&
	note "qcg_build_info: $versions" || bad "qcg_build_info: $versions"

# 3. Without --monitor: Prometheus, its namespace and the metrics lines go.
"$LAB" up >"$WORK/up2.log" 2>&1 || { show "$WORK/up2.log"; fail "qcg-lab up (without --monitor)"; }
ip netns list | grep -q '^qcg-mon\b' && bad "qcg-mon is left after up without --monitor"
# (A zombie waiting for its reaper is gone.)
[ "$(cat "/proc/$prom_pid/comm" 2>/dev/null)" = prometheus ] &&
	[ "$(awk '{ print $3 }' "/proc/$prom_pid/stat" 2>/dev/null)" != Z ] && bad "the lab's prometheus (pid $prom_pid) runs after up without --monitor"
grep -l metrics-listen "$LAB_STATE"/etc/*.conf >/dev/null 2>&1 && bad "metrics-listen left in the configs"
[ "$failed" = 0 ] || fail "$failed checks failed"
note "Prometheus in the lab scraped every service; its counters match the connections made"
