#!/usr/bin/env bash
#
# frontend-secret-stays: a job's secret never leaves its node (issue 17).  Two
# processes of one job publish, look each other up, connect and report through
# the real daemons on loopback; then the secret must be in no log, no state
# file and no readable byte of the frontend's or the broker's memory
# (/proc/PID/mem through /proc/PID/maps), as text or as the bytes it encodes.
# The job id, which does travel, must be found there: the scan reads the
# right memory.  A weak secret is refused with the way to make a good one.
#
#   qcg-cat rank 0 (listen) <========== TCP, direct ==========> qcg-cat rank 1 (connect)
#        \                                                          /
#         `--unix--> qcg-helper c1/n1 <------------------------unix-'
#                        | mTLS: the job's verifier, never its secret
#                    qcg-frontend c1 127.0.0.1:17842 --mTLS--> qcg-broker 127.0.0.1:17841
#                                                              (--state-file)
#
# Ports 17840-17869 belong to this test: broker 17841, frontend 17842, the
# node's range 17850-17869.  Reading another process's memory needs root.
#
#   test-secret-stays.sh BUILD_DIR SRC_DIR       exit 0 passed, 1 failed, 77 skipped

set -euo pipefail
export LC_ALL=C

build=$(cd "${1:?build dir}" && pwd)
src=$(cd "${2:?source dir}" && pwd)

# shellcheck source=../lib/loopback-grid.sh
. "$src/tests/lib/loopback-grid.sh"

cat_bin=$build/tools/qcg-cat
port_b=17841 port_f=17842 low=17850 high=17869

need_built "$helper" "$frontend" "$broker" "$certs" "$cat_bin"
need_commands ss python3
[[ $(id -u) -eq 0 ]] || { echo "skipped: reading /proc/PID/mem of the daemons needs root"; exit 77; }

grid_workdir qcg-secret-stays
grid_ca "frontend c1" "helper c1/n1"
grid_ports_free $port_b $port_f
grid_broker $port_b --log-level debug --state-file "$work/broker.state" || exit 1
broker_pid=${pids[-1]}
grid_frontend c1 $port_f --kind open --public-address 127.0.0.1 --log-level debug || exit 1
frontend_pid=${pids[-1]}
grid_helper helper c1/n1 $port_f $low-$high --log-level debug || exit 1
sock=$work/helper.sock

# A fresh secret and job id for each run: nothing else can hold them.
secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
job=secret-stays-$(od -An -tx1 -N8 /dev/urandom | tr -d ' \n')

# --- a weak secret: refused, saying how to make one ---------------------------
rc=0
QCG_JOB_SECRET=0123456789abcdef "$cat_bin" --helper "$sock" --job "$job" --rank 5 --timeout 5 \
	listen </dev/null >"$out" 2>&1 || rc=$?
if [[ $rc -ne 0 ]] && grep -q "too weak" "$out" && grep -q "openssl rand -hex 32" "$out"; then
	pass "a 64-bit secret is refused: $(head -n 1 "$out")"
else echo "(exit $rc)" >>"$out"; fail "a 64-bit secret is refused, saying 'openssl rand -hex 32'"; fi

# --- publish, lookup, connect, report with the secret ----------------------------
QCG_JOB=$job QCG_RANK=0 QCG_JOB_SECRET=$secret QCG_HELPER_SOCKET=$sock \
	"$cat_bin" --json --timeout 30 listen >"$work/recv" 2>"$work/listen.err" &
listener=$!
pids+=("$listener")
# (The shell opens listen.err in the background: it may not exist yet.)
if wait_for "rank 0 listening" 150 grep -qs '"event":"listening"' "$work/listen.err"; then
	pass "rank 0 publishes"
else cp "$work/listen.err" "$out" 2>/dev/null || true; fail "rank 0 publishes"; fi
rc=0
echo "payload of $job" | QCG_JOB_SECRET=$secret "$cat_bin" --helper "$sock" --job "$job" \
	--rank 1 --timeout 20 connect 0 >/dev/null 2>"$out" || rc=$?
if [[ $rc -eq 0 ]]; then pass "rank 1 looks rank 0 up and connects"
else echo "(exit $rc)" >>"$out"; fail "rank 1 looks rank 0 up and connects"; fi
wait_exit "$listener" 150 || true
if grep -q "payload of $job" "$work/recv"; then pass "rank 0 received the payload"
else cp "$work/listen.err" "$out"; fail "rank 0 received the payload"; fi
# The broker saw the job (its state file is written on its own schedule;
# the publish and the lookup are in its debug log at once).
cp "$work/broker.log" "$out"
if wait_for "the broker's lookup line" 100 grep -q "$job" "$work/broker.log"; then
	pass "the broker handled job $job"
else fail "the broker handled job $job"; fi
# The connection's report goes on from the frontend in a batch (reports).
if wait_for "the report at the broker" 100 grep -q "job $job rank 1 .* worked in" "$work/broker.log"; then
	pass "the connection's report reached the broker through the frontend"
else fail "the connection's report reached the broker through the frontend"; fi

# --- where the secret must not be: the services' memory -----------------------
# scan PID: "job=N secret-text=N secret-bytes=N" counted over the readable
# mappings of PID.
scan() {
	python3 - "$1" "$job" "$secret" <<'PY'
import os, re, sys
pid, job, secret = sys.argv[1], sys.argv[2].encode(), sys.argv[3]
needles = {"job": [job], "secret-text": [secret.encode(), secret.upper().encode()],
           "secret-bytes": [bytes.fromhex(secret)]}
counts = dict.fromkeys(needles, 0)
CHUNK, OVERLAP = 8 << 20, 128
fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
with open(f"/proc/{pid}/maps") as maps:
    for line in maps:
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+)", line)
        start, end, perms = int(m[1], 16), int(m[2], 16), m[3]
        # Not readable, the vDSO's data, or a sanitizer's shadow (terabytes
        # reserved): nothing of ours is there.
        if perms[0] != "r" or line.rstrip().endswith("[vvar]") or end - start > 4 << 30:
            continue
        for at in range(start, end, CHUNK):
            try:
                data = os.pread(fd, min(CHUNK + OVERLAP, end - at), at)
            except OSError:
                continue
            for name, forms in needles.items():
                # Matches that begin in the overlap are counted by the next chunk.
                counts[name] += sum(1 for f in forms for i in
                                    (mm.start() for mm in re.finditer(re.escape(f), data))
                                    if i < CHUNK)
print(" ".join(f"{k}={v}" for k, v in counts.items()))
PY
}
for who in frontend broker; do
	pid_var=${who}_pid
	res=$(scan "${!pid_var}" 2>&1) || res="scan failed: $res"
	echo "$who: $res" >"$out"
	if [[ $res =~ job=[1-9] ]]; then pass "the $who's memory holds the job id ($res)"
	else fail "the $who's memory holds the job id (the scan reads its memory)"; fi
	if [[ $res =~ secret-text=0\ secret-bytes=0 ]]; then
		pass "the $who's memory holds the secret neither as text nor as bytes"
	else fail "the $who's memory holds the secret neither as text nor as bytes"; fi
done

# --- nor in their logs and files once they stopped ---------------------------------
# (the broker writes its state file when it stops.)  Everything in $work but
# the helper's own log and socket, the test's outputs and the CA.
for p in "$frontend_pid" "$broker_pid"; do
	kill -TERM "$p" 2>/dev/null || true
	wait_exit "$p" 100 || true
done
if [[ -s $work/broker.state ]]; then pass "the broker wrote its state file"
else ls -l "$work" >"$out"; fail "the broker wrote its state file"; fi
found=$(grep -rlF -e "$secret" -e "${secret^^}" "$work" --exclude=helper.log \
	--exclude=recv --exclude=out --exclude='*.err' --exclude-dir=ca 2>/dev/null || true)
if [[ -z $found ]]; then pass "the secret is in no log or state file of the frontend or the broker"
else echo "$found" >"$out"; fail "the secret is in no log or state file of the frontend or the broker"; fi

echo "passed $passed, failed $failed"
((failed == 0))
