#!/usr/bin/env bash
# Builds the CNI reference plugins that bridgehead's node side uses (bridge,
# host-local, portmap, loopback) from the Go module proxy into DIR, and does
# nothing when DIR already holds them for this version. `make cni-plugins`
# calls it; the node tests invoke these binaries as a container runtime does,
# and the container image ships them.
set -euo pipefail
dir=${1:?usage: build.sh DIR}
ver=v1.10.0
mod=github.com/containernetworking/plugins
plugins="main/bridge main/loopback ipam/host-local meta/portmap"
if [ "$(cat "$dir/stamp" 2>/dev/null)" = "$ver $plugins" ]; then
	echo "cni-plugins: $dir is up to date ($ver)"
	exit 0
fi
mkdir -p "$dir"
rm -f "$dir/stamp"
start=$(date +%s)
pkgs=
for p in $plugins; do pkgs="$pkgs $mod/plugins/$p@$ver"; done
# go install with @version builds each plugin in module mode, outside this
# module, with the plugins' own go.mod and go.sum (checked by the sum DB).
GOBIN=$(cd "$dir" && pwd) CGO_ENABLED=0 GOFLAGS=-trimpath go install -ldflags '-s -w' $pkgs
echo "$ver $plugins" >"$dir/stamp"
echo "cni-plugins: $ver built in $(($(date +%s) - start)) s into $dir"
