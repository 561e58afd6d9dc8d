#!/usr/bin/env bash
# Builds crane (github.com/google/go-containerregistry/cmd/crane), which
# `make push` uses to copy the OCI archive of `make container` into a
# registry, from the Go module proxy into DIR, and does nothing when DIR
# already holds it for this recipe. go-containerregistry's go.mod has no
# replace directive, so `go install module@version` builds it as released.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: build.sh DIR}
ver=v0.22.1
stamp=$(sha256sum <"$here/build.sh" | cut -c1-16)
if [ -x "$dir/crane" ] && [ "$(cat "$dir/stamp" 2>/dev/null)" = "$stamp" ]; then
	echo "crane: $dir is up to date ($ver)"
	exit 0
fi
mkdir -p "$dir"
rm -f "$dir/stamp"
start=$(date +%s)
GOBIN="$dir" CGO_ENABLED=0 GOFLAGS=-trimpath go install -ldflags '-s -w' "github.com/google/go-containerregistry/cmd/crane@$ver"
echo "$stamp" >"$dir/stamp"
echo "crane: $ver built in $(($(date +%s) - start)) s into $dir"
