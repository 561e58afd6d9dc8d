package nodeagent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// iptables-legacy's FORWARD chain, read the way iptables-legacy -S does:
// the table "filter" from the kernel (getsockopt IPT_SO_GET_INFO and
// IPT_SO_GET_ENTRIES, the IPv6 counterparts for ip6tables). The layout
// is the kernel's UAPI (linux/netfilter_ipv4/ip_tables.h,
// netfilter_ipv6/ip6_tables.h, netfilter/x_tables.h) on 64-bit Linux.
const (
	iptSoGetInfo    = 64 // IPT_SO_GET_INFO, IP6T_SO_GET_INFO
	iptSoGetEntries = 65 // IPT_SO_GET_ENTRIES, IP6T_SO_GET_ENTRIES
	xtTableMaxName  = 32
	hookForward     = 2 // NF_INET_FORWARD
	// xt_entry_target: u16 size, name[29], u8 revision; the standard
	// target's int verdict follows.
	xtTargetHeader = 32
	// Standard verdicts: -NF_x - 1.
	verdictDrop   = -1
	verdictAccept = -2
	verdictReturn = -5 // XT_RETURN
)

// legacyFamily is where the fields of an ipt_entry / ip6t_entry are.
type legacyFamily struct {
	name           string // "iptables-legacy", "ip6tables-legacy"
	sockFamily     int
	level          int
	tablesNames    string // /proc/thread-self/net/ip_tables_names
	addrLen        int
	srcOff, mskOff int // source address and mask in the entry
	invOff         int // invflags, the last byte of the match fields
	targetOff      int // target_offset (u16), next_offset follows
	entrySize      int // sizeof the entry (no matches: target_offset)
}

var (
	legacy4 = legacyFamily{name: "iptables-legacy", sockFamily: unix.AF_INET, level: unix.IPPROTO_IP, tablesNames: "ip_tables_names",
		addrLen: 4, srcOff: 0, mskOff: 8, invOff: 83, targetOff: 88, entrySize: 112}
	legacy6 = legacyFamily{name: "ip6tables-legacy", sockFamily: unix.AF_INET6, level: unix.IPPROTO_IPV6, tablesNames: "ip6_tables_names",
		addrLen: 16, srcOff: 0, mskOff: 32, invOff: 132, targetOff: 140, entrySize: 168}
)

// legacyForward checks the legacy filter table's FORWARD chain of the
// pod block's family in the current namespace: it returns a problem when
// the policy is DROP and no rule of the chain (or of a chain it jumps to)
// accepts on nothing but a source match covering pod; "" when the table
// is not there (nothing is loaded to look: the table's name must already
// be in /proc/net/ip_tables_names), its policy is ACCEPT, or a rule
// accepts the pod block.
func legacyForward(pod netip.Prefix) (string, error) {
	f := legacy4
	if pod.Addr().Is6() {
		f = legacy6
	}
	names, err := os.ReadFile("/proc/thread-self/net/" + f.tablesNames)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil // no legacy x_tables in this kernel
	}
	if err != nil {
		return "", err
	}
	if !strings.Contains("\n"+string(names), "\nfilter\n") {
		return "", nil
	}
	fd, err := unix.Socket(f.sockFamily, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err != nil {
		return "", fmt.Errorf("%s: socket: %w", f.name, err)
	}
	defer unix.Close(fd)
	// struct ipt_getinfo: name[32], valid_hooks, hook_entry[5],
	// underflow[5], num_entries, size.
	info := make([]byte, xtTableMaxName+4+20+20+4+4)
	copy(info, "filter")
	if err := getsockopt(fd, f.level, iptSoGetInfo, info); err != nil {
		return "", fmt.Errorf("%s: table filter: %w", f.name, err)
	}
	u32 := func(b []byte, off int) uint32 { return binary.NativeEndian.Uint32(b[off:]) }
	if u32(info, xtTableMaxName)&(1<<hookForward) == 0 {
		return "", nil // no FORWARD chain
	}
	hook := int(u32(info, xtTableMaxName+4+4*hookForward))
	underflow := int(u32(info, xtTableMaxName+4+20+4*hookForward))
	size := int(u32(info, xtTableMaxName+4+20+20+4))
	// struct ipt_get_entries: name[32], size, then the entries, 8-aligned.
	const head = xtTableMaxName + 8
	buf := make([]byte, head+size)
	copy(buf, "filter")
	binary.NativeEndian.PutUint32(buf[xtTableMaxName:], uint32(size))
	if err := getsockopt(fd, f.level, iptSoGetEntries, buf); err != nil {
		return "", fmt.Errorf("%s: entries of table filter: %w", f.name, err)
	}
	t := legacyTable{f: f, b: buf[head:]}
	policy, ok := t.verdict(underflow)
	if !ok {
		return "", fmt.Errorf("%s: FORWARD's policy entry at %d is not a standard target", f.name, underflow)
	}
	if policy != verdictDrop {
		return "", nil
	}
	if t.accepts(hook, pod, 0) {
		return "", nil
	}
	return fmt.Sprintf("%s table filter chain FORWARD has policy DROP and no rule accepting %s", f.name, pod), nil
}

// getsockopt with a buffer the kernel reads and writes.
func getsockopt(fd, level, opt int, buf []byte) error {
	l := uint32(len(buf))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// legacyTable is the entries of one table.
type legacyTable struct {
	f legacyFamily
	b []byte
}

// entry returns the entry at off: its target offset and next offset.
func (t legacyTable) entry(off int) (target, next int, ok bool) {
	if off < 0 || off+t.f.entrySize > len(t.b) {
		return 0, 0, false
	}
	target = int(binary.NativeEndian.Uint16(t.b[off+t.f.targetOff:]))
	next = int(binary.NativeEndian.Uint16(t.b[off+t.f.targetOff+2:]))
	if target < t.f.entrySize || next < target+xtTargetHeader || off+next > len(t.b) {
		return 0, 0, false
	}
	return target, next, true
}

// verdict is the standard target's verdict of the entry at off (a
// negative standard verdict, or the offset of a jump), false when its
// target is not the standard one.
func (t legacyTable) verdict(off int) (int, bool) {
	target, next, ok := t.entry(off)
	if !ok || next < target+xtTargetHeader+4 {
		return 0, false
	}
	tg := t.b[off+target:]
	if name := strings.TrimRight(string(tg[2:2+29]), "\x00"); name != "" {
		return 0, false // ERROR, a named target (LOG, REJECT, ...)
	}
	return int(int32(binary.NativeEndian.Uint32(tg[xtTargetHeader:]))), true
}

// accepts walks a chain from the entry at off to its end (a RETURN or
// the built-in chain's policy), following jumps, and reports whether a
// rule accepts pod on a source match alone.
func (t legacyTable) accepts(off int, pod netip.Prefix, depth int) bool {
	if depth > maxJumpDepth {
		return false
	}
	for {
		target, next, ok := t.entry(off)
		if !ok {
			return false
		}
		v, std := t.verdict(off)
		plain := target == t.f.entrySize // no matches
		switch {
		case std && v == verdictAccept && plain && t.sourceOnly(off, pod):
			return true
		case std && v >= 0 && plain && t.conditionless(off):
			// An unconditional jump (-j CHAIN): follow it, then go on.
			if t.accepts(v, pod, depth+1) {
				return true
			}
		case std && v == verdictReturn && plain && t.conditionless(off):
			return false // the end of a user chain
		}
		if t.isPolicy(off) {
			return false
		}
		off += next
	}
}

// isPolicy: the entry is a built-in chain's last (its policy): an
// unconditional standard DROP or ACCEPT. Rules with conditions are not.
func (t legacyTable) isPolicy(off int) bool {
	v, std := t.verdict(off)
	target, _, _ := t.entry(off)
	return std && (v == verdictDrop || v == verdictAccept) && target == t.f.entrySize && t.conditionless(off)
}

// conditionless: no address, interface, protocol or inversion.
func (t legacyTable) conditionless(off int) bool {
	for _, c := range t.b[off : off+t.f.invOff+1] {
		if c != 0 {
			return false
		}
	}
	return true
}

// sourceOnly: the entry's only condition is a source match (not
// inverted) whose prefix covers pod.
func (t legacyTable) sourceOnly(off int, pod netip.Prefix) bool {
	e := t.b[off:]
	n := t.f.addrLen
	for i, c := range e[:t.f.invOff+1] {
		inSrc := i >= t.f.srcOff && i < t.f.srcOff+n
		inMsk := i >= t.f.mskOff && i < t.f.mskOff+n
		if c != 0 && !inSrc && !inMsk {
			return false
		}
	}
	p, ok := maskPrefix(e[t.f.srcOff:t.f.srcOff+n], e[t.f.mskOff:t.f.mskOff+n])
	return ok && p.Bits() > 0 && p.Bits() <= pod.Bits() && p.Contains(pod.Addr())
}
