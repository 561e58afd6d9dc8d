#!/usr/bin/env bash
# build-deb.sh: build the bridgehead Debian package with dpkg-deb.
#
#   deploy/package/build-deb.sh [-o OUTDIR] [-v VERSION] [-a ARCH] [-b BINARY]
#
#   -o OUTDIR   where the .deb goes (default: bin)
#   -v VERSION  package version (default: from git describe; a leading v is
#               dropped, a version not starting with a digit becomes 0.0~VERSION)
#   -a ARCH     Debian architecture (default: dpkg --print-architecture);
#               without -b it also picks GOARCH
#   -b BINARY   package this bridgehead binary instead of building one
#
# Run it from anywhere inside the repository. It prints the path of the
# package it wrote. Contents:
#
#   /usr/bin/bridgehead
#   /lib/systemd/system/bridgehead.service
#   /etc/bridgehead/bridgehead.yaml.example   (directory 0700)
#   /usr/share/doc/bridgehead/README.md
#
# The service is not enabled or started: it needs a key and a config first.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

outdir=$repo/bin version= arch= binary=
while getopts "o:v:a:b:h" opt; do
	case $opt in
	o) outdir=$OPTARG ;;
	v) version=$OPTARG ;;
	a) arch=$OPTARG ;;
	b) binary=$OPTARG ;;
	h) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -gt 0 ]; then
	echo "build-deb.sh: unexpected arguments: $*" >&2
	exit 2
fi

command -v dpkg-deb >/dev/null || { echo "build-deb.sh: dpkg-deb not found (apt-get install dpkg)" >&2; exit 1; }

arch=${arch:-$(dpkg --print-architecture)}
if [ -z "$version" ]; then
	version=$(git -C "$repo" describe --tags --always --dirty 2>/dev/null || echo dev)
fi
version=${version#v}
case $version in
[0-9]*) ;;
*) version="0.0~$version" ;;
esac
# Debian versions: no hyphen without a revision, no characters outside the set.
version=$(printf '%s' "$version" | tr -- '-_' '++' | tr -cd 'A-Za-z0-9.+~')

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root

if [ -z "$binary" ]; then
	case $arch in
	amd64 | arm64 | riscv64 | ppc64el | s390x) goarch=${arch/ppc64el/ppc64le} ;;
	armhf) goarch=arm ;;
	i386) goarch=386 ;;
	*) echo "build-deb.sh: no Go architecture for $arch; pass -b" >&2; exit 1 ;;
	esac
	binary=$work/bridgehead
	(cd "$repo" && CGO_ENABLED=0 GOOS=linux GOARCH=$goarch GOARM=7 \
		go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$binary" ./cmd/bridgehead)
fi
[ -x "$binary" ] || { echo "build-deb.sh: $binary is not an executable" >&2; exit 1; }

install -D -m 0755 "$binary" "$root/usr/bin/bridgehead"
install -D -m 0644 "$repo/deploy/systemd/bridgehead.service" "$root/lib/systemd/system/bridgehead.service"
install -d -m 0700 "$root/etc/bridgehead"
install -m 0644 "$here/bridgehead.yaml.example" "$root/etc/bridgehead/bridgehead.yaml.example"
install -D -m 0644 "$repo/deploy/README.md" "$root/usr/share/doc/bridgehead/README.md"
install -d -m 0755 "$root/DEBIAN"

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: bridgehead
Version: $version
Architecture: $arch
Maintainer: bridgehead maintainers <bridgehead@localhost>
Installed-Size: $size
Section: net
Priority: optional
Homepage: https://github.com/bridgehead/bridgehead
Description: encrypted userspace router for multi-site Kubernetes clusters
 bridgehead runs on one or more gateways per site and carries pod and node
 traffic between the sites of a Kubernetes cluster over an authenticated,
 encrypted UDP tunnel. The package installs the daemon and its systemd
 unit; write /etc/bridgehead/bridgehead.yaml and a private key, then
 enable bridgehead.service.
CONTROL

echo /etc/bridgehead/bridgehead.yaml.example >"$root/DEBIAN/conffiles"

# Maintainer scripts honour DPKG_ROOT (dpkg --root) so they can be tested
# without touching the machine.
cat >"$root/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
	# The directory holds the private key: root only. Set on first
	# install; an upgrade leaves the operator's choice alone.
	if [ ! -d "$DPKG_ROOT/etc/bridgehead" ]; then
		mkdir -p "$DPKG_ROOT/etc/bridgehead"
		chmod 0700 "$DPKG_ROOT/etc/bridgehead"
	elif [ -z "$2" ]; then
		chmod 0700 "$DPKG_ROOT/etc/bridgehead"
	fi
	if [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
		# An upgrade restarts a running gateway on the new binary.
		if [ -n "$2" ]; then
			systemctl try-restart bridgehead.service || true
		fi
	fi
fi
exit 0
POSTINST

cat >"$root/DEBIAN/prerm" <<'PRERM'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
	systemctl disable --now bridgehead.service || true
fi
exit 0
PRERM

cat >"$root/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
if [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
# /etc/bridgehead is left in place, even on purge: it holds the private key.
exit 0
POSTRM
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"

mkdir -p "$outdir"
deb=$outdir/bridgehead_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
