#!/usr/bin/env bash
# push.sh: copy the OCI archive that `make container` writes into a
# registry with crane, and print the kustomize images: lines that pin the
# pushed image by digest (`make push REGISTRY=...` runs it). The same
# lines go in an overlay of each directory you apply: deploy/kubernetes,
# deploy/kubernetes/gateway and deploy/kubernetes/verify (each names the
# image untagged and sets its tag, so none is left on :latest).
#
#   deploy/container/push.sh -c CRANE -r REGISTRY [-a ARCHIVE] [-n NAME] [-k IMAGE]
#
#   -c CRANE     the crane binary (make crane builds it from the Go module proxy)
#   -r REGISTRY  where to push: host[:port][/path], e.g. myacr.azurecr.io or
#                ghcr.io/example; the image goes to REGISTRY/NAME:TAG
#   -a ARCHIVE   the archive (default: out/bridgehead-oci.tar)
#   -n NAME      the repository name under REGISTRY (default: bridgehead)
#   -k IMAGE     the image name the manifests use, which kustomize replaces
#                (default: ghcr.io/bridgehead/bridgehead, as in
#                deploy/kubernetes/kustomization.yaml)
#
# TAG is the archive's own (git describe at build time, in index.json).
# The manifest is pushed byte for byte, so the registry's digest is the
# archive's (ARCHIVE.digest): push.sh checks the registry's answer
# against it and fails on a difference. Logging in is crane's (or
# docker's): `crane auth login REGISTRY -u USER -p TOKEN`, or for ACR
# `az acr login --name NAME` first; a registry on a loopback address is
# spoken to over plain HTTP. The images: lines go to stdout, last (after
# what make and the builds print), crane's progress to stderr; run this
# script alone (`deploy/container/push.sh -c ... -r ... > images.yaml`)
# for a file that holds only them.
set -euo pipefail

prog=$(basename "$0")
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
crane= registry= archive=$repo/out/bridgehead-oci.tar name=bridgehead image=ghcr.io/bridgehead/bridgehead
while getopts "c:r:a:n:k:h" opt; do
	case $opt in
	c) crane=$OPTARG ;;
	r) registry=${OPTARG%/} ;;
	a) archive=$OPTARG ;;
	n) name=$OPTARG ;;
	k) image=$OPTARG ;;
	h) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || { echo "$prog: unexpected arguments: $*" >&2; exit 2; }
[ -n "$registry" ] || { echo "$prog: -r REGISTRY is required (make push REGISTRY=host[:port][/path])" >&2; exit 2; }
[ -x "$crane" ] || { echo "$prog: -c: crane not found at '$crane' (make crane)" >&2; exit 1; }
[ -f "$archive" ] || { echo "$prog: -a: no archive at '$archive' (make container)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xf "$archive" -C "$work"
index=$(cat "$work/index.json")
digest=$(printf '%s' "$index" | grep -o '"digest":"sha256:[0-9a-f]\{64\}"' | head -1 | cut -d'"' -f4)
tag=$(printf '%s' "$index" | grep -o '"org.opencontainers.image.ref.name":"[^"]*"' | head -1 | cut -d'"' -f4)
[ -n "$digest" ] && [ -n "$tag" ] || { echo "$prog: $archive: no manifest digest and tag in index.json" >&2; exit 1; }
if [ -f "$archive.digest" ] && [ "$(cat "$archive.digest")" != "$digest" ]; then
	echo "$prog: $archive.digest says $(cat "$archive.digest"), index.json $digest: rebuild (make container)" >&2
	exit 1
fi

ref=$registry/$name:$tag
start=$(date +%s%N)
"$crane" push "$work" "$ref" >"$work/pushed"
pushed=$(cat "$work/pushed")
remote=$("$crane" digest "$ref")
if [ "${pushed##*@}" != "$digest" ] || [ "$remote" != "$digest" ]; then
	echo "$prog: pushed $ref as ${pushed##*@}, the registry has $remote, the archive is $digest" >&2
	exit 1
fi
echo "$prog: $ref@$digest pushed in $((($(date +%s%N) - start) / 1000000)) ms" >&2

cat <<EOT
# $ref@$digest
images:
  - name: $image
    newName: $registry/$name
    digest: $digest
EOT
