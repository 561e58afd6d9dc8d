#!/usr/bin/env bash
# build.sh: write the bridgehead container image as an OCI archive, with
# umoci and no container engine.
#
#   deploy/container/build.sh -u UMOCI -c CNI_DIR [-o OUTDIR] [-v VERSION] [-n NAME]
#
#   -u UMOCI    the umoci binary (make umoci builds it)
#   -c CNI_DIR  the CNI reference plugins (make cni-plugins builds them)
#   -o OUTDIR   where the archive goes (default: out)
#   -v VERSION  the image tag and `bridgehead version` (default: git describe)
#   -n NAME     the image name written in the .ref file (default: bridgehead)
#
# One image for the controller, the node agent and in-cluster gateways:
#
#   /usr/bin/bridgehead                 static (CGO_ENABLED=0), -trimpath
#   /usr/lib/bridgehead/cni/{bridge,host-local,loopback,portmap}
#
# Entrypoint /usr/bin/bridgehead, user 65532:65532 (the controller's
# default; the node agent and gateways override it: they run as root with
# NET_ADMIN, which their manifests grant). Two layers: the CNI plugins
# (they change rarely), then the binary.
#
# Reproducible: every mtime and timestamp is SOURCE_DATE_EPOCH (default:
# the commit time of HEAD), owners are 0:0, the archive's entries sorted,
# so the same commit gives the same archive and the same image digest.
#
# Writes OUTDIR/bridgehead-oci.tar (an OCI image layout as a tar, tagged
# VERSION), OUTDIR/bridgehead-oci.tar.digest (the manifest's sha256:...,
# the digest a registry shows) and OUTDIR/bridgehead-oci.tar.ref
# (NAME:VERSION@DIGEST, for manifests that pin the digest). It prints the
# archive's path.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/../build-common.sh"

outdir=$repo/out umoci= cnidir= version= name=bridgehead
while getopts "o:u:c:v:n:h" opt; do
	case $opt in
	o) outdir=$OPTARG ;;
	u) umoci=$OPTARG ;;
	c) cnidir=$OPTARG ;;
	v) version=$OPTARG ;;
	n) name=$OPTARG ;;
	h) build_help; exit 0 ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
build_no_args "$@"
[ -x "$umoci" ] || { echo "build.sh: -u: umoci not found at '$umoci' (make umoci)" >&2; exit 1; }
plugins="bridge host-local loopback portmap"
for p in $plugins; do
	[ -x "$cnidir/$p" ] || { echo "build.sh: -c: CNI plugin $p not found in '$cnidir' (make cni-plugins)" >&2; exit 1; }
done

start=$(date +%s%N)
version=${version:-$(build_git_version)}
# An OCI tag is [A-Za-z0-9_][A-Za-z0-9._-]{0,127}.
tag=$(printf '%s' "$version" | tr -c 'A-Za-z0-9._-' '_' | cut -c1-128)
epoch=$(build_epoch 0)
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
arch=$(go env GOARCH)

build_workdir

# The two layers' trees, with fixed modes, owners and mtimes.
install -d -m 0755 "$work/cni/usr/lib/bridgehead/cni" "$work/bin/usr/bin"
for p in $plugins; do
	install -m 0755 "$cnidir/$p" "$work/cni/usr/lib/bridgehead/cni/$p"
done
build_go "$work/bin/usr/bin/bridgehead" "$version" "$arch"
chmod 0755 "$work/bin/usr/bin/bridgehead"
if [ "$(id -u)" = 0 ]; then
	chown -R 0:0 "$work/cni" "$work/bin"
	rootless=
else
	rootless=--rootless
fi
find "$work/cni" "$work/bin" -exec touch -h -d "@$epoch" {} +

layout=$work/oci
img=$layout:$tag
"$umoci" init --layout "$layout"
"$umoci" new --image "$img"
"$umoci" insert $rootless --image "$img" --history.created "$created" \
	--history.created_by "deploy/container/build.sh: CNI reference plugins" "$work/cni/usr" /usr
"$umoci" insert $rootless --image "$img" --history.created "$created" \
	--history.created_by "deploy/container/build.sh: bridgehead $version" "$work/bin/usr" /usr
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
"$umoci" config --image "$img" --no-history --created "$created" --author bridgehead \
	--os linux --architecture "$arch" \
	--config.entrypoint /usr/bin/bridgehead --config.user 65532:65532 --config.workingdir / \
	--config.label "org.opencontainers.image.title=bridgehead" \
	--config.label "org.opencontainers.image.version=$version" \
	--config.label "org.opencontainers.image.revision=$revision" \
	--config.label "org.opencontainers.image.created=$created"
"$umoci" gc --layout "$layout"

mkdir -p "$outdir"
out=$(cd "$outdir" && pwd)/bridgehead-oci.tar
(cd "$layout" && tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
	--format=gnu --mode='u=rwX,go=rX' -cf "$out.tmp" oci-layout index.json blobs)
mv "$out.tmp" "$out"
digest=$(grep -o '"digest":"sha256:[0-9a-f]\{64\}"' "$layout/index.json" | head -1 | cut -d'"' -f4)
[ -n "$digest" ] || { echo "build.sh: no manifest digest in index.json" >&2; exit 1; }
echo "$digest" >"$out.digest"
echo "$name:$tag@$digest" >"$out.ref"
ms=$((($(date +%s%N) - start) / 1000000))
echo "container: $out $(stat -c %s "$out") bytes, $name:$tag@$digest, built in $ms ms" >&2
echo "$out"
