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
#   /usr/bin/kubectl-bridgehead -> bridgehead  (kubectl's plugin: kubectl bridgehead mesh)
#   /usr/libexec/bridgehead/bridgehead-keygen
#   /lib/systemd/system/bridgehead.service
#   /lib/systemd/system/bridgehead-keygen.service
#   /usr/lib/sysctl.d/60-bridgehead.conf       (forwarding, loose rp_filter)
#   /usr/lib/tmpfiles.d/bridgehead.conf        (/run/bridgehead, key modes)
#   /etc/bridgehead/bridgehead.yaml.example   (directory 0700)
#   /usr/share/man/man8/bridgehead.8.gz        (from bridgehead --help)
#   /usr/share/doc/bridgehead/{README.md,copyright,changelog.gz}
#
# The services are not enabled or started: the gateway needs a key and a
# config first. The gateway image (deploy/image) enables both.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../build-common.sh"

outdir=$repo/bin version= arch= binary=
while getopts "o:v:a:b:h" opt; do
	case $opt in
	o) outdir=$OPTARG ;;
	v) version=$OPTARG ;;
	a) arch=$OPTARG ;;
	b) binary=$OPTARG ;;
	h) build_help; exit 0 ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
build_no_args "$@"

command -v dpkg-deb >/dev/null || { echo "build-deb.sh: dpkg-deb not found (apt-get install dpkg)" >&2; exit 1; }

arch=${arch:-$(dpkg --print-architecture)}
version=${version:-$(build_git_version)}
version=${version#v}
case $version in
[0-9]*) ;;
*) version="0.0~$version" ;;
esac
# Debian versions: no hyphen without a revision, no characters outside the set.
version=$(printf '%s' "$version" | tr -- '-_' '++' | tr -cd 'A-Za-z0-9.+~')

build_workdir
root=$work/root

if [ -z "$binary" ]; then
	case $arch in
	amd64 | arm64 | riscv64 | ppc64el | s390x) goarch=${arch/ppc64el/ppc64le} ;;
	armhf) goarch=arm ;;
	i386) goarch=386 ;;
	*) echo "build-deb.sh: no Go architecture for $arch; pass -b" >&2; exit 1 ;;
	esac
	binary=$work/bridgehead
	build_go "$binary" "$version" "$goarch"
fi
[ -x "$binary" ] || { echo "build-deb.sh: $binary is not an executable" >&2; exit 1; }

install -D -m 0755 "$binary" "$root/usr/bin/bridgehead"
install -D -m 0755 "$here/bridgehead-keygen" "$root/usr/libexec/bridgehead/bridgehead-keygen"
install -D -m 0644 "$repo/deploy/systemd/bridgehead.service" "$root/lib/systemd/system/bridgehead.service"
install -D -m 0644 "$repo/deploy/systemd/bridgehead-keygen.service" "$root/lib/systemd/system/bridgehead-keygen.service"
install -D -m 0644 "$here/sysctl.conf" "$root/usr/lib/sysctl.d/60-bridgehead.conf"
install -D -m 0644 "$here/tmpfiles.conf" "$root/usr/lib/tmpfiles.d/bridgehead.conf"
install -d -m 0700 "$root/etc/bridgehead"
install -m 0644 "$here/bridgehead.yaml.example" "$root/etc/bridgehead/bridgehead.yaml.example"
doc=$root/usr/share/doc/bridgehead
install -D -m 0644 "$repo/docs/getting-started/gateway-vms.md" "$doc/README.md"
# The years of the copyright notice come from the history.
years=$(git -C "$repo" log --format=%cd --date=format:%Y 2>/dev/null | sort -u | sed -n '1p;$p' | paste -sd- - | sed 's/^\([0-9]*\)-\1$/\1/')
sed "s/^Copyright: /Copyright: ${years:-$(date +%Y)} /" "$here/copyright" >"$doc/copyright"
chmod 0644 "$doc/copyright"
# Lintian overrides, each explained in the file.
install -D -m 0644 "$here/lintian-overrides" "$root/usr/share/lintian/overrides/bridgehead"
# A Debian changelog entry for this build (lintian wants one; the project's
# history is in git).
date=$(git -C "$repo" log -1 --format=%cD 2>/dev/null || date -R)
printf 'bridgehead (%s) unstable; urgency=medium\n\n  * Built from %s.\n\n -- bridgehead maintainers <bridgehead@users.noreply.github.com>  %s\n' \
	"$version" "$(git -C "$repo" describe --always --dirty 2>/dev/null || echo "a source tree")" "$date" |
	gzip -9n >"$doc/changelog.gz"
chmod 0644 "$doc/changelog.gz"
# The manual page is the --help text, so it covers every command the
# binary has. Lines starting with . or ' are escaped for troff.
install -d -m 0755 "$root/usr/share/man/man8"
{
	printf '.TH BRIDGEHEAD 8 "%s" "bridgehead %s" "System Administration"\n' "$(date -u -d "$date" +%Y-%m-%d)" "$version"
	printf '.SH NAME\nbridgehead \\- encrypted userspace router between the sites of a Kubernetes cluster\n'
	printf '.SH SYNOPSIS\n.B bridgehead\n.I command\n[\\fIflags\\fR]\n.SH DESCRIPTION\n.nf\n'
	"$root/usr/bin/bridgehead" --help 2>&1 | sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"
	printf '.fi\n.SH FILES\n.TP\n/etc/bridgehead/bridgehead.yaml\nconfiguration\n.TP\n/etc/bridgehead/private.key\nthe gateway private key (0600)\n.TP\n/run/bridgehead/public.key\nits public key, written at boot by bridgehead-keygen.service\n'
	printf '.SH SEE ALSO\n/usr/share/doc/bridgehead/README.md\n'
} | gzip -9n >"$root/usr/share/man/man8/bridgehead.8.gz"
chmod 0644 "$root/usr/share/man/man8/bridgehead.8.gz"
# kubectl finds plugins on PATH by name; bridgehead answers as the plugin
# when run by this name (kubectl bridgehead mesh). Its manual is bridgehead's.
ln -s bridgehead "$root/usr/bin/kubectl-bridgehead"
ln -s bridgehead.8.gz "$root/usr/share/man/man8/kubectl-bridgehead.8.gz"
install -d -m 0755 "$root/DEBIAN"

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: bridgehead
Version: $version
Architecture: $arch
Maintainer: bridgehead maintainers <bridgehead@users.noreply.github.com>
Installed-Size: $size
Section: net
Priority: optional
Depends: init-system-helpers (>= 1.18~)
Homepage: https://github.com/bridgehead/bridgehead
Description: encrypted userspace router for multi-site Kubernetes clusters
 bridgehead runs on one or more gateways per site and carries pod and node
 traffic between the sites of a Kubernetes cluster over an authenticated,
 encrypted UDP tunnel. The package installs the daemon and its systemd
 units; bridgehead-keygen.service generates a private key on the machine
 and prints its public key. Write /etc/bridgehead/bridgehead.yaml, then
 enable bridgehead.service.
CONTROL

echo /etc/bridgehead/bridgehead.yaml.example >"$root/DEBIAN/conffiles"
# Checksums for debsums (conffiles are checked by dpkg itself).
(cd "$root" && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"

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
	# Only on a booted system: in a chroot (image build) these would
	# change the build host's kernel settings.
	if [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
		systemd-sysctl /usr/lib/sysctl.d/60-bridgehead.conf || true
		systemd-tmpfiles --create /usr/lib/tmpfiles.d/bridgehead.conf || true
		systemctl daemon-reload || true
		# An upgrade restarts a running gateway on the new binary.
		if [ -n "$2" ]; then
			deb-systemd-invoke try-restart bridgehead.service || true
		fi
	fi
fi
exit 0
POSTINST

cat >"$root/DEBIAN/prerm" <<'PRERM'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -z "$DPKG_ROOT" ]; then
	if [ -d /run/systemd/system ]; then
		deb-systemd-invoke stop bridgehead.service bridgehead-keygen.service || true
	fi
	# The operator (or the image) enabled them; removal disables them
	# so no dangling symlinks remain.
	deb-systemd-helper disable bridgehead.service bridgehead-keygen.service || true
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

# Reproducible: the same tree gives the same bytes (the image build is
# skipped when its inputs, this package among them, have not changed).
SOURCE_DATE_EPOCH=$(build_epoch "$(date +%s)")
export SOURCE_DATE_EPOCH
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

mkdir -p "$outdir"
deb=$outdir/bridgehead_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
