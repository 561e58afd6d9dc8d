# lib.sh: what the labs (lab.sh, ha-lab.sh, nat-lab.sh, node-lab.sh)
# share. Sourced, not run:
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# Every lab records what it creates in its STATE_DIR: `prefix`,
# `namespaces` (one a line) and `pids` (one a line), so that lab_down
# removes exactly that and a test may append its own namespaces and pids.
#
#   say TEXT...                   a step, in bold
#   run CMD...                    print the command, then run it
#   lab_state DIR PREFIX          make DIR, start its state files; prints DIR's absolute path
#   lab_namespaces DIR PREFIX NAME...
#                                 namespaces PREFIX-NAME, lo up, no IPv6 DAD, recorded in DIR
#   lab_two_sites PREFIX          the address plan of lab.sh on PREFIX-{a,b}-{gw,node}:
#                                 gateway lan, node eth0 and the node's pod on lo
#   lab_node_routes DIR PREFIX CONFIG SITE
#                                 `bridgehead routes` of CONFIG.yaml for site-SITE, run in PREFIX-SITE-node
#   lab_start DIR PREFIX NAME NS BIN [ARGS...]
#                                 BIN run --config NAME.yaml ARGS in PREFIX-NS; logs to NAME.log, pid to NAME.pid
#   lab_wait_up DIR PREFIX NAME:NS...
#                                 wait (10 s) until each gateway's bh0 has routes; else show its log, fail
#   lab_gateway DIR SITE GATEWAY NAME
#                                 the head of a gateway's config: site-SITE, gw-GATEWAY,
#                                 its key NAME.key and control socket NAME.sock in DIR
#   lab_config_extra SITE         CONFIG_EXTRA_A (site a) or CONFIG_EXTRA_B (site b), when set:
#                                 top-level YAML a test adds to that gateway's config
#   lab_down DIR                  stop the recorded pids, delete the recorded namespaces
#   lab_main ARGS...              the command line: up STATE_DIR [PREFIX] (the lab's up) | down STATE_DIR

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
run() { printf '    $ %s\n' "$*"; "$@"; }

lab_state() {
	local dir=$1
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	echo "$2" >"$dir/prefix"
	: >"$dir/namespaces"
	: >"$dir/pids"
	echo "$dir"
}

lab_namespaces() {
	local dir=$1 p=$2 ns
	shift 2
	for ns in "$@"; do
		run ip netns add "$p-$ns"
		echo "$p-$ns" >>"$dir/namespaces"
		ip -n "$p-$ns" link set lo up
		# Lab links come up at once; duplicate address detection would
		# hold IPv6 (link-local addresses included) back for a second.
		ip netns exec "$p-$ns" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
	done
}

# lab_site PREFIX SITE GW_ADDR4 GW_ADDR6 NODE_ADDR4 NODE_ADDR6 POD4 POD6:
# a site's gateway on its lan, its node on eth0 with the pod on lo.
lab_site() {
	local gw="$1-$2-gw" node="$1-$2-node"
	ip -n "$gw" addr add "$3" dev lan
	ip -n "$gw" addr add "$4" dev lan nodad
	ip -n "$node" addr add "$5" dev eth0
	ip -n "$node" addr add "$6" dev eth0 nodad
	ip -n "$node" addr add "$7" dev lo
	ip -n "$node" addr add "$8" dev lo
}

lab_two_sites() {
	lab_site "$1" a 10.224.0.4/16 fd00:224::4/64 10.224.0.5/16 fd00:224::5/64 10.244.1.10/32 fd00:244:0:1::10/128
	lab_site "$1" b 192.168.50.2/24 fd00:50::2/64 192.168.50.5/24 fd00:50::5/64 10.245.1.10/32 fd00:245:0:1::10/128
}

lab_node_routes() {
	local dir=$1 p=$2 cfg=$3 s=$4
	"$BRIDGEHEAD" routes --config "$dir/$cfg.yaml" --site "site-$s" --format ip >"$dir/$s-node-routes.sh"
	sed 's/^/    /' "$dir/$s-node-routes.sh"
	ip netns exec "$p-$s-node" sh -e "$dir/$s-node-routes.sh"
}

lab_start() {
	local dir=$1 p=$2 name=$3 ns=$4 bin=$5
	shift 5
	ip netns exec "$p-$ns" "$bin" run --config "$dir/$name.yaml" "$@" >"$dir/$name.log" 2>&1 &
	echo $! >>"$dir/pids"
	echo $! >"$dir/$name.pid"
	echo "    $name pid $! (log $dir/$name.log)"
}

lab_wait_up() {
	local dir=$1 p=$2 gw ok
	shift 2
	for gw in "$@"; do
		ok=
		for _ in $(seq 1 100); do
			if ip -n "$p-${gw#*:}" route show dev bh0 2>/dev/null | grep -q .; then ok=1; break; fi
			sleep 0.1
		done
		if [ -z "$ok" ]; then
			echo "gateway ${gw%%:*} did not come up; its log:" >&2
			cat "$dir/${gw%%:*}.log" >&2
			return 1
		fi
	done
}

lab_down() {
	local dir=$1
	[ -d "$dir" ] || return 0
	if [ -f "$dir/pids" ]; then
		while read -r pid; do
			[ -n "$pid" ] || continue
			kill -TERM "$pid" 2>/dev/null || true
		done <"$dir/pids"
		# A second signal: gateways stop at once instead of draining
		# first (SIGTERM alone drains; the lab is going away).
		while read -r pid; do
			[ -n "$pid" ] || continue
			kill -INT "$pid" 2>/dev/null || true
		done <"$dir/pids"
		while read -r pid; do
			[ -n "$pid" ] || continue
			for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
			kill -KILL "$pid" 2>/dev/null || true
		done <"$dir/pids"
		: >"$dir/pids"
	fi
	if [ -f "$dir/namespaces" ]; then
		while read -r ns; do
			[ -n "$ns" ] || continue
			ip netns del "$ns" 2>/dev/null || true
		done <"$dir/namespaces"
		: >"$dir/namespaces"
	fi
}

lab_gateway() {
	echo "site: site-$2"
	echo "gateway: gw-$3"
	echo "privateKeyFile: $1/$4.key"
	echo "controlSocket: $1/$4.sock"
}

lab_config_extra() {
	case $1 in
	a) [ -z "${CONFIG_EXTRA_A:-}" ] || printf '%s\n' "$CONFIG_EXTRA_A" ;;
	b) [ -z "${CONFIG_EXTRA_B:-}" ] || printf '%s\n' "$CONFIG_EXTRA_B" ;;
	esac
}

lab_main() {
	case "${1:-}" in
	up) shift; up "$@" ;;
	down) shift; lab_down "$@" ;;
	*) echo "usage: $0 up STATE_DIR [PREFIX] | down STATE_DIR" >&2; exit 2 ;;
	esac
}
