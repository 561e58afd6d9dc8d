#!/usr/bin/env bash
# Builds umoci v0.6.0, the OCI image tool that `make container` uses to
# write the bridgehead image without a container engine, from the Go module
# proxy into DIR, and does nothing when DIR already holds it for this recipe.
# `make umoci` calls it. umoci's go.mod has a replace directive, so it is
# built from the small module beside this script (go.mod, go.sum, tools.go)
# rather than with go install @version, as hack/kube-testenv does.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: build.sh DIR}
ver=v0.6.0
stamp=$(cat "$here/build.sh" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)
if [ -x "$dir/umoci" ] && [ "$(cat "$dir/stamp" 2>/dev/null)" = "$stamp" ]; then
	echo "umoci: $dir is up to date ($ver)"
	exit 0
fi
mkdir -p "$dir"
rm -f "$dir/stamp"
start=$(date +%s)
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$dir/umoci" github.com/opencontainers/umoci/cmd/umoci)
echo "$stamp" >"$dir/stamp"
echo "umoci: $ver built in $(($(date +%s) - start)) s into $dir"
