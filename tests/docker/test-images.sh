#!/usr/bin/env bash
# docker-images: docker/build-images with a safe dockerd of the test's own,
# then each image's --help, user, HEALTHCHECK, and the health check passing
# for real: broker, proxy, frontend and helper containers sharing one network
# namespace (--network none: loopback only) with a throw-away CA.  The host's
# rules, links and addresses must be what they were.
. "$(dirname "$0")/lib.sh"
require_docker

scratch_begin docker-images

t0=$SECONDS
qcg_dockerd_start "$scratch/dockerd"
say "dockerd up in $((SECONDS - t0)) s"
check_host_clean
nets=$(docker network ls --format '{{.Name}}' | sort | tr '\n' ' ')
[ "$nets" = "host none " ] || fail "networks besides host and none: $nets"

t1=$SECONDS
"$REPO/docker/build-images" --build-dir "$BUILD" --tag "$TAG" || fail "build-images"
say "images built in $((SECONDS - t1)) s"
check_host_clean

for s in broker frontend helper proxy; do
	img=qcg-$s:$TAG
	out=$(docker run --rm --network none "$img" --help 2>&1) || fail "$img --help: $out"
	grep -q "qcg-$s" <<<"$out" || fail "$img --help does not name qcg-$s: $out"
	user=$(docker image inspect -f '{{.Config.User}}' "$img")
	hc=$(docker image inspect -f '{{json .Config.Healthcheck.Test}}' "$img")
	[ "$hc" = "[\"CMD\",\"qcg-healthcheck\",\"$s\"]" ] || fail "$img HEALTHCHECK is $hc"
	case $s in
	helper) [ -z "$user" ] || fail "$img runs as '$user': the helper needs root for its capabilities" ;;
	*) [ "$user" = qcg ] || fail "$img runs as '$user', not qcg" ;;
	esac
	size=$(docker image inspect -f '{{.Size}}' "$img")
	say "$img: --help ok, user ${user:-root}, $((size / 1000000)) MB"
done
docker run --rm --network none --entrypoint qcg-cat "qcg-helper:$TAG" --help >/dev/null ||
	fail "qcg-cat --help in qcg-helper"
docker run --rm --network none --entrypoint qcg-probe "qcg-helper:$TAG" --help >/dev/null ||
	fail "qcg-probe --help in qcg-helper"

# The compose files: valid for Debian's docker-compose, and every service
# names its network (no bridge may be made) and runs under an init.
for f in "$REPO"/docker/compose/*.yml; do
	docker-compose -f "$f" config -q || fail "$f: docker-compose config"
	python3 - "$f" <<-'PY' || fail "$f: a service without network_mode or init"
		import sys, yaml
		services = yaml.safe_load(open(sys.argv[1]))["services"]
		bad = [n for n, s in services.items()
		       if s.get("network_mode") not in ("host", "none") or s.get("init") is not True]
		sys.exit(1 if bad or not services else 0)
	PY
	say "$(basename "$f"): valid, every service with network_mode and init"
done

# Health, for real.  Configs and certificates mounted read-only where the
# images expect them; every certificate names 127.0.0.1 (the daemons' --stats
# default), so the health check needs no QCG_HEALTH_URL.
certs=$scratch/qcg
conf=$scratch/qcg-connect
mkdir -p "$conf" "$scratch/run"
make_certs "$certs" broker:broker:127.0.0.1 proxy:p1:127.0.0.1 frontend:site1:127.0.0.1 helper:site1/node1:
cat >"$conf/qcg-broker.conf" <<-CONF
	listen = 127.0.0.1
	ca = /etc/qcg/ca.crt
	cert = /etc/qcg/broker-broker.pem
	proxy = p1@127.0.0.1:7703
	proxy-key = /etc/qcg/proxy.key
	syslog = yes
CONF
cat >"$conf/qcg-proxy.conf" <<-CONF
	listen = 127.0.0.1
	ca = /etc/qcg/ca.crt
	cert = /etc/qcg/proxy-p1.pem
	key-file = /etc/qcg/proxy.key
	broker = https://127.0.0.1:7700/
CONF
cat >"$conf/qcg-frontend.conf" <<-CONF
	listen = 127.0.0.1
	ca = /etc/qcg/ca.crt
	cert = /etc/qcg/frontend-site1.pem
	broker = https://127.0.0.1:7700/
	kind = open
CONF
cat >"$conf/qcg-helper.conf" <<-CONF
	frontend = https://127.0.0.1:7701/
	ca = /etc/qcg/ca.crt
	cert = /etc/qcg/helper-site1-node1.pem
	address = 127.0.0.1
	ports = 41000-41099
CONF
mounts=(-v "$conf:/etc/qcg-connect:ro" -v "$certs:/etc/qcg:ro")
health=(--health-interval 1s --health-timeout 10s --health-start-period 0s)
# The broker's namespace is everyone's (the lab test puts each in its own).
drun --name qcg-t-broker --init --network none --read-only --cap-drop ALL \
	"${health[@]}" "${mounts[@]}" "qcg-broker:$TAG"
drun --name qcg-t-proxy --init --network container:qcg-t-broker --read-only \
	--cap-drop ALL "${health[@]}" "${mounts[@]}" "qcg-proxy:$TAG"
drun --name qcg-t-frontend --init --network container:qcg-t-broker --read-only \
	--cap-drop ALL "${health[@]}" "${mounts[@]}" "qcg-frontend:$TAG"
drun --name qcg-t-helper --init --network container:qcg-t-broker --read-only \
	--cap-drop ALL --cap-add NET_ADMIN --cap-add NET_RAW "${health[@]}" "${mounts[@]}" \
	-v "$scratch/run:/run/qcg" "qcg-helper:$TAG"
for c in broker proxy frontend helper; do
	wait_healthy "qcg-t-$c" 30
	say "qcg-t-$c healthy"
done
# The helper is connected to its frontend, and says it may intercept.
status=$(docker exec qcg-t-helper qcg-helper --status --json) || fail "helper --status"
say "helper status: $status"
grep -q '"upstream_connected":true' <<<"$status" || fail "helper not connected to its frontend"
if docker exec qcg-t-broker qcg-healthcheck nosuchservice >/dev/null 2>&1; then
	fail "qcg-healthcheck accepts an unknown service"
fi

# init: true (--init) and SIGTERM: every container stops promptly.
t2=$SECONDS
docker stop -t 10 qcg-t-helper qcg-t-frontend qcg-t-proxy qcg-t-broker >/dev/null
[ $((SECONDS - t2)) -lt 10 ] || fail "containers took $((SECONDS - t2)) s to stop"
for c in helper frontend proxy broker; do
	code=$(docker inspect -f '{{.State.ExitCode}}' "qcg-t-$c")
	[ "$code" = 0 ] || { docker logs --tail 20 "qcg-t-$c" >&2; fail "qcg-t-$c exited $code on SIGTERM"; }
done
say "all stopped cleanly in $((SECONDS - t2)) s; total $((SECONDS - t0)) s"
