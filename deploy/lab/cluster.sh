#!/usr/bin/env bash
# cluster.sh: a real two-site Kubernetes cluster on this machine, each node
# its own network and mount namespace, bridgehead installed on it the way
# deploy/kubernetes/README.md tells an operator to.
#
#   cluster.sh up    STATE_DIR   build the namespaces, start the control plane, gateways and nodes
#   cluster.sh down  STATE_DIR   stop everything it started, remove namespaces, mounts and cgroups
#   cluster.sh shell STATE_DIR NODE [CMD...]   a shell (or CMD) on NODE: its network and mount namespace
#
# Topology (namespaces are PREFIX-NAME, PREFIX bhc):
#
#   site-a  LAN 10.224.0.0/16 (bridge in rt-a)    pods 10.244.0.0/16
#     cp     10.224.0.10  etcd, kube-apiserver, kube-controller-manager, kube-scheduler
#     gw-a1  10.224.0.4   gw-a2 10.224.0.5   bridgehead gateways (WAN .4, .5)
#     a1     10.224.0.11  a2    10.224.0.12  nodes: containerd, kubelet, kube-proxy
#   site-b  LAN 192.168.50.0/24 (bridge in rt-b) pods 10.245.0.0/16
#     gw-b1  192.168.50.4 bridgehead gateway (WAN .6)
#     b1     192.168.50.11 b2   192.168.50.12 nodes
#   WAN 198.18.0.0/24 (bridge in wan): rt-a .1, rt-b .2, the API server's
#     public endpoint (cp) .10, gateways .4 .5 .6, a server outside the
#     cluster (inet) .100, and this machine's root namespace .254, where
#     the admin kubeconfig reaches the API server.
#
# The site routers rt-a and rt-b are each site's network (a VNet, a
# customer LAN): the nodes' default route, and the route table that sends
# the other site's CIDRs to the site's gateways (site A: ECMP over both).
# So the control plane reaches the kubelets of site B, and they reach it,
# only through the gateways. The gateways and bridgehead's pods reach the
# API server at its public endpoint, as an AKS cluster's do.
#
# STATE_DIR holds everything: certificates, configs, each node's state
# (bound over /etc/cni/net.d, /opt/cni/bin, /var/lib/kubelet, ... in its
# mount namespace), logs, the PIDs it started and the namespaces it made.
# CLUSTER_BIN (the build of hack/cluster/build.sh), KUBE_TESTENV_DIR
# (etcd, kube-apiserver), BRIDGEHEAD (the binary, for the gateway VMs),
# IMAGES (OCI archives of hack/cluster/images.sh) and BRIDGEHEAD_IMAGE
# (make container's archive) name inputs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
P=${CLUSTER_PREFIX:-bhc}
CLUSTER_BIN=${CLUSTER_BIN:-$HOME/.cache/bridgehead/cluster/bin}
KUBE_TESTENV_DIR=${KUBE_TESTENV_DIR:-$HOME/.cache/bridgehead/kube-testenv}
BRIDGEHEAD=${BRIDGEHEAD:-$repo/bin/bridgehead}
NODES="a1 a2 b1 b2"
GATEWAYS="gw-a1 gw-a2 gw-b1"

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

# Node facts: site, LAN address, router.
node_site() { case $1 in a*) echo site-a ;; b*) echo site-b ;; esac; }
node_addr() {
	case $1 in
	a1) echo 10.224.0.11 ;; a2) echo 10.224.0.12 ;;
	b1) echo 192.168.50.11 ;; b2) echo 192.168.50.12 ;;
	esac
}
gw_lan() { case $1 in gw-a1) echo 10.224.0.4 ;; gw-a2) echo 10.224.0.5 ;; gw-b1) echo 192.168.50.4 ;; esac; }
gw_wan() { case $1 in gw-a1) echo 198.18.0.4 ;; gw-a2) echo 198.18.0.5 ;; gw-b1) echo 198.18.0.6 ;; esac; }
lan_of() { case $1 in *a*) echo a ;; *b*) echo b ;; esac; }

cgroup_v2() { [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; }

# ---------------------------------------------------------------- network

ns_add() {
	ip netns add "$P-$1"
	echo "$P-$1" >>"$dir/namespaces"
	ip -n "$P-$1" link set lo up
	ip netns exec "$P-$1" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
}

# plug NS DEV SWITCH-NS PORT ADDR/LEN: a veth from NS into SWITCH-NS's br0.
plug() {
	ip -n "$P-$1" link add "$2" type veth peer name "$4" netns "$P-$3"
	ip -n "$P-$3" link set "$4" master br0 up
	ip -n "$P-$1" link set "$2" up
	ip -n "$P-$1" addr add "$5" dev "$2"
}

network() {
	say "network: WAN, site routers, control plane, gateways, nodes, outside server"
	for n in wan rt-a rt-b inet cp $GATEWAYS $NODES; do ns_add "$n"; done
	for sw in wan rt-a rt-b; do
		ip -n "$P-$sw" link add br0 type bridge
		ip -n "$P-$sw" link set br0 up
	done
	ip -n "$P-rt-a" addr add 10.224.0.1/16 dev br0
	ip -n "$P-rt-b" addr add 192.168.50.1/24 dev br0
	plug rt-a wan wan rt-a 198.18.0.1/24
	plug rt-b wan wan rt-b 198.18.0.2/24
	plug inet eth0 wan inet 198.18.0.100/24
	plug cp wan wan cp 198.18.0.10/24
	plug cp eth0 rt-a cp 10.224.0.10/16
	ip -n "$P-cp" route add default via 10.224.0.1
	for g in $GATEWAYS; do
		local s
		s=$(lan_of "$g")
		plug "$g" wan wan "$g" "$(gw_wan "$g")/24"
		plug "$g" lan "rt-$s" "$g" "$(gw_lan "$g")/$([ "$s" = a ] && echo 16 || echo 24)"
	done
	for n in $NODES; do
		local s
		s=$(lan_of "$n")
		plug "$n" eth0 "rt-$s" "$n" "$(node_addr "$n")/$([ "$s" = a ] && echo 16 || echo 24)"
		ip -n "$P-$n" route add default via "$([ "$s" = a ] && echo 10.224.0.1 || echo 192.168.50.1)"
	done
	# The sites' route tables: the other site's node and pod CIDRs to the
	# site's gateways. The outside server routes back to both sites.
	ip -n "$P-rt-a" route add 192.168.50.0/24 nexthop via 10.224.0.4 nexthop via 10.224.0.5
	ip -n "$P-rt-a" route add 10.245.0.0/16 nexthop via 10.224.0.4 nexthop via 10.224.0.5
	ip -n "$P-rt-b" route add 10.224.0.0/16 via 192.168.50.4
	ip -n "$P-rt-b" route add 10.244.0.0/16 via 192.168.50.4
	# The site's own pod CIDR to its gateways too: they route each node's
	# block to its node (from the catalog), so hosts of the site that are
	# not nodes (the control plane here, anything in a VNet) reach pods
	# with one static route per site, not one per node kept in step with
	# every join.
	ip -n "$P-rt-a" route add 10.244.0.0/16 nexthop via 10.224.0.4 nexthop via 10.224.0.5
	ip -n "$P-rt-b" route add 10.245.0.0/16 via 192.168.50.4
	ip -n "$P-inet" route add 10.224.0.0/16 via 198.18.0.1
	ip -n "$P-inet" route add 192.168.50.0/24 via 198.18.0.2
	for r in rt-a rt-b $GATEWAYS $NODES; do ip netns exec "$P-$r" sysctl -qw net.ipv4.ip_forward=1; done
	# This machine's root namespace on the WAN, for the admin kubeconfig.
	ip link add "$P-root" type veth peer name root netns "$P-wan"
	echo "$P-root" >"$dir/rootlink"
	ip -n "$P-wan" link set root master br0 up
	ip link set "$P-root" up
	ip addr add 198.18.0.254/24 dev "$P-root"
}

# ------------------------------------------------------------ certificates

# cert NAME CN O [SANS]: a key and a certificate signed by the cluster CA.
cert() {
	local name=$1 cn=$2 o=$3 sans=${4:-}
	local subj="/CN=$cn"
	[ -z "$o" ] || subj="/O=$o$subj"
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$pki/$name.key" \
		-subj "$subj" -out "$pki/$name.csr" 2>/dev/null
	local ext="basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth,serverAuth"
	[ -z "$sans" ] || ext="$ext\nsubjectAltName=$sans"
	openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 30 \
		-extfile <(printf "$ext") -out "$pki/$name.crt" 2>/dev/null
	rm -f "$pki/$name.csr"
}

# kubeconfig FILE SERVER CERT-NAME
kubeconfig() {
	cat >"$1" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: bhc
  cluster: {server: "$2", certificate-authority: "$pki/ca.crt"}
users:
- name: $3
  user: {client-certificate: "$pki/$3.crt", client-key: "$pki/$3.key"}
contexts:
- name: bhc
  context: {cluster: bhc, user: $3}
current-context: bhc
YAML
}

certs() {
	say "certificates"
	pki=$dir/pki
	mkdir -p "$pki"
	openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$pki/ca.key" \
		-subj "/CN=bhc-ca" -days 30 -out "$pki/ca.crt" 2>/dev/null
	cert apiserver kube-apiserver "" \
		"DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1,IP:10.224.0.10,IP:198.18.0.10,IP:127.0.0.1"
	cert admin admin system:masters
	cert apiserver-kubelet kube-apiserver-kubelet-client system:masters
	cert kcm system:kube-controller-manager ""
	cert scheduler system:kube-scheduler ""
	cert kube-proxy system:kube-proxy ""
	for n in $NODES; do cert "node-$n" "system:node:$n" system:nodes; done
	openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
	openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
	kubeconfig "$dir/kubeconfig" https://198.18.0.10:6443 admin
	kubeconfig "$dir/cp-kcm.kubeconfig" https://127.0.0.1:6443 kcm
	kubeconfig "$dir/cp-scheduler.kubeconfig" https://127.0.0.1:6443 scheduler
	# The nodes' own components reach the API server at its private
	# address, through the gateways for site B.
	kubeconfig "$dir/kube-proxy.kubeconfig" https://10.224.0.10:6443 kube-proxy
	for n in $NODES; do kubeconfig "$dir/node-$n.kubeconfig" https://10.224.0.10:6443 "node-$n"; done
}

# ---------------------------------------------------------------- processes

# bg NAME NS CMD...: start CMD in namespace NS (network only), log to NAME.log.
bg() {
	local name=$1 ns=$2
	shift 2
	ip netns exec "$P-$ns" "$@" >"$dir/logs/$name.log" 2>&1 &
	echo "$!" >>"$dir/pids"
	echo "$!" >"$dir/pids.d/$name"
}

wait_for() { # DESC TRIES CMD...
	local desc=$1 tries=$2
	shift 2
	for _ in $(seq 1 "$tries"); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.5
	done
	echo "cluster: $desc did not come up; logs in $dir/logs" >&2
	return 1
}


control_plane() {
	say "control plane in $P-cp: etcd, kube-apiserver, kube-controller-manager, kube-scheduler"
	bg etcd cp "$KUBE_TESTENV_DIR/etcd" --data-dir "$dir/etcd" --listen-client-urls http://127.0.0.1:2379 \
		--advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 --log-level warn
	bg kube-apiserver cp "$KUBE_TESTENV_DIR/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
		--bind-address 0.0.0.0 --secure-port 6443 --advertise-address 10.224.0.10 \
		--service-cluster-ip-range 10.96.0.0/16 --service-node-port-range 30000-32767 \
		--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
		--client-ca-file "$pki/ca.crt" \
		--kubelet-client-certificate "$pki/apiserver-kubelet.crt" --kubelet-client-key "$pki/apiserver-kubelet.key" \
		--kubelet-preferred-address-types InternalIP \
		--service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
		--allow-privileged=true --cert-dir "$dir/apiserver-certs"
	wait_for "kube-apiserver" 120 kc get --raw /readyz
	bg kube-controller-manager cp "$CLUSTER_BIN/kube-controller-manager" --kubeconfig "$dir/cp-kcm.kubeconfig" \
		--authentication-kubeconfig "$dir/cp-kcm.kubeconfig" --authorization-kubeconfig "$dir/cp-kcm.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
		--service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
		--cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
		--allocate-node-cidrs=false --service-cluster-ip-range 10.96.0.0/16
	bg kube-scheduler cp "$CLUSTER_BIN/kube-scheduler" --kubeconfig "$dir/cp-scheduler.kubeconfig" \
		--authentication-kubeconfig "$dir/cp-scheduler.kubeconfig" --authorization-kubeconfig "$dir/cp-scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false
	# The API server calls the kubelets (logs, exec, port-forward) as
	# kube-apiserver-kubelet-client, in system:masters.
	wait_for "kube-controller-manager" 60 kc get namespace default
}

# ---------------------------------------------------------------- nodes

# The directories a node has of its own, bound over the host's paths in
# its mount namespace.
NODE_DIRS="/etc/cni/net.d /opt/cni/bin /var/lib/kubelet /var/lib/containerd /run/containerd /var/lib/cni
/var/log/pods /var/log/containers /run/netns /var/lib/bridgehead /etc/kubernetes /run/bridgehead"

cgroup_make() { # NODE
	if cgroup_v2; then
		# One tree: the node's cgroup holds no process itself (the node's
		# daemons go to system/, the kubelet's pods beside it), so it may
		# hand its controllers down, as the root must hand them to it.
		local g=/sys/fs/cgroup/$P-$1 ctl
		mkdir -p "$g/system"
		echo "$g" >>"$dir/cgroups"
		for ctl in cpuset cpu io memory pids; do
			grep -qw "$ctl" /sys/fs/cgroup/cgroup.controllers || continue
			grep -qw "$ctl" /sys/fs/cgroup/cgroup.subtree_control || echo "+$ctl" >/sys/fs/cgroup/cgroup.subtree_control
			echo "+$ctl" >"$g/cgroup.subtree_control"
		done
		return
	fi
	local c
	for c in /sys/fs/cgroup/*/; do
		c=${c%/}
		[ "$(basename "$c")" = unified ] && continue
		mkdir -p "$c/$P-$1/system"
		if [ "$(basename "$c")" = cpuset ]; then
			local g
			for g in "$c/$P-$1" "$c/$P-$1/system"; do
				cat "$c/cpuset.cpus" >"$g/cpuset.cpus"
				cat "$c/cpuset.mems" >"$g/cpuset.mems"
			done
		fi
		echo "$c/$P-$1" >>"$dir/cgroups"
	done
}

node_config() { # NODE
	local n=$1 nd=$dir/nodes/$1 addr
	addr=$(node_addr "$n")
	mkdir -p "$nd"
	local d
	for d in $NODE_DIRS; do mkdir -p "$nd/root$d"; done
	cat >"$nd/root/etc/kubernetes/containerd.toml" <<TOML
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "registry.k8s.io/pause:3.10.2"
# This machine's root has no CAP_SYS_RESOURCE (its bounding set lacks it),
# so no process can lower an oom_score_adj, and the sandboxes' -998 fails
# ("failed to update /proc/self/oom_score_adj: Permission denied").
# Containers keep containerd's own score or higher instead, as rootless
# containerd does.
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    SystemdCgroup = false
TOML
	cp "$pki/ca.crt" "$nd/root/etc/kubernetes/ca.crt"
	cp "$dir/node-$n.kubeconfig" "$nd/root/etc/kubernetes/kubelet.kubeconfig"
	cp "$dir/kube-proxy.kubeconfig" "$nd/root/etc/kubernetes/kube-proxy.kubeconfig"
	: >"$nd/root/etc/kubernetes/resolv.conf"
	cat >"$nd/root/etc/kubernetes/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 on the machine this was built on: the kubelet refuses it
# unless told (harmless on cgroup v2).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$P-$n
failSwapOn: false
address: $addr
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: /etc/kubernetes/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
clusterDNS: [10.96.0.10]
resolvConf: /etc/kubernetes/resolv.conf
# One machine's disk is every node's: no evictions or image GC for it.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
YAML
	cat >"$nd/root/etc/kubernetes/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {kubeconfig: /etc/kubernetes/kube-proxy.kubeconfig}
hostnameOverride: $n
bindAddress: $addr
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
nodePortAddresses: [primary]
detectLocalMode: BridgeInterface
detectLocal: {bridgeInterface: bh-br0}
# nf_conntrack_max is the machine's, not the node's: leave it. The TCP
# timeouts are per network namespace: kube-proxy sets the node's own
# (the e2e suite checks CLOSE_WAIT's).
conntrack: {maxPerCore: 0, min: 0}
YAML
}

# innode HOLDER NODE CMD...: CMD in the node's network and mount namespace
# (entered through its holder) and in its system cgroup.
innode() {
	local holder=$1 n=$2
	shift 2
	nsenter -t "$holder" -m -n -- sh -c '
		for c in /sys/fs/cgroup/*/"$0"/system /sys/fs/cgroup/"$0"/system; do
			[ ! -f "$c/cgroup.procs" ] || echo $$ >"$c/cgroup.procs"
		done
		exec "$@"' "$P-$n" "$@"
}

# import_image HOLDER NODE ARCHIVE: ARCHIVE into the node's containerd
# (namespace k8s.io, where the kubelet's images live) under the name in
# ARCHIVE.ref. bridgehead's own archive (make container) is tagged with
# its version; the manifests' kustomization names the tag dev, so it is
# tagged dev too, as `make push` would.
import_image() {
	local holder=$1 n=$2 img=$3 ref name
	ref=$(sed 's/@.*//' "$img.ref")
	name=${ref%:*}
	local ctr=("$CLUSTER_BIN/ctr" --address /run/containerd/containerd.sock -n k8s.io)
	innode "$holder" "$n" "${ctr[@]}" images import --base-name "$name" "$img" >>"$dir/logs/$n-images.log" 2>&1
	if [ "$img" = "$BRIDGEHEAD_IMAGE" ] && [ "$ref" != "$name:dev" ]; then
		innode "$holder" "$n" "${ctr[@]}" images tag --force "$ref" "$name:dev" >>"$dir/logs/$n-images.log" 2>&1
	fi
}

# node_start NODE: the holder of the node's mount namespace (its
# directories bound over the host's paths), then containerd, kubelet and
# kube-proxy inside it, all in the node's cgroup.
node_start() {
	local n=$1 nd=$dir/nodes/$1
	cgroup_make "$n"
	local binds=
	local d
	for d in $NODE_DIRS; do
		[ -d "$d" ] || { mkdir -p "$d"; echo "$d" >>"$dir/hostdirs"; }
		binds="$binds mount --bind '$nd/root$d' '$d';"
	done
	# A mount namespace of the node's own, entered from the node's
	# network namespace: a fresh sysfs (the node's links under
	# /sys/class/net) with the host's cgroup hierarchies bound back under
	# it, / shared inside so the kubelet's volume mounts reach
	# containerd's containers and stay out of the host, and the node's
	# directories over the host's paths. Its holder (sleep) is what
	# `cluster.sh shell` enters.
	mkdir -p "$nd/cgroup-hold"
	nsenter --net="/run/netns/$P-$n" unshare --mount --propagation private sh -c "
		set -e
		for c in /sys/fs/cgroup/*/$P-$n/system /sys/fs/cgroup/$P-$n/system; do [ -f \$c/cgroup.procs ] && echo \$\$ >\$c/cgroup.procs; done
		mount --rbind /sys/fs/cgroup '$nd/cgroup-hold'
		umount -l /sys
		mount -t sysfs sysfs /sys
		mount --rbind '$nd/cgroup-hold' /sys/fs/cgroup
		umount -l '$nd/cgroup-hold'
		mount --make-rshared /
		$binds
		exec sleep infinity" >"$dir/logs/$n-holder.log" 2>&1 &
	local holder=$!
	echo "$holder" >>"$dir/pids"
	echo "$holder" >"$dir/pids.d/$n-holder"
	wait_for "$n's mount namespace" 20 nsenter -t "$holder" -m test -f /etc/kubernetes/kubelet.yaml
	local path=$CLUSTER_BIN:/usr/sbin:/usr/bin:/sbin:/bin
	innode "$holder" "$n" env PATH="$path" "$CLUSTER_BIN/containerd" --config /etc/kubernetes/containerd.toml >"$dir/logs/$n-containerd.log" 2>&1 &
	echo "$!" >>"$dir/pids"
	wait_for "$n's containerd" 60 innode "$holder" "$n" "$CLUSTER_BIN/ctr" --address /run/containerd/containerd.sock version
	for img in "$IMAGES"/*.tar "$BRIDGEHEAD_IMAGE"; do
		import_image "$holder" "$n" "$img"
	done
	innode "$holder" "$n" env PATH="$path" "$CLUSTER_BIN/kubelet" --config /etc/kubernetes/kubelet.yaml \
		--kubeconfig /etc/kubernetes/kubelet.kubeconfig --hostname-override "$n" --node-ip "$(node_addr "$n")" \
		>"$dir/logs/$n-kubelet.log" 2>&1 &
	echo "$!" >>"$dir/pids"
	innode "$holder" "$n" env PATH="$path" "$CLUSTER_BIN/kube-proxy" --config /etc/kubernetes/kube-proxy.yaml \
		>"$dir/logs/$n-kube-proxy.log" 2>&1 &
	echo "$!" >>"$dir/pids"
}

# ------------------------------------------------------------- bridgehead

# catalog: the operator's catalog file (docs/getting-started/aks.md, step 3): both
# sites' CIDRs and gateways, with each gateway's public key as the
# gateway VM printed it (`bridgehead pubkey`).
catalog() {
	local g
	for g in $GATEWAYS; do
		mkdir -p "$dir/gateways/$g"
		"$BRIDGEHEAD" genkey -o "$dir/gateways/$g/private.key" >/dev/null
	done
	key() { "$BRIDGEHEAD" pubkey <"$dir/gateways/$1/private.key"; }
	cat >"$dir/catalog.yaml" <<YAML
site: site-a
gateway: gw-a1
cluster: {name: bhc, serviceCIDRs: [10.96.0.0/16], dnsServiceIP: 10.96.0.10}
# Site A's gateways relay API-server callbacks (each on its own address,
# port 8131), as on AKS; the verify Job checks the path through them.
relay: {listen: 10.224.0.4:8131, allowedPorts: [10250]}
sites:
  - name: site-a
    nodeCIDRs: [10.224.0.0/16]
    podCIDRs: [10.244.0.0/16]
    gateways:
      - {name: gw-a1, address: 10.224.0.4, endpoint: 198.18.0.4:51820, publicKey: $(key gw-a1)}
      - {name: gw-a2, address: 10.224.0.5, endpoint: 198.18.0.5:51820, publicKey: $(key gw-a2)}
  - name: site-b
    nodeCIDRs: [192.168.50.0/24]
    podCIDRs: [10.245.0.0/16]
    gateways:
      - {name: gw-b1, address: 192.168.50.4, endpoint: 198.18.0.6:51820, publicKey: $(key gw-b1)}
YAML
}

# install: bridgehead as docs/getting-started/aks.md tells an operator, and nothing
# else: the kustomization, the catalog as Site and Gateway resources with
# the gateways' credentials, the API server's address for the node agent
# (a cluster without AKS's FQDN annotation), then each gateway VM with its
# own config, key and kubeconfig.
install() {
	say "bridgehead: kubectl apply -k deploy/kubernetes"
	kc apply -k "$repo/deploy/kubernetes" >"$dir/logs/apply.log"
	kc -n kube-system create configmap bridgehead-api-server \
		--from-literal=KUBERNETES_SERVICE_HOST=10.224.0.10 --from-literal=KUBERNETES_SERVICE_PORT=6443 >>"$dir/logs/apply.log"
	say "bridgehead: the catalog as Sites and Gateways (catalog to-resources --gateway-rbac)"
	catalog
	"$BRIDGEHEAD" catalog to-resources --config "$dir/catalog.yaml" --gateway-rbac | kc apply -f - >>"$dir/logs/apply.log"
	say "bridgehead: gateways $GATEWAYS"
	local g site
	for g in $GATEWAYS; do
		site=site-$(lan_of "$g")
		local gd=$dir/gateways/$g
		local kcfg=$gd/gateway.kubeconfig
		# Its credential as docs/getting-started/aks.md step 6 says: one command, a
		# short-lived token beside the kubeconfig.
		"$BRIDGEHEAD" gateway admit "$site/$g" --kubeconfig "$dir/kubeconfig" \
			--server https://198.18.0.10:6443 --token-ttl 24h -o "$kcfg" >>"$dir/logs/apply.log"
		cat >"$gd/bridgehead.yaml" <<YAML
site: $site
gateway: $g
privateKeyFile: private.key
listen: 0.0.0.0:51820
interface: {name: bh0, mtu: 1420}
metrics: {listen: 127.0.0.1:9641}
controlSocket: $gd/bridgehead.sock
cluster: {name: bhc, serviceCIDRs: [10.96.0.0/16], dnsServiceIP: 10.96.0.10}
kubernetes: {kubeconfig: gateway.kubeconfig, follow: true}
YAML
		bg "$g" "$g" "$BRIDGEHEAD" run --config "$gd/bridgehead.yaml"
	done
	say "CoreDNS (a Deployment of 2, Service kube-dns 10.96.0.10)"
	kc apply -f "$repo/hack/cluster/coredns.yaml" >>"$dir/logs/apply.log"
}

kc() { "$CLUSTER_BIN/kubectl" --kubeconfig "$dir/kubeconfig" "$@"; }

up() {
	dir=$1
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	[ ! -s "$dir/namespaces" ] || { echo "cluster: $dir holds a running cluster; cluster.sh down it first" >&2; exit 1; }
	local stale
	stale=$(ip netns list | awk -v p="$P-" 'index($1, p) == 1 {print $1}' | tr '\n' ' ')
	[ -z "$stale" ] || { echo "cluster: namespaces $stale exist: another cluster (another state directory, or CLUSTER_PREFIX) runs on this machine; take it down first" >&2; exit 1; }
	# A fresh cluster: nothing of an earlier one's state.
	rm -rf "$dir/nodes" "$dir/pki" "$dir/etcd" "$dir/logs" "$dir/gateways" "$dir/pids.d" "$dir/apiserver-certs" "$dir"/*.kubeconfig "$dir/kubeconfig"
	: >"$dir/namespaces"
	: >"$dir/pids"
	: >"$dir/cgroups"
	: >"$dir/hostdirs"
	mkdir -p "$dir/logs" "$dir/pids.d"
	IMAGES=${IMAGES:?IMAGES: a directory of OCI archives (NAME.tar with NAME.tar.ref)}
	BRIDGEHEAD_IMAGE=${BRIDGEHEAD_IMAGE:?BRIDGEHEAD_IMAGE: the OCI archive of make container}
	network
	certs
	control_plane
	for n in $NODES; do node_config "$n"; done
	say "nodes: containerd, kubelet, kube-proxy in $NODES"
	for n in $NODES; do node_start "$n"; done
	install
	ready
}

# ready waits until every node is Ready and CoreDNS answers, then prints
# each node's way from registration (NotReady: "cni plugin not
# initialized") to Ready.
ready() {
	say "waiting for the nodes to turn Ready and for CoreDNS"
	# Site B's kubelets register once the gateways carry them to the API
	# server; wait for every node to exist before waiting on them.
	wait_for "every node registered" 240 sh -c "[ \$('$CLUSTER_BIN/kubectl' --kubeconfig '$dir/kubeconfig' get nodes -o name | wc -l) -eq $(echo $NODES | wc -w) ]"
	kc wait --for=condition=Ready node --all --timeout=240s >/dev/null
	kc -n kube-system rollout status deployment/coredns --timeout=180s >/dev/null
	kc get nodes -o custom-columns='NODE:.metadata.name,SITE:.metadata.labels.bridgehead\.io/site,INTERNAL-IP:.status.addresses[0].address,REGISTERED:.metadata.creationTimestamp,READY:.status.conditions[?(@.type=="Ready")].lastTransitionTime,NETWORK:.status.conditions[?(@.type=="BridgeheadNodeNetwork")].reason'
	say "cluster up: KUBECONFIG=$dir/kubeconfig kubectl get nodes; a node's shell: $0 shell $dir a1"
}

# --------------------------------------------------------------- teardown

down() {
	[ -d "$1" ] || return 0
	dir=$(cd "$1" && pwd)
	local pid
	# The node's own processes first (containers, shims), found by cgroup.
	if [ -f "$dir/cgroups" ]; then
		for _ in 1 2 3; do
			while read -r c; do
				{ find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null || true; } | while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done
			done <"$dir/cgroups"
			sleep 0.3
		done
	fi
	if [ -f "$dir/pids" ]; then
		while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$dir/pids"
		sleep 1
		while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done <"$dir/pids"
	fi
	if [ -f "$dir/cgroups" ]; then
		while read -r c; do
			[ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
		done <"$dir/cgroups"
	fi
	if [ -f "$dir/namespaces" ]; then
		while read -r ns; do ip netns del "$ns" 2>/dev/null || true; done <"$dir/namespaces"
	fi
	[ ! -f "$dir/rootlink" ] || ip link del "$(cat "$dir/rootlink")" 2>/dev/null || true
	if [ -f "$dir/hostdirs" ]; then
		tac "$dir/hostdirs" | while read -r d; do rmdir "$d" 2>/dev/null || true; done
	fi
	# Anything still mounted under the state (overlay snapshots of a
	# node whose namespace is gone are not, but be sure).
	{ grep -o " $dir[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	rm -f "$dir/namespaces" "$dir/pids" "$dir/cgroups" "$dir/hostdirs" "$dir/rootlink"
}

shell() {
	dir=$(cd "$1" && pwd)
	local n=$2
	shift 2
	local holder
	holder=$(cat "$dir/pids.d/$n-holder" 2>/dev/null) || { echo "cluster: no node $n in $dir" >&2; exit 1; }
	[ $# -gt 0 ] || set -- bash
	exec nsenter -t "$holder" -m -n -- env PATH="$CLUSTER_BIN:/usr/sbin:/usr/bin:/sbin:/bin" \
		CONTAINER_RUNTIME_ENDPOINT=unix:///run/containerd/containerd.sock "$@"
}

# image DIR: import BRIDGEHEAD_IMAGE (make container's archive) into every
# node of a running cluster, tagged dev again, for a change to bridgehead
# without a new cluster; then restart what runs it (kubectl -n kube-system
# rollout restart daemonset/bridgehead-node).
image() {
	dir=$(cd "$1" && pwd)
	BRIDGEHEAD_IMAGE=${BRIDGEHEAD_IMAGE:?BRIDGEHEAD_IMAGE: the OCI archive of make container}
	local n holder
	for n in $NODES; do
		holder=$(cat "$dir/pids.d/$n-holder" 2>/dev/null) || { echo "cluster: no node $n in $dir" >&2; exit 1; }
		import_image "$holder" "$n" "$BRIDGEHEAD_IMAGE"
	done
	say "$(sed 's/@.*//' "$BRIDGEHEAD_IMAGE.ref") imported into $NODES as :dev"
}

case "${1:-}" in
up) shift; up "$@" ;;
image) shift; image "$@" ;;
down) shift; down "$@" ;;
shell) shift; shell "$@" ;;
*) echo "usage: $0 up STATE_DIR | down STATE_DIR | shell STATE_DIR NODE [CMD...] | image STATE_DIR" >&2; exit 2 ;;
esac
