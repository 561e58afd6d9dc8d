#!/usr/bin/env bash
# ha-lab.sh: the two-site lab with two gateways in site B, in network
# namespaces on this machine.
#
#   ha-lab.sh up     STATE_DIR [PREFIX]   build it, start the three gateways and the node-B balancer
#   ha-lab.sh down   STATE_DIR            stop everything, delete the namespaces (lab.sh down)
#
# Topology (PREFIX defaults to bhha):
#
#                                   ┌─ PREFIX-b-gw  (gw-b1) 192.168.50.2 ─┐
#   PREFIX-a-node ── PREFIX-a-gw ═ WAN bridge ═                      LAN bridge ── PREFIX-b-node
#   pod 10.244.1.10   gw-a1          (PREFIX-wan)                     (PREFIX-b-lan)   pod 10.245.1.10
#                                   └─ PREFIX-b-gw2 (gw-b2) 192.168.50.3 ─┘
#
# WAN: 203.0.113.1 (gw-a1), .2 (gw-b1), .3 (gw-b2) on one bridge. Site B's
# node holds the ECMP routes `bridgehead routes` prints for a site with two
# gateways and no routerAddress. Like a load balancer in front of the
# gateways (an Azure internal load balancer with HA ports and a /readyz
# probe, or keepalived), `bhprobe lb-watch` on node B keeps only the
# gateways whose /readyz answers 200 in those routes.
#
# BRIDGEHEAD (default ./bin/bridgehead) and BHPROBE (default ./bin/bhprobe)
# name the binaries; PROBE_INTERVAL (default: bridgehead's) is site B's
# probe interval; LAN_INTERFACE (default lan) is the gateways'
# lan.interface, and set empty leaves the lan section out (the default
# config: each gateway watches the interface that holds its address).
# Everything is recorded in STATE_DIR as lab.sh does, so `lab.sh down`
# removes exactly that.
set -euo pipefail

BRIDGEHEAD=${BRIDGEHEAD:-./bin/bridgehead}
BHPROBE=${BHPROBE:-./bin/bhprobe}
PROBE_INTERVAL=${PROBE_INTERVAL:-}
LAN_INTERFACE=${LAN_INTERFACE-lan}
LB_INTERVAL=${LB_INTERVAL:-100ms}
here=$(cd "$(dirname "$0")" && pwd)

. "$here/lib.sh"

# link NS DEV SWITCH PORT: a veth from NS (named DEV) to a port of the
# bridge in SWITCH.
link() {
	ip -n "$1" link add "$2" type veth peer name "$4" netns "$3"
	ip -n "$3" link set "$4" master br0 up
	ip -n "$1" link set "$2" up
}

up() {
	local dir p=${2:-bhha}
	dir=$(lab_state "$1" "$p")

	say "creating namespaces"
	lab_namespaces "$dir" "$p" a-node a-gw b-gw b-gw2 b-node wan b-lan
	for sw in wan b-lan; do
		ip -n "$p-$sw" link add br0 type bridge
		ip -n "$p-$sw" link set br0 up
	done

	say "wiring: node A -- gw-a1 == WAN bridge == gw-b1, gw-b2 -- LAN bridge -- node B"
	ip -n "$p-a-gw" link add lan type veth peer name eth0 netns "$p-a-node"
	ip -n "$p-a-gw" link set lan up
	ip -n "$p-a-node" link set eth0 up
	link "$p-a-gw" wan "$p-wan" a1
	link "$p-b-gw" wan "$p-wan" b1
	link "$p-b-gw2" wan "$p-wan" b2
	link "$p-b-gw" lan "$p-b-lan" g1
	link "$p-b-gw2" lan "$p-b-lan" g2
	link "$p-b-node" eth0 "$p-b-lan" node
	lab_two_sites "$p"
	ip -n "$p-b-gw2" addr add 192.168.50.3/24 dev lan
	ip -n "$p-b-gw2" addr add fd00:50::3/64 dev lan nodad
	ip -n "$p-a-gw" addr add 203.0.113.1/24 dev wan
	ip -n "$p-b-gw" addr add 203.0.113.2/24 dev wan
	ip -n "$p-b-gw2" addr add 203.0.113.3/24 dev wan

	say "keys and configs"
	local g
	for g in a1 b1 b2; do
		(umask 077 && "$BRIDGEHEAD" genkey >"$dir/$g.key")
		eval "pub_$g=\$(\"\$BRIDGEHEAD\" pubkey <\"\$dir/\$g.key\")"
	done
	# shellcheck disable=SC2154 # set by eval above
	catalog "$pub_a1" "$pub_b1" "$pub_b2" >"$dir/sites.yaml"
	for g in a1 b1 b2; do
		{
			lab_gateway "$dir" "${g:0:1}" "$g" "$g"
			echo "interface: {name: bh0, mtu: 1420}"
			# Watch the LAN side: a gateway that cannot deliver to its
			# site is drained (/readyz 503) and its flows move. Without
			# a lan section the gateway finds the interface itself.
			[ -z "$LAN_INTERFACE" ] || echo "lan: {interface: $LAN_INTERFACE}"
			# /readyz on every address: the balancer on node B asks it.
			echo "metrics: {listen: 0.0.0.0:9641}"
			cat "$dir/sites.yaml"
		} >"$dir/$g.yaml"
		run "$BRIDGEHEAD" check --config "$dir/$g.yaml"
	done

	say "node routes from 'bridgehead routes' (site B: ECMP over both gateways)"
	for s in a b; do
		lab_node_routes "$dir" "$p" "${s}1" "$s"
	done

	say "starting gateways"
	lab_start "$dir" "$p" a1 a-gw "$BRIDGEHEAD"
	lab_start "$dir" "$p" b1 b-gw "$BRIDGEHEAD"
	lab_start "$dir" "$p" b2 b-gw2 "$BRIDGEHEAD"
	lab_wait_up "$dir" "$p" a1:a-gw b1:b-gw b2:b-gw2

	say "node B's balancer: routes only via gateways whose /readyz answers 200"
	local dests
	dests=$(awk '/^ip (-6 )?route replace/ {print ($2 == "-6") ? $5 : $4}' "$dir/b-node-routes.sh" | paste -sd, -)
	ip netns exec "$p-b-node" "$BHPROBE" lb-watch -gateways 192.168.50.2,192.168.50.3 -gateways6 fd00:50::2,fd00:50::3 \
		-ready-port 9641 -interval "$LB_INTERVAL" -dests "$dests" >"$dir/lb.log" 2>&1 &
	echo $! >>"$dir/pids"
}

catalog() {
	local probe=
	[ -z "$PROBE_INTERVAL" ] || probe="    probeInterval: $PROBE_INTERVAL"
	cat <<YAML
sites:
  - name: site-a
    nodeCIDRs: [10.224.0.0/16, fd00:224::/64]
    podCIDRs: [10.244.0.0/16, fd00:244::/56]
$probe
    gateways:
      - {name: gw-a1, address: 10.224.0.4, address6: fd00:224::4, endpoint: 203.0.113.1:51820, publicKey: $1}
    nodes:
      - {name: node-a1, address: 10.224.0.5, podCIDR: 10.244.1.0/24, address6: fd00:224::5, podCIDR6: fd00:244:0:1::/64}
  - name: site-b
    nodeCIDRs: [192.168.50.0/24, fd00:50::/64]
    podCIDRs: [10.245.0.0/16, fd00:245::/56]
$probe
    gateways:
      - {name: gw-b1, address: 192.168.50.2, address6: fd00:50::2, endpoint: 203.0.113.2:51820, publicKey: $2}
      - {name: gw-b2, address: 192.168.50.3, address6: fd00:50::3, endpoint: 203.0.113.3:51820, publicKey: $3}
    nodes:
      - {name: node-b1, address: 192.168.50.5, podCIDR: 10.245.1.0/24, address6: fd00:50::5, podCIDR6: fd00:245:0:1::/64}
YAML
}

lab_main "$@"
