#!/usr/bin/env bash
# nat-lab.sh: three bridgehead sites in network namespaces, two of them
# behind NAT (issue #20, "Sites behind NAT").
#
#   nat-lab.sh up   STATE_DIR [PREFIX]   build the lab, start the gateways
#   nat-lab.sh down STATE_DIR            stop the gateways, delete the namespaces
#
# Topology (PREFIX defaults to bhnat):
#
#   a-node ── a-gw ─────────────────┐
#   pod 10.244.1.10   203.0.113.1   │
#                                   │ wan: a bridge in PREFIX-wan,
#   e1-node ── e1-gw ── e1-nat ─────┤      203.0.113.0/24 (the Internet)
#   pod 10.41.1.10  192.168.1.2  203.0.113.11 (masquerade)
#                                   │
#   e2-node ── e2-gw ── e2-nat ─────┤
#   pod 10.42.1.10  192.168.2.2  203.0.113.12 (masquerade)
#                                   │
#   (HUBS=2)       a2-gw ───────────┘
#                  203.0.113.2, on site A's LAN beside a-gw
#
# Site A's gateway has a public endpoint. The edge gateways have none:
# each sits behind its own NAT router, which masquerades what leaves
# through its WAN side and lets nothing in that it did not see leave
# (nftables, policy drop, forwarded or for itself), so no inbound port is
# open. Dropping unsolicited datagrams to the router itself matters for
# hole punching: Linux would otherwise keep a conntrack entry for the
# other spoke's first probe, and the gateway's own datagram to that spoke
# would then leave with a new port (a NAT clash) instead of its mapping. The catalog
# lists the edge sites without endpoints and without `via`: site A is
# their hub by default.
#
# HUBS=2 adds a second gateway to site A, the hub: gw-a2 at 203.0.113.2,
# with gw-a on a LAN bridge (PREFIX-a-lan) to node A, whose routes then
# spread over both (ECMP, as `bridgehead routes` prints them). The edge
# sites relay through both; a relayed flow takes one by its hash.
#
# NAT_E1, NAT_E2: "masquerade" (default; Linux keeps the source port and
# reuses the mapping for every destination, an endpoint-independent
# mapping) or "random" (`masquerade random`: a new random port per
# destination, a symmetric NAT).
# START=0 builds the namespaces and configs and starts no gateway.
# BRIDGEHEAD names the binary. Everything created is recorded in STATE_DIR
# so `down` removes exactly that.
set -euo pipefail

BRIDGEHEAD=${BRIDGEHEAD:-./bin/bridgehead}
CIPHER=${CIPHER:-aesgcm}
TUN_MTU=${TUN_MTU:-1380}
NAT_E1=${NAT_E1:-masquerade}
NAT_E2=${NAT_E2:-masquerade}
START=${START:-1}
HUBS=${HUBS:-1}
# RUN_ARGS: extra flags for `bridgehead run`.
RUN_ARGS=${RUN_ARGS:-}

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SITES="a e1 e2"
[ "$HUBS" = 1 ] || [ "$HUBS" = 2 ] || { echo "HUBS: want 1 or 2, not $HUBS" >&2; exit 2; }
# GATEWAYS: one config, key, socket and log each (a2 is site A's second).
GATEWAYS=$SITES
[ "$HUBS" = 1 ] || GATEWAYS="a a2 e1 e2"

up() {
	local dir p=${2:-bhnat}
	dir=$(lab_state "$1" "$p")

	say "creating namespaces ($p-*)"
	local extra=
	[ "$HUBS" = 1 ] || extra="a2-gw a-lan"
	# shellcheck disable=SC2086 # extra is a list of names
	lab_namespaces "$dir" "$p" wan a-gw a-node e1-nat e1-gw e1-node e2-nat e2-gw e2-node $extra

	say "the WAN: a bridge, site A's gateway and the two NAT routers on it"
	ip -n "$p-wan" link add br0 type bridge
	ip -n "$p-wan" link set br0 up
	local wanns
	local wans="a:a-gw e1:e1-nat e2:e2-nat"
	[ "$HUBS" = 1 ] || wans="$wans a2:a2-gw"
	for pair in $wans; do
		wanns=${pair#*:}
		run ip -n "$p-wan" link add "to-${pair%%:*}" type veth peer name wan netns "$p-$wanns"
		ip -n "$p-wan" link set "to-${pair%%:*}" master br0 up
		ip -n "$p-$wanns" link set wan up
	done
	ip -n "$p-a-gw" addr add 203.0.113.1/24 dev wan
	[ "$HUBS" = 1 ] || ip -n "$p-a2-gw" addr add 203.0.113.2/24 dev wan
	ip -n "$p-e1-nat" addr add 203.0.113.11/24 dev wan
	ip -n "$p-e2-nat" addr add 203.0.113.12/24 dev wan

	say "edge sites: gateway behind its NAT router"
	local i mode
	for i in 1 2; do
		mode=NAT_E$i
		mode=${!mode}
		run ip -n "$p-e$i-nat" link add lan type veth peer name uplink netns "$p-e$i-gw"
		ip -n "$p-e$i-nat" addr add "192.168.$i.1/24" dev lan
		ip -n "$p-e$i-nat" link set lan up
		ip -n "$p-e$i-gw" addr add "192.168.$i.2/24" dev uplink
		ip -n "$p-e$i-gw" link set uplink up
		ip -n "$p-e$i-gw" route add default via "192.168.$i.1"
		ip netns exec "$p-e$i-nat" sysctl -qw net.ipv4.ip_forward=1
		case $mode in
		masquerade) mode=masquerade ;;
		random) mode="masquerade random" ;;
		*) echo "NAT_E$i: want masquerade or random, not $mode" >&2; return 1 ;;
		esac
		echo "    e$i-nat: $mode"
		ip netns exec "$p-e$i-nat" nft -f - <<NFT
table ip nat {
	chain post {
		type nat hook postrouting priority srcnat;
		oifname "wan" $mode
	}
}
table inet filter {
	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
		iifname "lan" oifname "wan" accept
	}
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		iifname "lan" accept
		iifname "lo" accept
	}
}
NFT
	done

	say "site LANs: node -- gateway"
	if [ "$HUBS" = 1 ]; then
		lanside a-gw a-node 10.224.0 10.244.1.10
	else
		# Site A: both gateways and the node on a bridge.
		ip -n "$p-a-lan" link add br0 type bridge
		ip -n "$p-a-lan" link set br0 up
		local port ns dev sw
		for port in a-gw:lan:gw1 a2-gw:lan:gw2 a-node:eth0:node; do
			IFS=: read -r ns dev sw <<<"$port"
			ip -n "$p-$ns" link add "$dev" type veth peer name "$sw" netns "$p-a-lan"
			ip -n "$p-a-lan" link set "$sw" master br0 up
			ip -n "$p-$ns" link set "$dev" up
		done
		ip -n "$p-a-gw" addr add 10.224.0.4/16 dev lan
		ip -n "$p-a2-gw" addr add 10.224.0.6/16 dev lan
		ip -n "$p-a-node" addr add 10.224.0.5/16 dev eth0
		ip -n "$p-a-node" addr add 10.244.1.10/32 dev lo
	fi
	lanside e1-gw e1-node 10.31.0 10.41.1.10
	lanside e2-gw e2-node 10.32.0 10.42.1.10

	say "generating keys"
	local s
	for s in $GATEWAYS; do
		"$BRIDGEHEAD" genkey -o "$dir/$s.key"
	done

	say "writing configs"
	local a2=
	[ "$HUBS" = 1 ] || a2=$("$BRIDGEHEAD" pubkey <"$dir/a2.key")
	catalog "$("$BRIDGEHEAD" pubkey <"$dir/a.key")" "$("$BRIDGEHEAD" pubkey <"$dir/e1.key")" \
		"$("$BRIDGEHEAD" pubkey <"$dir/e2.key")" "$a2" >"$dir/sites.yaml"
	local site
	for s in $GATEWAYS; do
		site=$s
		[ "$s" != a2 ] || site=a
		{
			lab_gateway "$dir" "$site" "$s" "$s"
			echo "listen: 0.0.0.0:51820"
			echo "cipher: $CIPHER"
			echo "interface:"
			echo "  name: bh0"
			echo "  mtu: $TUN_MTU"
			echo "metrics:"
			echo "  listen: 127.0.0.1:9641"
			cat "$dir/sites.yaml"
		} >"$dir/$s.yaml"
		run "$BRIDGEHEAD" check --config "$dir/$s.yaml"
	done

	say "node routes from 'bridgehead routes'"
	for s in $SITES; do
		lab_node_routes "$dir" "$p" "$s" "$s"
	done

	[ "$START" = 1 ] || return 0
	say "starting gateways"
	local up=()
	for s in $GATEWAYS; do
		# shellcheck disable=SC2086 # RUN_ARGS is a list of flags
		lab_start "$dir" "$p" "$s" "$s-gw" "$BRIDGEHEAD" $RUN_ARGS
		up+=("$s:$s-gw")
	done
	lab_wait_up "$dir" "$p" "${up[@]}"
}

# lanside GW NODE NET POD: a veth between a gateway and its node, the
# gateway at NET.4, the node at NET.5 with POD on its loopback.
lanside() {
	local p gw=$1 node=$2 net=$3 pod=$4
	p=$(cat "$dir/prefix")
	ip -n "$p-$gw" link add lan type veth peer name eth0 netns "$p-$node"
	ip -n "$p-$gw" addr add "$net.4/16" dev lan
	ip -n "$p-$node" addr add "$net.5/16" dev eth0
	ip -n "$p-$node" addr add "$pod/32" dev lo
	ip -n "$p-$gw" link set lan up
	ip -n "$p-$node" link set eth0 up
}

catalog() {
	cat <<YAML
sites:
  - name: site-a
    nodeCIDRs: [10.224.0.0/16]
    podCIDRs: [10.244.0.0/16]
    gateways:
      - {name: gw-a, address: 10.224.0.4, endpoint: "203.0.113.1:51820", publicKey: "$1"}
YAML
	[ -z "$4" ] || echo "      - {name: gw-a2, address: 10.224.0.6, endpoint: \"203.0.113.2:51820\", publicKey: \"$4\"}"
	cat <<YAML
    nodes:
      - {name: node-a1, address: 10.224.0.5, podCIDR: 10.244.1.0/24}
  - name: site-e1
    nodeCIDRs: [10.31.0.0/16]
    podCIDRs: [10.41.0.0/16]
    gateways:
      - {name: gw-e1, address: 10.31.0.4, publicKey: "$2"}
    nodes:
      - {name: node-e1, address: 10.31.0.5, podCIDR: 10.41.1.0/24}
  - name: site-e2
    nodeCIDRs: [10.32.0.0/16]
    podCIDRs: [10.42.0.0/16]
    gateways:
      - {name: gw-e2, address: 10.32.0.4, publicKey: "$3"}
    nodes:
      - {name: node-e2, address: 10.32.0.5, podCIDR: 10.42.1.0/24}
YAML
}

lab_main "$@"
