#!/usr/bin/env bash
# Writes the OCI image archives that `make cluster` imports into every
# node's containerd, under the upstream names, so unmodified manifests and
# the e2e suite find them and nothing is pulled (there is no registry):
#
#   registry.k8s.io/pause:3.10.2          pause.c from the k8s.io/kubernetes module, static
#   registry.k8s.io/coredns/coredns:v1.15.0  CoreDNS built by build.sh
#   registry.k8s.io/e2e-test-images/agnhost:2.66.1
#                                         agnhost (build.sh's conformance part) on the
#                                         Debian layer: upstream's is Alpine with sh, nc,
#                                         curl and dig, which cannot be fetched here
#   registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1   the Debian layer (dnsutils)
#   registry.k8s.io/e2e-test-images/nginx:1.27.0-2           the Debian layer's nginx
#   registry.k8s.io/build-image/distroless-iptables:v0.9.9   the Debian layer (conntrack,
#                                         iptables: the KubeProxy CLOSE_WAIT spec)
#   registry.k8s.io/e2e-test-images/busybox:1.37.0-2         the Debian layer (busybox)
#   registry.k8s.io/e2e-test-images/regression-issue-74839:1.5  its server, built by build.sh
#
# The Debian layer is one minbase bookworm tree from Debian's archive
# (debootstrap, the packages below), shared by the three e2e images: the
# same layer digest, so each node stores it once.
#
# usage: images.sh UMOCI CLUSTER_BUILD_DIR
# Writes CLUSTER_BUILD_DIR/images/NAME.tar, each with NAME.tar.ref (the
# image's full name); an image whose inputs are unchanged is not rebuilt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
umoci=${1:?usage: images.sh UMOCI DIR}
dir=${2:?usage: images.sh UMOCI DIR}
out=$dir/images
mkdir -p "$out"
epoch=0
created=1970-01-01T00:00:00Z
debian_packages=curl,wget,netcat-openbsd,dnsutils,iproute2,iputils-ping,procps,nginx-light,ca-certificates,iperf,iperf3,socat,bash,conntrack,iptables,busybox

treehash() { (cd "$1" && find . -type f -exec sha256sum {} + | LC_ALL=C sort) | sha256sum | cut -c1-16; }

# image FILE NAME TAG ENTRYPOINT CMD USER ROOTFS...: one layer per ROOTFS;
# ENTRYPOINT and CMD are |-separated argument lists ("" for none).
image() {
	local file=$1 name=$2 tag=$3 entry=$4 cmd=$5 user=$6
	shift 6
	local stamp r
	stamp=$( (cat "$here/images.sh"; echo "$name:$tag $entry $cmd $user"; for r in "$@"; do cat "$r.hash" 2>/dev/null || treehash "$r"; done) | sha256sum | cut -c1-16)
	if [ -f "$out/$file.tar" ] && [ "$(cat "$out/$file.stamp" 2>/dev/null)" = "$stamp" ]; then
		echo "cluster-images: $name:$tag is up to date"
		return
	fi
	local work
	work=$(mktemp -d)
	"$umoci" init --layout "$work/oci"
	"$umoci" new --image "$work/oci:$tag"
	for r in "$@"; do
		"$umoci" insert --image "$work/oci:$tag" --history.created "$created" --history.created_by "hack/cluster/images.sh" "$r" /
	done
	local cfg=(--config.user "$user" --config.workingdir /)
	local a
	if [ -n "$entry" ]; then
		IFS='|' read -ra a <<<"$entry"
		for e in "${a[@]}"; do cfg+=(--config.entrypoint "$e"); done
	fi
	if [ -n "$cmd" ]; then
		IFS='|' read -ra a <<<"$cmd"
		for e in "${a[@]}"; do cfg+=(--config.cmd "$e"); done
	fi
	"$umoci" config --image "$work/oci:$tag" --no-history --created "$created" --os linux --architecture "$(go env GOARCH)" \
		--config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "${cfg[@]}"
	"$umoci" gc --layout "$work/oci"
	(cd "$work/oci" && tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner -cf "$out/$file.tar.tmp" oci-layout index.json blobs)
	mv "$out/$file.tar.tmp" "$out/$file.tar"
	echo "$name:$tag" >"$out/$file.tar.ref"
	echo "$stamp" >"$out/$file.stamp"
	rm -rf "$work"
	echo "cluster-images: $name:$tag -> $out/$file.tar"
}

# fix ROOTFS: owners, mtimes, and its content hash beside it.
fix() {
	chown -R 0:0 "$1"
	find "$1" -exec touch -h -d "@$epoch" {} +
	treehash "$1" >"$1.hash"
}

kmod=$(cd "$here/kube" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
r=$(mktemp -d)
trap 'rm -rf "$r"' EXIT

mkdir -p "$r/pause"
gcc -Os -static -o "$r/pause/pause" "$kmod/build/pause/linux/pause.c"
strip "$r/pause/pause"
fix "$r/pause"
image pause registry.k8s.io/pause 3.10.2 /pause "" 65535:65535 "$r/pause"

mkdir -p "$r/coredns/etc/ssl/certs"
install -m 0755 "$dir/bin/coredns" "$r/coredns/coredns"
fix "$r/coredns"
image coredns registry.k8s.io/coredns/coredns v1.15.0 /coredns "" 0:0 "$r/coredns"

# The Debian layer, cached in DIR/debian: debootstrap (minutes) runs
# again only when the package list or debian_layer itself changes, not
# for any other edit of this script.
deb=$dir/debian
debian_layer() {
	rm -rf "$deb" "$deb.tmp"
	debootstrap --variant=minbase --include="$debian_packages" bookworm "$deb.tmp" http://deb.debian.org/debian >"$dir/debootstrap.log" 2>&1 ||
		{ tail -20 "$dir/debootstrap.log" >&2; exit 1; }
	# What an image needs no copy of: package caches and lists, docs,
	# logs, and the nginx site that would listen on IPv6 too.
	rm -rf "$deb.tmp"/var/cache/apt/* "$deb.tmp"/var/lib/apt/lists/* "$deb.tmp"/usr/share/doc/* \
		"$deb.tmp"/usr/share/man/* "$deb.tmp"/usr/share/info/* "$deb.tmp"/var/log/* "$deb.tmp"/usr/share/locale/*
	fix "$deb.tmp"
	mv "$deb.tmp" "$deb"
	mv "$deb.tmp.hash" "$deb.hash"
}
debstamp=$( (declare -f debian_layer; echo "$debian_packages") | sha256sum | cut -c1-16)
if [ "$(cat "$deb.stamp" 2>/dev/null)" != "$debstamp" ]; then
	start=$(date +%s)
	debian_layer
	echo "$debstamp" >"$deb.stamp"
	echo "cluster-images: the Debian layer built in $(($(date +%s) - start)) s"
fi

# What upstream's agnhost Dockerfile adds beside the binary: porter's TLS
# pair, netexec's /uploads, the agnhost-2 link of the entrypoint tests,
# CoreDNS for the DNS tests that run their own, and the user and group
# the SupplementalGroups test expects in the image.
mkdir -p "$r/agnhost/uploads" "$r/agnhost/etc"
install -m 0755 "$dir/bin/agnhost" "$r/agnhost/agnhost"
ln -s agnhost "$r/agnhost/agnhost-2"
install -m 0644 "$kmod/test/images/agnhost/porter/localhost.crt" "$kmod/test/images/agnhost/porter/localhost.key" "$r/agnhost/"
install -m 0755 "$dir/bin/coredns" "$r/agnhost/coredns"
cp "$deb/etc/passwd" "$deb/etc/group" "$r/agnhost/etc/"
echo "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh" >>"$r/agnhost/etc/passwd"
printf 'user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n' >>"$r/agnhost/etc/group"
fix "$r/agnhost"
image agnhost registry.k8s.io/e2e-test-images/agnhost 2.66.1 /agnhost pause 0:0 "$deb" "$r/agnhost"
image glibc-dns-testing registry.k8s.io/e2e-test-images/glibc-dns-testing 2.1.1 "" /bin/sh 0:0 "$deb"
image distroless-iptables registry.k8s.io/build-image/distroless-iptables v0.9.9 "" /bin/sh 0:0 "$deb"
image busybox registry.k8s.io/e2e-test-images/busybox 1.37.0-2 "" /bin/sh 0:0 "$deb"
mkdir -p "$r/regression"
install -m 0755 "$dir/bin/regression-issue-74839" "$r/regression/regression-issue-74839"
fix "$r/regression"
image regression-issue-74839 registry.k8s.io/e2e-test-images/regression-issue-74839 1.5 /regression-issue-74839 "" 0:0 "$deb" "$r/regression"
mkdir -p "$r/nginx/etc/nginx/sites-enabled" "$r/nginx/usr/share/nginx/html"
cat >"$r/nginx/etc/nginx/sites-enabled/default" <<'NGINX'
server {
	listen 80 default_server;
	listen [::]:80 default_server;
	root /usr/share/nginx/html;
	index index.html;
	location / {
		try_files $uri $uri/ =404;
	}
}
NGINX
echo '<html><body>nginx</body></html>' >"$r/nginx/usr/share/nginx/html/index.html"
fix "$r/nginx"
image nginx registry.k8s.io/e2e-test-images/nginx 1.27.0-2 "/usr/sbin/nginx" "-g|daemon off;" 0:0 "$deb" "$r/nginx"
