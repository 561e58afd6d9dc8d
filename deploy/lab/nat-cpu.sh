#!/usr/bin/env bash
# nat-cpu.sh: the hub's CPU per GB, relayed against terminated, in one
# nat-lab.sh run (issue #20, "Performance").
#
#   nat-cpu.sh PREFIX [SECONDS]
#
# Brings up nat-lab.sh (NAT_E2=random by default: E2's symmetric NAT keeps
# E1 <-> E2 on the hub), then runs one TCP stream (iperf3, SECONDS, 10 by
# default) for each of
#   relay  pod E1 -> pod E2, which gw-a relays without decrypting;
#   term   pod A  -> pod E1, which gw-a seals itself;
# and prints, per stream, the throughput and the CPU time gw-a spent
# (utime, stime from /proc/PID/stat) per GB received, with the machine's
# user, system and softirq time over the same seconds (/proc/stat, all
# CPUs) and the load average before it. With tick-based accounting the
# softirq work the kernel runs in gw-a's context (veth delivery into the
# next namespace, the NAT router's forwarding) is charged to gw-a's stime
# and to softirq.
#
# BRIDGEHEAD names the binary (release build: go build -o bin/ ./cmd/...),
# BHPROBE the probe (default: beside BRIDGEHEAD);
# NAT_E2, HUBS, RUN_ARGS go to nat-lab.sh.
set -euo pipefail
p=${1:?usage: nat-cpu.sh PREFIX [SECONDS]}
secs=${2:-10}
here=$(cd "$(dirname "$0")" && pwd)
export BRIDGEHEAD=${BRIDGEHEAD:-$here/../../bin/bridgehead}
export NAT_E2=${NAT_E2:-random}
st=$(mktemp -d "/tmp/$p-state.XXXX")
"$here/nat-lab.sh" up "$st" "$p" >"$st/up.log" 2>&1 || { tail -20 "$st/up.log"; exit 1; }
trap '"$here/nat-lab.sh" down "$st" >/dev/null 2>&1 || true; rm -rf "$st"' EXIT

BHPROBE=${BHPROBE:-$(dirname "$BRIDGEHEAD")/bhprobe}
wait_ping() { # ns src dst
	for _ in $(seq 1 100); do
		ip netns exec "$1" "$BHPROBE" ping -src "$2" -count 1 -timeout 500ms "$3" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	echo "no answer from $3 in $1" >&2
	return 1
}
wait_ping "$p-e1-node" 10.41.1.10 10.42.1.10
wait_ping "$p-a-node" 10.244.1.10 10.41.1.10
sleep 3 # direct-path probing settles
path=$(ip netns exec "$p-e1-gw" "$BRIDGEHEAD" status --socket "$st/e1.sock" 2>/dev/null | awk '$2 == "gw-e2" {for (i=4;i<=NF;i++) if ($i ~ /^(direct|via)$/) {print $i, ($i == "via" ? $(i+1) " " $(i+2) : ""); exit}}')
hub=$(ip netns pids "$p-a-gw" | head -1)
hz=$(getconf CLK_TCK)

# stream NAME CLIENT_NS CLIENT_IP SERVER_NS SERVER_IP
stream() {
	local name=$1 cns=$2 cip=$3 sns=$4 sip=$5
	ip netns exec "$sns" iperf3 -s -1 -B "$sip" >/dev/null 2>&1 &
	sleep 0.5
	local load s0 s1 h0 h1
	load=$(cut -d' ' -f1-3 /proc/loadavg)
	s0=$(head -1 /proc/stat); h0=$(awk '{print $14, $15}' "/proc/$hub/stat")
	ip netns exec "$cns" iperf3 -c "$sip" -B "$cip" -t "$secs" -J >"$st/$name.json"
	s1=$(head -1 /proc/stat); h1=$(awk '{print $14, $15}' "/proc/$hub/stat")
	wait
	python3 - "$name" "$hz" "$load" "$s0" "$s1" "$h0" "$h1" "$st/$name.json" <<'PY'
import json, sys
name, hz, load, s0, s1, h0, h1, js = sys.argv[1:]
hz = int(hz)
d = json.load(open(js))["end"]["sum_received"]
gb = d["bytes"] / 1e9
s0, s1 = [list(map(int, s.split()[1:])) for s in (s0, s1)]
ds = [(b - a) / hz for a, b in zip(s0, s1)]  # user nice system idle iowait irq softirq
(hu0, hs0), (hu1, hs1) = [map(int, h.split()) for h in (h0, h1)]
hu, hs = (hu1 - hu0) / hz, (hs1 - hs0) / hz
print(f"{name}: {d['bits_per_second']/1e6:.0f} Mbit/s, {gb:.3f} GB; gw-a utime {hu:.2f} s stime {hs:.2f} s"
      f" = {(hu+hs)/gb:.2f} s/GB (user {hu/gb:.2f}, sys {hs/gb:.2f});"
      f" machine user {ds[0]:.2f} sys {ds[2]:.2f} softirq {ds[6]:.2f} idle {ds[3]:.2f} s; load {load}")
PY
}
echo "E1 -> E2 path: ${path:-unknown}; NAT_E2=$NAT_E2; binary $BRIDGEHEAD; ${secs} s per stream"
stream relay "$p-e1-node" 10.41.1.10 "$p-e2-node" 10.42.1.10
stream term "$p-a-node" 10.244.1.10 "$p-e1-node" 10.41.1.10
