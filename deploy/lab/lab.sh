#!/usr/bin/env bash
# lab.sh: a two-site bridgehead lab in network namespaces on this machine.
#
#   lab.sh up   STATE_DIR [PREFIX]   build the lab, start both gateways
#   lab.sh down STATE_DIR            stop the gateways, delete the namespaces
#
# Topology (PREFIX defaults to bhlab):
#
#   PREFIX-a-node ── lan ── PREFIX-a-gw ══ wan ══ PREFIX-b-gw ── lan ── PREFIX-b-node
#   pod 10.244.1.10          bridgehead          bridgehead          pod 10.245.1.10
#       fd00:244:0:1::10     10.224.0.4          192.168.50.2            fd00:245:0:1::10
#
# The node namespaces run nothing of ours: they hold a pod address and only
# the static routes `bridgehead routes` prints for their site. Each gateway
# namespace runs `bridgehead run` with a generated key and config.
#
# BRIDGEHEAD (default ./bin/bridgehead) names the binary. BRIDGEHEAD_A and
# BRIDGEHEAD_B (default BRIDGEHEAD) name the binary that gateway A (B)
# checks its config with and runs, e.g. a previous release's
# (e2e/compat_test.go); keys, the catalog and node routes come from
# BRIDGEHEAD. Everything lab.sh creates is recorded in STATE_DIR so `down`
# removes exactly that.
set -euo pipefail

BRIDGEHEAD=${BRIDGEHEAD:-./bin/bridgehead}
BRIDGEHEAD_A=${BRIDGEHEAD_A:-$BRIDGEHEAD}
BRIDGEHEAD_B=${BRIDGEHEAD_B:-$BRIDGEHEAD}
CIPHER=${CIPHER:-aesgcm}
TUN_MTU=${TUN_MTU:-1420}
WAN_MTU=${WAN_MTU:-1500}
KEEPALIVE=${KEEPALIVE:-10s}
OFFLOAD=${OFFLOAD:-true}
# RUN_ARGS: extra flags for `bridgehead run` (tests: --rekey-after 10s).
RUN_ARGS=${RUN_ARGS:-}
# CONFIG_EXTRA_A, CONFIG_EXTRA_B: top-level YAML added to gateway A's
# (B's) config, e.g. a relay section.

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

up() {
	local dir p=${2:-bhlab}
	dir=$(lab_state "$1" "$p")

	say "creating namespaces ($p-a-node, $p-a-gw, $p-b-gw, $p-b-node)"
	lab_namespaces "$dir" "$p" a-node a-gw b-gw b-node

	say "wiring links: node A -- gateway A == WAN == gateway B -- node B"
	run ip -n "$p-a-gw" link add lan type veth peer name eth0 netns "$p-a-node"
	run ip -n "$p-b-gw" link add lan type veth peer name eth0 netns "$p-b-node"
	run ip -n "$p-a-gw" link add wan type veth peer name wan netns "$p-b-gw"
	ip -n "$p-a-gw" link set wan mtu "$WAN_MTU"
	ip -n "$p-b-gw" link set wan mtu "$WAN_MTU"
	# Site LANs
	lab_two_sites "$p"
	# WAN
	ip -n "$p-a-gw" addr add 203.0.113.1/24 dev wan
	ip -n "$p-b-gw" addr add 203.0.113.2/24 dev wan
	for ns in a-gw b-gw; do
		ip -n "$p-$ns" link set lan up
		ip -n "$p-$ns" link set wan up
	done
	ip -n "$p-a-node" link set eth0 up
	ip -n "$p-b-node" link set eth0 up

	say "generating keys"
	"$BRIDGEHEAD" genkey -o "$dir/a.key"
	"$BRIDGEHEAD" genkey -o "$dir/b.key"
	local pa pb
	pa=$("$BRIDGEHEAD" pubkey <"$dir/a.key")
	pb=$("$BRIDGEHEAD" pubkey <"$dir/b.key")
	echo "    gw-a1 public key $pa"
	echo "    gw-b1 public key $pb"

	say "writing configs ($dir/a.yaml, $dir/b.yaml)"
	catalog "$pa" "$pb" >"$dir/sites.yaml"
	for s in a b; do
		{
			lab_gateway "$dir" "$s" "${s}1" "$s"
			echo "listen: 0.0.0.0:51820"
			echo "cipher: $CIPHER"
			echo "interface:"
			echo "  name: bh0"
			echo "  mtu: $TUN_MTU"
			echo "  offload: $OFFLOAD"
			echo "metrics:"
			echo "  listen: 127.0.0.1:9641"
			lab_config_extra "$s"
			cat "$dir/sites.yaml"
		} >"$dir/$s.yaml"
	done

	say "checking both configs, each with the binary that runs it"
	run "$BRIDGEHEAD_A" check --config "$dir/a.yaml"
	run "$BRIDGEHEAD_B" check --config "$dir/b.yaml"

	say "installing node routes from 'bridgehead routes' (nodes run nothing of ours)"
	for s in a b; do
		lab_node_routes "$dir" "$p" "$s" "$s"
	done

	say "starting gateways"
	for s in a b; do
		local bin=$BRIDGEHEAD_A
		if [ "$s" = b ]; then bin=$BRIDGEHEAD_B; fi
		# shellcheck disable=SC2086 # RUN_ARGS is a list of flags
		lab_start "$dir" "$p" "$s" "$s-gw" "$bin" $RUN_ARGS
	done
	lab_wait_up "$dir" "$p" a:a-gw b:b-gw
	ip -n "$p-a-gw" route show dev bh0 | sed 's/^/    gw-a1: /'
}

catalog() {
	cat <<YAML
sites:
  - name: site-a
    nodeCIDRs: [10.224.0.0/16, fd00:224::/64]
    podCIDRs: [10.244.0.0/16, fd00:244::/56]
    keepalive: $KEEPALIVE
    gateways:
      - name: gw-a1
        address: 10.224.0.4
        address6: fd00:224::4
        endpoint: 203.0.113.1:51820
        publicKey: $1
    nodes:
      - {name: node-a1, address: 10.224.0.5, podCIDR: 10.244.1.0/24, address6: fd00:224::5, podCIDR6: fd00:244:0:1::/64}
  - name: site-b
    nodeCIDRs: [192.168.50.0/24, fd00:50::/64]
    podCIDRs: [10.245.0.0/16, fd00:245::/56]
    keepalive: $KEEPALIVE
    gateways:
      - name: gw-b1
        address: 192.168.50.2
        address6: fd00:50::2
        endpoint: 203.0.113.2:51820
        publicKey: $2
    nodes:
      - {name: node-b1, address: 192.168.50.5, podCIDR: 10.245.1.0/24, address6: fd00:50::5, podCIDR6: fd00:245:0:1::/64}
YAML
}

lab_main "$@"
