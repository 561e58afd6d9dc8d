#!/usr/bin/env bash
# demo.sh: bring up the two-site lab, prove pod-to-pod connectivity through
# the encrypted tunnel, show what an operator would look at, tear down.
# Run as root from the repository root (make demo does).
set -euo pipefail
cd "$(dirname "$0")/../.."

export BRIDGEHEAD=${BRIDGEHEAD:-./bin/bridgehead}
PROBE=${PROBE:-./bin/bhprobe}
STATE=$(mktemp -d /tmp/bridgehead-demo.XXXXXX)
PREFIX=bhdemo

say() { printf '\n\033[1;34m==> %s\033[0m\n' "$*"; }
run() { printf '    $ %s\n' "$*"; "$@" 2>&1 | sed 's/^/      /'; return "${PIPESTATUS[0]}"; }

cleanup() {
	local rc=$?
	say "tearing the lab down"
	deploy/lab/lab.sh down "$STATE"
	rm -rf "$STATE"
	if [ "$rc" -eq 0 ]; then
		printf '\n\033[1;32mdemo passed\033[0m\n'
	else
		printf '\n\033[1;31mdemo FAILED (exit %s)\033[0m\n' "$rc"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$(id -u)" -ne 0 ]; then
	echo "demo: needs root (network namespaces and TUN devices)" >&2
	exit 1
fi
# A demo left behind by a killed run would collide with this one.
for ns in a-node a-gw b-gw b-node; do ip netns del "$PREFIX-$ns" 2>/dev/null || true; done

# Gateway A also runs the CONNECT relay for API-server callbacks.
export CONFIG_EXTRA_A=$'relay:\n  listen: 10.224.0.4:8131\n  allowedPorts: [10250]'
deploy/lab/lab.sh up "$STATE" "$PREFIX"

say "a stand-in kubelet on node B (HTTPS on :10250), for the callback checks"
ip netns exec $PREFIX-b-node "$PROBE" kubelet -listen :10250 >"$STATE/kubelet.log" 2>&1 &
echo $! >>"$STATE/pids"
for _ in $(seq 1 50); do grep -q listening "$STATE/kubelet.log" 2>/dev/null && break; sleep 0.1; done
sed 's/^/      /' "$STATE/kubelet.log"

say "node A's routing table: only its LAN and the routes toward gateway A"
run ip -n $PREFIX-a-node route
run ip -n $PREFIX-a-node -6 route

say "ICMP echo pod A -> pod B and back, IPv4 and IPv6"
run ip netns exec $PREFIX-a-node "$PROBE" ping -src 10.244.1.10 -count 3 10.245.1.10
run ip netns exec $PREFIX-b-node "$PROBE" ping -src 10.245.1.10 -count 3 10.244.1.10
run ip netns exec $PREFIX-a-node "$PROBE" ping -src fd00:244:0:1::10 -count 3 fd00:245:0:1::10
run ip netns exec $PREFIX-b-node "$PROBE" ping -src fd00:245:0:1::10 -count 3 fd00:244:0:1::10

say "TCP transfer pod A -> pod B, 32 MiB, checksummed on both ends"
ip netns exec $PREFIX-b-node "$PROBE" tcp-recv -listen 10.245.1.10:7000 >"$STATE/recv.out" 2>&1 &
RECV=$!
for _ in $(seq 1 50); do grep -q listening "$STATE/recv.out" 2>/dev/null && break; sleep 0.1; done
run ip netns exec $PREFIX-a-node "$PROBE" tcp-send -src 10.244.1.10 -bytes $((32 << 20)) 10.245.1.10:7000 | tee "$STATE/send.out"
wait $RECV
sed 's/^/      /' "$STATE/recv.out"
sent=$(grep -o 'sha256 [0-9a-f]*' "$STATE/send.out")
got=$(grep -o 'sha256 [0-9a-f]*' "$STATE/recv.out")
if [ "$sent" != "$got" ]; then
	echo "checksum mismatch: sent $sent, received $got" >&2
	exit 1
fi
echo "    checksums match: $got"

say "the WAN carries only UDP to port 51820 (encrypted); gateway A's tunnel routes"
run ip -n $PREFIX-a-gw route show dev bh0
run ip -n $PREFIX-a-gw -6 route show dev bh0

say "what an operator looks at: bridgehead status on gateway A"
run "$BRIDGEHEAD" status --socket "$STATE/a.sock"

say "gateway A's readiness probe (/readyz, what a load balancer asks)"
run ip netns exec $PREFIX-a-gw "$PROBE" http-get http://127.0.0.1:9641/readyz

say "gateway A's log"
sed 's/^/      /' "$STATE/a.log"

say "gateway B's metrics (excerpt)"
ip netns exec $PREFIX-b-gw "$PROBE" http-get http://127.0.0.1:9641/metrics >"$STATE/metrics.txt"
grep -E '^bridgehead_(peer_(sent|received)_(packets|bytes)_total|handshakes_total|peer_endpoint_info|build_info)' "$STATE/metrics.txt" | sed 's/^/      /'
grep -E '^bridgehead_dropped_packets_total' "$STATE/metrics.txt" | grep -v ' 0$' | sed 's/^/      /' || echo "      (no drops)"

say "bridgehead verify on gateway A: the checks an operator runs after installing it"
run ip netns exec $PREFIX-a-gw "$BRIDGEHEAD" verify --config "$STATE/a.yaml"
