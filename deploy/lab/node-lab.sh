#!/usr/bin/env bash
# node-lab.sh: two sites of two nodes each, their gateways and an
# "internet", in network namespaces, for `bridgehead node`.
#
#   node-lab.sh up   STATE_DIR [PREFIX]   build the lab, start both gateways
#   node-lab.sh down STATE_DIR            stop everything, delete the namespaces
#
# Topology (PREFIX defaults to bhnode):
#
#   PREFIX-a-n1 ─┐                                       ┌─ PREFIX-b-n1
#   10.224.0.11  ├─ lan ─ PREFIX-a-gw ══ wan ══ PREFIX-b-gw ─ lan ─┤  192.168.50.11
#   PREFIX-a-n2 ─┘        10.224.0.4             192.168.50.2      └─ PREFIX-b-n2
#   10.224.0.12                │                                    192.168.50.12
#                         PREFIX-inet 198.51.100.100, 2001:db8:100::100
#
# Each site's LAN is a bridge in its gateway's namespace. The nodes run
# nothing yet: no routes, no pod network (the test starts `bridgehead node`
# in them). Their default route goes through their gateway, which also
# routes to the "internet" namespace (site A only) without any NAT: what
# the internet sees is what the node sent.
#
# BRIDGEHEAD names the binary. Everything created is recorded in STATE_DIR
# (namespaces, pids) so `down` removes exactly that; a test may append its
# own namespaces and pids there.
set -euo pipefail

BRIDGEHEAD=${BRIDGEHEAD:-./bin/bridgehead}
# CONFIG_EXTRA_A, CONFIG_EXTRA_B: top-level YAML added to gateway A's
# (B's) config, e.g. a relay section (as in lab.sh).

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

up() {
	local dir p=${2:-bhnode}
	dir=$(lab_state "$1" "$p")
	lab_namespaces "$dir" "$p" a-gw b-gw a-n1 a-n2 b-n1 b-n2 inet
	for ns in a-gw b-gw; do
		ip netns exec "$p-$ns" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
	done

	lan a 10.224.0.4/16 fd00:224::4/64
	lan b 192.168.50.2/24 fd00:50::2/64
	node a n1 10.224.0.11/16 fd00:224::11/64 10.224.0.4 fd00:224::4
	node a n2 10.224.0.12/16 fd00:224::12/64 10.224.0.4 fd00:224::4
	node b n1 192.168.50.11/24 fd00:50::11/64 192.168.50.2 fd00:50::2
	node b n2 192.168.50.12/24 fd00:50::12/64 192.168.50.2 fd00:50::2

	# WAN between the gateways.
	ip -n "$p-a-gw" link add wan type veth peer name wan netns "$p-b-gw"
	ip -n "$p-a-gw" addr add 203.0.113.1/24 dev wan
	ip -n "$p-b-gw" addr add 203.0.113.2/24 dev wan
	ip -n "$p-a-gw" link set wan up
	ip -n "$p-b-gw" link set wan up

	# The internet, behind gateway A, routing back to site A's node
	# addresses only (a pod address reaching it could not be answered).
	ip -n "$p-a-gw" link add inet type veth peer name eth0 netns "$p-inet"
	ip -n "$p-a-gw" addr add 198.51.100.1/24 dev inet
	ip -n "$p-a-gw" addr add 2001:db8:100::1/64 dev inet nodad
	ip -n "$p-inet" addr add 198.51.100.100/24 dev eth0
	ip -n "$p-inet" addr add 2001:db8:100::100/64 dev eth0 nodad
	ip -n "$p-a-gw" link set inet up
	ip -n "$p-inet" link set eth0 up
	ip -n "$p-inet" route add 10.224.0.0/16 via 198.51.100.1
	ip -n "$p-inet" -6 route add fd00:224::/64 via 2001:db8:100::1

	"$BRIDGEHEAD" genkey -o "$dir/a.key"
	"$BRIDGEHEAD" genkey -o "$dir/b.key"
	local pa pb
	pa=$("$BRIDGEHEAD" pubkey <"$dir/a.key")
	pb=$("$BRIDGEHEAD" pubkey <"$dir/b.key")
	catalog "$pa" "$pb" >"$dir/sites.yaml"
	for s in a b; do
		{
			lab_gateway "$dir" "$s" "${s}1" "$s"
			echo "listen: 0.0.0.0:51820"
			echo "interface: {name: bh0, mtu: 1420}"
			echo "metrics: {listen: 127.0.0.1:9641}"
			lab_config_extra "$s"
			cat "$dir/sites.yaml"
		} >"$dir/$s.yaml"
		"$BRIDGEHEAD" check --config "$dir/$s.yaml" >/dev/null
	done
	for s in a b; do
		lab_start "$dir" "$p" "$s" "$s-gw" "$BRIDGEHEAD"
	done
	lab_wait_up "$dir" "$p" a:a-gw b:b-gw
}

# lan SITE ADDR4 ADDR6: the site's LAN bridge in its gateway's namespace.
lan() {
	local g="$p-$1-gw"
	ip -n "$g" link add lan type bridge
	ip -n "$g" addr add "$2" dev lan
	ip -n "$g" addr add "$3" dev lan nodad
	ip -n "$g" link set lan up
}

# node SITE NAME ADDR4 ADDR6 GW4 GW6: a node on its site's LAN.
node() {
	local g="$p-$1-gw" n="$p-$1-$2"
	ip -n "$g" link add "$2" type veth peer name eth0 netns "$n"
	ip -n "$g" link set "$2" master lan up
	ip -n "$n" addr add "$3" dev eth0
	ip -n "$n" addr add "$4" dev eth0 nodad
	ip -n "$n" link set eth0 up
	ip -n "$n" route add default via "$5"
	ip -n "$n" -6 route add default via "$6"
}

catalog() {
	cat <<YAML
cluster:
  name: node-lab
  serviceCIDRs: [10.96.0.0/16]
sites:
  - name: site-a
    nodeCIDRs: [10.224.0.0/16, fd00:224::/64]
    podCIDRs: [10.244.0.0/16, fd00:244::/56]
    keepalive: 10s
    gateways:
      - {name: gw-a1, address: 10.224.0.4, address6: fd00:224::4, endpoint: 203.0.113.1:51820, publicKey: $1}
    nodes:
      - {name: node-a1, address: 10.224.0.11, podCIDR: 10.244.1.0/24, address6: fd00:224::11, podCIDR6: fd00:244:0:1::/64}
      - {name: node-a2, address: 10.224.0.12, podCIDR: 10.244.2.0/24, address6: fd00:224::12, podCIDR6: fd00:244:0:2::/64}
  - name: site-b
    nodeCIDRs: [192.168.50.0/24, fd00:50::/64]
    podCIDRs: [10.245.0.0/16, fd00:245::/56]
    keepalive: 10s
    gateways:
      - {name: gw-b1, address: 192.168.50.2, address6: fd00:50::2, endpoint: 203.0.113.2:51820, publicKey: $2}
    nodes:
      - {name: node-b1, address: 192.168.50.11, podCIDR: 10.245.1.0/24, address6: fd00:50::11, podCIDR6: fd00:245:0:1::/64}
      - {name: node-b2, address: 192.168.50.12, podCIDR: 10.245.2.0/24, address6: fd00:50::12, podCIDR6: fd00:245:0:2::/64}
YAML
}

lab_main "$@"
