#!/usr/bin/env bash
# build-image.sh: build the bridgehead gateway disk image from Debian
# packages (root only). No prebuilt image is downloaded: mmdebstrap installs
# Debian bookworm from the archive, the bridgehead .deb goes on top, GRUB is
# installed for both BIOS and UEFI from the host's grub-pc-bin and
# grub-efi-amd64-bin. The host needs ext4 and loop devices, not vfat.
#
#   deploy/image/build-image.sh -d DEB [-o OUTDIR] [-c CACHEDIR] [-s SIZE_MIB] [-f]
#
#   -d DEB       the bridgehead package to install (make deb builds it)
#   -o OUTDIR    where the images go (default: out/image)
#   -c CACHEDIR  where the base root file system is cached (default: out/image-cache)
#   -s SIZE_MIB  disk size in MiB (default 2048); cloud-init grows the root
#                file system to the VM's disk at first boot
#   -f           rebuild even when the inputs have not changed
#   -b           build (or find) the cached base only, then stop; no -d needed
#
# Outputs in OUTDIR:
#   bridgehead.qcow2         QEMU/KVM, OpenStack, Packer's qemu builder
#   bridgehead.vhd           fixed-size VHD, virtual size a whole number of MiB
#                            (what Azure accepts for an image upload)
#   bridgehead.packages      package versions inside the image (dpkg-query)
#   bridgehead.inputs        hash of everything the image was built from
#   SHA256SUMS
#
# Two stages. The base (Debian, kernel, cloud-init, sshd: packages.txt) is
# cached as a tarball named by a hash of packages.txt and this script's
# base recipe; it is rebuilt only when they change. The second stage (the
# .deb, overlay/, boot loader, disk) runs each time an input changes and
# takes about a minute. Nothing is left mounted or attached on success,
# failure or Ctrl-C: the EXIT trap unmounts, detaches the loop device and
# removes the work directory.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

deb= outdir=$repo/out/image cachedir=$repo/out/image-cache size_mib=2048 force= baseonly=
while getopts "d:o:c:s:fbh" opt; do
	case $opt in
	d) deb=$OPTARG ;;
	o) outdir=$OPTARG ;;
	c) cachedir=$OPTARG ;;
	s) size_mib=$OPTARG ;;
	f) force=1 ;;
	b) baseonly=1 ;;
	h) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
die() { echo "build-image.sh: $*" >&2; exit 1; }
[ $# -eq 0 ] || die "unexpected arguments: $*"
if [ -z "$baseonly" ]; then
	[ -n "$deb" ] || die "no package: pass -d bridgehead_VERSION_amd64.deb (make deb)"
	[ -f "$deb" ] || die "$deb: no such file"
fi
[ "$(id -u)" = 0 ] || die "must run as root (loop devices, mounts, chroot)"
case $size_mib in '' | *[!0-9]*) die "-s $size_mib: a whole number of MiB" ;; esac
[ "$size_mib" -ge 1024 ] || die "-s $size_mib: at least 1024 MiB"
for tool in mmdebstrap sfdisk losetup partx mkfs.ext4 mkfs.vfat mcopy grub-mkimage python3 qemu-img chroot sha256sum; do
	command -v "$tool" >/dev/null || die "$tool not found (apt-get install mmdebstrap fdisk dosfstools mtools e2fsprogs grub-common grub-pc-bin grub-efi-amd64-bin qemu-utils)"
done
[ -d /usr/lib/grub/i386-pc ] || die "no GRUB BIOS modules (apt-get install grub-pc-bin)"
[ -d /usr/lib/grub/x86_64-efi ] || die "no GRUB UEFI modules (apt-get install grub-efi-amd64-bin)"

start=$(date +%s)
suite=bookworm
mirror=http://deb.debian.org/debian
security=http://deb.debian.org/debian-security
sources=("deb $mirror $suite main" "deb $mirror $suite-updates main" "deb $security $suite-security main")
packages=$(sed 's/#.*//' "$here/packages.txt" | tr -s ' \n' '\n' | grep -v '^$' | paste -sd, -)

# The base recipe: bump baserev when the mmdebstrap call changes meaning.
baserev=1
basekey=$(printf '%s\n' "$baserev" "$suite" "${sources[@]}" "$packages" | sha256sum | cut -c1-16)
base=$cachedir/base-$basekey.tar

# Everything the image is made of, for the up-to-date check.
[ -n "$baseonly" ] || inputs=$( {
	echo "base $basekey size $size_mib"
	sha256sum "$deb" | cut -d' ' -f1
	sha256sum "$0" "$here/customize.sh" | cut -d' ' -f1
	(cd "$here/overlay" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
} | sha256sum | cut -c1-64)
if [ -z "$baseonly" ] && [ -z "$force" ] && [ -f "$outdir/bridgehead.inputs" ] && [ "$(cat "$outdir/bridgehead.inputs")" = "$inputs" ] &&
	[ -f "$outdir/bridgehead.qcow2" ] && [ -f "$outdir/bridgehead.vhd" ]; then
	echo "build-image.sh: $outdir is up to date (inputs $inputs)" >&2
	exit 0
fi

mkdir -p "$cachedir" "$outdir"
work=$(mktemp -d "$cachedir/work.XXXXXX")
loop=
mounts=()
cleanup() {
	local rc=$? i
	trap - EXIT INT TERM
	for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
		umount "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}" || true
	done
	if [ -n "$loop" ]; then
		losetup -d "$loop" || true
	fi
	rm -rf "$work"
	if [ $rc -ne 0 ]; then
		echo "build-image.sh: failed (exit $rc); mounts, loop device and work directory removed" >&2
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Stage 1: the cached base.
if [ ! -f "$base" ]; then
	echo "== base: mmdebstrap $suite ($base)" >&2
	# required = Priority: required + apt; the list adds the rest.
	mmdebstrap --variant=required --mode=root --format=tar \
		--include="$packages" \
		--aptopt='Acquire::Retries "3"' \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-include=/usr/share/locale/locale.alias' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-include=/usr/share/doc/bridgehead/*' \
		--customize-hook='chroot "$1" apt-get clean' \
		--customize-hook='rm -rf "$1"/var/lib/apt/lists/*' \
		"$suite" "$work/base.tar" "${sources[@]}"
	mv "$work/base.tar" "$base"
	# Older bases are never used again.
	find "$cachedir" -maxdepth 1 -name 'base-*.tar' ! -name "base-$basekey.tar" -delete
else
	echo "== base: cached $base" >&2
fi

[ -z "$baseonly" ] || exit 0

# Stage 2: disk, file systems, root, package, boot loader.
echo "== disk: ${size_mib} MiB, GPT: BIOS boot, EFI system, root" >&2
raw=$work/disk.raw
truncate -s "${size_mib}M" "$raw"
rootuuid=$(cat /proc/sys/kernel/random/uuid)
espid=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ' | tr a-f A-F)
sfdisk -q "$raw" <<EOF
label: gpt
start=1MiB, size=1MiB, type=21686148-6449-6E6F-744E-656564454649, name="bios"
size=126MiB, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name="esp"
type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709, name="root"
EOF
loop=$(losetup -f --show -P "$raw")
# Partition device nodes do not always appear by themselves (no udev in
# some build hosts): ask the kernel again and wait for them.
for _ in $(seq 50); do
	[ -b "${loop}p3" ] && break
	partx -u "$loop" 2>/dev/null || partx -a "$loop" 2>/dev/null || true
	sleep 0.1
done
[ -b "${loop}p3" ] || die "partitions of $loop did not appear"

mkfs.vfat -F 32 -n BH-EFI -i "$espid" "${loop}p2" >/dev/null
mkfs.ext4 -q -L bh-root -U "$rootuuid" "${loop}p3"
mnt=$work/mnt
mkdir -p "$mnt"
mount "${loop}p3" "$mnt"
mounts+=("$mnt")

echo "== root: base, overlay, bridgehead package" >&2
tar -C "$mnt" --numeric-owner --xattrs --xattrs-include='*' -xpf "$base"
"$here/customize.sh" "$mnt" "$deb"
echo bridgehead >"$mnt/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$mnt/etc/hosts"
cat >"$mnt/etc/fstab" <<EOF
# <file system>  <mount point>  <type>  <options>  <dump>  <pass>
UUID=$rootuuid  /  ext4  errors=remount-ro  0  1
UUID=${espid:0:4}-${espid:4:4}  /boot/efi  vfat  umask=0077,nofail  0  2
EOF
chroot "$mnt" dpkg-query -W -f '${Package} ${Version}\n' >"$work/bridgehead.packages"
[ -e "$mnt/vmlinuz" ] && [ -e "$mnt/initrd.img" ] || die "no /vmlinuz or /initrd.img symlink in the root"

echo "== boot loader: GRUB for BIOS and UEFI" >&2
# GRUB is put together with grub-mkimage, not grub-install: grub-install
# wants to map the loop partitions to a BIOS drive (it cannot without
# udev) and the ESP mounted (the build host may have no vfat driver).
# Both images embed the same early config: find the root file system by
# UUID, read /boot/grub/grub.cfg. The modules are also copied to
# /boot/grub so that GRUB can load more of them at run time.
mkdir -p "$mnt/boot/efi" "$mnt/boot/grub/i386-pc" "$mnt/boot/grub/x86_64-efi"
cp /usr/lib/grub/i386-pc/*.mod /usr/lib/grub/i386-pc/*.lst "$mnt/boot/grub/i386-pc/"
cp /usr/lib/grub/x86_64-efi/*.mod /usr/lib/grub/x86_64-efi/*.lst "$mnt/boot/grub/x86_64-efi/"
printf 'search --no-floppy --fs-uuid --set=root %s\nset prefix=($root)/boot/grub\nconfigfile $prefix/grub.cfg\n' "$rootuuid" >"$work/early.cfg"
grubmods="part_gpt ext2 fat search search_fs_uuid normal configfile linux serial terminal gzio echo test"
# BIOS: boot.img in the MBR's code area, core.img in the BIOS boot
# partition (sector 2048). What grub-bios-setup would patch, patched here:
# boot.img's pointer to core.img's first sector (offset 0x5c), its jump
# over the boot-drive check turned into NOPs for hard disks (0x66), and
# the block list at the end of core.img's first sector (where the rest of
# core.img starts). The partition table and disk signature stay.
# shellcheck disable=SC2086
grub-mkimage -O i386-pc -o "$work/core.img" -p /boot/grub -c "$work/early.cfg" biosdisk $grubmods
python3 - "$loop" "$work/core.img" /usr/lib/grub/i386-pc/boot.img <<'PY'
import struct, sys
dev, core_path, boot_path = sys.argv[1:]
start = 2048  # first sector of the BIOS boot partition
core = bytearray(open(core_path, "rb").read())
boot = bytearray(open(boot_path, "rb").read())
assert len(boot) == 512, "boot.img is not one sector"
assert len(core) <= 2048 * 512, "core.img does not fit the 1 MiB BIOS boot partition"
sectors = (len(core) + 511) // 512
blk = 0x200 - 12  # struct grub_pc_bios_boot_blocklist: start u64, len u16, segment u16
_, length, _ = struct.unpack_from("<QHH", core, blk)
assert length == sectors - 1, f"core.img block list length {length}, want {sectors - 1}"
struct.pack_into("<Q", core, blk, start + 1)
struct.pack_into("<Q", boot, 0x5C, start)
boot[0x66:0x68] = b"\x90\x90"
with open(dev, "r+b") as f:
    mbr = bytearray(f.read(512))
    mbr[0:440] = boot[0:440]
    f.seek(0)
    f.write(mbr)
    f.seek(start * 512)
    f.write(core)
PY
# UEFI: the removable-media path EFI/BOOT/BOOTX64.EFI, which firmware
# boots without an NVRAM entry, copied with mtools.
# shellcheck disable=SC2086
grub-mkimage -O x86_64-efi -o "$work/BOOTX64.EFI" -p /boot/grub -c "$work/early.cfg" \
	$grubmods efi_gop all_video
MTOOLS_SKIP_CHECK=1 mmd -i "${loop}p2" ::/EFI ::/EFI/BOOT 2>/dev/null
MTOOLS_SKIP_CHECK=1 mcopy -i "${loop}p2" "$work/BOOTX64.EFI" ::/EFI/BOOT/BOOTX64.EFI 2>/dev/null
MTOOLS_SKIP_CHECK=1 mdir -i "${loop}p2" ::/EFI/BOOT 2>/dev/null | grep -q BOOTX64 || die "GRUB UEFI install failed"
# The kernel and initrd are named through Debian's /vmlinuz and
# /initrd.img symlinks, which every kernel upgrade updates, so this file
# needs no update-grub. Console on ttyS0 for the Azure serial console,
# QEMU's -serial and the first-boot public key.
cat >"$mnt/boot/grub/grub.cfg" <<EOF
# Written by bridgehead's build-image.sh. Kernel upgrades move the
# /vmlinuz and /initrd.img symlinks; this file does not change.
set timeout=1
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
search --no-floppy --fs-uuid --set=root $rootuuid
menuentry 'Debian GNU/Linux, bridgehead gateway' {
	linux /vmlinuz root=UUID=$rootuuid ro console=tty0 console=ttyS0,115200n8
	initrd /initrd.img
}
EOF

for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
	umount "${mounts[i]}"
	unset 'mounts[i]'
done
sync
losetup -d "$loop"
loop=
# Check what reached the disk file itself, not the loop device's cache:
# the root file system at its offset must be clean and hold the package.
rootstart=$(sfdisk -J "$raw" | python3 -c 'import json,sys; print(json.load(sys.stdin)["partitiontable"]["partitions"][2]["start"])')
e2fsck -fn "$raw?offset=$((rootstart * 512))" >/dev/null 2>&1 || die "root file system in $raw is not clean"
debugfs -R 'stat /usr/bin/bridgehead' "$raw?offset=$((rootstart * 512))" 2>/dev/null | grep -q 'Type: regular' ||
	die "root file system in $raw has no /usr/bin/bridgehead"

echo "== convert: qcow2, fixed VHD" >&2
qemu-img convert -f raw -O qcow2 -c "$raw" "$work/bridgehead.qcow2"
qemu-img convert -f raw -O vpc -o subformat=fixed,force_size "$raw" "$work/bridgehead.vhd"
rm -f "$raw"
vsize=$(qemu-img info --output=json -f vpc "$work/bridgehead.vhd" | sed -n 's/.*"virtual-size": \([0-9]*\).*/\1/p')
[ "$vsize" = $((size_mib * 1024 * 1024)) ] || die "VHD virtual size $vsize, want $((size_mib * 1024 * 1024))"

echo "$inputs" >"$work/bridgehead.inputs"
(cd "$work" && sha256sum bridgehead.qcow2 bridgehead.vhd >SHA256SUMS)
for f in bridgehead.qcow2 bridgehead.vhd bridgehead.packages SHA256SUMS bridgehead.inputs; do
	mv -f "$work/$f" "$outdir/$f"
done
echo "== done in $(($(date +%s) - start)) s: $outdir (qcow2 $(du -m "$outdir/bridgehead.qcow2" | cut -f1) MiB, VHD $(du -m --apparent-size "$outdir/bridgehead.vhd" | cut -f1) MiB, virtual $size_mib MiB)" >&2
echo "$outdir/bridgehead.qcow2"
echo "$outdir/bridgehead.vhd"
