#!/usr/bin/env bash
#
# mpi-loopback: Open MPI jobs over btl_qcg against the real daemons on
# loopback, with a throw-away CA.  vader is left out (--mca btl self,qcg), so
# btl_qcg carries the same-host traffic of the 4 ranks.
#
#   rank 0..3 (mpirun -np 4, btl self,qcg) <===== TCP, direct, lazily =====> each other
#        `--unix--> qcg-helper c1/n1 --mTLS--> qcg-frontend c1 127.0.0.1:18402
#                                                  --mTLS--> qcg-broker 127.0.0.1:18401
#
# Ports 18400-18499 belong to these tests: broker 18401, frontends 18402-18405
# (clusters c1-c4), listening ranges n1 18450-18474, n2 18475-18486, n3
# 18487-18499, n4 18700-18719 (18410-18449 are helper-punch's and the
# reflector tests').  Every wait is bounded and waits on something
# observable (a port, the helper's status, an exit).
#
#   test-loopback.sh BUILD_DIR SRC_DIR      exit 0 passed, 1 failed, 77 skipped

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)

# A failed check shows the last 40 lines of mpirun's output; the cleanup, 30 of each log.
fail_lines=40 log_lines=30
# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"

btl=$build/btl_qcg/mca_btl_qcg.so
progs=$build/tests/mpi
port_b=18401 port_f=18402 low=18450 high=18474

need_commands mpirun ompi_info
for f in "$helper" "$frontend" "$broker" "$certs" "$btl"; do
	[[ -e $f ]] || { echo "$f not built: skipping"; exit 77; }
done
need_commands ss

ompi_dir=$(ompi_info --path pkglibdir 2>/dev/null | sed -n 's/.*Pkglibdir: *//p')
component_path=$build/btl_qcg${ompi_dir:+:$ompi_dir}

grid_workdir qcg-mpi

# --- the grid -------------------------------------------------------------
grid_one_node $port_b $port_f $low-$high

export QCG_HELPER_SOCKET=$work/helper.sock
# The job (btl_qcg's grid job is "$QCG_JOB.m.<Open MPI's job id>") and its secret.
QCG_JOB=mpi-loopback-$(od -An -tx1 -N8 /dev/urandom | tr -d ' \n')
QCG_JOB_SECRET=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
export QCG_JOB QCG_JOB_SECRET
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI 5's mpirun hands the component path to PMIx as well, which then
# names every file there that is not a PMIx component ("bad prefix"); none
# of that is ours to check (Open MPI 4.1 does not pass it on).
export PMIX_MCA_mca_base_component_show_load_errors=none
# Under the sanitizer build the test programs carry ASan (any error aborts
# the rank, so the job fails); leak checking is off: Open MPI leaves much
# allocated at exit, and its frames are in every stack of ours too.
# The daemons above were started with the caller's ASAN_OPTIONS (leaks checked);
# the MPI processes get leak checking off on top of them (the last setting wins).
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
# A default that a test's own --mca overrides.
export OMPI_MCA_btl_qcg_connect_timeout=20000
# Every job's ranks yield when idle: spinning beside the other tests' jobs
# on 2 cores, a 10-lap ring took 1.8 s a lap and its job ran past its
# timeout (a CI failure of the sanitizer build).
export OMPI_MCA_mpi_yield_when_idle=1

# run_mpi SECONDS NP BTLS ARGS... : mpirun with the component path; status in $rc.
run_mpi() {
	local secs=$1 np=$2 btls=$3
	shift 3
	rc=0
	timeout -k 5 "$secs" mpirun --oversubscribe -np "$np" --bind-to none \
		--mca mca_base_component_path "$component_path" --mca pml ob1 --mca btl "$btls" \
		-x QCG_JOB -x QCG_JOB_SECRET -x QCG_HELPER_SOCKET -x ASAN_OPTIONS \
		"$@" >"$out" 2>&1 || rc=$?
}

# --- the component loads --------------------------------------------------
# ompi_info is not built with the sanitizer: it needs ASan preloaded to load
# a sanitizer build of the component.
preload=""
# grep reads all of ldd's output: with -q it may exit first, and pipefail then sees
# ldd's SIGPIPE (no preload; every ompi_info of an ASan build failed).
if ldd "$btl" | grep libasan >/dev/null; then preload=$(gcc -print-file-name=libasan.so); fi
if OMPI_MCA_mca_base_component_path=$component_path LD_PRELOAD=$preload ompi_info >"$out" 2>&1 &&
	grep -q "MCA btl: qcg" "$out"; then
	pass "ompi_info lists 'MCA btl: qcg' with the build's component path"
else fail "ompi_info lists 'MCA btl: qcg' with the build's component path"; fi
# What a user sets is shown at ompi_info's default level (1); the connection
# log, a developer's tool, only with --level 9.
params() { OMPI_MCA_mca_base_component_path=$component_path LD_PRELOAD=$preload \
	ompi_info --param btl qcg "$@" 2>&1 | sed -n 's/.*parameter "\(btl_qcg_[a-z_]*\)".*/\1/p' | sort | tr '\n' ' '; }
shown=$(params) all=$(params --level 9)
if [[ $shown == "btl_qcg_cluster_peers btl_qcg_connect_timeout btl_qcg_encrypt btl_qcg_exclusivity btl_qcg_local_peers btl_qcg_verbose " &&
	$all == *btl_qcg_conn_log* && $all == *btl_qcg_eager_limit* && $all == *btl_qcg_max_connects* ]]; then
	pass "ompi_info --param btl qcg: cluster_peers, connect_timeout, encrypt, exclusivity, local_peers, verbose; conn_log, max_connects at --level 9"
else
	echo "(default level: $shown; level 9: $all)" >"$out"
	fail "ompi_info --param btl qcg: cluster_peers, connect_timeout, encrypt, exclusivity, local_peers, verbose; conn_log, max_connects at --level 9"
fi

# --- the MPI test programs over btl_qcg -------------------------------------
for prog in allpairs ring anysource alltoall "firstsend --all-qcg"; do
	name=${prog%% *}
	t0=$(ms)
	# shellcheck disable=SC2086
	run_mpi 120 4 self,qcg "$progs/qcg-mpi-$name" ${prog#"$name"}
	if [[ $rc -eq 0 ]] && grep -q "^PASS $name" "$out"; then
		pass "$name over self,qcg, 4 ranks ($(($(ms) - t0)) ms): $(grep "^PASS" "$out" | cut -c1-110)"
	else echo "(exit $rc)" >>"$out"; fail "$name over self,qcg, 4 ranks"; fi
done

# --- which technique connected each pair, verbose lines ----------------------
run_mpi 60 4 self,qcg --mca btl_qcg_verbose 1 "$progs/qcg-mpi-pairs"
if [[ $rc -eq 0 ]] && grep -q "^PASS pairs" "$out" && grep -q "summary: direct 6$" "$out"; then
	pass "pairs: all 6 pairs 'direct' through btl_qcg"
else echo "(exit $rc)" >>"$out"; fail "pairs: all 6 pairs 'direct' through btl_qcg"; fi
# One line per connection end: 6 pairs x 2 ends, each naming technique and setup time.
n=$(grep -cE '^(\[[^]]*\] )?btl_qcg: rank [0-3] (->|<-) rank [0-3] \(host .*\): direct, setup [0-9.]+ ms' "$out" || true)
if [[ $n -eq 12 ]]; then pass "btl_qcg_verbose 1: 12 lines 'rank A -> rank B (host H): direct, setup T ms'"
else echo "($n lines)" >>"$out"; fail "btl_qcg_verbose 1: 12 lines 'rank A -> rank B (host H): direct, setup T ms'"; fi

# --- encrypted channels (btl_qcg_encrypt always; one cluster is plain by default) --
n=$(grep -cE 'btl_qcg: rank [0-3] (->|<-) rank [0-3] \(host .*\): direct, setup .*, plain$' "$out" || true)
if [[ $n -eq 12 ]]; then pass "one cluster, btl_qcg_encrypt inter-site (default): 12 channel ends plain"
else echo "($n lines)" >>"$out"; fail "one cluster, btl_qcg_encrypt inter-site (default): 12 channel ends plain"; fi
t0=$(ms)
run_mpi 120 4 self,qcg --mca btl_qcg_encrypt always --mca btl_qcg_verbose 1 "$progs/qcg-mpi-allpairs"
n=$(grep -cE 'btl_qcg: rank [0-3] (->|<-) rank [0-3] \(host .*\): direct, setup .*, tls-(user|kernel)' "$out" || true)
if [[ $rc -eq 0 ]] && grep -q "^PASS allpairs" "$out" && [[ $n -eq 12 ]]; then
	pass "btl_qcg_encrypt always: allpairs intact, 12 channel ends name their TLS path ($(($(ms) - t0)) ms)"
else echo "(exit $rc, $n TLS lines)" >>"$out"; fail "btl_qcg_encrypt always: allpairs over TLS"; fi
# Frames v2 (sequence numbers, acks, resend) over TLS: every reset loses what
# the session had not sent; the resend makes up for it.
run_mpi 240 4 self,qcg --mca btl_qcg_encrypt always --mca btl_qcg_test_break_every 40 \
	--mca btl_qcg_verbose 1 "$progs/qcg-mpi-resend" 10
breaks=$(grep -c "broken (btl_qcg_test_break_every)" "$out" || true)
n=$(grep -cE 'btl_qcg: rank [0-3] (->|<-) rank [0-3] \(host .*\): direct, setup .*, tls-(user|kernel)' "$out" || true)
if [[ $rc -eq 0 ]] && grep -q "^PASS resend" "$out" && ((breaks >= 10 && n >= 12)); then
	pass "btl_qcg_encrypt always: resend over TLS ($n encrypted channel ends), $breaks resets, every message once, in order, intact"
else echo "(exit $rc, $breaks breaks, $n TLS lines)" >>"$out"; fail "btl_qcg_encrypt always: resend over TLS"; fi
# No BTL left between the two ranks: the job aborts.  mpirun may lose the help
# text in the abort (its show_help "Data unpack" errors, as below).
run_mpi 60 2 self,qcg --mca btl_qcg_encrypt sometimes "$progs/qcg-mpi-allpairs"
if [[ $rc -ne 0 ]] && grep -q "btl_qcg_encrypt 'sometimes' is not inter-site, always or never" "$out"; then
	pass "btl_qcg_encrypt sometimes: refused with a help message naming the values"
elif [[ $rc -ne 0 ]] && grep -q "show_help.c" "$out" && ! grep -q "^PASS" "$out"; then
	pass "btl_qcg_encrypt sometimes: refused, the job aborts (mpirun lost the help text this time)"
else echo "(exit $rc)" >>"$out"; fail "btl_qcg_encrypt sometimes: refused with a help message naming the values"; fi

# --- MPI_THREAD_MULTIPLE (btl_qcg's threads block) ------------------------------
# 4 threads per rank, each exchanging 0 B .. 1 MiB with every peer at once from
# the start: first connects to a peer come from several threads at once, and
# still end with one channel per pair (one verbose line per end: 12).
run_mpi 120 4 self,qcg --mca btl_qcg_verbose 1 "$progs/qcg-mpi-threads" --threads 4
n=$(grep -cE '^(\[[^]]*\] )?btl_qcg: rank [0-3] (->|<-) rank [0-3] \(host' "$out" || true)
if [[ $rc -eq 0 ]] && grep -q "^PASS threads" "$out" && [[ $n -eq 12 ]]; then
	pass "threads: MPI_THREAD_MULTIPLE, 4 threads per rank, every peer at once, 12 channel ends: $(grep "^PASS" "$out" | cut -c1-110)"
else echo "(exit $rc, $n channel ends)" >>"$out"; fail "threads: MPI_THREAD_MULTIPLE, 4 threads per rank over self,qcg"; fi
# The message-rate mode the benchmark parses.
run_mpi 60 2 self,qcg "$progs/qcg-mpi-threads" --rate --threads 4 --messages 5000
if [[ $rc -eq 0 ]] && grep -q "^PASS threads" "$out" &&
	grep -qE '^rate: threads 4 ranks 2 size 8 messages 40000 seconds [0-9.]+ msgs_per_s [0-9]+$' "$out"; then
	pass "threads --rate: $(grep '^rate:' "$out")"
else echo "(exit $rc)" >>"$out"; fail "threads --rate: 4 threads per rank, one 'rate:' line"; fi

# --- broken connections (btl_qcg_test_break_every, a test hook) ---------------
# Every rank aborts (RST: what the peer had not read is lost too) its
# connection to a peer after every 40 new frames it wrote to it, while the 4
# ranks exchange windows of numbered, checksummed messages (8 B .. 256 KiB)
# with all others both ways: each break is followed by a new connection on
# which both ends say what they have and the frames the peer missed are sent
# again; every message arrives once, in order, intact.
t0=$(ms)
run_mpi 240 4 self,qcg --mca btl_qcg_test_break_every 40 --mca btl_qcg_verbose 1 "$progs/qcg-mpi-resend" 20
elapsed=$(($(ms) - t0))
breaks=$(grep -c "broken (btl_qcg_test_break_every)" "$out" || true)
back=$(grep -cE "re-established by direct in [0-9.]+ ms: [0-9]+ frames sent again" "$out" || true)
again=$({ grep -oE "re-established by direct in [0-9.]+ ms: [0-9]+ frames" "$out" || true; } | awk '{ s += $(NF - 1) } END { print s + 0 }')
if [[ $rc -eq 0 ]] && grep -q "^PASS resend" "$out" && ((breaks >= 20 && back >= breaks && again > 0)); then
	pass "resend: $breaks connection resets under the exchange, $back re-established, $again frames sent again ($elapsed ms): $(grep "^PASS" "$out" | cut -c1-120)"
else echo "(exit $rc, $breaks breaks, $back re-established, $again frames sent again)" >>"$out"; fail "resend: connections reset under a checksummed exchange, every message once, in order, intact"; fi

# The same under MPI_THREAD_MULTIPLE: 4 threads per rank send and receive to
# every peer at once while the connections are reset every 13 frames (breaks
# found by one thread's write while another reads or reconnects).
run_mpi 240 4 self,qcg --mca btl_qcg_test_break_every 13 --mca btl_qcg_verbose 1 "$progs/qcg-mpi-threads" --threads 4
breaks=$(grep -c "broken (btl_qcg_test_break_every)" "$out" || true)
if [[ $rc -eq 0 ]] && grep -q "^PASS threads" "$out" && ((breaks >= 20)); then
	pass "threads with resets: $breaks connection resets, 4 threads per rank: $(grep "^PASS" "$out" | cut -c1-110)"
else echo "(exit $rc, $breaks breaks)" >>"$out"; fail "threads with resets: MPI_THREAD_MULTIPLE, every message intact across connection resets"; fi

# --- a first connection whose peer resets it (btl_qcg_test_drop_incoming) ----
# Every rank resets the first 2 connections its peers make to it before its
# verdict, as a peer too busy to finish the setup in time, or a middlebox,
# would: the first connections are tried again and every pair exchanges.
run_mpi 120 4 self,qcg --mca btl_qcg_test_drop_incoming 2 --mca btl_qcg_verbose 2 \
	"$progs/qcg-mpi-pairs"
resets=$(grep -c "reset a connection from rank .* (btl_qcg_test_drop_incoming)" "$out" || true)
again=$(grep -cE "btl_qcg: rank [0-3]: connecting to rank [0-3]: connection setup: .*; again in" "$out" || true)
if [[ $rc -eq 0 ]] && grep -q "^PASS pairs" "$out" && ((resets >= 4 && again >= 1)); then
	pass "first connections reset before the verdict ($resets) are tried again ($again): $(grep "^PASS" "$out" | cut -c1-80)"
else echo "(exit $rc, $resets resets, $again tried again)" >>"$out"; fail "first connections reset before the verdict are tried again"; fi

# --- a peer that is gone ------------------------------------------------------
# Here and below, a job that must fail fails by itself: not by the timeout
# (exit 124, or 137 when it also ignored SIGTERM), which ends a hung one.
# How long it took is shown, not bounded: under ASan and load one rank's
# MPI_Init took 35 s before btl_qcg even spoke to its helper.
# After 2 rounds rank 1 stops itself (SIGSTOP: it neither exits nor answers);
# rank 0 sends it messages, its connection breaks (the hook) and no new one
# can be made: the job fails within btl_qcg_reconnect_timeout (3 s; plus the
# abort), with the message that the peer is gone, and does not hang.
# The hook breaks rank 0's connections only.  A break of rank 1's own just
# before it stopped left it a reconnect whose bound passed while it was
# stopped; mpirun continues a stopped rank to end it (SIGCONT, then
# SIGTERM), and rank 1 then reported rank 0 lost as well, racing rank 0's
# report (its help text in 12 of 40 jobs here; its line once, under load).
printf '#!/bin/sh\n# the break hook on rank 0 only\n%s\nexec "$@"\n' \
	"[ \"\$OMPI_COMM_WORLD_RANK\" = 0 ] && export OMPI_MCA_btl_qcg_test_break_every=8" \
	>"$work/break-rank0.sh"
chmod +x "$work/break-rank0.sh"
t0=$(ms)
run_mpi 60 2 self,qcg --mca btl_qcg_reconnect_timeout 3000 "$work/break-rank0.sh" "$progs/qcg-mpi-resend" 2 1
elapsed=$(($(ms) - t0))
echo "(exit $rc after $elapsed ms)" >>"$out"
# Rank 0 says so twice: in the help text (relayed before the abort) and in
# its abort line.  Open MPI may lose the last output of a job it kills (its
# MPI_ABORT text says as much), so either one will do; neither fails.
said=""
grep -qE "btl_qcg: rank 0 lost rank 1 \(host .*\): the connection broke and no new one was made within 3000 ms" "$out" &&
	said="its line"
grep -q 'peer process is gone (it died' "$out" && grep -qE '^ *Local rank: +0$' "$out" &&
	grep -qE '^ *Peer rank: +1$' "$out" && grep -qE '^ *Bound: +3\.0 s$' "$out" &&
	said="${said:+$said and }the help text"
if [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] && ! grep -q "^PASS" "$out" && [[ -n $said ]]; then
	pass "peer gone: rank 1 stopped, the job fails in $elapsed ms; rank 0 says it lost rank 1 within the 3000 ms bound ($said)"
else fail "peer gone: the job fails within btl_qcg_reconnect_timeout, rank 0 saying the peer is gone"; fi

# --- a peer that vanishes from an encrypted channel ------------------------------
# Rank 1 exits without MPI_Finalize after an exchange: rank 0's channel ends
# without a close_notify, and rank 0 says so, in words (the reason came from
# the TLS session, which was freed before the line was written: heap bytes,
# or an ASan report).  Open MPI ends the job.
run_mpi 60 2 self,qcg --mca btl_qcg_encrypt always --mca btl_qcg_verbose 2 "$progs/qcg-mpi-vanish"
echo "(exit $rc)" >>"$out"
if grep -q "^VANISH rank 1" "$out" && ! grep -q AddressSanitizer "$out" &&
	grep -qE "btl_qcg: rank 0: connection to rank 1 broken \(TLS receive: unexpected eof while reading\)" "$out"; then
	pass "peer vanished from a TLS channel: rank 0 says 'broken (TLS receive: unexpected eof while reading)'"
else fail "peer vanished from a TLS channel: rank 0 says why its channel broke, in words"; fi

# --- opting out --------------------------------------------------------------------
# help_count TOPIC TEXT: how many ranks sent help-mpi-btl-qcg.txt's TOPIC, as
# mpirun shows it: the text (TEXT, a line of it) once, then "N more
# processes have sent help message help-mpi-btl-qcg.txt / TOPIC".
help_count() {
	local first more
	first=$(grep -c -- "$2" "$out" || true)
	more=$(sed -nE "s/.* ([0-9]+) more process(es have| has) sent help message help-mpi-btl-qcg.txt \/ $1\$/\1/p" \
		"$out" | awk '{n += $1} END {print n + 0}')
	echo $((first + more))
}
# No job secret, qcg named in the btl list: the help message once for the
# 4 ranks (mpirun aggregates them), and the job runs over tcp.  mpirun 4.1
# loses some relayed help messages when ranks send them at once (its PMIx
# log handler calls the RML off its event thread: "ORTE_ERROR_LOG: Out of
# resource in file .../orte/util/show_help.c"; 8 of 20 jobs here lost 1 to
# 4 of them), so up to 3 jobs run until one shows it.
nosecret="process: the job has no secret"
for try in 1 2 3; do
	rc=0
	timeout -k 5 60 env -u QCG_JOB_SECRET mpirun --oversubscribe -np 4 --bind-to none \
		--mca mca_base_component_path "$component_path" --mca pml ob1 --mca btl self,tcp,qcg \
		--mca btl_tcp_if_include 127.0.0.1/8 -x QCG_JOB -x QCG_HELPER_SOCKET \
		"$progs/qcg-mpi-ring" 10 >"$out" 2>&1 || rc=$?
	n=$(grep -c "$nosecret" "$out" || true) ranks=$(help_count "no secret" "$nosecret")
	[[ $rc -ne 0 || $n -gt 1 || $ranks -eq 4 ]] && break
done
# mpirun may lose every one of them, 3 jobs in a row under ASan and load
# (its show_help.c errors, "Data unpack would read past end of buffer"):
# those errors then say that help messages, ours (nothing else sends one
# here), were sent and lost.
if [[ $rc -eq 0 ]] && grep -q "^PASS ring" "$out" && [[ $n -eq 1 && $ranks -ge 1 && $ranks -le 4 ]] &&
	grep -q "Problem: *QCG_JOB_SECRET is not set" "$out"; then
	pass "btl self,tcp,qcg without QCG_JOB_SECRET: the help message once, from $ranks of 4 ranks (job $try); the job runs over tcp"
elif [[ $rc -eq 0 ]] && grep -q "^PASS ring" "$out" && [[ $n -eq 0 ]] &&
	grep -q "ORTE_ERROR_LOG: .*show_help\.c" "$out"; then
	pass "btl self,tcp,qcg without QCG_JOB_SECRET: the job runs over tcp (mpirun lost the help messages in all 3 jobs)"
else echo "(exit $rc, $n texts, $ranks ranks, job $try)" >>"$out"
	fail "btl self,tcp,qcg without QCG_JOB_SECRET: the help message once for the ranks; the job runs over tcp"; fi

# A weak secret (issue 17): the grid would refuse it, so the component says
# so and steps aside (up to 3 jobs, for the lost help texts above).
for try in 1 2 3; do
	rc=0
	timeout -k 5 60 env QCG_JOB_SECRET=s3cret mpirun --oversubscribe -np 2 --bind-to none \
		--mca mca_base_component_path "$component_path" --mca pml ob1 --mca btl self,tcp,qcg \
		--mca btl_tcp_if_include 127.0.0.1/8 -x QCG_JOB -x QCG_JOB_SECRET -x QCG_HELPER_SOCKET \
		"$progs/qcg-mpi-ring" 10 >"$out" 2>&1 || rc=$?
	[[ $rc -ne 0 ]] || grep -q "Problem: *QCG_JOB_SECRET has about" "$out" && break
done
if [[ $rc -eq 0 ]] && grep -q "^PASS ring" "$out" && grep -q "openssl rand -hex 32" "$out" &&
	grep -q "Problem: *QCG_JOB_SECRET has about 35 bits, at least 128 needed" "$out"; then
	pass "a weak QCG_JOB_SECRET: the help message says how to make one (job $try); the job runs over tcp"
else echo "(exit $rc, job $try)" >>"$out"
	fail "a weak QCG_JOB_SECRET: the help message says how to make one; the job runs over tcp"; fi

# The same with no other BTL between the ranks: MPI_Init fails and the job
# aborts at once.  The help texts (ours, Open MPI's "unable to reach each
# other") race with the abort in mpirun: each is lost in about 1 run of 8
# here, so only the abort is asserted.
rc=0
t0=$(ms)
timeout -k 5 60 env -u QCG_JOB_SECRET OMPI_MCA_btl=self,qcg mpirun --oversubscribe -np 2 \
	--bind-to none --mca mca_base_component_path "$component_path" --mca pml ob1 -x QCG_JOB \
	-x QCG_HELPER_SOCKET "$progs/qcg-mpi-ring" 1 >"$out" 2>&1 || rc=$?
if [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] && ! grep -q "^PASS" "$out"; then
	pass "OMPI_MCA_btl=self,qcg without QCG_JOB_SECRET: no BTL left between the ranks, the job aborts (exit $rc after $(($(ms) - t0)) ms)"
else echo "(exit $rc)" >>"$out"
	fail "OMPI_MCA_btl=self,qcg without QCG_JOB_SECRET: no BTL left between the ranks, the job aborts"; fi

# Not named (Open MPI's default btl selection, which loads qcg from the
# component path): not a word from qcg, unless verbose.
rc=0
timeout -k 5 60 env -u QCG_JOB_SECRET mpirun --oversubscribe -np 4 --bind-to none \
	--mca mca_base_component_path "$component_path" --mca pml ob1 \
	--mca btl_tcp_if_include 127.0.0.1/8 -x QCG_JOB -x QCG_HELPER_SOCKET \
	"$progs/qcg-mpi-ring" 10 >"$out" 2>&1 || rc=$?
if [[ $rc -eq 0 ]] && grep -q "^PASS ring" "$out" && ! grep -qi "qcg" "$out"; then
	pass "default btl selection without QCG_JOB_SECRET: qcg steps aside silently, the job runs"
else echo "(exit $rc)" >>"$out"; fail "default btl selection without QCG_JOB_SECRET: qcg steps aside silently"; fi

# The secret but no job id (QCG_JOB), not named, verbose: a line per rank
# says why, no help message; the job runs over tcp.
rc=0
timeout -k 5 60 env -u QCG_JOB mpirun --oversubscribe -np 2 --bind-to none \
	--mca mca_base_component_path "$component_path" --mca pml ob1 --mca btl ^vader \
	--mca btl_qcg_verbose 1 --mca btl_tcp_if_include 127.0.0.1/8 -x QCG_JOB_SECRET \
	-x QCG_HELPER_SOCKET "$progs/qcg-mpi-ring" 10 >"$out" 2>&1 || rc=$?
n=$(grep -c "btl_qcg: rank [01]: not used: QCG_JOB is not set" "$out" || true)
if [[ $rc -eq 0 ]] && grep -q "^PASS ring" "$out" && [[ $n -eq 2 ]] &&
	! grep -q "help-mpi-btl-qcg\|cannot be used by this" "$out" &&
	! grep -q "btl_qcg: rank [01] [-<]" "$out"; then
	pass "btl ^vader, no QCG_JOB, btl_qcg_verbose 1: a 'not used' line per rank, no help message; the job runs over tcp"
else echo "(exit $rc, $n lines)" >>"$out"
	fail "btl ^vader, no QCG_JOB, btl_qcg_verbose 1: a 'not used' line per rank, no help message"; fi

# --- reversed: a NATed cluster ------------------------------------------------------
# Even ranks on n1 (cluster c1, open), odd ranks on n4 (cluster c4, behind a NAT
# as far as the broker knows): an even rank reaches an odd one by `reversed`
# (the odd rank's helper connects back); firstsend makes both ends of each
# such pair connect at once.
grid_certs "frontend c4" "helper c4/n4"
grid_frontend c4 $((port_f + 3)) --kind nat --public-address 127.0.0.1 || exit 1
# Listening range 18700-18719.
grid_helper helper-n4 c4/n4 $((port_f + 3)) 18700-18719 || exit 1
printf '#!/bin/sh\n# odd ranks on node n4 of cluster c4 (nat)\n%s\n%s\n' \
	"[ \$((OMPI_COMM_WORLD_RANK % 2)) = 1 ] && QCG_HELPER_SOCKET=$work/helper-n4.sock" \
	"export QCG_HELPER_SOCKET; exec \"\$@\"" >"$work/odd-nat.sh"
chmod +x "$work/odd-nat.sh"
run_mpi 60 4 self,qcg "$work/odd-nat.sh" "$progs/qcg-mpi-pairs"
if [[ $rc -eq 0 ]] && grep -q "^PASS pairs" "$out" && grep -q "^summary: direct 4 reversed 2$" "$out" &&
	grep -qE '^0 -> 1 +reversed' "$out" && grep -qE '^2 -> 3 +reversed' "$out"; then
	pass "pairs with odd ranks behind a NAT: 0 -> 1 and 2 -> 3 reversed, the rest direct"
else echo "(exit $rc)" >>"$out"; fail "pairs with odd ranks behind a NAT: 0 -> 1 and 2 -> 3 reversed"; fi
for prog in "firstsend --all-qcg" "allpairs 4194304"; do
	name=${prog%% *}
	# shellcheck disable=SC2086
	run_mpi 120 4 self,qcg "$work/odd-nat.sh" "$progs/qcg-mpi-$name" ${prog#"$name"}
	if [[ $rc -eq 0 ]] && grep -q "^PASS $name" "$out"; then
		pass "$name with odd ranks behind a NAT (reversed pairs)"
	else echo "(exit $rc)" >>"$out"; fail "$name with odd ranks behind a NAT (reversed pairs)"; fi
done

# --- a cluster's own network: btl_qcg_cluster_peers --------------------------------
# With btl_tcp selected too, qcg leaves the pairs inside a cluster (0-2 in c1,
# 1-3 in c4) to tcp (the default, -1: another network BTL runs) and keeps the
# pairs between the clusters; with 1 it carries every pair.
run_mpi 60 4 self,tcp,qcg --mca btl_tcp_if_include 127.0.0.1/8 "$work/odd-nat.sh" "$progs/qcg-mpi-pairs"
# (pairs calls a pair qcg did not carry between ranks of one host "same node";
# which end initiates a cross pair, so direct or reversed, is a race.)
n=$(sed -n 's/^summary://p' "$out" | awk '{ s = 0; for (i = 1; i <= NF; i += 2) if ($i == "direct" || $i == "reversed") s += $(i + 1); print s }')
if [[ $rc -eq 0 ]] && grep -q "^PASS pairs" "$out" && [[ $n -eq 4 ]] && grep -q "^summary:.* shared memory 2$" "$out" &&
	grep -qE '^2 -- 0 +same node' "$out" && grep -qE '^3 -- 1 +same node' "$out"; then
	pass "btl self,tcp,qcg: the pairs inside a cluster by tcp, the 4 between clusters by qcg"
else echo "(exit $rc)" >>"$out"; fail "btl self,tcp,qcg: the pairs inside a cluster by tcp, the 4 between clusters by qcg"; fi
run_mpi 60 4 self,tcp,qcg --mca btl_tcp_if_include 127.0.0.1/8 --mca btl_qcg_cluster_peers 1 \
	"$work/odd-nat.sh" "$progs/qcg-mpi-pairs"
# (Which end initiates a pair is a race: an odd rank's connect is direct, an
# even rank's reversed; either way all 6 are qcg's.)
n=$(sed -n 's/^summary://p' "$out" | awk '{ s = 0; for (i = 1; i <= NF; i += 2) if ($i == "direct" || $i == "reversed") s += $(i + 1); print s }')
if [[ $rc -eq 0 ]] && grep -q "^PASS pairs" "$out" && [[ $n -eq 6 ]]; then
	pass "btl self,tcp,qcg, btl_qcg_cluster_peers 1: qcg carries all 6 pairs"
else echo "(exit $rc)" >>"$out"; fail "btl self,tcp,qcg, btl_qcg_cluster_peers 1: qcg carries all 6 pairs"; fi

# --- more peers than connect slots -----------------------------------------------
# One connect at a time (btl_qcg_max_connects 1): every rank sends to every
# other at once; the others wait for the slot, and every pair still ends with
# one channel.
run_mpi 60 4 self,qcg --mca btl_qcg_max_connects 1 --mca btl_qcg_verbose 2 \
	"$work/odd-nat.sh" "$progs/qcg-mpi-firstsend" --all-qcg
n=$(grep -c "waits for a connect slot" "$out" || true)
if [[ $rc -eq 0 ]] && grep -q "^PASS firstsend" "$out" && [[ $n -ge 1 ]]; then
	pass "btl_qcg_max_connects 1: $n connects waited for the slot, firstsend passes with one channel per pair"
else echo "(exit $rc, $n waits)" >>"$out"; fail "btl_qcg_max_connects 1: connects wait for the slot, firstsend passes"; fi

# --- a peer that cannot be reached: an error naming it, not a hang ---------------
# Two more clusters, both behind symmetric NATs (as far as the broker knows):
# no technique of this grid (no proxy configured) connects them, so the
# first send between rank 0 (c2) and rank 1 (c3) must fail with a message
# naming the peer and the technique it would need.
for c in 2 3; do
	grid_certs "frontend c$c" "helper c$c/n$c"
	grid_frontend c$c $((port_f + c - 1)) --kind symnat --public-address 127.0.0.1 || exit 1
	# Listening ranges: n2 18475-18486, n3 18487-18499.
	grid_helper helper-n$c c$c/n$c $((port_f + c - 1)) \
		$((18475 + (c - 2) * 12))-$((18486 + (c - 2) * 13)) || exit 1
done
printf '#!/bin/sh\n# rank 0 on node n2 of cluster c2, rank 1 on node n3 of cluster c3\n%s\n' \
	"QCG_HELPER_SOCKET=$work/helper-n\$((OMPI_COMM_WORLD_RANK + 2)).sock exec \"\$@\"" \
	>"$work/split.sh"
chmod +x "$work/split.sh"
t0=$(ms)
run_mpi 60 2 self,qcg "$work/split.sh" "$progs/qcg-mpi-ring" 1
elapsed=$(($(ms) - t0))
echo "(exit $rc after $elapsed ms)" >>"$out"
cp "$out" "$work/unreachable.out"
# The error line of the rank that aborts names the peer, the technique needed
# and both clusters (libqcgconn's reason).  The help text above it
# (help-mpi-btl-qcg.txt's "technique unavailable") says the same at more
# length, when mpirun does not lose it in the abort (about 1 run in 8 here).
if [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] &&
	grep -qE "btl_qcg: rank [01] cannot reach rank [01] \(host .*needs technique proxy: cluster c[23] .* cluster c[23] " "$out"; then
	if grep -q "need a connection technique this grid does not offer" "$out"; then
		grep -qE "^ *Peer rank: +[01]$" "$out" && grep -qE "^ *Reason: .*needs technique proxy: cluster c[23] .* cluster c[23] " "$out" &&
			pass "unreachable peer: the job aborts in $elapsed ms naming the peer, the technique (proxy) and clusters c2, c3; the help text says the same" ||
			fail "unreachable peer: the help text lacks the peer rank or the reason"
	else
		pass "unreachable peer: the job aborts in $elapsed ms naming the peer, the technique (proxy) and clusters c2, c3 (mpirun lost the help text this time)"
	fi
else fail "unreachable peer: the job aborts, naming the peer, the technique and the clusters"; fi

[[ -n ${QCG_TEST_SHOW:-} ]] && cat "$work/unreachable.out"
echo "passed $passed, failed $failed"
((failed == 0))
