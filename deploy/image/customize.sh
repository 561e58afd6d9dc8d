#!/bin/sh
# customize.sh ROOT DEB: turn a Debian root file system into a bridgehead
# gateway. The one recipe of both image builds: build-image.sh runs it on
# the root it assembles (ROOT is a mount point), the Packer template on the
# running Azure build VM (ROOT is /). It expects the packages of
# packages.txt to be installed already.
#
#   - overlay/ (next to this script): sshd keys-only, cloud-init data
#     sources and default user, bridgehead.service starting once a config
#     exists, the Azure agent only on Azure, a DHCP fallback
#   - the bridgehead package
#   - services enabled: bridgehead, bridgehead-keygen, systemd-networkd,
#     systemd-resolved, ssh
#   - no SSH host keys and an empty machine id: every VM made from the
#     image generates its own at first boot
set -eu

[ $# -eq 2 ] || { echo "usage: customize.sh ROOT DEB" >&2; exit 2; }
root=$1 deb=$2
here=$(cd "$(dirname "$0")" && pwd)

# The overlay is configuration: root-owned whoever checked it out.
cp -r --no-preserve=ownership "$here/overlay/." "$root/"
if [ "$root" = / ]; then
	dpkg -i "$deb"
else
	cp "$deb" "$root/tmp/bridgehead.deb"
	chroot "$root" dpkg -i /tmp/bridgehead.deb
	rm -f "$root/tmp/bridgehead.deb"
fi
[ -x "$root/usr/bin/bridgehead" ] || { echo "customize.sh: bridgehead did not install" >&2; exit 1; }

# bridgehead.service starts at boot once a config exists (the drop-in in
# overlay/); the key generator runs at every boot.
systemctl --root="$root" enable bridgehead.service bridgehead-keygen.service \
	systemd-networkd.service systemd-resolved.service ssh.service

rm -f "$root"/etc/ssh/ssh_host_*
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"
