#!/usr/bin/env bash
# boot-test.sh: boot two bridgehead gateway VMs from the image under
# QEMU/KVM and check them the way an operator would (root).
#
#   deploy/image/boot-test.sh [-k] IMAGE.qcow2
#
#   -k   keep the work directory (serial logs, seeds, configs) on success
#
# Each VM boots from a copy-on-write overlay of IMAGE (the image is never
# written) with a NoCloud seed (ISO labelled cidata) and two NICs:
#
#   lan  QEMU user network, the site's LAN: gw-a 10.201.0.4/24, gw-b
#        10.202.0.4/24. SSH (22) and the health listener (9641) are
#        forwarded to 127.0.0.1 ports of this machine.
#   wan  a QEMU socket network between the two VMs (127.0.0.1 only):
#        gw-a 192.168.77.1/24, gw-b 192.168.77.2/24; the tunnel runs here.
#
# gw-a boots with BIOS (SeaBIOS), gw-b with UEFI (OVMF), so both boot paths
# of the image are exercised. The sequence, and what each step checks:
#
#   1. gw-a boots with SSH access only, no key, no config: bridgehead-keygen
#      generates /etc/bridgehead/private.key (0600) and prints the public
#      key on the serial console and in /run/bridgehead/public.key;
#      bridgehead.service stays inactive (no config yet).
#   2. gw-b boots with its key and config in cloud-init user data (the
#      catalog carries gw-a's key read from gw-a's console): the gateway
#      starts on its own, and the key it prints is the one it was given.
#   3. gw-a gets its config over SSH, `bridgehead check`, `systemctl start`.
#   4. On both: bridgehead.service active (running) under systemd, Type=
#      notify, watchdog 30 s, and the sandbox in force on the process
#      (NoNewPrivs, seccomp, capability bounding set of exactly
#      CAP_NET_ADMIN and CAP_BPF, read-only /usr).
#   5. /readyz answers 200 on both through the forwarded LAN port once the
#      gateways have handshaken over the wan network.
#   6. A config change (a new pod CIDR for site b) and `systemctl reload`
#      on gw-a: the kernel route for it appears, the daemon did not
#      restart, the reload counter moved, /readyz stays 200.
#   7. gw-a reboots: it prints the same public key (no new key generated),
#      the gateway comes back by itself and /readyz is 200 again.
#
# QEMU processes are stopped by PID, and the work directory removed, on
# success, failure and Ctrl-C. The last line is "N passed, M failed".
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

keep=
while getopts "kh" opt; do
	case $opt in
	k) keep=1 ;;
	h) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
die() { echo "boot-test.sh: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: boot-test.sh [-k] IMAGE.qcow2"
image=$(realpath "$1")
[ -f "$image" ] || die "$image: no such file"
[ "$(id -u)" = 0 ] || die "must run as root (KVM)"
for tool in qemu-system-x86_64 qemu-img genisoimage ssh ssh-keygen curl python3 go; do
	command -v "$tool" >/dev/null || die "$tool not found (make image-deps)"
done
ovmf_code=/usr/share/OVMF/OVMF_CODE_4M.fd
ovmf_vars=/usr/share/OVMF/OVMF_VARS_4M.fd
[ -f "$ovmf_code" ] || die "$ovmf_code not found (apt-get install ovmf)"

start=$(date +%s)
work=$(mktemp -d /tmp/bh-boot-test.XXXXXX)
# BOOT_TEST_ACCEL: kvm, tcg, or auto (default): KVM when it can boot this
# image here, checked by a 60 s probe for GRUB's menu on the serial
# console. Some nested hosts expose /dev/kvm but fail to run GRUB or the
# kernel under it (the machine this test was written on: GRUB hangs after
# "GRUB loading", OVMF stops with a KVM internal error); TCG then runs the
# same test, slower, and the test says which one it used.
accel=${BOOT_TEST_ACCEL:-auto}
pids=()
passed=0 failed=0
cleanup() {
	local rc=$? pid
	trap - EXIT INT TERM
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	done
	if [ $rc -ne 0 ] || [ $failed -ne 0 ]; then
		for f in "$work"/*.serial; do
			[ -f "$f" ] || continue
			echo "---- last lines of $(basename "$f")" >&2
			tail -n 40 "$f" >&2
		done
		mkdir -p "$repo/out/image-test"
		cp "$work"/*.serial "$work"/*.yaml "$repo/out/image-test/" 2>/dev/null || true
		echo "boot-test.sh: serial logs and configs kept in $repo/out/image-test" >&2
	fi
	if [ -n "$keep" ]; then
		echo "boot-test.sh: work directory kept: $work" >&2
	else
		rm -rf "$work"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

kvm_probe() {
	[ -w /dev/kvm ] || return 1
	local pid
	qemu-system-x86_64 -machine q35,accel=kvm -cpu host,-arch-capabilities -m 256 -display none -monitor none \
		-drive "file=$image,if=virtio,format=qcow2,readonly=on" -snapshot \
		-serial "file:$work/probe.serial" -daemonize -pidfile "$work/probe.pid" 2>/dev/null || return 1
	pid=$(cat "$work/probe.pid")
	pids+=("$pid")
	for _ in $(seq 60); do
		grep -aq 'GNU GRUB' "$work/probe.serial" && break
		sleep 1
	done
	kill "$pid" 2>/dev/null || true
	grep -aq 'GNU GRUB' "$work/probe.serial"
}
case $accel in
kvm) ;;
tcg) ;;
auto)
	if kvm_probe; then accel=kvm; else
		accel=tcg
		echo "boot-test.sh: KVM cannot boot the image on this host (no GRUB menu in 60 s); using TCG" >&2
	fi
	;;
*) die "BOOT_TEST_ACCEL=$accel: kvm, tcg or auto" ;;
esac
if [ "$accel" = kvm ]; then
	cpu=(-machine q35,accel=kvm -cpu host,-arch-capabilities)
	slow=1
else
	cpu=(-machine q35,accel=tcg -cpu max)
	slow=4
fi
echo "boot-test.sh: accelerator $accel"

say() { printf '== %s (%ds)\n' "$*" $(($(date +%s) - start)); }
pass() { passed=$((passed + 1)); echo "PASS: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { # check DESCRIPTION COMMAND...
	local what=$1
	shift
	if "$@"; then pass "$what"; else fail "$what"; fi
}
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# A host-built bridgehead for keys and `check`, from this tree.
(cd "$repo" && CGO_ENABLED=0 go build -o "$work/bridgehead" ./cmd/bridgehead)
bh=$work/bridgehead

ssh-keygen -q -t ed25519 -N '' -C bh-boot-test -f "$work/id"
sshkey=$(cat "$work/id.pub")
declare -A sshport hport lanip wanip serialf macs
macs[a]=0a macs[b]=0b
sshport[a]=$(freeport) sshport[b]=$(freeport)
hport[a]=$(freeport) hport[b]=$(freeport)
wanport=$(freeport)
lanip[a]=10.201.0.4 lanip[b]=10.202.0.4
wanip[a]=192.168.77.1 wanip[b]=192.168.77.2
serialf[a]=$work/gw-a.serial serialf[b]=$work/gw-b.serial

vssh() { # vssh a|b COMMAND: run COMMAND (one shell string) on the VM as the operator user
	local vm=$1 try rc
	shift
	# ssh exits 255 when the connection fails (sshd restarting during
	# cloud-init): try again; any other status is the command's.
	for try in 1 2 3 4 5; do
		rc=0
		ssh -i "$work/id" -p "${sshport[$vm]}" -o BatchMode=yes -o StrictHostKeyChecking=no \
			-o UserKnownHostsFile=/dev/null -o ConnectTimeout=10 -o LogLevel=ERROR bridgehead@127.0.0.1 "$@" || rc=$?
		[ $rc -eq 255 ] || return $rc
		sleep 3
	done
	return $rc
}
# cloud-init restarts sshd in its later stages: wait until it has
# finished, then check that it finished without errors.
cloudinit_finished() { vssh "$1" cloud-init status 2>/dev/null | grep -Eq 'status: (done|error)'; }
cloudinit_clean() {
	local out
	out=$(vssh "$1" cloud-init status --long 2>&1) || true
	case $out in "status: done"*) return 0 ;; esac
	echo "gw-$1: $out" >&2
	return 1
}
waitfor() { # waitfor SECONDS DESCRIPTION COMMAND... (TCG multiplies SECONDS by 4)
	local secs=$1 what=$2 t
	shift 2
	t=$(($(date +%s) + secs))
	until "$@" >/dev/null 2>&1; do
		if [ "$(date +%s)" -ge $t ]; then
			echo "timed out after ${secs}s waiting for $what" >&2
			return 1
		fi
		sleep 2
	done
}
pubkeys() { grep -a -o 'bridgehead public key: [A-Za-z0-9+/=]*' "${serialf[$1]}" | awk '{print $4}' || true; }
nkeys() { [ "$(pubkeys "$1" | wc -l)" -ge "$2" ]; }
readyz() { [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "http://127.0.0.1:${hport[$1]}/readyz")" = 200 ]; }

# seed VM NAME USERDATA: a NoCloud seed ISO with the VM's network config.
seed() {
	local vm=$1 d=$work/seed-$1
	mkdir -p "$d"
	printf 'instance-id: bh-boot-test-%s\nlocal-hostname: gw-%s\n' "$vm" "$vm" >"$d/meta-data"
	cat >"$d/network-config" <<EOF
version: 2
ethernets:
  lan:
    match: {macaddress: "52:54:00:0b:00:${macs[$vm]}"}
    dhcp4: true
  wan:
    match: {macaddress: "52:54:00:0b:01:${macs[$vm]}"}
    addresses: [${wanip[$vm]}/24]
EOF
	cat >"$d/user-data"
	genisoimage -quiet -V cidata -J -r -o "$work/seed-$vm.iso" "$d"
}

# boot VM FIRMWARE WANNETDEV
boot() {
	local vm=$1 fw=$2 wan=$3 net=${lanip[$1]%.*}.0 extra=()
	qemu-img create -q -f qcow2 -F qcow2 -b "$image" "$work/gw-$vm.qcow2" 4G
	if [ "$fw" = uefi ]; then
		cp "$ovmf_vars" "$work/gw-$vm.vars"
		extra=(-drive "if=pflash,format=raw,readonly=on,file=$ovmf_code"
			-drive "if=pflash,format=raw,file=$work/gw-$vm.vars")
	fi
	qemu-system-x86_64 -name "bh-boot-test-gw-$vm" "${cpu[@]}" -smp 1 -m 768 \
		"${extra[@]}" \
		-drive "file=$work/gw-$vm.qcow2,if=virtio,format=qcow2" \
		-drive "file=$work/seed-$vm.iso,if=virtio,format=raw,readonly=on" \
		-netdev "user,id=lan,net=$net/24,dhcpstart=${lanip[$vm]},hostfwd=tcp:127.0.0.1:${sshport[$vm]}-:22,hostfwd=tcp:127.0.0.1:${hport[$vm]}-:9641" \
		-device "virtio-net-pci,netdev=lan,mac=52:54:00:0b:00:${macs[$vm]}" \
		-netdev "socket,id=wan,$wan" \
		-device "virtio-net-pci,netdev=wan,mac=52:54:00:0b:01:${macs[$vm]}" \
		-display none -serial "file:${serialf[$vm]}" -monitor none \
		-daemonize -pidfile "$work/gw-$vm.pid"
	pids+=("$(cat "$work/gw-$vm.pid")")
}

config() { # config SITE PUBKEY_A PUBKEY_B [EXTRA_POD_CIDR_B]
	local s=$1
	cat <<EOF
site: site-$s
gateway: gw-$s
privateKeyFile: private.key
listen: 0.0.0.0:51820
interface:
  name: bh0
  mtu: 1420
metrics:
  # The LAN side: the load balancer's (here: the test's) health probe.
  listen: 0.0.0.0:9641
sites:
  - name: site-a
    nodeCIDRs: [10.201.0.0/24]
    podCIDRs: [10.211.0.0/16]
    keepalive: 10s
    gateways:
      - name: gw-a
        address: ${lanip[a]}
        endpoint: ${wanip[a]}:51820
        publicKey: $2
  - name: site-b
    nodeCIDRs: [10.202.0.0/24]
    podCIDRs: [10.212.0.0/16${4:+, $4}]
    keepalive: 10s
    gateways:
      - name: gw-b
        address: ${lanip[b]}
        endpoint: ${wanip[b]}:51820
        publicKey: $3
EOF
}

# --- 1. gw-a: first boot without key or config ------------------------
say "gw-a: first boot, BIOS, no key, no config"
seed a <<EOF
#cloud-config
ssh_authorized_keys:
  - $sshkey
EOF
boot a bios "listen=127.0.0.1:$wanport"
waitfor $((300 * slow)) "gw-a's public key on its serial console" nkeys a 1
puba=$(pubkeys a | head -n1)
echo "gw-a public key (serial console): $puba"
waitfor $((240 * slow)) "SSH on gw-a" vssh a true
waitfor $((240 * slow)) "cloud-init to finish on gw-a" cloudinit_finished a
check "gw-a: cloud-init finished without errors" cloudinit_clean a
check "gw-a: private key generated at first boot, mode 0600 root" \
	test "$(vssh a "sudo stat -c '%a %U' /etc/bridgehead/private.key")" = "600 root"
check "gw-a: /run/bridgehead/public.key is the key on the console" \
	test "$(vssh a cat /run/bridgehead/public.key)" = "$puba"
check "gw-a: the public key matches the private key on disk" \
	test "$(vssh a 'sudo cat /etc/bridgehead/private.key' | "$bh" pubkey)" = "$puba"
check "gw-a: bridgehead.service inactive without a config" \
	test "$(vssh a systemctl show -p ActiveState --value bridgehead.service)" = inactive
sshd_hardened() {
	[ "$(vssh a sudo sshd -T | grep -E '^(permitrootlogin|passwordauthentication|kbdinteractiveauthentication) ' | sort | tr '\n' ' ')" = \
		"kbdinteractiveauthentication no passwordauthentication no permitrootlogin no " ]
}
check "gw-a: sshd allows keys only, no root login" sshd_hardened

# --- 2. gw-b: key and config from user data ----------------------------
say "gw-b: first boot, UEFI, key and config from cloud-init user data"
(umask 077 && "$bh" genkey >"$work/gw-b.key")
pubb=$("$bh" pubkey <"$work/gw-b.key")
config a "$puba" "$pubb" >"$work/gw-a.yaml"
config b "$puba" "$pubb" >"$work/gw-b.yaml"
# gw-b's config names private.key next to it, and check matches that key
# against the catalog: check it beside gw-b's key. gw-a's key never leaves
# gw-a, so its config is checked there (step 3).
mkdir -p "$work/check"
cp "$work/gw-b.key" "$work/check/private.key"
cp "$work/gw-b.yaml" "$work/check/"
"$bh" check --config "$work/check/gw-b.yaml" >/dev/null 2>&1 || { "$bh" check --config "$work/check/gw-b.yaml"; die "gw-b config refused"; }
seed b <<EOF
#cloud-config
ssh_authorized_keys:
  - $sshkey
write_files:
  - path: /etc/bridgehead/private.key
    permissions: "0600"
    content: $(cat "$work/gw-b.key")
  - path: /etc/bridgehead/bridgehead.yaml
    permissions: "0600"
    encoding: b64
    content: $(base64 -w0 "$work/gw-b.yaml")
EOF
boot b uefi "connect=127.0.0.1:$wanport"
waitfor $((300 * slow)) "gw-b's public key on its serial console" nkeys b 1
check "gw-b: the key from user data is kept and published" test "$(pubkeys b | head -n1)" = "$pubb"
waitfor $((240 * slow)) "SSH on gw-b" vssh b true
waitfor $((240 * slow)) "cloud-init to finish on gw-b" cloudinit_finished b
check "gw-b: cloud-init finished without errors" cloudinit_clean b

# --- 3. gw-a: config over SSH ------------------------------------------
say "gw-a: config over SSH, check, start"
vssh a 'sudo tee /etc/bridgehead/bridgehead.yaml >/dev/null && sudo chmod 0600 /etc/bridgehead/bridgehead.yaml' <"$work/gw-a.yaml"
check "gw-a: bridgehead check accepts the config on the VM" vssh a sudo bridgehead check --config /etc/bridgehead/bridgehead.yaml
vssh a sudo systemctl start bridgehead.service

# --- 4. the unit under systemd -----------------------------------------
unit_ok() { # unit_ok VM: active (running), notify, watchdog, sandbox
	local vm=$1 show pid status
	show=$(vssh "$vm" systemctl show -p ActiveState,SubState,Type,WatchdogUSec,MainPID bridgehead.service | sort | tr '\n' ' ')
	pid=$(vssh "$vm" systemctl show -p MainPID --value bridgehead.service)
	case $show in
	"ActiveState=active MainPID=$pid SubState=running Type=notify WatchdogUSec=30s ") ;;
	*) echo "gw-$vm: $show" >&2; return 1 ;;
	esac
	status=$(vssh "$vm" sudo grep -E "'^(NoNewPrivs|Seccomp|CapBnd):'" "/proc/$pid/status" | tr -s ' \t' ' ' | sort | tr '\n' ' ')
	# CAP_NET_ADMIN is bit 12, CAP_BPF bit 39.
	[ "$status" = "CapBnd: 0000008000001000 NoNewPrivs: 1 Seccomp: 2 " ] || { echo "gw-$vm: $status" >&2; return 1; }
	vssh "$vm" sudo findmnt --task "$pid" -n -o OPTIONS -T /usr | grep -q '^ro' || { echo "gw-$vm: /usr is writable for the daemon" >&2; return 1; }
	vssh "$vm" systemctl status --no-pager bridgehead.service | grep -q 'Active: active (running)'
}
say "bridgehead.service under systemd"
waitfor $((60 * slow)) "gw-a's gateway to start" vssh a systemctl is-active bridgehead.service
check "gw-a: bridgehead.service active (running), Type=notify, watchdog 30s, sandboxed" unit_ok a
check "gw-b: bridgehead.service active (running), Type=notify, watchdog 30s, sandboxed" unit_ok b
vssh b systemctl status --no-pager bridgehead.service | head -n 5 | sed 's/^/    gw-b: /'

# --- 5. readiness -------------------------------------------------------
say "/readyz over the LAN port"
check "gw-a: /readyz 200 after the handshake" waitfor $((120 * slow)) "gw-a /readyz" readyz a
check "gw-b: /readyz 200 after the handshake" waitfor $((60 * slow)) "gw-b /readyz" readyz b
vssh a sudo bridgehead status | sed 's/^/    gw-a: /' || true

# --- 6. reload ----------------------------------------------------------
say "gw-a: config change and systemctl reload"
reloads() { curl -s --max-time 3 "http://127.0.0.1:${hport[a]}/metrics" | awk '/^bridgehead_config_reloads_total\{result="success"\}/ {print $2}'; }
pid1=$(vssh a systemctl show -p MainPID --value bridgehead.service)
r1=$(reloads)
config a "$puba" "$pubb" 10.213.0.0/16 >"$work/gw-a-reload.yaml"
vssh a 'sudo tee /etc/bridgehead/bridgehead.yaml >/dev/null' <"$work/gw-a-reload.yaml"
check "gw-a: systemctl reload succeeds" vssh a sudo systemctl reload bridgehead.service
newroute() { [ -n "$(vssh a ip route show 10.213.0.0/16 dev bh0)" ]; }
check "gw-a: the new pod CIDR is routed into the tunnel after reload" \
	waitfor $((30 * slow)) "route 10.213.0.0/16" newroute
check "gw-a: reload kept the process (no restart)" test "$(vssh a systemctl show -p MainPID --value bridgehead.service)" = "$pid1"
reloaded() { [ "$(reloads)" != "$r1" ]; }
check "gw-a: reload counter moved" waitfor $((30 * slow)) "the reload counter" reloaded
check "gw-a: /readyz still 200 after reload" readyz a

# --- 7. reboot ----------------------------------------------------------
say "gw-a: reboot"
vssh a sudo systemctl reboot || true
waitfor $((300 * slow)) "gw-a's public key after the reboot" nkeys a 2
check "gw-a: the same public key after reboot" test "$(pubkeys a | sed -n 2p)" = "$puba"
check "gw-a: no key generated at the second boot" test "$(grep -a -c 'bridgehead-keygen: generated' "${serialf[a]}")" = 1
waitfor $((240 * slow)) "SSH on gw-a after reboot" vssh a true
waitfor $((240 * slow)) "cloud-init to finish on gw-a after reboot" cloudinit_finished a
check "gw-a: cloud-init finished without errors after reboot" cloudinit_clean a
check "gw-a: bridgehead.service back after reboot" waitfor $((60 * slow)) "gw-a's gateway" vssh a systemctl is-active bridgehead.service
check "gw-a: active (running), Type=notify, watchdog, sandboxed after reboot" unit_ok a
check "gw-a: /readyz 200 after reboot" waitfor $((120 * slow)) "gw-a /readyz" readyz a

say "done"
echo "boot test: $(($(date +%s) - start)) s"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
