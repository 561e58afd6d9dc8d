#!/bin/sh
# deps.sh: install the Debian packages that make image and make image-test
# need, when one of their commands is missing (root).
set -eu
need=
check() { command -v "$1" >/dev/null 2>&1 || need="$need $2"; }
check mmdebstrap mmdebstrap
check sfdisk fdisk
check partx util-linux
check mkfs.vfat dosfstools
check mcopy mtools
check mkfs.ext4 e2fsprogs
check grub-mkimage grub-common
check python3 python3-minimal
[ -d /usr/lib/grub/i386-pc ] || need="$need grub-pc-bin"
[ -d /usr/lib/grub/x86_64-efi ] || need="$need grub-efi-amd64-bin"
[ -f /usr/share/OVMF/OVMF_CODE_4M.fd ] || need="$need ovmf"
check qemu-img qemu-utils
check qemu-system-x86_64 qemu-system-x86
check genisoimage genisoimage
check ssh openssh-client
check ssh-keygen openssh-client
check curl curl
check lintian lintian
check dpkg-deb dpkg
if [ -n "$need" ]; then
	echo "deps.sh: installing$need" >&2
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $need
fi
