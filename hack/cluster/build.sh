#!/usr/bin/env bash
# Builds what `make cluster` runs, from the Go module proxy (none of it is
# a download here), into DIR/bin, and does nothing for a part whose recipe
# (this script and its module's go.mod/go.sum) is unchanged since it was
# built: the stamps are per part, so a change to one rebuilds only it.
#
#   kube:       kubelet, kube-proxy, kube-scheduler, kube-controller-manager
#               and kubectl, from k8s.io/kubernetes (hack/cluster/kube, the
#               same release as make kube-testenv's kube-apiserver, so the
#               two share the Go build cache)
#   containerd: containerd, containerd-shim-runc-v2 and ctr
#               (github.com/containerd/containerd/v2, hack/cluster/containerd)
#   runc:       runc (github.com/opencontainers/runc, hack/cluster/runc), with cgo
#               and libseccomp: Debian's 1.1.5 cannot start a container in a
#               node's mount namespace on this kernel ("can't get final child's
#               PID from pipe: EOF"); 1.5.3 can
#   coredns:    coredns (github.com/coredns/coredns, hack/cluster/coredns)
#   agnhost:    the e2e suite's test server (k8s.io/kubernetes/test/images/agnhost)
#               and the conntrack regression server (test/images/regression-issue-74839)
#   conformance (only when asked: build.sh DIR conformance): e2e.test and
#               ginkgo, from the same k8s.io/kubernetes module
#
# usage: build.sh DIR [PART...]   (default parts: kube containerd runc coredns agnhost)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: build.sh DIR [PART...]}
shift
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(kube containerd runc coredns agnhost)
kver=v1.37.2
mkdir -p "$dir/bin"

stamp() { cat "$here/build.sh" "$here/$1/go.mod" "$here/$1/go.sum" | sha256sum | cut -c1-16; }
fresh() { [ "$(cat "$dir/$1.stamp" 2>/dev/null)" = "$(stamp "$2")" ]; }

v=k8s.io/component-base/version
cv=k8s.io/client-go/pkg/version
kld="-s -w -X $v.gitVersion=$kver -X $v.gitMajor=1 -X $v.gitMinor=37 -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
kld="$kld -X $cv.gitVersion=$kver -X $cv.gitMajor=1 -X $cv.gitMinor=37 -X $cv.gitTreeState=clean"

build() { # part module-dir ldflags tags pkg...  (CGO_ENABLED from the environment, default 0)
	local part=$1 mod=$2 ld=$3 tags=$4
	shift 4
	if fresh "$part" "$mod"; then
		echo "cluster-build: $part is up to date"
		return
	fi
	rm -f "$dir/$part.stamp"
	local start=$(date +%s)
	# One go build for all of a part's commands: one link runs while the
	# next command's packages compile, where a build per command left a
	# core idle through every link.
	(cd "$here/$mod" && GOFLAGS=-mod=mod CGO_ENABLED=${CGO_ENABLED:-0} go build -trimpath -tags "$tags" -ldflags "$ld" -o "$dir/bin/" "$@")
	stamp "$mod" >"$dir/$part.stamp"
	echo "cluster-build: $part built in $(($(date +%s) - start)) s"
}

for p in "${parts[@]}"; do
	case $p in
	kube)
		build kube kube "$kld" "" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy \
			k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl ;;
	containerd)
		# no_btrfs: the btrfs snapshotter needs cgo and libbtrfs; the nodes use overlayfs.
		cv2=github.com/containerd/containerd/v2/version
		build containerd containerd "-s -w -X $cv2.Version=v2.4.2 -X $cv2.Revision=module" "no_btrfs" \
			github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
			github.com/containerd/containerd/v2/cmd/ctr ;;
	runc)
		CGO_ENABLED=1 build runc runc "-s -w -X main.version=1.5.3" "seccomp" github.com/opencontainers/runc ;;
	coredns)
		build coredns coredns "-s -w" "" github.com/coredns/coredns ;;
	agnhost)
		build agnhost kube "-s -w" "" k8s.io/kubernetes/test/images/agnhost k8s.io/kubernetes/test/images/regression-issue-74839 ;;
	conformance)
		if fresh conformance kube; then
			echo "cluster-build: conformance is up to date"
		else
			rm -f "$dir/conformance.stamp"
			start=$(date +%s)
			(cd "$here/kube" && GOFLAGS=-mod=mod CGO_ENABLED=0 go test -c -trimpath -ldflags "$kld" -o "$dir/bin/e2e.test" k8s.io/kubernetes/test/e2e)
			(cd "$here/kube" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$dir/bin/" github.com/onsi/ginkgo/v2/ginkgo)
			stamp kube >"$dir/conformance.stamp"
			echo "cluster-build: conformance built in $(($(date +%s) - start)) s"
		fi ;;
	*) echo "cluster-build: unknown part $p" >&2; exit 2 ;;
	esac
done
