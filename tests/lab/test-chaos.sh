#!/usr/bin/env bash
# lab-chaos: a job of 10 ranks over the five sites streams checksummed
# messages between every pair of ranks (qcg-mpi-resend: every message once,
# in order, intact) while the grid's services fail in turn (issue 19):
#
#   open1 open2   fw1 fw2   nata1 nata2   natb1 natb2   sym1 sym2   (one rank each)
#        direct, reversed, proxy (two proxies: lab, lab2) between them
#
#   faults, one after the other:  a helper killed -9 and started again;
#   a frontend stopped and started; the broker stopped and started; the
#   proxy `lab` killed -9 (lab2 takes its pairs, and the launch connections
#   of mpirun, on nata1, through it: qcg-launch resumes them); conntrack -F on
#   nata's router (port-keeping NAT) and sym's (symmetric NAT: the connections
#   through it break; btl_qcg makes them again, qcg-launch resumes its own).
#   CHAOS_FULL=1: every helper of a node with a rank, every frontend, and
#   conntrack -F on natb's and fw's (stateful firewall) routers too.
#
# After each fault: every pair of ranks must carry data sent after the fault
# (a whole all-to-all round) within 180 s, every connection of it that broke must
# be re-established (btl_qcg_verbose 1 says so), and a new connection to the
# faulted part (qcg-cat, a job of its own, tried meanwhile) must succeed.
# Printed per fault: ms until that round was in, ms until a new connection
# worked, breaks, ms until the slowest broken connection carried data again,
# frames sent again.  At the end the job must PASS: no
# message lost, duplicated, reordered or corrupted.  A fault the job does not
# survive is reported (JOB LOST) and a new job takes the next faults; the test
# fails for it unless CHAOS_KNOWN_FATAL names it (comma-separated prefixes of
# fault names; none by default, see KNOWN_FATAL).  Everything is started again and the lab put back
# to one proxy at the end, whatever happened.
. "$(dirname "$0")/test-lib.sh"
require_lab
require_services
command -v mpirun >/dev/null 2>&1 || skip "mpirun is not installed"
progs=$QCG_BUILD_DIR/tests/mpi
[ -x "$progs/qcg-mpi-resend" ] || skip "qcg-mpi-resend is not built (needs libopenmpi-dev)"
[ -r "$LAB_STATE/etc/proxy.conf" ] || skip "the lab runs no qcg-proxy"
command -v conntrack >/dev/null 2>&1 || skip "conntrack is not installed"
scratch
STOP=/tmp/qcg-chaos-stop.$$
restore() {
	local s
	rm -f "$STOP"
	for s in broker proxy proxy2 $(for n in $LAB_COMPUTE; do echo "$n-helper"; done) \
		open-frontend fw-frontend nata-frontend natb-frontend sym-frontend; do
		"$LAB" service start "$s" >/dev/null 2>&1 || true
	done
	QCG_LAB_PROXIES=1 "$LAB" up >/dev/null 2>&1 || echo "lab-chaos: could not put the lab back (qcg-lab up)" >&2
}
trap 'scratch_cleanup; restore' EXIT

# Two proxies, both beating to the broker.
QCG_LAB_PROXIES=2 "$LAB" up >/dev/null || fail "qcg-lab up with two proxies failed"
grid_json() {
	"$LAB" exec broker -- qcg-broker --config "$LAB_STATE/etc/broker.conf" --grid --json \
		--url "$BROKER_URL" 2>/dev/null
}
# proxy_field NAME KEY: from the broker's grid picture.
proxy_field() {
	grid_json | grep -o "{\"name\":\"$1\",[^}]*}" | json_field "$2"
}
# slow_poll SECONDS WHAT CMD...: poll for checks that cost a process or more,
# once a second.
slow_poll() {
	local secs=$1 what=$2 t0
	shift 2
	t0=$(ms)
	while [ $(($(ms) - t0)) -lt $((secs * 1000)) ]; do
		"$@" && return 0
		sleep 1
	done
	echo "timed out after ${secs}s waiting for $what" >&2
	return 1
}
both_alive() { [ "$(proxy_field lab state)" = alive ] && [ "$(proxy_field lab2 state)" = alive ]; }
slow_poll 30 "both proxies alive at the broker" both_alive || fail "the broker does not see both proxies alive: $(grid_json)"

if [ "${CHAOS_FULL:-0}" = 1 ]; then
	helpers="$LAB_COMPUTE" frontends="open fw nata natb sym" routers="nata natb fw sym"
else
	# Two NAT flushes (a port-keeping one may stall the job for up to two
	# minutes: TCP backoff): nata's, and sym's, which the launch connections
	# through it (mpirun on nata1) must survive.
	helpers="nata1" frontends="natb" routers="nata sym"
fi

# start_job: the job in the background (mpirun on $CHAOS_FROM, default
# nata1: the launch connections to sym's agents go through a proxy, which is
# killed; from open1 the launch connections are reversed, through no proxy),
# its output in $JOB_OUT; returns once all 45 pairs of ranks are connected.
CHAOS_FROM=${CHAOS_FROM:-nata1}
JOBS=0
start_job() {
	JOBS=$((JOBS + 1))
	JOB_OUT=$WORK/job$JOBS.out
	rm -f "$STOP"
	QCG_MPIRUN_ARGS="--mca btl_qcg_verbose 1" timeout -k 10 1500 "$LAB" mpirun \
		--from "$CHAOS_FROM" -- "$progs/qcg-mpi-resend" 100000000 -1 "$STOP" >"$JOB_OUT" 2>&1 &
	job=$!
	BG_PIDS+=("$job")
	slow_poll 120 "job $JOBS: all pairs connected" all_connected ||
		{ show "$JOB_OUT" 30; fail "job $JOBS: not all pairs connected"; }
	note "job $JOBS running; proxied pairs: lab $(proxy_field lab pairs), lab2 $(proxy_field lab2 pairs) (at their last beats)"
}
all_connected() { [ "$(grep -c ' -> rank [0-9]* (host ' "$JOB_OUT" || true)" -ge 45 ]; }
start_job

# new_conn FROM TO: until a new connection FROM -> TO (qcg-cat, a job of its
# own) carries a line, trying for 90 s; sets PROBE_TECH.
NEWJOB=0
new_conn() {
	local from=$1 to=$2 t0 job
	t0=$(ms)
	while [ $(($(ms) - t0)) -lt 90000 ]; do
		NEWJOB=$((NEWJOB + 1))
		job=$(new_job "chaos$NEWJOB")
		rm -f "$WORK/probe.out" "$WORK/probe.err"
		BG_NAME=probe run_bg "$to" qcg-cat --job "$job" --rank 0 --json --timeout 20 listen
		local listener=$BG_PID i
		for ((i = 0; i < 100; i++)); do
			grep -q '"event":"listening"' "$WORK/probe.err" 2>/dev/null && break
			kill -0 "$listener" 2>/dev/null || break
			sleep 0.1
		done
		if echo "chaos $job" | "$LAB" exec "$from" -- qcg-cat --job "$job" --rank 1 --json \
			--timeout 20 connect 0 >/dev/null 2>"$WORK/probe.cerr" &&
			wait_exit "$listener" 30 && grep -qx "chaos $job" "$WORK/probe.out"; then
			PROBE_TECH=$(json_event "$WORK/probe.cerr" sent | json_field technique)
			return 0
		fi
		kill "$listener" 2>/dev/null || true
		wait "$listener" 2>/dev/null || true
		sleep 1
	done
	cat "$WORK/probe.cerr" "$WORK/probe.err" >&2
	return 1
}

# progressed FROM_LINE AFTER_LINE: every pair of ranks carried data since the
# fault, and every connection that broke since line FROM_LINE of the job's
# output (the fault began after it) is re-established.  Rank 0 prints "round N"
# once its messages of round N are in (at most once a second), then tells the
# others to go on; each rank sends round N+1 only after all of its round N
# came.  So the first line after AFTER_LINE (the fault is done), round A, may
# count messages sent before the fault, every message of round A+1 was sent
# after it, and a line for round A+2 or later says every rank received all of
# round A+1.  (One round line was taken for this before: a pair stuck since
# the fault went unseen, and the job hung at its end instead.)
since() { tail -n +"$(($1 + 1))" "$JOB_OUT"; }
count() { since "$1" | grep -c "$2" || true; }
progressed() {
	local rounds
	rounds=$(since "$2" | sed -n 's/^round \([0-9]*\)$/\1/p')
	[ -n "$rounds" ] && [ "$(tail -n 1 <<<"$rounds")" -ge $(($(head -n 1 <<<"$rounds") + 2)) ] &&
		[ "$(count "$1" 're-established')" -ge "$(count "$1" 'broken (.*): reconnecting')" ]
}

REPORT=() LOST=()
# Fault classes the job is known not to survive (the report names them; the
# test asserts the others).  Comma-separated prefixes of fault names.
# None known: a symmetric NAT that forgets (conntrack -F sym) lost the job
# until the launch connections were resumed (qcg-launch), and the death of a
# proxy that carried mpirun's launch connections too.
KNOWN_FATAL=${CHAOS_KNOWN_FATAL-}
known_fatal() {
	local k ks
	IFS=, read -r -a ks <<<"$KNOWN_FATAL"
	for k in "${ks[@]}"; do [ -n "$k" ] && [[ $1 == "$k"* ]] && return 0; done
	return 1
}
# job_lost NAME WHY: the job did not survive fault NAME: reported (and a
# failure unless known), then a new job for the next faults.
job_lost() {
	echo "-- LOST: the job did not survive '$1': $2" >&2
	show "$JOB_OUT" 15
	known_fatal "$1" || LOST+=("$1")
	REPORT+=("$(printf '%-26s %s' "$1" "JOB LOST: $2")")
	kill "$job" 2>/dev/null || true
	wait "$job" 2>/dev/null || true
	start_job
}
# fault NAME PROBE_FROM PROBE_TO CMD...: runs CMD (the fault), then measures.
fault() {
	local name=$1 from=$2 to=$3 mark after t0 t_new t_job breaks slowest again
	shift 3
	mark=$(wc -l <"$JOB_OUT")
	t0=$(ms)
	"$@" >/dev/null || fail "$name: the fault itself failed ($*)"
	after=$(wc -l <"$JOB_OUT")
	# The new connection is tried meanwhile: both are timed from the fault.
	rm -f "$WORK/new.res"
	(new_conn "$from" "$to" && echo "$(($(ms) - t0)) $PROBE_TECH" >"$WORK/new.res") &
	local prober=$!
	BG_PIDS+=("$prober")
	if ! slow_poll 180 "$name: every pair of ranks carrying data" progressed "$mark" "$after"; then
		wait "$prober" 2>/dev/null || true
		job_lost "$name" "not every pair of ranks carried data within 180 s"
		return 0
	fi
	t_job=$(($(ms) - t0))
	wait "$prober" 2>/dev/null || true
	[ -s "$WORK/new.res" ] || fail "$name: no new connection $from -> $to within 90 s"
	read -r t_new PROBE_TECH <"$WORK/new.res"
	kill -0 "$job" 2>/dev/null || { job_lost "$name" "mpirun ended: $(tail -n 1 "$JOB_OUT")"; return 0; }
	breaks=$(count "$mark" 'broken (.*): reconnecting')
	slowest=$(since "$mark" | sed -n 's/.*re-established by [a-z]* in \([0-9.]*\) ms.*/\1/p' | sort -n | tail -n 1)
	again=$(since "$mark" | sed -n 's/.*: \([0-9]*\) frames sent again (.*/\1/p' | awk '{ s += $1 } END { print s + 0 }')
	REPORT+=("$(printf '%-24s %7s %7s %6s %9s %6s  %s' "$name" "$t_job" "$t_new" "$breaks" "${slowest:--}" "$again" "$from->$to $PROBE_TECH")")
	note "${REPORT[-1]}"
}

restart() { "$LAB" service "$2" "$1" && "$LAB" service start "$1"; }
flush_router() { ip netns exec "qcg-r-$1" conntrack -F 2>/dev/null; }
# A node of another site than NODE's, to connect from.
other() { case $1 in open*) echo nata1 ;; *) echo open1 ;; esac; }

HEADER=$(printf '%-24s %7s %7s %6s %9s %6s  %s' fault job_ms new_ms breaks reconn_ms resent "(probe: from->to technique)")
note "$HEADER"
for n in $helpers; do fault "helper $n kill -9" "$(other "$n")" "$n" restart "$n-helper" kill; done
for s in $frontends; do fault "frontend $s restart" "$(other "${s}1")" "${s}1" restart "$s-frontend" stop; done
fault "broker restart" natb1 nata1 restart broker stop
proxy_was=$(proxy_field lab pairs)
fault "proxy lab kill -9" natb1 nata1 "$LAB" service kill proxy
dead() { [ "$(proxy_field lab state)" = dead ]; }
slow_poll 30 "the broker sees proxy lab dead" dead ||
	fail "proxy lab killed, still '$(proxy_field lab state)' at the broker; --grid says: $("$LAB" exec broker -- \
		qcg-broker --config "$LAB_STATE/etc/broker.conf" --grid --url "$BROKER_URL" 2>&1 | tail -n 12)"
note "proxy lab dead at the broker (it relayed $proxy_was pairs); lab2 relays $(proxy_field lab2 pairs)"
"$LAB" service start proxy >/dev/null || fail "proxy lab did not start again"
for r in $routers; do
	case $r in nata | natb) from=open1 to=${r}1 ;; *) from=nata1 to=${r}1 ;; esac
	fault "conntrack -F $r" "$from" "$to" flush_router "$r"
done

touch "$STOP"
rc=0
# CHAOS_KEEP=DIR: the jobs' whole outputs are copied there (hunting a rare
# failure needs the passing runs' too).
keep_outputs() { [ -z "${CHAOS_KEEP:-}" ] || cp "$WORK"/job*.out "$CHAOS_KEEP"/ 2>/dev/null || true; }
# hang_report: what a job that does not end is doing, before it is killed:
# its output but the round lines, its agents' logs, each of the user's
# processes (state, kernel wait, stacks; a rank's btl_qcg endpoints: state,
# frames sent/acked/written, received, ack owed), and their TCP sockets.
hang_report() {
	local n pid cmd dir
	echo "== job $JOBS output but the round lines (last 100); its last round: $(grep '^round' "$JOB_OUT" | tail -n 1)"
	grep -v '^round [0-9]*$' "$JOB_OUT" | tail -n 100
	dir=$(ls -dt "$LAB_STATE"/mpirun.* 2>/dev/null | head -n 1)
	for n in ${dir:+"$dir"/agent-*.log}; do
		echo "== $(basename "$n") (last 15)"
		tail -n 15 "$n"
	done
	cat >"$WORK/eps.gdb" <<-'EOF'
		set $m = btl_qcg_active
		set $i = 0
		while $m != 0 && $i < $m->neps
		  set $e = $m->eps[$i]
		  if $e != 0
		    printf "ep %u: state %d fd %d resumed %d sent %lu acked %lu written %lu unsent %lu rx %lu ack_sent %lu owed %d ctl %d/%lu out %d staged %lu/%lu broken_since %lu breaks %lu\n", $e->vpid, $e->state, $e->fd, $e->resumed, $e->sq.sent, $e->sq.acked, $e->written_seq, $e->unsent ? $e->unsent->rq.seq : 0, $e->rx_seq, $e->ack_sent, $e->ack_owed, $e->ctl_pending, $e->ctl_sent, $e->want_out, $e->tls_out_off, $e->tls_out_len, $e->broken_since_us, $e->breaks
		  end
		  set $i = $i + 1
		end
		thread apply all bt 12
	EOF
	for n in $LAB_COMPUTE; do
		for pid in $(ip netns pids "qcg-$n" 2>/dev/null); do
			[ "$(stat -c %u "/proc/$pid" 2>/dev/null)" = "$LAB_UID" ] || continue
			cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-100)
			echo "== $n $pid $(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) $(cat "/proc/$pid/wchan" 2>/dev/null): $cmd"
			command -v gdb >/dev/null 2>&1 || continue
			case $cmd in
			*qcg-mpi-resend* | *qcg-launch* | *qcg-agent* | *orted* | *mpirun*)
				timeout 30 gdb -p "$pid" -batch -nx -x "$WORK/eps.gdb" 2>&1 |
					grep -E '^(ep |#|Thread )' | head -n 80 ;;
			esac
		done
		echo "== $n: TCP sockets of the user's processes"
		ip netns exec "qcg-$n" ss -tnpio 2>/dev/null | grep -A1 -E 'qcg-|orted|mpirun' | head -n 80
	done
}
# A job that does not end shows its output and who is left (wait_exit alone
# would fail without them).
job_ended() { ! kill -0 "$job" 2>/dev/null; }
slow_poll 300 "job $JOBS to end after its stop file" job_ended || {
	show "$JOB_OUT" 60
	hang_report >"$WORK/hang.txt" 2>&1
	cat "$WORK/hang.txt" >&2
	keep_outputs
	fail "job $JOBS still runs 300 s after its stop file"
}
wait_exit "$job" 10 || rc=$?
keep_outputs
grep -q '^PASS resend' "$JOB_OUT" && [ "$rc" -eq 0 ] ||
	{ show "$JOB_OUT" 40; fail "job $JOBS did not pass (exit $rc)"; }
note "job $JOBS: $(grep '^PASS resend' "$JOB_OUT")"
# btl_qcg's lines are text: a broken encrypted channel's reason (its TLS
# session's) was printed after the session was freed, as heap bytes.
bad=$(grep -ah 'btl_qcg' "$WORK"/job*.out | LC_ALL=C grep -a '[^[:print:]]' | head -n 3 | cat -v) || true
[ -z "$bad" ] || fail "btl_qcg printed lines that are not text: $bad"
note "summary (job_ms: until every pair of ranks carried a round sent after the fault; new_ms: until a new connection worked; breaks: connections of the job that broke; reconn_ms: the slowest of them until it carried data again; resent: frames sent again):"
note "$HEADER"
for line in "${REPORT[@]}"; do note "$line"; done
[ ${#LOST[@]} -eq 0 ] || fail "the job did not survive: ${LOST[*]}"
echo "PASS lab-chaos: ${#REPORT[@]} faults, $JOBS job(s), no message lost, duplicated or corrupted"
